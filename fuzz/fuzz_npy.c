/* fuzz_npy.c — libFuzzer target for the .npy and .npz readers: every input goes to the .npy loader (plain,
 * and with a type for bare '|V1' descrs) and to the in-memory .npz reader. Seeds: fuzz/corpus/npy/;
 * crashes found become regression files in fuzz/regress/npy/.
 *   make fuzz && build/fuzz/fuzz_npy fuzz/corpus/npy -max_total_time=120 */
#include "io/io.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static tpu_ctx *ctx;
    if (!ctx) ctx = tpu_ctx_new();
    tpu_tensor *t = NULL;
    if (tpu_npy_load_mem(ctx, data, size, "fuzz.npy", &t) == TPU_OK) {
        /* touch every element so a wrong size shows up as an out-of-bounds read */
        volatile double sink = 0;
        for (int64_t i = 0; i < tpu_tensor_count(t); i++) sink += tpu_tensor_get_f64(t, i);
        (void)sink;
    }
    tpu_tensor_free(t);
    io_npy_opts o = {TPU_F8E4M3FN, NULL, NULL, NULL, 0};
    if (io_npy_load_mem_opts(ctx, data, size, "fuzz.npy", &o, &t) == TPU_OK) tpu_tensor_free(t);

    tpu_tensor **ts = NULL;
    char **names = NULL;
    int n = 0;
    if (io_npz_load_mem(ctx, data, size, "fuzz.npz", NULL, NULL, &ts, &names, &n) == TPU_OK) {
        for (int i = 0; i < n; i++) {
            volatile size_t sink = strlen(names[i]) + tpu_tensor_nbytes(ts[i]);
            (void)sink;
        }
        tpu_tensors_free(ts, n);
        tpu_names_free(names, n);
    }
    return 0;
}
