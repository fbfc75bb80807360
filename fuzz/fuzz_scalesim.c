/* fuzz_scalesim.c — libFuzzer target for the SCALE-Sim readers and, on small inputs, the layer simulation.
 * An input is a config, a line "====", then a topology; a first byte 'G' makes the topology GEMM rows.
 * Everything goes to ss_config_parse and to both topology readers; when both parse, tiny layers are
 * simulated (so fuzzed array sizes, SRAM sizes and bandwidths reach the memory model).
 * Seeds: fuzz/corpus/scalesim/; inputs that once crashed: fuzz/regress/scalesim/.
 *   make fuzz && build/fuzz/fuzz_scalesim fuzz/corpus/scalesim -max_total_time=120 */
#include "compat/scalesim.h"
#include "util/util.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static tpu_ctx *ctx;
    if (!ctx) ctx = tpu_ctx_new();
    const char *text = (const char *)data;
    bool gemm = size > 0 && text[0] == 'G';
    size_t split = size;
    for (size_t i = 0; i + 5 <= size; i++)
        if (!memcmp(text + i, "====\n", 5)) {
            split = i;
            break;
        }
    const char *topo = split < size ? text + split + 5 : text;
    size_t topo_len = split < size ? size - split - 5 : size;

    ss_config cfg;
    bool cfg_ok = ss_config_parse(ctx, text, split, "fuzz.cfg", &cfg) == TPU_OK;
    ss_topology t;
    bool topo_ok = ss_topology_parse(ctx, topo, topo_len, "fuzz.csv", gemm, &t) == TPU_OK;
    if (topo_ok && !gemm) {
        ss_topology t2;
        if (ss_topology_parse(ctx, topo, topo_len, "fuzz.csv", true, &t2) == TPU_OK) ss_topology_free(&t2);
    }
    if (cfg_ok && topo_ok && cfg.array_rows <= 64 && cfg.array_cols <= 64) {
        for (int i = 0; i < t.n && i < 4; i++) {
            const ss_layer *l = &t.layers[i];
            int64_t M, N, K;
            tim_conv cv = {l->ifmap_h, l->ifmap_w, l->filter_h, l->filter_w, l->channels, l->filters, l->stride_h,
                           l->stride_w};
            if (tim_conv_to_gemm(&cv, &M, &N, &K) != TPU_OK) continue;
            if (M * K > 4096 || K * N > 4096 || M * N > 4096 || l->ifmap_h * l->ifmap_w * l->channels > 65536)
                continue;   /* keep each run fast */
            ss_layer_result r;
            if (ss_simulate_layer(ctx, &cfg, l, &r) == TPU_OK) {
                char buf[48];
                ss_format_float(r.overall_util, buf, sizeof buf);
            }
        }
    }
    if (cfg_ok) ss_config_free(&cfg);
    if (topo_ok) ss_topology_free(&t);
    tpu_warnings_clear(ctx);
    return 0;
}
