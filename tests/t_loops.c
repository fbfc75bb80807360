/* t_loops.c — loops whose bodies call sub-computations run on a copy of the module with those calls inlined
 * (exe_interp.c, exe_inlined): the outputs are the bytes the module as written gives (EXE_NO_INLINE), with the
 * fast kernels and against the naive references, in both numerics modes; the inlined copy is really what runs
 * (the module's own plans stay unmade); runs with a step limit keep the calls. */
#include "test.h"
#include "compile/policy.h"
#include "exec/exec.h"

#include <stdlib.h>

/* A scan: nested calls in the body (a reshape chain back to a value's own shape across them) (one returns a parameter unchanged), a call in the condition, a reducer,
 * a dot, a dynamic-update-slice of the loop state inside a call, and a call outside the loop. */
static const char *lp_text =
    "HloModule loops\n"
    "add_f { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
    "pick { xs = f32[16,8] parameter(0)\n i = s32[] parameter(1)\n z = s32[] constant(0)\n"
    "  d = f32[1,8] dynamic-slice(xs, i, z), dynamic_slice_sizes={1,8}\n ROOT r = f32[8] reshape(d) }\n"
    "same { ROOT p = f32[8,8] parameter(0) }\n"
    "step { w = f32[8,8] parameter(0)\n h = f32[8] parameter(1)\n x = f32[8] parameter(2)\n"
    "  c = f32[] constant(0.75)\n cb = f32[8] broadcast(c), dimensions={}\n m = f32[8] multiply(h, cb)\n"
    "  a = f32[8] add(m, x)\n t = f32[8] tanh(a)\n w2 = f32[8,8] call(w), to_apply=same\n"
    "  t1 = f32[8,1] reshape(t)\n t2 = f32[8,1] broadcast(t1), dimensions={0,1}\n t3 = f32[8] reshape(t2)\n"
    "  hb = f32[8,8] broadcast(t3), dimensions={0}\n d = f32[8,8] dot(w2, hb), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
    "  k = f32[] constant(0.125)\n kb = f32[8,8] broadcast(k), dimensions={}\n wn = f32[8,8] multiply(d, kb)\n"
    "  z = f32[] constant(0)\n s = f32[] reduce(t, z), dimensions={0}, to_apply=add_f\n"
    "  ROOT r = (f32[8], f32[8,8], f32[]) tuple(t, wn, s) }\n"
    "put { ys = f32[16] parameter(0)\n v = f32[] parameter(1)\n i = s32[] parameter(2)\n"
    "  r1 = f32[1] reshape(v)\n ROOT u = f32[16] dynamic-update-slice(ys, r1, i) }\n"
    "limit { ROOT n = s32[] constant(16) }\n"
    "body { p = (s32[], f32[8], f32[8,8], f32[16], f32[16,8]) parameter(0)\n"
    "  i = s32[] get-tuple-element(p), index=0\n h = f32[8] get-tuple-element(p), index=1\n"
    "  w = f32[8,8] get-tuple-element(p), index=2\n ys = f32[16] get-tuple-element(p), index=3\n"
    "  xs = f32[16,8] get-tuple-element(p), index=4\n x = f32[8] call(xs, i), to_apply=pick\n"
    "  st = (f32[8], f32[8,8], f32[]) call(w, h, x), to_apply=step\n"
    "  h2 = f32[8] get-tuple-element(st), index=0\n w3 = f32[8,8] get-tuple-element(st), index=1\n"
    "  s = f32[] get-tuple-element(st), index=2\n ys2 = f32[16] call(ys, s, i), to_apply=put\n"
    "  one = s32[] constant(1)\n i1 = s32[] add(i, one)\n"
    "  ROOT r = (s32[], f32[8], f32[8,8], f32[16], f32[16,8]) tuple(i1, h2, w3, ys2, xs) }\n"
    "cond { p = (s32[], f32[8], f32[8,8], f32[16], f32[16,8]) parameter(0)\n"
    "  i = s32[] get-tuple-element(p), index=0\n n = s32[] call(), to_apply=limit\n"
    "  ROOT lt = pred[] compare(i, n), direction=LT }\n"
    "ENTRY e { h = f32[8] parameter(0)\n w = f32[8,8] parameter(1)\n xs = f32[16,8] parameter(2)\n"
    "  z = f32[] constant(0)\n ys = f32[16] broadcast(z), dimensions={}\n i = s32[] constant(0)\n"
    "  w0 = f32[8,8] call(w), to_apply=same\n"
    "  t = (s32[], f32[8], f32[8,8], f32[16], f32[16,8]) tuple(i, h, w0, ys, xs)\n"
    "  l = (s32[], f32[8], f32[8,8], f32[16], f32[16,8]) while(t), condition=cond, body=body\n"
    "  a = f32[8] get-tuple-element(l), index=1\n b = f32[8,8] get-tuple-element(l), index=2\n"
    "  c = f32[16] get-tuple-element(l), index=3\n ROOT r = (f32[8], f32[8,8], f32[16]) tuple(a, b, c) }\n";

/* Runs m with the EXE_* bits `ref` (and the step limit max_steps) and returns the outputs (NULL on failure). */
static tpu_tensor **lp_run(tpu_ctx *ctx, tpu_module *m, tpu_numerics mode, unsigned ref, int64_t max_steps,
                           tpu_tensor **ins, int nin, int *n)
{
    tpu_run_opts o = tpu_run_opts_default();
    o.numerics = mode;
    o.max_steps = max_steps;
    exe_run_cfg cfg = {.ref = ref};
    tpu_tensor **outs = NULL;
    if (exe_run(ctx, m, &o, &cfg, ins, nin, &outs, n) != TPU_OK) {
        test_fail(__FILE__, __LINE__, "run (ref bits %u): %s", ref, tpu_errmsg(ctx));
        return NULL;
    }
    return outs;
}

static int lp_same(tpu_tensor **a, int na, tpu_tensor **b, int nb, const char *what)
{
    if (!a || !b || na != nb) {
        test_fail(__FILE__, __LINE__, "%s: %d outputs against %d", what, na, nb);
        return 0;
    }
    for (int i = 0; i < na; i++)
        if (tpu_tensor_nbytes(a[i]) != tpu_tensor_nbytes(b[i]) ||
            memcmp(tpu_tensor_cdata(a[i]), tpu_tensor_cdata(b[i]), tpu_tensor_nbytes(a[i]))) {
            test_fail(__FILE__, __LINE__, "%s: output %d differs", what, i);
            return 0;
        }
    return 1;
}

TEST(loop_calls_inlined_give_the_bytes_of_the_module_as_written)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    REQUIRE(tpu_module_parse(ctx, lp_text, strlen(lp_text), "loops.hlo", &m) == TPU_OK);
    tpu_tensor **ins = NULL;
    int nin = 0;
    REQUIRE(tpu_random_inputs(ctx, m, 5, &ins, &nin) == TPU_OK);
    static const unsigned refs[] = {EXE_NO_INLINE, EXE_NO_INLINE | EXE_NO_FUSION | EXE_REF_ELEMENTWISE | EXE_REF_KERNELS};
    for (int mode = 0; mode < 2; mode++) {
        tpu_numerics nm = mode ? TPU_NUMERICS_EXACT : TPU_NUMERICS_TPU;
        int na = 0;
        tpu_tensor **a = lp_run(ctx, m, nm, 0, 0, ins, nin, &na);
        for (size_t r = 0; r < sizeof refs / sizeof refs[0]; r++) {
            int nb = 0;
            tpu_tensor **b = lp_run(ctx, m, nm, refs[r], 0, ins, nin, &nb);
            char what[64];
            snprintf(what, sizeof what, "%s numerics, reference bits %u", mode ? "exact" : "tpu", refs[r]);
            lp_same(a, na, b, nb, what);
            tpu_tensors_free(b, nb);
        }
        /* inlined, the reference kernels too */
        int nc = 0;
        tpu_tensor **c = lp_run(ctx, m, nm, EXE_REF_ELEMENTWISE | EXE_REF_KERNELS, 0, ins, nin, &nc);
        lp_same(a, na, c, nc, "inlined with the reference kernels");
        tpu_tensors_free(c, nc);
        tpu_tensors_free(a, na);
    }
    tpu_tensors_free(ins, nin);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

TEST(loop_calls_inlined_copy_is_what_runs)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    REQUIRE(tpu_module_parse(ctx, lp_text, strlen(lp_text), "loops.hlo", &m) == TPU_OK);
    tpu_tensor **ins = NULL, **a = NULL;
    int nin = 0, na = 0;
    REQUIRE(tpu_random_inputs(ctx, m, 6, &ins, &nin) == TPU_OK);
    a = lp_run(ctx, m, TPU_NUMERICS_TPU, 0, 0, ins, nin, &na);
    CHECK_EQ_INT(exe_plans_count(m), 0);   /* the plans are the inlined copy's */
    tpu_tensors_free(a, na);
    /* a step limit counts calls: the module runs as written, and stops where it did before inlining */
    a = lp_run(ctx, m, TPU_NUMERICS_TPU, 0, 100000, ins, nin, &na);
    CHECK(exe_plans_count(m) > 0);
    tpu_tensors_free(a, na);
    tpu_run_opts o = tpu_run_opts_default();
    o.max_steps = 40;
    CHECK(exe_run(ctx, m, &o, NULL, ins, nin, &a, &na) == TPU_ERR_LIMIT);
    tpu_tensors_free(ins, nin);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* The benchmark's loop programs (bench/programs), when the checkout has them. */
TEST(loop_calls_inlined_bench_programs)
{
    static const char *progs[] = {"bench/programs/scan_small_steps.hlo", "bench/programs/while_newton.hlo"};
    tpu_ctx *ctx = tpu_ctx_new();
    int ran = 0;
    for (size_t p = 0; p < sizeof progs / sizeof progs[0]; p++) {
        tpu_module *m = NULL;
        if (tpu_module_load(ctx, progs[p], &m) != TPU_OK) continue;
        tpu_tensor **ins = NULL;
        int nin = 0, na = 0, nb = 0;
        REQUIRE(tpu_random_inputs(ctx, m, 7, &ins, &nin) == TPU_OK);
        tpu_tensor **a = lp_run(ctx, m, TPU_NUMERICS_TPU, 0, 0, ins, nin, &na);
        tpu_tensor **b = lp_run(ctx, m, TPU_NUMERICS_TPU, EXE_NO_INLINE | EXE_NO_FUSION | EXE_REF_ELEMENTWISE | EXE_REF_KERNELS,
                                0, ins, nin, &nb);
        lp_same(a, na, b, nb, progs[p]);
        tpu_tensors_free(a, na);
        tpu_tensors_free(b, nb);
        tpu_tensors_free(ins, nin);
        tpu_module_free(m);
        ran++;
    }
    if (!ran) test_skip("bench/programs not found from here");
    tpu_ctx_free(ctx);
}

/* cmp_forward_moves: reads through reshape chains and dimension-preserving broadcasts back to a value of the
 * same shape, and nowhere else (a broadcast that adds or permutes, a reshape to a new shape, a type change). */
TEST(loop_forward_moves_skips_only_identity_chains)
{
    static const char *text =
        "HloModule mv\n"
        "ENTRY e { x = f32[8] parameter(0)\n a = f32[8,1] reshape(x)\n b = f32[8,1] broadcast(a), dimensions={0,1}\n"
        "  c = f32[8] reshape(b)\n d = f32[8,8] broadcast(c), dimensions={0}\n e = f32[2,4] reshape(c)\n"
        "  f = f32[8,1] broadcast(a), dimensions={0,1}\n g = bf16[8] parameter(1)\n h = f32[8] convert(g)\n"
        "  k = f32[8] add(c, h)\n ROOT r = (f32[8,8], f32[2,4], f32[8,1], f32[8]) tuple(d, e, f, k) }\n";
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    REQUIRE(tpu_module_parse(ctx, text, strlen(text), "mv.hlo", &m) == TPU_OK);
    hlo_module *c = NULL;
    REQUIRE(hlo_module_clone(ctx, m, &c) == TPU_OK);
    cmp_forward_moves(c);
    const hlo_comp *e = c->entry;
    const hlo_instr *d = NULL, *r = NULL, *k = NULL;
    for (int i = 0; i < e->ninstrs; i++) {
        if (!strcmp(e->instrs[i]->name, "d")) d = e->instrs[i];
        if (!strcmp(e->instrs[i]->name, "e")) r = e->instrs[i];
        if (!strcmp(e->instrs[i]->name, "k")) k = e->instrs[i];
    }
    REQUIRE(d && r && k);
    CHECK_EQ_STR(d->ops[0]->name, "x");   /* c = reshape(broadcast(reshape(x))) is x */
    CHECK_EQ_STR(r->ops[0]->name, "x");   /* e reads c's elements: x's */
    CHECK_EQ_STR(k->ops[0]->name, "x");
    CHECK_EQ_STR(k->ops[1]->name, "h");   /* a convert is no move */
    CHECK_EQ_STR(e->root->ops[2]->name, "a");   /* f = broadcast(a) adds nothing; a's shape is not x's */
    CHECK_EQ_STR(e->root->ops[1]->name, "e");   /* a reshape to a shape nothing below has stays */
    hlo_module_free(c);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* Loop-invariant values (exe_interp.c, exe_hoist_plan): a Newton iteration whose condition takes the max of an
 * input the body passes back unchanged, and whose body multiplies by a matrix it passes back too, next to an
 * element that changes (its max is computed every time) and an rng (never held). The values are held (counted),
 * and the outputs are the bytes of runs that compute everything every iteration, with the reference kernels
 * too, in both numerics modes. */
static const char *lp_inv_text =
    "HloModule inv\n"
    "mx { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT m = f32[] maximum(a, b) }\n"
    "cond { p = (f32[256], s32[], f32[256], f32[16,16]) parameter(0)\n x = f32[256] get-tuple-element(p), index=0\n"
    "  a = f32[256] get-tuple-element(p), index=2\n i = s32[] get-tuple-element(p), index=1\n"
    "  xx = f32[256] multiply(x, x)\n d = f32[256] subtract(xx, a)\n e = f32[256] abs(d)\n"
    "  ninf = f32[] constant(-inf)\n em = f32[] reduce(e, ninf), dimensions={0}, to_apply=mx\n"
    "  am = f32[] reduce(a, ninf), dimensions={0}, to_apply=mx\n tol = f32[] constant(1e-9)\n"
    "  t = f32[] multiply(am, tol)\n gt = pred[] compare(em, t), direction=GT\n"
    "  n = s32[] constant(30)\n lt = pred[] compare(i, n), direction=LT\n ROOT ok = pred[] and(gt, lt) }\n"
    "body { p = (f32[256], s32[], f32[256], f32[16,16]) parameter(0)\n x = f32[256] get-tuple-element(p), index=0\n"
    "  a = f32[256] get-tuple-element(p), index=2\n w = f32[16,16] get-tuple-element(p), index=3\n"
    "  i = s32[] get-tuple-element(p), index=1\n q = f32[256] divide(a, x)\n s = f32[256] add(x, q)\n"
    "  h = f32[] constant(0.5)\n hb = f32[256] broadcast(h), dimensions={}\n x1 = f32[256] multiply(s, hb)\n"
    "  ww = f32[16,16] dot(w, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
    "  wt = f32[16,16] transpose(ww), dimensions={1,0}\n wr = f32[256] reshape(wt)\n"
    "  z = f32[] constant(0)\n o = f32[] constant(1e-6)\n r = f32[256] rng(z, o), distribution=rng_uniform\n"
    "  wz = f32[256] multiply(wr, r)\n x2 = f32[256] add(x1, wz)\n"
    "  one = s32[] constant(1)\n i1 = s32[] add(i, one)\n"
    "  ROOT t = (f32[256], s32[], f32[256], f32[16,16]) tuple(x2, i1, a, w) }\n"
    "ENTRY e { a0 = f32[256] parameter(0)\n w = f32[16,16] parameter(1)\n a = f32[256] abs(a0)\n"
    "  one = f32[] constant(1)\n ob = f32[256] broadcast(one), dimensions={}\n a1 = f32[256] add(a, ob)\n"
    "  z = s32[] constant(0)\n t = (f32[256], s32[], f32[256], f32[16,16]) tuple(a1, z, a1, w)\n"
    "  l = (f32[256], s32[], f32[256], f32[16,16]) while(t), condition=cond, body=body\n"
    "  x = f32[256] get-tuple-element(l), index=0\n i = s32[] get-tuple-element(l), index=1\n"
    "  ROOT r = (f32[256], s32[]) tuple(x, i) }\n";

TEST(loop_invariant_values_held_give_the_same_bytes)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    REQUIRE(tpu_module_parse(ctx, lp_inv_text, strlen(lp_inv_text), "inv.hlo", &m) == TPU_OK);
    tpu_tensor **ins = NULL;
    int nin = 0;
    REQUIRE(tpu_random_inputs(ctx, m, 9, &ins, &nin) == TPU_OK);
    static const unsigned refs[] = {0, EXE_NO_HOIST, EXE_NO_HOIST | EXE_NO_FUSION | EXE_REF_ELEMENTWISE | EXE_REF_KERNELS};
    for (int mode = 0; mode < 2; mode++) {
        tpu_tensor **first = NULL;
        int nfirst = 0;
        for (size_t r = 0; r < sizeof refs / sizeof refs[0]; r++) {
            tpu_run_opts o = tpu_run_opts_default();
            o.numerics = mode ? TPU_NUMERICS_EXACT : TPU_NUMERICS_TPU;
            int64_t held = -1;
            exe_run_cfg cfg = {.ref = refs[r], .hoisted = &held};
            tpu_tensor **outs = NULL;
            int n = 0;
            if (exe_run(ctx, m, &o, &cfg, ins, nin, &outs, &n) != TPU_OK) {
                test_fail(__FILE__, __LINE__, "run (ref bits %u): %s", refs[r], tpu_errmsg(ctx));
                continue;
            }
            /* per iteration after the first: am in the condition, ww in the body (not wt, which passes the
             * dot's value on, nor the rng) */
            int32_t iters = n == 2 ? *(const int32_t *)tpu_tensor_cdata(outs[1]) : 0;
            CHECK(iters > 3);
            if (refs[r] & EXE_NO_HOIST) CHECK_EQ_INT(held, 0);
            else CHECK_MSG(held >= 2 * (iters - 1), "%lld values held over %d iterations", (long long)held, iters);
            if (!first) {
                first = outs;
                nfirst = n;
                continue;
            }
            char what[64];
            snprintf(what, sizeof what, "%s numerics, reference bits %u", mode ? "exact" : "tpu", refs[r]);
            lp_same(first, nfirst, outs, n, what);
            tpu_tensors_free(outs, n);
        }
        tpu_tensors_free(first, nfirst);
    }
    tpu_tensors_free(ins, nin);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* The small-dot path (kernels/dot.c, dot_tiny) gives the general path's bytes (EXE_REF_KERNELS runs the general
 * one): both operand orientations, each precision, both numerics modes, sizes on both sides of its limit. */
TEST(dot_tiny_matches_general_path)
{
    static const char *prec[] = {"", ", operand_precision={high,high}", ", operand_precision={highest,highest}"};
    static const int64_t dims[][3] = {{8, 8, 8}, {1, 5, 3}, {7, 1, 9}, {15, 16, 17}, {3, 64, 2}};
    tpu_ctx *ctx = tpu_ctx_new();
    int checked = 0;
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
        for (int lc = 0; lc < 2; lc++)
            for (int rc = 0; rc < 2; rc++)
                for (size_t p = 0; p < sizeof prec / sizeof prec[0]; p++) {
                    int64_t M = dims[d][0], K = dims[d][1], N = dims[d][2];
                    char text[1024];
                    snprintf(text, sizeof text,
                             "HloModule td\nENTRY e {\n  a = f32[%lld,%lld] parameter(0)\n  b = f32[%lld,%lld] parameter(1)\n"
                             "  ROOT d = f32[%lld,%lld] dot(a, b), lhs_contracting_dims={%d}, rhs_contracting_dims={%d}%s\n}\n",
                             (long long)(lc ? M : K), (long long)(lc ? K : M), (long long)(rc ? N : K), (long long)(rc ? K : N),
                             (long long)M, (long long)N, lc, rc, prec[p]);
                    /* lhs [M,K] when lc (contracting 1), [K,M] otherwise; rhs [K,N] when !rc, [N,K] otherwise */
                    tpu_module *m = NULL;
                    if (tpu_module_parse(ctx, text, strlen(text), "td.hlo", &m) != TPU_OK) {
                        test_fail(__FILE__, __LINE__, "parse: %s\n%s", tpu_errmsg(ctx), text);
                        continue;
                    }
                    tpu_tensor **ins = NULL;
                    int nin = 0;
                    if (tpu_random_inputs(ctx, m, 3 + d, &ins, &nin) == TPU_OK)
                        for (int mode = 0; mode < 2; mode++) {
                            tpu_numerics nm = mode ? TPU_NUMERICS_EXACT : TPU_NUMERICS_TPU;
                            int na = 0, nb = 0;
                            tpu_tensor **a = lp_run(ctx, m, nm, 0, 0, ins, nin, &na);
                            tpu_tensor **b = lp_run(ctx, m, nm, EXE_REF_KERNELS, 0, ins, nin, &nb);
                            checked += lp_same(a, na, b, nb, text);
                            tpu_tensors_free(a, na);
                            tpu_tensors_free(b, nb);
                        }
                    tpu_tensors_free(ins, nin);
                    tpu_module_free(m);
                }
    CHECK_EQ_INT(checked, 5 * 2 * 2 * 3 * 2);
    tpu_ctx_free(ctx);
}

/* Counted loops (exe_interp.c, exe_counted): a condition comparing an integer state element with a constant is
 * evaluated on the state, in every direction, either operand order, signed and unsigned (the unsigned bound
 * above INT32_MAX), and gives the trip counts and results of the condition run as a computation; a condition
 * of another form (two comparisons and-ed) still runs as one. */
TEST(loop_counted_conditions_match_the_computation)
{
    static const struct { const char *ty, *lhs, *rhs, *dir, *start, *step; int64_t trips; } cases[] = {
        {"s32", "i", "n", "LT", "0", "1", 7},         {"s32", "n", "i", "GT", "0", "1", 7},
        {"s32", "i", "n", "LE", "0", "1", 8},         {"s64", "i", "n", "NE", "0", "1", 7},
        {"s32", "i", "n", "GE", "20", "-3", 5},       {"u32", "i", "n", "LT", "4294967290", "1", 0},
        {"u32", "n", "i", "GT", "4294967280", "1", 9}, {"s32", "i", "n", "EQ", "7", "1", 1},
    };
    tpu_ctx *ctx = tpu_ctx_new();
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char text[2048];
        const char *ty = cases[c].ty;
        const char *bound = !strcmp(ty, "u32") ? "4294967289" : "7";
        snprintf(text, sizeof text,
                 "HloModule counted\n"
                 "body { p = (%s[], f32[4]) parameter(0)\n i = %s[] get-tuple-element(p), index=0\n"
                 "  x = f32[4] get-tuple-element(p), index=1\n s = %s[] constant(%s)\n i1 = %s[] add(i, s)\n"
                 "  y = f32[4] multiply(x, x)\n ROOT t = (%s[], f32[4]) tuple(i1, y) }\n"
                 "cond { p = (%s[], f32[4]) parameter(0)\n i = %s[] get-tuple-element(p), index=0\n"
                 "  n = %s[] constant(%s)\n ROOT c = pred[] compare(%s, %s), direction=%s%s }\n"
                 "ENTRY e { x = f32[4] parameter(0)\n z = %s[] constant(%s)\n t = (%s[], f32[4]) tuple(z, x)\n"
                 "  w = (%s[], f32[4]) while(t), condition=cond, body=body\n"
                 "  i = %s[] get-tuple-element(w), index=0\n y = f32[4] get-tuple-element(w), index=1\n"
                 "  ROOT r = (%s[], f32[4]) tuple(i, y) }\n",
                 ty, ty, ty, cases[c].step, ty, ty, ty, ty, ty,
                 bound, cases[c].lhs, cases[c].rhs, cases[c].dir, !strcmp(ty, "u32") ? ", type=UNSIGNED" : "", ty,
                 cases[c].start, ty, ty, ty, ty);
        tpu_module *m = NULL;
        if (tpu_module_parse(ctx, text, strlen(text), "counted.hlo", &m) != TPU_OK) {
            test_fail(__FILE__, __LINE__, "parse: %s\n%s", tpu_errmsg(ctx), text);
            continue;
        }
        tpu_tensor **ins = NULL, **outs[2] = {NULL, NULL};
        int nin = 0, n[2] = {0, 0};
        int64_t counted[2] = {-1, -1}, trips[2][32];
        REQUIRE(tpu_random_inputs(ctx, m, 4, &ins, &nin) == TPU_OK);
        for (int r = 0; r < 2; r++) {
            memset(trips[r], 0xff, sizeof trips[r]);
            exe_run_cfg cfg = {.ref = r ? EXE_NO_COUNTED : 0, .counted = &counted[r], .trip_counts = trips[r]};
            if (exe_run(ctx, m, NULL, &cfg, ins, nin, &outs[r], &n[r]) != TPU_OK)
                test_fail(__FILE__, __LINE__, "case %zu: %s", c, tpu_errmsg(ctx));
        }
        lp_same(outs[0], n[0], outs[1], n[1], text);
        /* the while is instruction 3 of the entry, after body (7) and cond (4): global index 14 */
        CHECK_MSG(trips[0][14] == cases[c].trips && trips[1][14] == cases[c].trips, "case %zu: %lld and %lld trips, want %lld",
                  c, (long long)trips[0][14], (long long)trips[1][14], (long long)cases[c].trips);
        CHECK_EQ_INT(counted[0], cases[c].trips + 1);
        CHECK_EQ_INT(counted[1], 0);
        for (int r = 0; r < 2; r++) tpu_tensors_free(outs[r], n[r]);
        tpu_tensors_free(ins, nin);
        tpu_module_free(m);
    }
    /* a condition of another form runs as a computation */
    tpu_module *m = NULL;
    REQUIRE(tpu_module_parse(ctx, lp_inv_text, strlen(lp_inv_text), "inv.hlo", &m) == TPU_OK);
    tpu_tensor **ins = NULL, **outs = NULL;
    int nin = 0, n = 0;
    int64_t counted = -1;
    REQUIRE(tpu_random_inputs(ctx, m, 4, &ins, &nin) == TPU_OK);
    exe_run_cfg cfg = {.counted = &counted};
    CHECK(exe_run(ctx, m, NULL, &cfg, ins, nin, &outs, &n) == TPU_OK);
    CHECK_EQ_INT(counted, 0);
    tpu_tensors_free(outs, n);
    tpu_tensors_free(ins, nin);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* Contiguous static slices are views of their operand (kernels/data.c, data_static_slice_view): the bytes of
 * the copying path (EXE_REF_KERNELS), for rows, vector prefixes, a middle block and non-contiguous slices, and
 * a view outlives an in-place update of its operand's last user (it holds the operand). */
TEST(slice_views_match_copies)
{
    static const char *text =
        "HloModule sv\n"
        "ENTRY e { p = f32[4,6,8] parameter(0)\n v = f32[64] parameter(1)\n x = f32[4,6,8] multiply(p, p)\n"
        "  a = f32[1,6,8] slice(x), slice={[2:3], [0:6], [0:8]}\n b = f32[1,1,8] slice(x), slice={[3:4], [5:6], [0:8]}\n"
        "  c = f32[1,2,8] slice(x), slice={[1:2], [2:4], [0:8]}\n d = f32[2,6,4] slice(x), slice={[1:3], [0:6], [4:8]}\n"
        "  e = f32[2,3,8] slice(x), slice={[0:4:2], [0:6:2], [0:8]}\n"
        "  f = f32[8] slice(v), slice={[0:8]}\n g = f32[8] slice(v), slice={[56:64]}\n"
        "  y = f32[4,6,8] negate(x)\n z = f32[4,6,8] exponential(y)\n"
        "  ROOT r = (f32[1,6,8], f32[1,1,8], f32[1,2,8], f32[2,6,4], f32[2,3,8], f32[8], f32[8], f32[4,6,8]) tuple(a, b, c, d, e, f, g, z) }\n";
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    REQUIRE(tpu_module_parse(ctx, text, strlen(text), "sv.hlo", &m) == TPU_OK);
    tpu_tensor **ins = NULL;
    int nin = 0, na = 0, nb = 0;
    REQUIRE(tpu_random_inputs(ctx, m, 8, &ins, &nin) == TPU_OK);
    tpu_tensor **a = lp_run(ctx, m, TPU_NUMERICS_TPU, 0, 0, ins, nin, &na);
    tpu_tensor **b = lp_run(ctx, m, TPU_NUMERICS_TPU, EXE_REF_KERNELS | EXE_NO_FUSION | EXE_REF_ELEMENTWISE, 0, ins, nin, &nb);
    lp_same(a, na, b, nb, "slices");
    tpu_tensors_free(a, na);
    tpu_tensors_free(b, nb);
    tpu_tensors_free(ins, nin);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* f32 max/min reductions of long rows (kernels/reduce.c: the integer-key fold) give the float fold's bytes
 * (EXE_REF_KERNELS): NaNs anywhere, +0 against -0, subnormals (read as zero), infinities, rows of zeros,
 * lengths that are not multiples of 16, and an init that wins or is NaN. */
TEST(reduce_maxmin_keys_match_float_fold)
{
    static const float special[] = {0.0f, -0.0f, 1e-40f, -1e-40f, INFINITY, -INFINITY, -3.5f, 2.25f, -1e30f, 1e-38f};
    static const char *inits[] = {"-inf", "inf", "0", "-0", "5", "nan"};
    static const int lens[] = {16, 64, 100, 257, 4099};
    tpu_ctx *ctx = tpu_ctx_new();
    uint64_t seed = 12345;
    int compared = 0;
    for (int op = 0; op < 2; op++)
        for (size_t ii = 0; ii < sizeof inits / sizeof inits[0]; ii++)
            for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
                int n = lens[li];
                char text[1024];
                snprintf(text, sizeof text,
                         "HloModule rk\nf { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT m = f32[] %s(a, b) }\n"
                         "ENTRY e { x = f32[3,%d] parameter(0)\n i = f32[] constant(%s)\n"
                         "  ROOT r = f32[3] reduce(x, i), dimensions={1}, to_apply=f }\n",
                         op ? "minimum" : "maximum", n, inits[ii]);
                tpu_module *m = NULL;
                if (tpu_module_parse(ctx, text, strlen(text), "rk.hlo", &m) != TPU_OK) {
                    test_fail(__FILE__, __LINE__, "parse: %s", tpu_errmsg(ctx));
                    continue;
                }
                tpu_tensor *x = NULL;
                int64_t dims[2] = {3, n};
                REQUIRE(tpu_tensor_new(ctx, TPU_F32, 2, dims, &x) == TPU_OK);
                float *v = tpu_tensor_data(x);
                for (int k = 0; k < 3 * n; k++) {
                    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                    int pick = (int)(seed >> 33) % 16;
                    v[k] = pick < 10 ? special[pick] : (float)((int)(seed >> 40) % 2000 - 1000) * 0.001f;
                }
                /* row 1: zeros and subnormals against values on the losing side (max: negative, min: positive) */
                static const float near0[] = {0.0f, -0.0f, 1e-40f, -1e-40f, 3.5f, 1e30f};
                for (int k = 0; k < n; k++) {
                    float z = near0[(k * 7 + (int)ii) % 6];
                    v[n + k] = z >= 1.0f ? (op ? z : -z) : z;
                }
                v[2 * n + (int)(seed % (uint64_t)n)] = NAN;                       /* row 2: one NaN */
                int na = 0, nb = 0;
                tpu_tensor **a = lp_run(ctx, m, TPU_NUMERICS_TPU, 0, 0, &x, 1, &na);
                tpu_tensor **b = lp_run(ctx, m, TPU_NUMERICS_TPU, EXE_REF_KERNELS, 0, &x, 1, &nb);
                compared += lp_same(a, na, b, nb, text);
                tpu_tensors_free(a, na);
                tpu_tensors_free(b, nb);
                tpu_tensor_free(x);
                tpu_module_free(m);
            }
    CHECK_EQ_INT(compared, 2 * 6 * 5);
    tpu_ctx_free(ctx);
}
