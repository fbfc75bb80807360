/* t_dist.c — the multi-process runtime under mpirun (tests/cli/t_dist.sh starts it):
 *
 *   mpirun -np P dist-tests CASE
 *
 * equal     programs with every collective (groups spanning processes, subgroups, a while loop, bf16, the
 *           shard_map golden) run on a system spread over the P processes and on a one-process system of
 *           the same devices in each process: every local device's outputs must be the same bytes. Also a
 *           system whose devices are interleaved over the processes, and repeated runs.
 * fail      process 1's devices get a wrongly shaped input: every process's run fails, the others' naming
 *           process 1; the job then ends through MPI_Abort (exit code not 0).
 * early     process 1's run fails before its devices start (no inputs for them): the others are told
 * program   process 1 runs another program (a different constant): the others are told at the first collective.
 * slice     process 1 asks for another slice: refused when the system is made.
 * hang      process 1 never reaches the collective (TPUSIM_DIST_TIMEOUT set small by the caller): process 0 gives
 *           up naming it.
 * nprocs    a slice whose hosts do not split over the processes is refused with the valid counts.
 *
 * Every line a process prints starts with "rank R:"; the shell test reads them. Exit 0: the case's checks
 * passed and the job ended cleanly. */
#include "tpusim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int g_rank, g_fail, g_pass;

#define CHECK(c, ...)                                                                                          \
    do {                                                                                                       \
        if (c) g_pass++;                                                                                       \
        else {                                                                                                 \
            g_fail++;                                                                                          \
            printf("rank %d: FAIL %s:%d: ", g_rank, __FILE__, __LINE__);                                       \
            printf(__VA_ARGS__);                                                                               \
            printf("\n");                                                                                      \
            fflush(stdout);                                                                                    \
        }                                                                                                      \
    } while (0)

#define ADD_F32 "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT c = f32[] add(a, b) }\n"
#define ADD_BF16 "addb { a = bf16[] parameter(0)\n b = bf16[] parameter(1)\n ROOT c = bf16[] add(a, b) }\n"

/* every collective over 8 replicas: whole-system groups, groups spanning the processes, a ring permute */
static const char *k_all =
    "HloModule all, replica_count=8\n" ADD_F32 ADD_BF16
    "ENTRY e {\n p = f32[37] parameter(0)\n q = bf16[16] parameter(1)\n r = f32[40] parameter(2)\n"
    " ar = f32[37] all-reduce(p), replica_groups={}, to_apply=add\n"
    " ar2 = f32[37] all-reduce(p), replica_groups={{0,5,2,7},{1,4,3,6}}, to_apply=add\n"
    " ar3 = f32[37] all-reduce(p), replica_groups={{0,1},{2,3},{4,5},{6,7}}, to_apply=add\n"
    " arb = bf16[16] all-reduce(q), replica_groups={}, to_apply=addb\n"
    " ag = f32[296] all-gather(p), replica_groups={}, dimensions={0}\n"
    " rs = f32[5] reduce-scatter(r), replica_groups={}, dimensions={0}, to_apply=add\n"
    " a2a = f32[40] all-to-all(r), replica_groups={}, dimensions={0}\n"
    " cp = f32[37] collective-permute(p), source_target_pairs={{0,7},{7,1},{1,6},{6,2},{2,5},{5,3},{3,4},{4,0}}\n"
    " cb = f32[37] collective-broadcast(p), replica_groups={{6,0,1,2,3,4,5,7}}\n"
    " id = u32[] replica-id()\n"
    " ROOT t = (f32[37], f32[37], f32[37], bf16[16], f32[296], f32[5], f32[40], f32[37], f32[37], u32[]) "
    "tuple(ar, ar2, ar3, arb, ag, rs, a2a, cp, cb, id)\n}\n";

/* a while loop of all-reduces and permutes: executions are matched by number */
static const char *k_loop =
    "HloModule w, replica_count=8\n" ADD_F32
    "cond { s = (s32[], f32[9]) parameter(0)\n i = s32[] get-tuple-element(s), index=0\n"
    " n = s32[] constant(6)\n ROOT lt = pred[] compare(i, n), direction=LT }\n"
    "body { s = (s32[], f32[9]) parameter(0)\n i = s32[] get-tuple-element(s), index=0\n"
    " one = s32[] constant(1)\n j = s32[] add(i, one)\n v = f32[9] get-tuple-element(s), index=1\n"
    " h = f32[] constant(0.3)\n hb = f32[9] broadcast(h), dimensions={}\n"
    " ar = f32[9] all-reduce(v), replica_groups={}, to_apply=add\n sc = f32[9] multiply(ar, hb)\n"
    " pm = f32[9] collective-permute(sc), source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}}\n"
    " nx = f32[9] add(pm, v)\n ROOT t = (s32[], f32[9]) tuple(j, nx) }\n"
    "ENTRY e {\n p = f32[9] parameter(0)\n z = s32[] constant(0)\n s = (s32[], f32[9]) tuple(z, p)\n"
    " w = (s32[], f32[9]) while(s), condition=cond, body=body\n ROOT r = f32[9] get-tuple-element(w), index=1\n}\n";

/* Deterministic values of every magnitude (summation order shows in the last bits). */
static float v_mixed(int dev, int k, int i)
{
    uint32_t x = (uint32_t)(dev * 7919 + k * 104729 + i * 31 + 17);
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    float m = (float)(x % 20011) / 20011.0f - 0.5f;
    static const float scale[5] = {1e-3f, 1.0f, 3e3f, 7e-6f, 1e5f};
    return m * scale[(x >> 8) % 5];
}

static tpu_tensor *mk_f32(tpu_ctx *ctx, int dev, int k, int n)
{
    int64_t d[1] = {n};
    tpu_tensor *t = NULL;
    if (tpu_tensor_new(ctx, TPU_F32, 1, d, &t)) return NULL;
    float *p = tpu_tensor_data(t);
    for (int i = 0; i < n; i++) p[i] = v_mixed(dev, k, i);
    return t;
}

static tpu_tensor *mk_bf16(tpu_ctx *ctx, int dev, int n)
{
    int64_t d[1] = {n};
    tpu_tensor *t = NULL;
    if (tpu_tensor_new(ctx, TPU_BF16, 1, d, &t)) return NULL;
    uint16_t *p = tpu_tensor_data(t);
    for (int i = 0; i < n; i++) {
        float f = v_mixed(dev, 9, i) * 100.0f;
        uint32_t u;
        memcpy(&u, &f, 4);
        p[i] = (uint16_t)(u >> 16);
    }
    return t;
}

typedef struct inputs {
    int           N, k;
    tpu_tensor ***in;
} inputs;

static void inputs_free(inputs *x)
{
    for (int d = 0; x->in && d < x->N; d++) tpu_tensors_free(x->in[d], x->k);
    free(x->in);
}

/* Runs m on sys (one process's part, or all) and on a one-process system of the same devices; compares every
 * device this process runs. */
static void compare_runs(tpu_ctx *ctx, tpu_system *dist, tpu_system *whole, const tpu_module *m, const inputs *x,
                         const char *what)
{
    int N = x->N;
    tpu_tensor ***a = calloc((size_t)N, sizeof *a), ***b = calloc((size_t)N, sizeof *b);
    int na = 0, nb = 0;
    tpu_status st = tpu_system_run(ctx, dist, m, NULL, (tpu_tensor **const *)x->in, x->k, a, &na);
    CHECK(!st, "%s: the multi-process run failed: %s", what, tpu_errmsg(ctx));
    st = st ? st : tpu_system_run(ctx, whole, m, NULL, (tpu_tensor **const *)x->in, x->k, b, &nb);
    CHECK(!st, "%s: the one-process run failed: %s", what, tpu_errmsg(ctx));
    int compared = 0;
    for (int d = 0; !st && d < N; d++) {
        if (!tpu_system_is_local(dist, d)) {
            CHECK(a[d] == NULL, "%s: device %d is not local but has outputs", what, d);
            continue;
        }
        CHECK(na == nb, "%s: %d outputs vs %d", what, na, nb);
        for (int j = 0; j < na && j < nb; j++) {
            size_t n1 = tpu_tensor_nbytes(a[d][j]), n2 = tpu_tensor_nbytes(b[d][j]);
            CHECK(n1 == n2 && !memcmp(tpu_tensor_cdata(a[d][j]), tpu_tensor_cdata(b[d][j]), n1),
                  "%s: device %d output %d differs from the one-process run", what, d, j);
        }
        compared++;
    }
    CHECK(st || compared > 0, "%s: no local device", what);
    tpu_system_outputs_free(a, N, na);
    tpu_system_outputs_free(b, N, nb);
    free(a);
    free(b);
}

static tpu_tensor *clone(tpu_ctx *ctx, const tpu_tensor *t)
{
    tpu_tensor *c = NULL;
    if (tpu_tensor_new(ctx, tpu_tensor_dtype(t), tpu_tensor_rank(t), tpu_tensor_dims(t), &c)) return NULL;
    memcpy(tpu_tensor_data(c), tpu_tensor_cdata(t), tpu_tensor_nbytes(t));
    return c;
}

static tpu_module *parse(tpu_ctx *ctx, const char *text, const char *name)
{
    tpu_module *m = NULL;
    if (tpu_module_parse(ctx, text, strlen(text), name, &m)) {
        printf("rank %d: FAIL parse %s: %s\n", g_rank, name, tpu_errmsg(ctx));
        g_fail++;
    }
    return m;
}

static void case_equal(tpu_ctx *ctx, tpu_dist *d)
{
    int P = tpu_dist_size(d), N = 8;
    tpu_module *all = parse(ctx, k_all, "all.hlo"), *loop = parse(ctx, k_loop, "loop.hlo");
    inputs x = {N, 3, calloc(8, sizeof *x.in)}, y = {N, 1, calloc(8, sizeof *y.in)};
    for (int g = 0; g < N; g++) {
        x.in[g] = calloc(3, sizeof **x.in);
        x.in[g][0] = mk_f32(ctx, g, 0, 37);
        x.in[g][1] = mk_bf16(ctx, g, 16);
        x.in[g][2] = mk_f32(ctx, g, 2, 40);
        y.in[g] = calloc(1, sizeof **y.in);
        y.in[g][0] = mk_f32(ctx, g, 5, 9);
    }
    tpu_system *blocks = NULL, *inter = NULL, *whole = NULL;
    int owner[8];
    for (int g = 0; g < N; g++) owner[g] = (g * 3 + 1) % P;   /* interleaved, not in blocks */
    tpu_status st = tpu_system_new_dist(ctx, "8", d, NULL, &blocks);
    CHECK(!st, "system in blocks: %s", tpu_errmsg(ctx));
    if (!st) st = tpu_system_new_dist(ctx, "8", d, owner, &inter);
    CHECK(!st, "interleaved system: %s", tpu_errmsg(ctx));
    if (!st) st = tpu_system_new(ctx, "8", &whole);
    if (!st && all && loop) {
        for (int rep = 0; rep < 3; rep++) compare_runs(ctx, blocks, whole, all, &x, "every collective (blocks)");
        compare_runs(ctx, blocks, whole, loop, &y, "while loop (blocks)");
        compare_runs(ctx, inter, whole, all, &x, "every collective (interleaved)");
        compare_runs(ctx, inter, whole, loop, &y, "while loop (interleaved)");
        compare_runs(ctx, blocks, whole, loop, &y, "while loop again (blocks)");
    }
    tpu_system_free(blocks);
    tpu_system_free(inter);
    tpu_system_free(whole);
    inputs_free(&x);
    inputs_free(&y);
    tpu_module_free(all);
    tpu_module_free(loop);
    /* the shard_map golden: 4 partitions, subgroups, all-to-all, permutes, a loop */
    tpu_module *sm = NULL;
    tpu_tensor **gin = NULL;
    char **names = NULL;
    int ng = 0;
    st = tpu_module_load(ctx, "tests/golden/runtime/shard_map.hlo", &sm);
    CHECK(!st, "shard_map.hlo: %s", tpu_errmsg(ctx));
    if (!st) st = tpu_npz_load(ctx, "tests/golden/runtime/shard_map.npz", &gin, &names, &ng);
    CHECK(!st, "shard_map.npz: %s", tpu_errmsg(ctx));
    if (!st && 4 % P == 0) {
        inputs z = {4, 2, calloc(4, sizeof *z.in)};
        for (int g = 0; g < 4; g++) {
            z.in[g] = calloc(2, sizeof **z.in);
            for (int i = 0; i < 2; i++) {
                char want[32];
                snprintf(want, sizeof want, "arg%d_dev%d", i, g);
                for (int k = 0; k < ng; k++)
                    if (!strcmp(names[k], want)) z.in[g][i] = clone(ctx, gin[k]);
            }
        }
        tpu_system *s4 = NULL, *w4 = NULL;
        st = tpu_system_new_dist(ctx, "4", d, NULL, &s4);
        if (!st) st = tpu_system_new(ctx, "4", &w4);
        CHECK(!st, "4 devices: %s", tpu_errmsg(ctx));
        if (!st) compare_runs(ctx, s4, w4, sm, &z, "shard_map golden");
        tpu_system_free(s4);
        tpu_system_free(w4);
        inputs_free(&z);
    }
    tpu_names_free(names, ng);
    tpu_tensors_free(gin, ng);
    tpu_module_free(sm);
}

/* process 1's devices get f32[36] where the program takes f32[37] */
static int case_fail(tpu_ctx *ctx, tpu_dist *d)
{
    tpu_module *all = parse(ctx, k_all, "all.hlo");
    inputs x = {8, 3, calloc(8, sizeof *x.in)};
    tpu_system *sys = NULL;
    tpu_status st = tpu_system_new_dist(ctx, "8", d, NULL, &sys);
    for (int g = 0; g < 8; g++) {
        int mine = tpu_system_is_local(sys, g);
        x.in[g] = calloc(3, sizeof **x.in);
        x.in[g][0] = mk_f32(ctx, g, 0, mine && g_rank == 1 ? 36 : 37);
        x.in[g][1] = mk_bf16(ctx, g, 16);
        x.in[g][2] = mk_f32(ctx, g, 2, 40);
    }
    tpu_tensor **out[8];
    int nout = 0;
    if (!st) st = tpu_system_run(ctx, sys, all, NULL, (tpu_tensor **const *)x.in, 3, out, &nout);
    printf("rank %d: run: %s\n", g_rank, st ? tpu_errmsg(ctx) : "ok");
    fflush(stdout);
    if (!st) tpu_system_outputs_free(out, 8, nout);
    tpu_system_free(sys);
    inputs_free(&x);
    tpu_module_free(all);
    return st != TPU_OK;
}

/* process 1 gives no inputs at all: its run fails before its devices start */
static int case_early(tpu_ctx *ctx, tpu_dist *d)
{
    tpu_module *m = parse(ctx, k_loop, "loop.hlo");
    inputs y = {8, 1, calloc(8, sizeof *y.in)};
    tpu_system *sys = NULL;
    tpu_status st = tpu_system_new_dist(ctx, "8", d, NULL, &sys);
    for (int g = 0; !st && g < 8; g++)
        if (g_rank != 1) {
            y.in[g] = calloc(1, sizeof **y.in);
            y.in[g][0] = mk_f32(ctx, g, 5, 9);
        }
    tpu_tensor **out[8];
    int nout = 0;
    if (!st) st = tpu_system_run(ctx, sys, m, NULL, (tpu_tensor **const *)y.in, 1, out, &nout);
    printf("rank %d: run: %s\n", g_rank, st ? tpu_errmsg(ctx) : "ok");
    fflush(stdout);
    if (!st) tpu_system_outputs_free(out, 8, nout);
    tpu_system_free(sys);
    inputs_free(&y);
    tpu_module_free(m);
    return st != TPU_OK;
}

/* process 1 runs the loop with another constant */
static int case_program(tpu_ctx *ctx, tpu_dist *d)
{
    char *text = strdup(k_loop);
    if (g_rank == 1) {
        char *c = strstr(text, "constant(0.3)");
        if (c) c[10] = '4';
    }
    tpu_module *m = parse(ctx, text, "loop.hlo");
    free(text);
    inputs y = {8, 1, calloc(8, sizeof *y.in)};
    for (int g = 0; g < 8; g++) {
        y.in[g] = calloc(1, sizeof **y.in);
        y.in[g][0] = mk_f32(ctx, g, 5, 9);
    }
    tpu_system *sys = NULL;
    tpu_tensor **out[8];
    int nout = 0;
    tpu_status st = tpu_system_new_dist(ctx, "8", d, NULL, &sys);
    if (!st) st = tpu_system_run(ctx, sys, m, NULL, (tpu_tensor **const *)y.in, 1, out, &nout);
    printf("rank %d: run: %s\n", g_rank, st ? tpu_errmsg(ctx) : "ok");
    fflush(stdout);
    if (!st) tpu_system_outputs_free(out, 8, nout);
    tpu_system_free(sys);
    inputs_free(&y);
    tpu_module_free(m);
    return st != TPU_OK;
}

static int case_slice(tpu_ctx *ctx, tpu_dist *d)
{
    tpu_system *sys = NULL;
    tpu_status st = tpu_system_new_dist(ctx, g_rank == 1 ? "v4-32" : "v4-16", d, NULL, &sys);
    printf("rank %d: system: %s\n", g_rank, st ? tpu_errmsg(ctx) : "ok");
    fflush(stdout);
    tpu_system_free(sys);
    return st != TPU_OK;
}

/* process 1 sleeps instead of running */
static int case_hang(tpu_ctx *ctx, tpu_dist *d)
{
    tpu_module *m = parse(ctx, k_loop, "loop.hlo");
    inputs y = {8, 1, calloc(8, sizeof *y.in)};
    for (int g = 0; g < 8; g++) {
        y.in[g] = calloc(1, sizeof **y.in);
        y.in[g][0] = mk_f32(ctx, g, 5, 9);
    }
    tpu_system *sys = NULL;
    tpu_tensor **out[8];
    int nout = 0;
    tpu_status st = tpu_system_new_dist(ctx, "8", d, NULL, &sys);
    if (!st && g_rank == 1) {
        printf("rank 1: sleeping\n");
        fflush(stdout);
        sleep(600);   /* ended by the abort of the others */
    }
    if (!st) st = tpu_system_run(ctx, sys, m, NULL, (tpu_tensor **const *)y.in, 1, out, &nout);
    printf("rank %d: run: %s\n", g_rank, st ? tpu_errmsg(ctx) : "ok");
    fflush(stdout);
    if (!st) tpu_system_outputs_free(out, 8, nout);
    tpu_system_free(sys);
    inputs_free(&y);
    tpu_module_free(m);
    return st != TPU_OK;
}

static int case_nprocs(tpu_ctx *ctx, tpu_dist *d)
{
    tpu_system *sys = NULL;
    tpu_status st = tpu_system_new_dist(ctx, "v3-32", d, NULL, &sys);
    printf("rank %d: system: %s\n", g_rank, st ? tpu_errmsg(ctx) : "ok");
    fflush(stdout);
    tpu_system_free(sys);
    return st != TPU_OK;
}

int main(int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "equal";
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_dist *d = NULL;
    if (!tpu_dist_launched()) {
        fprintf(stderr, "dist-tests: start me with mpirun -np 2 (or more)\n");
        return 2;
    }
    if (tpu_dist_new(ctx, &d)) {
        fprintf(stderr, "dist-tests: %s\n", tpu_errmsg(ctx));
        return 1;
    }
    g_rank = tpu_dist_rank(d);
    int failed = 0;
    if (!strcmp(c, "equal")) case_equal(ctx, d);
    else if (!strcmp(c, "fail")) failed = case_fail(ctx, d);
    else if (!strcmp(c, "early")) failed = case_early(ctx, d);
    else if (!strcmp(c, "program")) failed = case_program(ctx, d);
    else if (!strcmp(c, "slice")) failed = case_slice(ctx, d);
    else if (!strcmp(c, "hang")) failed = case_hang(ctx, d);
    else if (!strcmp(c, "nprocs")) failed = case_nprocs(ctx, d);
    else {
        printf("rank %d: no case '%s'\n", g_rank, c);
        failed = 1;
    }
    printf("rank %d: %d checks passed, %d failed\n", g_rank, g_pass, g_fail);
    fflush(stdout);
    tpu_dist_free(d, failed || g_fail);   /* MPI_Abort after a failure: ends every process */
    tpu_ctx_free(ctx);
    return g_fail ? 1 : 0;
}
