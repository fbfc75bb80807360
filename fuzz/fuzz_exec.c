/* fuzz_exec.c — the differential target: mutated programs go through the verifier and then through run (random
 * inputs, at most 20000 steps and 2 s), the memory planner and the profiler (fuzz/oracle.h). It abort()s when
 * a program that does not verify is run, planned or profiled, or a verified one fails with an internal error;
 * crashes, hangs (libFuzzer's -timeout) and sanitizer reports are findings by themselves.
 * Runs stay small: programs with arrays over 2^14 elements are only planned and profiled, and one allocation
 * over 256 MiB fails (the library must report it cleanly). Seeds: fuzz/corpus/exec/ (HLO programs that verify
 * and run, and tests/hostile/); the dictionary is fuzz/hlo.dict.
 *   make fuzz && build/fuzz/fuzz_exec fuzz/corpus-work/exec fuzz/corpus/exec -dict=fuzz/hlo.dict -max_total_time=60 */
#include "oracle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed);

/* Half the mutations rewrite one number of the program (a dimension, an index, a size, a parameter number) to
 * a nearby or extreme value: programs stay parseable and reach the verifier's and kernels' edge cases, which
 * byte-level mutations seldom do. The other half are libFuzzer's own. */
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed)
{
    uint64_t r = seed * 0x9E3779B97F4A7C15ull + 1;
    if ((r >> 60) & 1 || size == 0) return LLVMFuzzerMutate(data, size, max_size);
    /* count numbers, pick one */
    size_t nnum = 0;
    for (size_t i = 0; i < size; i++)
        if (data[i] >= '0' && data[i] <= '9' && (i == 0 || data[i - 1] < '0' || data[i - 1] > '9')) nnum++;
    if (!nnum) return LLVMFuzzerMutate(data, size, max_size);
    size_t pick = (size_t)(r >> 20) % nnum, k = 0, start = 0, end = 0;
    for (size_t i = 0; i < size; i++)
        if (data[i] >= '0' && data[i] <= '9' && (i == 0 || data[i - 1] < '0' || data[i - 1] > '9') && k++ == pick) {
            start = i;
            for (end = i; end < size && data[end] >= '0' && data[end] <= '9'; end++) {}
            break;
        }
    long long v = 0;
    for (size_t i = start; i < end && i < start + 18; i++) v = v * 10 + (data[i] - '0');
    static const long long extreme[] = {0, 1, 2, 3, 7, 8, 16, 17, 127, 128, 255, 256, 1023, 65536, 2147483647LL,
                                        2147483648LL, 4294967296LL, 9223372036854775807LL};
    switch ((r >> 8) % 6) {
    case 0: v = v + 1; break;
    case 1: v = v > 0 ? v - 1 : 0; break;
    case 2: v = v * 2; break;
    case 3: v = v / 2; break;
    default: v = extreme[(r >> 32) % (sizeof extreme / sizeof extreme[0])]; break;
    }
    char num[24];
    int n = snprintf(num, sizeof num, "%lld", v);
    if (size - (end - start) + (size_t)n > max_size) return LLVMFuzzerMutate(data, size, max_size);
    memmove(data + start + n, data + end, size - end);
    memcpy(data + start, num, (size_t)n);
    return size - (end - start) + (size_t)n;
}

#define FX_MAX_ALLOC ((size_t)256 << 20)

static void *fx_malloc(size_t n, void *u) { (void)u; return n > FX_MAX_ALLOC ? NULL : malloc(n); }
static void *fx_realloc(void *p, size_t n, void *u) { (void)u; return n > FX_MAX_ALLOC ? NULL : realloc(p, n); }
static void fx_free(void *p, void *u) { (void)u; free(p); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static tpu_ctx *ctx;
    if (!ctx) {
        static const tpu_allocator a = {fx_malloc, fx_realloc, fx_free, NULL};
        tpu_set_allocator(&a);
        ctx = tpu_ctx_new();
    }
    if (size > (1 << 15)) return 0;
    tpu_warnings_clear(ctx);
    tpu_module *m = NULL;
    if (tpu_module_parse(ctx, (const char *)data, size, "fuzz.hlo", &m) != TPU_OK) return 0;
    oracle_result r;
    oracle_opts o = {20000, 2.0, 1 << 14};
    const char *bad = oracle_check(ctx, m, &o, &r);
    if (bad) {
        fprintf(stderr, "fuzz_exec: %s\n  verify: %s\n  run: %s %s\n  memory: %s %s\n  profile: %s %s\n", bad,
                r.verifies ? "ok" : r.verify_msg, tpu_status_name(r.run_st), r.run_msg, tpu_status_name(r.plan_st),
                r.plan_msg, tpu_status_name(r.prof_st), r.prof_msg);
        abort();
    }
    tpu_module_free(m);
    return 0;
}
