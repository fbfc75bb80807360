/* fuzz_hlo_proto.c — libFuzzer target for the binary HloModuleProto reader (src/hlo/hlo_proto_bin.c). Any
 * bytes go to tpu_module_parse_proto; an input that reads is printed as HLO text, the text is parsed again, and
 * the two modules must be equal and print identically (any difference abort()s so the fuzzer reports it); read
 * modules also go through the verifier and the TPU check. Seeds: fuzz/corpus/hlo_proto/ (the golden protos
 * of tests/golden/proto/); crashes found become regression files in fuzz/regress/hlo_proto/ (replayed by
 * fuzz/run.sh and by the unit test fuzz_regress_files).
 *   make fuzz && build/fuzz/fuzz_hlo_proto fuzz/corpus-work/hlo_proto fuzz/corpus/hlo_proto \
 *       -dict=fuzz/hlo_proto.dict -max_total_time=60 */
#include "hlo/hlo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static tpu_ctx *ctx;
    if (!ctx) ctx = tpu_ctx_new();
    if (size > (1 << 16)) return 0;   /* big inputs only slow the search down */
    tpu_warnings_clear(ctx);
    tpu_module *m = NULL;
    if (tpu_module_parse_proto(ctx, data, size, "fuzz.pb", &m) != TPU_OK) return 0;
    char *s1 = NULL, *s2 = NULL;
    if (tpu_module_to_string(ctx, m, &s1) != TPU_OK) abort();
    tpu_module *m2 = NULL;
    if (tpu_module_parse(ctx, s1, strlen(s1), "printed.hlo", &m2) != TPU_OK) {
        fprintf(stderr, "printed module does not parse: %s\n--- printed:\n%s\n", tpu_errmsg(ctx), s1);
        abort();
    }
    char why[512] = "";
    if (!hlo_module_equal(m, m2, why, sizeof why)) {
        fprintf(stderr, "printed module differs: %s\n--- printed:\n%s\n", why, s1);
        abort();
    }
    if (tpu_module_to_string(ctx, m2, &s2) != TPU_OK) abort();
    if (strcmp(s1, s2)) {
        fprintf(stderr, "second print differs\n--- first:\n%s\n--- second:\n%s\n", s1, s2);
        abort();
    }
    tpu_report *r = NULL;
    if (tpu_check(ctx, m, "v5e", &r) == TPU_OK) {
        volatile size_t n = strlen(tpu_report_text(r)) + strlen(tpu_report_json(r));
        (void)n;
    }
    tpu_report_free(r);
    tpu_free(s1);
    tpu_free(s2);
    tpu_module_free(m);
    tpu_module_free(m2);
    return 0;
}
