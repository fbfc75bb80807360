/* gemm_bench.c — the executor's matrix multiply (src/exec/kernels/gemm.c) against this CPU's measured peak.
 *
 *   gemm_bench [--quick] [--reps N] [--threads N] [--only SUBSTR] [--no-peak]
 *
 * 1. Peak: tiny loops of independent multiply-adds kept in registers, no memory traffic — f32 FMA (16 zmm
 *    accumulators; ymm on a CPU without AVX-512: 16 / 32 flops per instruction) and bf16 dot products
 *    (VDPBF16PS, 64 flops per zmm instruction: 16 lanes x 2 products x multiply+add), on 1 thread and on
 *    every thread (OpenMP; wall time, so a core busy with another job shows as a lower peak).
 * 2. GEMM: exe_gemm on row-major operands for large squares (4096^3, 2048^3, 1024^3) and a few skinny shapes,
 *    with f32 operands (read as is: exact mode / HIGHEST) and bf16-valued ones (f32 read through bf16
 *    rounding, part HI: TPU mode's DEFAULT precision; bf16 data), with each kernel that applies: "openblas"
 *    (sgemm, bf16-valued operands converted to f32 copies first), "avx512" (the f32 microkernel) and
 *    "avx512bf16" (VDPBF16PS microkernel, bf16-valued operands only), on all threads and on 1; best of N.
 *    The table gives GFLOP/s (2*M*N*K / time) and the percentage of the matching peak on the same thread
 *    count: the f32 peak for f32 operands, the bf16 peak for bf16-valued ones (the first rep of each
 *    kernel counts: best of N).
 *
 * Runs like tpu_run: FTZ/DAZ on, single-threaded OpenBLAS calls (exe_gemm splits the work over its threads),
 * a buffer pool for conversion scratch. Build (bench/run_bench.py --gemm-only does this and runs it):
 *
 *   make build/release/libtpusim.a && cc -std=c11 -O2 -fopenmp -D_POSIX_C_SOURCE=200809L -Iinclude -Isrc \
 *       bench/gemm_bench.c build/release/libtpusim.a $(pkg-config --libs openblas zlib libcjson) -fopenmp \
 *       -lm -lpthread -o build/release/gemm_bench
 */
#include "exec/exe_par.h"
#include "exec/exec.h"
#include "exec/kernels/gemm.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define GB_X86 1
#if (defined(__clang__) && __clang_major__ >= 9) || (!defined(__clang__) && __GNUC__ >= 10)
#define GB_BF16 1
#endif
#endif

static double gb_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static volatile float gb_sink;

void openblas_set_num_threads(int n);   /* cblas.h's; exe_gemm runs one sgemm per thread (as tpu_run sets) */

/* ---- peak loops: flops done in `iters` iterations of 16 independent chains ---- */

#ifdef GB_X86
#define GB_16(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#define GB_DECL(i) __m512 a##i = _mm512_set1_ps(0.001f * (float)(i));
#define GB_FMA(i) a##i = _mm512_fmadd_ps(a##i, y, x);
#define GB_SUM(i) s = _mm512_add_ps(s, a##i);
__attribute__((target("avx512f"))) static double gb_peak_fma512(long iters)
{
    __m512 x = _mm512_set1_ps(1e-7f), y = _mm512_set1_ps(0.9999f), s = _mm512_setzero_ps();
    GB_16(GB_DECL)
    for (long it = 0; it < iters; it++) {
        GB_16(GB_FMA)
        __asm__ volatile("" : "+v"(x));   /* keeps the loop from being folded */
    }
    GB_16(GB_SUM)
    gb_sink = _mm512_reduce_add_ps(s);
    return (double)iters * 16 * 32;
}
#define GB_DECL8(i) __m256 a##i = _mm256_set1_ps(0.001f * (float)(i));
#define GB_FMA8(i) a##i = _mm256_fmadd_ps(a##i, y, x);
#define GB_SUM8(i) s = _mm256_add_ps(s, a##i);
__attribute__((target("avx2,fma"))) static double gb_peak_fma256(long iters)
{
    __m256 x = _mm256_set1_ps(1e-7f), y = _mm256_set1_ps(0.9999f), s = _mm256_setzero_ps();
    GB_16(GB_DECL8)
    for (long it = 0; it < iters; it++) {
        GB_16(GB_FMA8)
        __asm__ volatile("" : "+x"(x));
    }
    GB_16(GB_SUM8)
    float o[8];
    _mm256_storeu_ps(o, s);
    gb_sink = o[0];
    return (double)iters * 16 * 16;
}
#endif

#ifdef GB_BF16
#define GB_DP(i) a##i = _mm512_dpbf16_ps(a##i, p, q);
__attribute__((target("avx512f,avx512bf16"))) static double gb_peak_bf16(long iters)
{
    /* bf16 pairs (1/1024, 1/1024) and (1/1024, -1/1024): sums stay tiny and normal */
    __m512bh p = (__m512bh)_mm512_set1_epi32(0x3A803A80), q = (__m512bh)_mm512_set1_epi32((int)0x3A80BA80u);
    __m512 s = _mm512_setzero_ps();
    GB_16(GB_DECL)
    for (long it = 0; it < iters; it++) {
        GB_16(GB_DP)
        __asm__ volatile("" : "+v"(p));
    }
    GB_16(GB_SUM)
    gb_sink = _mm512_reduce_add_ps(s);
    return (double)iters * 16 * 64;
}
#endif

typedef double (*gb_peak_fn)(long);

/* GFLOP/s of fn on `threads` threads (each runs it; wall time of the whole), best of 12 short runs (~10 ms:
 * on a shared machine some run uninterrupted). */
static double gb_peak(gb_peak_fn fn, int threads)
{
    long iters = threads > 1 ? 10000000 : 2000000;   /* longer with threads: a late starter costs less */
    double best = 0;
    for (int rep = 0; rep < 13; rep++) {
        double flops = 0, t0 = gb_now();
#pragma omp parallel num_threads(threads) reduction(+ : flops)
        flops += fn(iters);
        double t = gb_now() - t0, g = flops / t * 1e-9;
        if (rep > 0 && g > best) best = g;   /* rep 0 warms up (frequency, threads) */
    }
    return best;
}

/* ---- GEMM cases ---- */

typedef struct gb_case {
    int64_t M, N, K;
} gb_case;

enum { GB_F32, GB_F32HI, GB_BF16DT };
static const char *const gb_opnames[] = {"f32", "f32 hi (bf16)", "bf16"};

static uint64_t gb_state = 88172645463325252ull;
static float gb_rand(void)
{
    gb_state = gb_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((int64_t)(gb_state >> 40) - (1 << 23)) * (1.0f / (1 << 23));
}

static void *gb_operand(int64_t n, int ops)
{
    if (ops == GB_BF16DT) {
        uint16_t *p = malloc((size_t)n * 2);
        for (int64_t i = 0; p && i < n; i++) {
            float x = gb_rand();
            uint32_t u;
            memcpy(&u, &x, 4);
            p[i] = (uint16_t)(u >> 16);
        }
        return p;
    }
    float *p = malloc((size_t)n * 4);
    for (int64_t i = 0; p && i < n; i++) p[i] = gb_rand();
    return p;
}

/* Best time of reps runs of exe_gemm with kernel `name` (NULL: exe_gemm's own choice). */
static double gb_time(const char *name, int threads, const gb_case *c, const exe_gemm_src *A, const exe_gemm_src *B,
                      float *C, int reps)
{
    exe_gemm_force(strcmp(name, "default") ? name : NULL);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = gb_now();
        exe_gemm(threads, c->M, c->N, c->K, A, B, C, c->N, 0);
        double t = gb_now() - t0;
        if (t < best) best = t;
    }
    exe_gemm_force(NULL);
    return best;
}

static const char *gb_cpu(void)
{
    static char model[256] = "unknown CPU";
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
            snprintf(model, sizeof model, "%s", strchr(line, ':') + 2);
            model[strcspn(model, "\n")] = 0;
            break;
        }
    if (f) fclose(f);
    return model;
}

int main(int argc, char **argv)
{
    int quick = 0, reps = 3, nth = exe_par_max_threads(), peak_only = 0, no_peak = 0;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) nth = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--peak-only")) peak_only = 1;
        else if (!strcmp(argv[i], "--no-peak")) no_peak = 1;
        else {
            fprintf(stderr, "usage: gemm_bench [--quick] [--reps N] [--threads N] [--only SUBSTR] [--peak-only] [--no-peak]\n");
            return 2;
        }
    }
    if (nth < 1) nth = 1;
#ifdef GB_X86
    _mm_setcsr(_mm_getcsr() | 0x8040);   /* FTZ | DAZ, as tpu_run */
#endif
    openblas_set_num_threads(1);
    exe_pool *pool = exe_pool_push();   /* conversion scratch reused across runs, as within tpu_run */
    int tcounts[2] = {nth, 1}, ntc = nth > 1 ? 2 : 1;
    double pf[2] = {0, 0}, pb[2] = {0, 0};   /* peaks per thread count */
    const char *fname = "none";
#ifdef GB_X86
    __builtin_cpu_init();
    gb_peak_fn ff = NULL, fb = NULL;
    if (__builtin_cpu_supports("avx512f")) ff = gb_peak_fma512, fname = "zmm FMA";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) ff = gb_peak_fma256, fname = "ymm FMA";
#ifdef GB_BF16
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16")) fb = gb_peak_bf16;
#endif
    printf("machine: %s, %d threads\n", gb_cpu(), nth);
    if (!no_peak)
        for (int t = 0; t < ntc; t++) {
            if (ff) pf[t] = gb_peak(ff, tcounts[t]);
            if (fb) pb[t] = gb_peak(fb, tcounts[t]);
            printf("peak, %d thread%s: f32 (%s) %.1f GFLOP/s, bf16 (VDPBF16PS) %s%.1f GFLOP/s\n", tcounts[t],
                   tcounts[t] > 1 ? "s" : "", fname, pf[t], fb ? "" : "n/a ", pb[t]);
        }
#else
    printf("machine: %s, %d threads (no peak loops for this architecture)\n", gb_cpu(), nth);
#endif
    fflush(stdout);
    if (peak_only) return 0;

    static const gb_case sq[] = {{4096, 4096, 4096}, {2048, 2048, 2048}, {1024, 1024, 1024}, {512, 512, 512}};
    static const gb_case sk[] = {{64, 4096, 4096}, {4096, 64, 4096}, {4096, 4096, 64}, {256, 1024, 8192}};
    gb_case cases[16];
    int nc = 0;
    for (int i = quick ? 1 : 0; i < 4; i++) cases[nc++] = sq[i];
    for (int i = 0; i < 4; i++) cases[nc++] = sk[i];
    printf("\n%-16s %-14s %-11s %7s %10s %9s %7s %9s\n", "M x N x K", "operands", "kernel", "threads", "ms", "GFLOP/s",
           "% peak", "/openblas");
    for (int ci = 0; ci < nc; ci++) {
        const gb_case *c = &cases[ci];
        char shape[64];
        snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)c->M, (long long)c->N, (long long)c->K);
        double flops = 2.0 * (double)c->M * (double)c->N * (double)c->K;
        int r = flops > 1e11 ? (reps > 2 ? 2 : reps) : reps;
        for (int ops = 0; ops < 3; ops++) {
            char label[128];
            snprintf(label, sizeof label, "%s %s", shape, gb_opnames[ops]);
            if (only && !strstr(label, only)) continue;
            void *a = gb_operand(c->M * c->K, ops), *b = gb_operand(c->K * c->N, ops);
            float *C = malloc((size_t)(c->M * c->N) * sizeof(float));
            if (!a || !b || !C) {
                fprintf(stderr, "out of memory for %s\n", label);
                return 1;
            }
            memset(C, 0, (size_t)(c->M * c->N) * sizeof(float));
            tpu_dtype dt = ops == GB_BF16DT ? TPU_BF16 : TPU_F32;
            exe_mx_part part = ops == GB_F32 ? EXE_MX_AS_IS : EXE_MX_HI;
            exe_gemm_src A = {a, dt, c->K, 1, part}, B = {b, dt, c->N, 1, part};
            /* each kernel that applies, then the default (what exe_gemm runs unpinned), with the percentage of
             * the matching measured peak and of OpenBLAS's GFLOP/s in the same run */
            static const char *const kernels[] = {"openblas", "avx512", "avx512bf16", NULL};
            for (int t = 0; t < ntc; t++) {
                double blas = 0;
                for (int kn = 0; kn < 4; kn++) {
                    if (kn == 2 && ops == GB_F32) continue;
                    exe_gemm_force(kernels[kn]);
                    if (kernels[kn] && strcmp(exe_gemm_kernel_name(), kernels[kn])) continue;   /* this CPU lacks it */
                    const char *name = kernels[kn] ? kernels[kn] : "default";
                    double s = gb_time(name, tcounts[t], c, &A, &B, C, r);
                    double g = flops / s * 1e-9, pk = ops == GB_F32 ? pf[t] : pb[t];
                    if (kn == 0) blas = g;
                    char pct[32] = "-", vb[32] = "-";
                    if (pk > 0) snprintf(pct, sizeof pct, "%.0f%%", 100.0 * g / pk);
                    if (blas > 0) snprintf(vb, sizeof vb, "%.0f%%", 100.0 * g / blas);
                    printf("%-16s %-14s %-11s %7d %10.2f %9.1f %7s %9s\n", shape, gb_opnames[ops], name, tcounts[t], s * 1e3,
                           g, pct, vb);
                    fflush(stdout);
                }
            }
            free(a);
            free(b);
            free(C);
        }
    }
    exe_pool_pop(pool);
    exe_gemm_force(NULL);
    printf("\ndefault (exe_gemm_force(NULL)): %s — on AVX-512 CPUs the microkernels, the bf16 one for bf16-valued "
           "operands where it times faster than the f32 one (gemm.h); elsewhere OpenBLAS\n", exe_gemm_kernel_name());
    return 0;
}
