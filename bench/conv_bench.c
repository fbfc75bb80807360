/* conv_bench.c — times the dot and convolution kernels.
 *
 *   conv_bench [FILE.hlo] [--exact] [--threads N] [--ref-check] [--dot] [--only SUBSTR|KIND] [--keep-pages]
 *
 * With a module (default ../shared/corpus/hlo/mobilenet_v2.hlo) it runs every convolution in it once on random
 * operands (TPU numerics unless --exact) and prints each one's time and GFLOP/s, then totals per kind. --dot
 * times square and skinny f32/bf16 matmuls at each precision instead. --keep-pages makes malloc keep freed
 * memory (no mmap), so results land in pages already touched: the time without first-touch page faults. Not part of `make test`; build it with
 * `make build/release/conv_bench` (or `make bench`, which builds every bench tool).
 */
#include "exec/exec.h"
#include "hlo/hlo.h"
#include "util/tensor.h"

#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double bench_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t bench_state = 88172645463325252ull;

static void bench_fill(tpu_tensor *t)
{
    uint64_t s = bench_state;
    if (t->dtype == TPU_F32) {
        float *d = t->data;
        for (int64_t i = 0; i < t->count; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            d[i] = (float)((int64_t)(s >> 40) - (1 << 23)) * (1.0f / (1 << 23));
        }
    } else {
        for (int64_t i = 0; i < t->count; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            ten_store_f64(t->dtype, t->data, i, (double)((int64_t)(s >> 40) - (1 << 23)) / (1 << 23));
        }
    }
    bench_state = s;
}

static const char *bench_kind(const hlo_instr *in)
{
    const hlo_attr *a = hlo_attr_find(in, HK_DIM_LABELS);
    int64_t g = hlo_attr_int(in, HK_FEATURE_GROUP_COUNT, 1), bg = hlo_attr_int(in, HK_BATCH_GROUP_COUNT, 1);
    if (bg > 1) return "depthwise weight-grad (batch groups)";
    if (g > 1) return "depthwise fwd/input-grad (feature groups)";
    const char *out = a ? strstr(a->v.dimlabels->text, "->") : NULL;
    if (out && out[2] != 'b') return "weight-grad";
    const hlo_attr *w = hlo_attr_find(in, HK_WINDOW);
    int one = 1;
    for (int i = 0; w && i < w->v.window->rank; i++) one &= w->v.window->d[i].size == 1;
    return one ? "1x1 fwd/input-grad" : "other (first layer)";
}

/* Nominal flops: 2 * outputs * input features per group * window volume. */
static double bench_flops(const hlo_instr *in)
{
    const hlo_attr *a = hlo_attr_find(in, HK_DIM_LABELS);
    const hlo_shape *w = &in->ops[1]->shape;
    double k = (double)w->dims[a->v.dimlabels->k_in];
    for (int i = 0; i < a->v.dimlabels->nspatial; i++) k *= (double)w->dims[a->v.dimlabels->k_spatial[i]];
    return 2.0 * (double)hlo_shape_count(&in->shape) * k;
}

static int bench_convs(tpu_ctx *ctx, const char *path, tpu_numerics num, int threads, int ref_check, const char *only)
{
    tpu_module *m = NULL;
    if (tpu_module_load(ctx, path, &m)) {
        fprintf(stderr, "%s\n", tpu_errmsg(ctx));
        return 1;
    }
    exe_state S;
    memset(&S, 0, sizeof S);
    S.ctx = ctx;
    S.m = m;
    S.numerics = num;
    S.threads = threads;
    const char *kinds[8];
    double ktime[8] = {0}, kflops[8] = {0}, kcpu[8] = {0}, tcpu = 0;
    int kcount[8] = {0}, nk = 0, n = 0;
    double total = 0, tflops = 0;
    for (int c = 0; c < m->ncomps; c++)
        for (int i = 0; i < m->comps[c]->ninstrs; i++) {
            const hlo_instr *in = m->comps[c]->instrs[i];
            if (in->op != HLO_CONVOLUTION) continue;
            char line[512];
            ut_buf b;
            ut_buf_init(&b);
            hlo_print_instr(&b, in);
            snprintf(line, sizeof line, "%s", b.data ? b.data : "");
            ut_buf_free(&b);
            char *meta = strstr(line, ", metadata=");
            if (meta) *meta = 0;
            if (only && !strstr(line, only) && strcmp(bench_kind(in), only)) continue;
            tpu_tensor *x = ten_alloc_uninit((tpu_dtype)in->ops[0]->shape.dtype, in->ops[0]->shape.rank, in->ops[0]->shape.dims);
            tpu_tensor *w = ten_alloc_uninit((tpu_dtype)in->ops[1]->shape.dtype, in->ops[1]->shape.rank, in->ops[1]->shape.dims);
            if (!x || !w) {
                fprintf(stderr, "out of memory\n");
                return 1;
            }
            bench_fill(x);
            bench_fill(w);
            exe_value *ops[2] = {exe_value_array(x), exe_value_array(w)};
            exe_value *out = NULL;
            double t0 = ut_now(), c0 = bench_cpu();
            tpu_status st = exe_k_convolution(&S, in, ops, &out);
            double dt = ut_now() - t0, dc = bench_cpu() - c0;
            if (st) {
                fprintf(stderr, "%s\n", tpu_errmsg(ctx));
                return 1;
            }
            double fl = bench_flops(in);
            const char *kind = bench_kind(in);
            int k = 0;
            while (k < nk && strcmp(kinds[k], kind)) k++;
            if (k == nk) kinds[nk++] = kind;
            ktime[k] += dt;
            kcpu[k] += dc;
            tcpu += dc;
            kflops[k] += fl;
            kcount[k]++;
            total += dt;
            tflops += fl;
            n++;
            printf("%8.1f ms (cpu %8.1f ms) %7.1f GFLOP/s  %s\n", dt * 1e3, dc * 1e3, fl / dt * 1e-9, line);
            if (ref_check) {
                exe_value *ref = NULL;
                if (exe_k_convolution_ref(&S, in, ops, &ref) == TPU_OK) {
                    double e = 0, mx = 0;
                    for (int64_t j = 0; j < ref->t->count; j++) {
                        double a = tpu_tensor_get_f64(out->t, j), r = tpu_tensor_get_f64(ref->t, j);
                        e = fmax(e, fabs(a - r));
                        mx = fmax(mx, fabs(r));
                    }
                    printf("           max abs err vs reference %.3g (max |ref| %.3g)\n", e, mx);
                    exe_value_unref(ref);
                }
            }
            fflush(stdout);
            exe_value_unref(out);
            exe_value_unref(ops[0]);
            exe_value_unref(ops[1]);
        }
    printf("\n%-44s %5s %9s %9s %9s %8s\n", "kind", "count", "wall (s)", "cpu (s)", "GFLOP", "GFLOP/s");
    for (int k = 0; k < nk; k++)
        printf("%-44s %5d %9.2f %9.2f %9.1f %8.1f\n", kinds[k], kcount[k], ktime[k], kcpu[k], kflops[k] * 1e-9,
               kflops[k] / ktime[k] * 1e-9);
    printf("%-44s %5d %9.2f %9.2f %9.1f %8.1f\n", "total", n, total, tcpu, tflops * 1e-9, tflops / total * 1e-9);
    tpu_module_free(m);
    return 0;
}

static int bench_dots(tpu_ctx *ctx, tpu_numerics num, int threads)
{
    static const struct { int64_t m, k, n; const char *t; } sizes[] = {
        {256, 256, 256, "f32"},    {1024, 1024, 1024, "f32"}, {2048, 2048, 2048, "f32"}, {8192, 1024, 64, "f32"},
        {64, 4096, 4096, "f32"},   {1024, 1024, 1024, "bf16"}, {2048, 2048, 2048, "bf16"},
    };
    const char *precs[] = {"", ", operand_precision={high,high}", ", operand_precision={highest,highest}"};
    const char *pname[] = {"DEFAULT", "HIGH", "HIGHEST"};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (int p = 0; p < 3; p++) {
            if (strcmp(sizes[i].t, "f32") && p) continue;
            char text[512];
            snprintf(text, sizeof text,
                     "HloModule d\nENTRY e {\n a = %s[%lld,%lld] parameter(0)\n b = %s[%lld,%lld] parameter(1)\n"
                     " ROOT d = f32[%lld,%lld] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}%s\n}\n",
                     sizes[i].t, (long long)sizes[i].m, (long long)sizes[i].k, sizes[i].t, (long long)sizes[i].k,
                     (long long)sizes[i].n, (long long)sizes[i].m, (long long)sizes[i].n, precs[p]);
            tpu_module *m = NULL;
            if (tpu_module_parse(ctx, text, strlen(text), "dot", &m)) {
                fprintf(stderr, "%s\n", tpu_errmsg(ctx));
                return 1;
            }
            const hlo_instr *in = m->entry->root;
            exe_state S;
            memset(&S, 0, sizeof S);
            S.ctx = ctx;
            S.m = m;
            S.numerics = num;
            S.threads = threads;
            tpu_tensor *a = ten_alloc_uninit((tpu_dtype)in->ops[0]->shape.dtype, 2, in->ops[0]->shape.dims);
            tpu_tensor *b = ten_alloc_uninit((tpu_dtype)in->ops[1]->shape.dtype, 2, in->ops[1]->shape.dims);
            bench_fill(a);
            bench_fill(b);
            exe_value *ops[2] = {exe_value_array(a), exe_value_array(b)};
            double best = 1e30;
            for (int rep = 0; rep < 3; rep++) {
                exe_value *out = NULL;
                double t0 = ut_now();
                if (exe_k_dot(&S, in, ops, &out)) {
                    fprintf(stderr, "%s\n", tpu_errmsg(ctx));
                    return 1;
                }
                double dt = ut_now() - t0;
                if (dt < best) best = dt;
                exe_value_unref(out);
            }
            double fl = 2.0 * (double)sizes[i].m * (double)sizes[i].n * (double)sizes[i].k;
            printf("dot %4s [%lld,%lld]x[%lld,%lld] %-8s %8.2f ms %7.1f GFLOP/s\n", sizes[i].t, (long long)sizes[i].m,
                   (long long)sizes[i].k, (long long)sizes[i].k, (long long)sizes[i].n, num == TPU_NUMERICS_EXACT ? "exact" : pname[p],
                   best * 1e3, fl / best * 1e-9);
            exe_value_unref(ops[0]);
            exe_value_unref(ops[1]);
            tpu_module_free(m);
        }
    return 0;
}

int main(int argc, char **argv)
{
    const char *path = "../shared/corpus/hlo/mobilenet_v2.hlo", *only = NULL;
    tpu_numerics num = TPU_NUMERICS_TPU;
    int threads = 0, dots = 0, ref_check = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--exact")) num = TPU_NUMERICS_EXACT;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--dot")) dots = 1;
        else if (!strcmp(argv[i], "--ref-check")) ref_check = 1;
        else if (!strcmp(argv[i], "--keep-pages")) {
            mallopt(M_MMAP_MAX, 0);
            mallopt(M_TRIM_THRESHOLD, -1);
        }
        else path = argv[i];
    }
    tpu_ctx *ctx = tpu_ctx_new();
    int rc = dots ? bench_dots(ctx, num, threads) : bench_convs(ctx, path, num, threads, ref_check, only);
    tpu_ctx_free(ctx);
    return rc;
}
