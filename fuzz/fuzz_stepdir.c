/* fuzz_stepdir.c — libFuzzer target for the STEP_DIR readers (docs/step_dir.md) and chip files: an input is up
 * to three parts separated by a line "====": signature.json, a cached dataset (.tpuds, binary), and a chip file
 * (.json, docs/chips.md). Each part is written into a scratch directory (the readers take paths, as the trainer
 * does) and read: the signature by trn_sig_load, and when it loads, init_state.npz against it if the third part
 * is absent; the dataset by trn_data_open and, when both loaded, trn_data_check of the signature's batch
 * against it; the chip file by tpu_chip_get. Seeds: fuzz/corpus/stepdir/.
 *   make fuzz && build/fuzz/fuzz_stepdir fuzz/corpus-work/stepdir fuzz/corpus/stepdir -max_total_time=60 */
#include "train/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fz_dir[64];

static void fz_cleanup(void)
{
    static const char *const names[] = {"signature.json", "data.tpuds", "chip.json"};
    char path[128];
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", fz_dir, names[i]);
        unlink(path);
    }
    rmdir(fz_dir);
}

static int fz_write(const char *name, const uint8_t *p, size_t n, char *path, size_t psize)
{
    snprintf(path, psize, "%s/%s", fz_dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    int ok = fwrite(p, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

/* The next part: bytes up to "\n====\n" (or the end). */
static size_t fz_part(const uint8_t *p, size_t n, size_t *next)
{
    for (size_t i = 0; i + 6 <= n; i++)
        if (!memcmp(p + i, "\n====\n", 6)) {
            *next = i + 6;
            return i;
        }
    *next = n;
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static tpu_ctx *ctx;
    if (!ctx) {
        ctx = tpu_ctx_new();
        snprintf(fz_dir, sizeof fz_dir, "/tmp/tpusim-fuzz-stepdir-%d", (int)getpid());
        char cmd[128];
        snprintf(cmd, sizeof cmd, "mkdir -p %s", fz_dir);
        if (system(cmd) != 0) abort();
        atexit(fz_cleanup);
    }
    if (size > (1 << 16)) return 0;
    size_t adv1, adv2, adv3;
    size_t n1 = fz_part(data, size, &adv1);
    size_t n2 = fz_part(data + adv1, size - adv1, &adv2);
    size_t n3 = fz_part(data + adv1 + adv2, size - adv1 - adv2, &adv3);
    char sig[128], ds[128], chip[128];
    if (!fz_write("signature.json", data, n1, sig, sizeof sig)) return 0;
    trn_sig *s = NULL;
    if (trn_sig_load(ctx, fz_dir, &s) == TPU_OK && n3 == 0 && s->init_state) {
        tpu_tensor **state = NULL;
        if (trn_sig_load_state(ctx, s, s->init_state, &state) == TPU_OK) tpu_tensors_free(state, s->nstate);
    }
    if (adv1 < size && fz_write("data.tpuds", data + adv1, n2, ds, sizeof ds)) {
        trn_dataset *d = NULL;
        if (trn_data_open(ctx, ds, &d) == TPU_OK && s) trn_data_check(ctx, d, s->batch, s->nbatch, 1, "fuzz");
        trn_data_free(d);
    }
    if (adv1 + adv2 < size && fz_write("chip.json", data + adv1 + adv2, n3, chip, sizeof chip)) {
        tpu_chip *c = NULL;
        if (tpu_chip_get(ctx, chip, &c) == TPU_OK) {
            char *txt = NULL;
            size_t len = 0;
            FILE *mf = open_memstream(&txt, &len);
            if (mf) {
                tpu_chip_print(ctx, c, mf, 1);
                fclose(mf);
            }
            free(txt);
        }
        tpu_chip_free(c);
    }
    trn_sig_free(s);
    return 0;
}
