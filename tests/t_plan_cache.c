/* t_plan_cache.c — what the executor keeps between runs.
 * Each computation's plan, in its module (hlo_module.exec_plans): runs of two look-alike modules (same
 * computation names, ids and instruction counts, other opcodes and constants) alternated, with and without
 * fusion, and the same modules run from several threads at once from their first run on, all give the bytes
 * a fresh module gives.
 * Result buffers the caller frees: back to the freeing thread's pool, taken by the next run's results. */
#include "test.h"
#include "exec/exec.h"
#include "util/tensor.h"

#include <pthread.h>
#include <stdlib.h>

/* a while loop (3 trips) over a constant, a fusible chain and a dot; B differs in opcodes and constants */
#define PC_MODULE(NAME, OP, C, D)                                                                        \
    "HloModule " NAME "\n"                                                                            \
    "body {\n  p = (s32[], f32[4,4]) parameter(0)\n  i = s32[] get-tuple-element(p), index=0\n"          \
    "  x = f32[4,4] get-tuple-element(p), index=1\n  one = s32[] constant(1)\n  i1 = s32[] add(i, one)\n" \
    "  c = f32[4,4] constant({{" C "},{1,2,3,4},{0.5,0.25,2,8},{3,1,4,1}})\n"                            \
    "  y = f32[4,4] " OP "(x, c)\n  e = f32[4,4] exponential(y)\n  n = f32[4,4] negate(e)\n"             \
    "  z = f32[4,4] " OP "(n, x)\n"                                                                       \
    "  d = f32[4,4] dot(z, c), lhs_contracting_dims={" D "}, rhs_contracting_dims={0}\n"                  \
    "  ROOT t = (s32[], f32[4,4]) tuple(i1, d)\n}\n"                                                       \
    "cond {\n  p = (s32[], f32[4,4]) parameter(0)\n  i = s32[] get-tuple-element(p), index=0\n"          \
    "  k = s32[] constant(3)\n  ROOT lt = pred[] compare(i, k), direction=LT\n}\n"                      \
    "ENTRY e {\n  x = f32[4,4] parameter(0)\n  s = f32[] constant(0.125)\n"                               \
    "  b = f32[4,4] broadcast(s), dimensions={}\n  xs = f32[4,4] multiply(x, b)\n"                        \
    "  z = s32[] constant(0)\n  t = (s32[], f32[4,4]) tuple(z, xs)\n"                                     \
    "  w = (s32[], f32[4,4]) while(t), condition=cond, body=body\n"                                       \
    "  ROOT r = f32[4,4] get-tuple-element(w), index=1\n}\n"

static const char *pc_text[2] = {
    PC_MODULE("a", "add", "1,-1,2,-2", "1"),
    PC_MODULE("b", "multiply", "0.5,3,-1,2", "0"),
};

static tpu_module *pc_load(tpu_ctx *ctx, int k)
{
    tpu_module *m = NULL;
    if (tpu_module_parse(ctx, pc_text[k], strlen(pc_text[k]), k ? "b.hlo" : "a.hlo", &m) != TPU_OK) {
        test_fail(__FILE__, __LINE__, "parse: %s", tpu_errmsg(ctx));
        return NULL;
    }
    return m;
}

/* Runs m (ref: EXE_* bits) on ins and compares with want (NULL: returns the output in *got instead). */
static int pc_run(tpu_ctx *ctx, tpu_module *m, unsigned ref, tpu_tensor **ins, const tpu_tensor *want, tpu_tensor **got)
{
    exe_run_cfg cfg = {.ref = ref};
    tpu_tensor **outs = NULL;
    int n = 0, bad = 0;
    if (exe_run(ctx, m, NULL, &cfg, ins, 1, &outs, &n) != TPU_OK || n != 1) {
        tpu_tensors_free(outs, n);
        return 1;
    }
    if (got) {
        *got = outs[0];
        outs[0] = NULL;
    } else {
        bad = tpu_tensor_nbytes(outs[0]) != tpu_tensor_nbytes(want) ||
              memcmp(tpu_tensor_cdata(outs[0]), tpu_tensor_cdata(want), tpu_tensor_nbytes(want)) != 0;
    }
    tpu_tensors_free(outs, n);
    return bad;
}

/* The two modules' outputs from fresh modules (one run each), and their inputs. */
static int pc_reference(tpu_ctx *ctx, tpu_tensor ***ins, tpu_tensor **want)
{
    for (int k = 0; k < 2; k++) {
        tpu_module *m = pc_load(ctx, k);
        if (!m) return 1;
        int n = 0, bad = tpu_random_inputs(ctx, m, 5, &ins[k], &n) != TPU_OK || n != 1 ? 1 : pc_run(ctx, m, 0, ins[k], NULL, &want[k]);
        tpu_module_free(m);
        if (bad) return 1;
    }
    return 0;
}

TEST(exec_plans_kept_per_module_and_fusion_setting)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_tensor **ins[2] = {0}, *want[2] = {0};
    tpu_module *m[2] = {0};
    REQUIRE(pc_reference(ctx, ins, want) == 0);
    /* the two modules give different results (else the test could not tell them apart) */
    CHECK(memcmp(tpu_tensor_cdata(want[0]), tpu_tensor_cdata(want[1]), tpu_tensor_nbytes(want[0])) != 0);
    m[0] = pc_load(ctx, 0);
    m[1] = pc_load(ctx, 1);
    REQUIRE(m[0] && m[1]);
    CHECK_EQ_INT(exe_plans_count(m[0]), 0);
    int plans_fused = 0;
    for (int r = 0; r < 6; r++)
        for (int k = 0; k < 2; k++) {
            unsigned ref = r % 3 == 2 ? EXE_NO_FUSION : 0;
            CHECK_MSG(pc_run(ctx, m[k], ref, ins[k], want[k], NULL) == 0, "run %d of module %c (%s) differs", r, 'a' + k,
                      ref ? "unfused" : "fused");
            if (r == 0 && k == 0) plans_fused = exe_plans_count(m[0]);
        }
    /* entry and body: one plan each per fusion setting, made once (cond, a counted loop's condition, is
     * evaluated on the loop state without a plan: exe_counted) */
    CHECK_EQ_INT(plans_fused, 2);
    CHECK_EQ_INT(exe_plans_count(m[0]), 4);
    CHECK_EQ_INT(exe_plans_count(m[1]), 4);
    for (int k = 0; k < 2; k++) {
        tpu_module_free(m[k]);
        tpu_tensors_free(ins[k], 1);
        tpu_tensor_free(want[k]);
    }
    tpu_ctx_free(ctx);
}

typedef struct pc_job {
    pthread_barrier_t *go;
    tpu_module       **m;
    tpu_tensor      ***ins, **want;
    int                id, bad;
} pc_job;

static void *pc_thread(void *arg)
{
    pc_job *J = arg;
    tpu_ctx *ctx = tpu_ctx_new();
    pthread_barrier_wait(J->go);
    for (int r = 0; r < 40 && ctx; r++) {
        int k = (r + J->id) & 1;
        J->bad += pc_run(ctx, J->m[k], (r / 2 + J->id) % 3 == 0 ? EXE_NO_FUSION : 0, J->ins[k], J->want[k], NULL);
    }
    tpu_ctx_free(ctx);
    return NULL;
}

TEST(exec_plans_shared_by_threads)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_tensor **ins[2] = {0}, *want[2] = {0};
    REQUIRE(pc_reference(ctx, ins, want) == 0);
    for (int round = 0; round < 3; round++) {
        /* fresh modules each round: the threads race to make and publish the first plans */
        tpu_module *m[2] = {pc_load(ctx, 0), pc_load(ctx, 1)};
        REQUIRE(m[0] && m[1]);
        enum { NT = 4 };
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, NT);
        pthread_t th[NT];
        pc_job jobs[NT];
        for (int t = 0; t < NT; t++) {
            jobs[t] = (pc_job){.go = &go, .m = m, .ins = ins, .want = want, .id = t};
            CHECK(pthread_create(&th[t], NULL, pc_thread, &jobs[t]) == 0);
        }
        for (int t = 0; t < NT; t++) {
            pthread_join(th[t], NULL);
            CHECK_MSG(jobs[t].bad == 0, "round %d thread %d: %d runs differ", round, t, jobs[t].bad);
        }
        pthread_barrier_destroy(&go);
        CHECK_EQ_INT(exe_plans_count(m[0]), 4);   /* entry and body, fused and not (the counted cond has none) */
        tpu_module_free(m[0]);
        tpu_module_free(m[1]);
    }
    for (int k = 0; k < 2; k++) {
        tpu_tensors_free(ins[k], 1);
        tpu_tensor_free(want[k]);
    }
    tpu_ctx_free(ctx);
}

static void *pc_free_outputs(void *arg)
{
    tpu_tensor **outs = arg;
    tpu_tensors_free(outs, 2);   /* a thread that never ran a program: plain frees */
    return NULL;
}

TEST(exec_outputs_freed_by_the_caller_serve_the_next_run)
{
    static const char text[] =
        "HloModule o\nENTRY e {\n  x = f32[512,512] parameter(0)\n  y = f32[100] parameter(1)\n"
        "  c = f32[] constant(2)\n  b = f32[512,512] broadcast(c), dimensions={}\n"
        "  m = f32[512,512] multiply(x, b)\n  n = f32[100] negate(y)\n  ROOT t = (f32[512,512], f32[100]) tuple(m, n)\n}\n";
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    tpu_tensor **ins = NULL, **outs = NULL;
    int nin = 0, n = 0;
    REQUIRE_OK(ctx, tpu_module_parse(ctx, text, strlen(text), "o.hlo", &m));
    REQUIRE_OK(ctx, tpu_random_inputs(ctx, m, 3, &ins, &nin));
    REQUIRE_OK(ctx, tpu_run(ctx, m, NULL, ins, nin, &outs, &n));
    REQUIRE(n == 2);
    void *data[2] = {tpu_tensor_data(outs[0]), tpu_tensor_data(outs[1])};
    tpu_tensor *want[2] = {ten_clone(outs[0]), ten_clone(outs[1])};
    REQUIRE(want[0] && want[1]);
    tpu_tensors_free(outs, n);
    for (int r = 0; r < 3; r++) {
        REQUIRE_OK(ctx, tpu_run(ctx, m, NULL, ins, nin, &outs, &n));
        REQUIRE(n == 2);
        for (int k = 0; k < 2; k++) {
            CHECK_MSG(memcmp(tpu_tensor_cdata(outs[k]), tpu_tensor_cdata(want[k]), tpu_tensor_nbytes(want[k])) == 0,
                      "run %d output %d differs", r, k);
            /* the buffer the caller freed after the run before (this thread's pool hands it out again) */
            if (r < 2) CHECK_MSG(tpu_tensor_data(outs[k]) == data[k], "run %d output %d: a fresh buffer", r, k);
        }
        if (r == 1) {
            pthread_t th;
            REQUIRE(pthread_create(&th, NULL, pc_free_outputs, outs) == 0);
            pthread_join(th, NULL);
        } else {
            tpu_tensors_free(outs, n);
        }
    }
    tpu_tensor_free(want[0]);
    tpu_tensor_free(want[1]);
    tpu_tensors_free(ins, nin);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}
