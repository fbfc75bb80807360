/* t_runtime.c — the replicated runtime (src/runtime/): every collective against a plain reference (loops over
 * the per-device inputs), groups in every form, collectives inside while loops, f32/bf16/s32 numerics in the
 * documented ring order, failures and divergence released with an error (never a hang), statistics. */
#include "test.h"
#include "runtime/runtime.h"
#include "util/fp.h"
#include "util/tensor.h"

#include <stdlib.h>

#define ADD_F32 "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = f32[] add(a, b) }\n"
#define ADD_BF16 "addb { a = bf16[] parameter(0)\n b = bf16[] parameter(1)\n ROOT r = bf16[] add(a, b) }\n"
#define ADD_S32 "adds { a = s32[] parameter(0)\n b = s32[] parameter(1)\n ROOT r = s32[] add(a, b) }\n"
#define MAX_F32 "maxf { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = f32[] maximum(a, b) }\n"

enum { MAXD = 16 };

/* A system, a module and per-device inputs; outputs after rt_run. */
typedef struct {
    tpu_ctx    *ctx;
    tpu_system *sys;
    tpu_module *m;
    int         n, nin, nout;
    tpu_tensor *in[MAXD][8];
    tpu_tensor **inp[MAXD];
    tpu_tensor **out[MAXD];
} rt_case;

static int rc_open(rt_case *c, const char *devices, const char *text)
{
    memset(c, 0, sizeof *c);
    c->ctx = tpu_ctx_new();
    if (tpu_system_new(c->ctx, devices, &c->sys) != TPU_OK) {
        test_fail(__FILE__, __LINE__, "system %s: %s", devices, tpu_errmsg(c->ctx));
        return 0;
    }
    c->n = tpu_system_num_devices(c->sys);
    if (tpu_module_parse(c->ctx, text, strlen(text), "rt.hlo", &c->m) != TPU_OK) {
        test_fail(__FILE__, __LINE__, "parse: %s", tpu_errmsg(c->ctx));
        return 0;
    }
    for (int d = 0; d < c->n; d++) c->inp[d] = c->in[d];
    return 1;
}

static void rc_close(rt_case *c)
{
    if (c->nout) tpu_system_outputs_free(c->out, c->n, c->nout);
    for (int d = 0; d < MAXD; d++)
        for (int k = 0; k < 8; k++) tpu_tensor_free(c->in[d][k]);
    tpu_module_free(c->m);
    tpu_system_free(c->sys);
    tpu_ctx_free(c->ctx);
}

static tpu_status rc_run(rt_case *c)
{
    if (c->nout) tpu_system_outputs_free(c->out, c->n, c->nout);
    c->nout = 0;
    return tpu_system_run(c->ctx, c->sys, c->m, NULL, c->inp, c->nin, c->out, &c->nout);
}

/* Input k of device d: a new tensor filled by value(d, i). */
static tpu_tensor *rc_input(rt_case *c, int d, int k, tpu_dtype t, int rank, const int64_t *dims,
                            double (*value)(int d, int64_t i))
{
    tpu_tensor *x = NULL;
    tpu_tensor_new(c->ctx, t, rank, dims, &x);
    for (int64_t i = 0; x && i < x->count; i++) {
        if (tpu_dtype_kind(t) == 'f') ten_store_f64(t, x->data, i, value(d, i));
        else ten_store_i64(t, x->data, i, (int64_t)value(d, i));
    }
    c->in[d][k] = x;
    if (k + 1 > c->nin) c->nin = k + 1;
    return x;
}

/* values whose f32 sum depends on the order: large magnitudes that cancel, and small ones */
static double v_mixed(int d, int64_t i)
{
    static const double big[] = {3e7, -3e7, 1.0, 0.3, 7e6, -1.25e7, 2.5, -0.7};
    return big[(d * 3 + i) % 8] * (1 + 0.01 * (double)(i % 7)) + 0.001 * (double)d;
}
static double v_small_int(int d, int64_t i) { return (double)((d * 7 + i * 3) % 11) - 5; }
static double v_bf16(int d, int64_t i) { return 1.0 + 0.0078125 * (double)((d + i) % 5) + (d == 0 ? 256 : 0); }
static double v_id(int d, int64_t i) { return 100.0 * d + (double)i; }

/* The documented ring order: chunk c (ceil(count/n) elements) starts at member c+1 and ends at member c. */
static void ref_ring_f32(const float *const *x, int n, int64_t count, float *out)
{
    int64_t cs = (count + n - 1) / n;
    for (int64_t e = 0; e < count; e++) {
        int c = (int)(e / cs), first = (c + 1) % n;
        float acc = x[first][e];
        for (int k = 1; k < n; k++) acc = x[(first + k) % n][e] + acc;
        out[e] = acc;
    }
}

static int bits_equal_f32(float a, float b) { return !memcmp(&a, &b, sizeof a); }

/* ---- groups ---- */

static const hlo_instr *find_instr(const tpu_module *m, const char *name)
{
    for (int c = 0; c < m->ncomps; c++)
        for (int i = 0; i < m->comps[c]->ninstrs; i++)
            if (!strcmp(m->comps[c]->instrs[i]->name, name)) return m->comps[c]->instrs[i];
    return NULL;
}

TEST(runtime_groups_modes)
{
    const char *text =
        "HloModule g, replica_count=2, num_partitions=4\n" ADD_F32
        "ENTRY e {\n p = f32[8] parameter(0)\n"
        " cr = f32[8] all-reduce(p), replica_groups={}, to_apply=add\n"
        " cp = f32[8] all-to-all(p), channel_id=1, replica_groups={{0,1},{2,3}}, dimensions={0}\n"
        " crp = f32[8] all-reduce(p), channel_id=2, replica_groups={{1},{0}}, to_apply=add\n"
        " fl = f32[8] all-reduce(p), channel_id=3, use_global_device_ids=true, replica_groups=[2,4]<=[4,2]T(1,0), to_apply=add\n"
        " fl2 = f32[8] all-reduce(p), channel_id=4, use_global_device_ids=true, replica_groups={{7,0},{1,2,3,4,5,6}}, to_apply=add\n"
        " pm = f32[8] collective-permute(p), channel_id=5, source_target_pairs={{0,1}}\n"
        " ROOT t = (f32[8], f32[8], f32[8], f32[8], f32[8], f32[8]) tuple(cr, cp, crp, fl, fl2, pm)\n}\n";
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    REQUIRE_OK(ctx, tpu_module_parse(ctx, text, strlen(text), "g.hlo", &m));
    int mem[8], n, rank;
    /* device 6 = replica 1, partition 2 */
    const hlo_instr *cr = find_instr(m, "cr"), *cp = find_instr(m, "cp"), *crp = find_instr(m, "crp");
    const hlo_instr *fl = find_instr(m, "fl"), *fl2 = find_instr(m, "fl2"), *pm = find_instr(m, "pm");
    REQUIRE(cr && cp && crp && fl && fl2 && pm);
    CHECK_EQ_INT(rt_group_mode(cr), RT_CROSS_REPLICA);
    CHECK_EQ_INT(rt_group_mode(cp), RT_CROSS_PARTITION);
    CHECK_EQ_INT(rt_group_mode(crp), RT_CROSS_REPLICA_AND_PARTITION);
    CHECK_EQ_INT(rt_group_mode(fl), RT_FLATTENED_ID);
    CHECK_OK(ctx, rt_group_members(ctx, m, cr, 2, 4, 6, mem, &n, &rank));
    CHECK_EQ_INT(n, 2);
    CHECK(mem[0] == 2 && mem[1] == 6 && rank == 1);
    CHECK_OK(ctx, rt_group_members(ctx, m, cp, 2, 4, 6, mem, &n, &rank));
    CHECK(n == 2 && mem[0] == 6 && mem[1] == 7 && rank == 0);
    CHECK_OK(ctx, rt_group_members(ctx, m, crp, 2, 4, 6, mem, &n, &rank));
    CHECK(n == 4 && mem[0] == 4 && mem[3] == 7 && rank == 2);
    /* [2,4]<=[4,2]T(1,0): iota(8) as 4x2, transposed to 2x4: {0,2,4,6},{1,3,5,7} */
    CHECK_OK(ctx, rt_group_members(ctx, m, fl, 2, 4, 6, mem, &n, &rank));
    CHECK(n == 4 && mem[0] == 0 && mem[1] == 2 && mem[2] == 4 && mem[3] == 6 && rank == 3);
    CHECK_OK(ctx, rt_group_members(ctx, m, fl, 2, 4, 3, mem, &n, &rank));
    CHECK(n == 4 && mem[0] == 1 && mem[3] == 7 && rank == 1);
    CHECK_OK(ctx, rt_group_members(ctx, m, fl2, 2, 4, 0, mem, &n, &rank));
    CHECK(n == 2 && mem[0] == 7 && mem[1] == 0 && rank == 1);
    CHECK_OK(ctx, rt_group_members(ctx, m, fl2, 2, 4, 5, mem, &n, &rank));
    CHECK(n == 6 && rank == 4);
    /* collective-permute with a channel: the partitions of this replica */
    CHECK_OK(ctx, rt_group_members(ctx, m, pm, 2, 4, 6, mem, &n, &rank));
    CHECK(n == 4 && mem[0] == 4 && rank == 2);
    /* errors: fl2's ids do not fit 1 x 4 devices; cp's partition 3 ... of a 2-partition system is not named */
    CHECK(rt_group_members(ctx, m, fl2, 1, 4, 0, mem, &n, &rank) == TPU_ERR_INVALID);
    CHECK(strstr(tpu_errmsg(ctx), "id 7") != NULL);
    CHECK(rt_group_members(ctx, m, cp, 1, 8, 5, mem, &n, &rank) == TPU_ERR_INVALID);
    CHECK(strstr(tpu_errmsg(ctx), "in no replica group") != NULL);
    CHECK(rt_group_members(ctx, m, fl, 1, 4, 0, mem, &n, &rank) == TPU_ERR_INVALID);
    tpu_module_free(m);
    /* duplicates */
    const char *dup = "HloModule d, replica_count=4\n" ADD_F32
                      "ENTRY e {\n p = f32[4] parameter(0)\n ROOT dup = f32[4] all-reduce(p), replica_groups={{0,1},{1,2,3}}, to_apply=add\n}\n";
    REQUIRE_OK(ctx, tpu_module_parse(ctx, dup, strlen(dup), "d.hlo", &m));
    CHECK(rt_group_members(ctx, m, find_instr(m, "dup"), 4, 1, 0, mem, &n, &rank) == TPU_ERR_INVALID);
    CHECK_MSG(strstr(tpu_errmsg(ctx), "twice") != NULL, "%s / n=%d", tpu_errmsg(ctx), n);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* ---- all-reduce ---- */

TEST(runtime_all_reduce_f32_ring_order)
{
    rt_case c;
    const char *text = "HloModule ar, replica_count=4\n" ADD_F32
                       "ENTRY e {\n p = f32[37] parameter(0)\n ROOT ar = f32[37] all-reduce(p), replica_groups={}, to_apply=add\n}\n";
    if (!rc_open(&c, "4", text)) { rc_close(&c); return; }
    int64_t dims[1] = {37};
    const float *x[4];
    for (int d = 0; d < 4; d++) x[d] = rc_input(&c, d, 0, TPU_F32, 1, dims, v_mixed)->data;
    REQUIRE_OK(c.ctx, rc_run(&c));
    REQUIRE(c.nout == 1);
    float ref[37];
    ref_ring_f32(x, 4, 37, ref);
    int order_matters = 0;
    for (int64_t e = 0; e < 37; e++) {
        float naive = ((x[0][e] + x[1][e]) + x[2][e]) + x[3][e];
        order_matters |= !bits_equal_f32(naive, ref[e]);
        for (int d = 0; d < 4; d++) {
            float got = ((const float *)c.out[d][0]->data)[e];
            CHECK_MSG(bits_equal_f32(got, ref[e]), "device %d element %lld: %.9g, ring order gives %.9g", d, (long long)e,
                      got, ref[e]);
        }
    }
    CHECK(order_matters);   /* the data tell ring order from 0,1,2,3 */
    tpu_system_stats s;
    tpu_system_last_stats(c.sys, &s);
    CHECK_EQ_INT(s.collectives, 1);
    CHECK_EQ_INT(s.all_reduce, 1);
    CHECK(s.ici_s > 0 && s.ici_bytes > 0);
    CHECK_EQ_INT(s.replicas, 4);
    rc_close(&c);
}

TEST(runtime_all_reduce_bf16_rounds_each_hop)
{
    rt_case c;
    const char *text = "HloModule arb, replica_count=3\n" ADD_BF16
                       "ENTRY e {\n p = bf16[5,3] parameter(0)\n ROOT ar = bf16[5,3] all-reduce(p), replica_groups={}, to_apply=addb\n}\n";
    if (!rc_open(&c, "3", text)) { rc_close(&c); return; }
    int64_t dims[2] = {5, 3};
    const uint16_t *x[3];
    for (int d = 0; d < 3; d++) x[d] = rc_input(&c, d, 0, TPU_BF16, 2, dims, v_bf16)->data;
    REQUIRE_OK(c.ctx, rc_run(&c));
    int64_t cs = 5;   /* 15 elements, 3 chunks */
    int differs_from_f32 = 0;
    for (int64_t e = 0; e < 15; e++) {
        int ch = (int)(e / cs), first = (ch + 1) % 3;
        uint16_t acc = x[first][e];
        double exact = 0;
        for (int k = 0; k < 3; k++) exact += fp_bf16_to_f32(x[k][e]);
        for (int k = 1; k < 3; k++) acc = fp_f32_to_bf16_ftz(fp_bf16_to_f32(x[(first + k) % 3][e]) + fp_bf16_to_f32(acc));
        differs_from_f32 |= acc != fp_f32_to_bf16((float)exact);
        for (int d = 0; d < 3; d++) CHECK_EQ_INT(((const uint16_t *)c.out[d][0]->data)[e], acc);
    }
    CHECK(differs_from_f32);   /* per-hop bf16 rounding is visible in these data */
    rc_close(&c);
}

TEST(runtime_all_reduce_s32_max_tuple_and_groups)
{
    rt_case c;
    /* two operands (tuple result), groups {0,2,4},{1,3,5}; and a max over all six */
    const char *text = "HloModule art, replica_count=6\n" ADD_S32 MAX_F32
                       "ENTRY e {\n p = s32[7] parameter(0)\n q = f32[2,3] parameter(1)\n"
                       " t = (s32[7], f32[2,3]) all-reduce(p, q), replica_groups={{0,2,4},{1,3,5}}, to_apply=adds\n"
                       " t0 = s32[7] get-tuple-element(t), index=0\n t1 = f32[2,3] get-tuple-element(t), index=1\n"
                       " mx = f32[2,3] all-reduce(q), replica_groups={}, to_apply=maxf\n"
                       " ROOT r = (s32[7], f32[2,3], f32[2,3]) tuple(t0, t1, mx)\n}\n";
    if (!rc_open(&c, "6", text)) { rc_close(&c); return; }
    /* the add reducer over f32 operand q is a type mismatch: to_apply takes s32 */
    int64_t d7[1] = {7}, d23[2] = {2, 3};
    for (int d = 0; d < 6; d++) {
        rc_input(&c, d, 0, TPU_S32, 1, d7, v_small_int);
        rc_input(&c, d, 1, TPU_F32, 2, d23, v_mixed);
    }
    CHECK(rc_run(&c) == TPU_ERR_SHAPE);
    CHECK_MSG(strstr(tpu_errmsg(c.ctx), "'adds' parameter 0 is s32[], expected f32[]") != NULL, "%s", tpu_errmsg(c.ctx));
    rc_close(&c);

    text = "HloModule art, replica_count=6\n" ADD_S32 ADD_F32 MAX_F32
           "ENTRY e {\n p = s32[7] parameter(0)\n q = f32[2,3] parameter(1)\n"
           " t = s32[7] all-reduce(p), replica_groups={{0,2,4},{1,3,5}}, to_apply=adds\n"
           " mx = f32[2,3] all-reduce(q), replica_groups={}, to_apply=maxf\n"
           " ROOT r = (s32[7], f32[2,3]) tuple(t, mx)\n}\n";
    if (!rc_open(&c, "6", text)) { rc_close(&c); return; }
    for (int d = 0; d < 6; d++) {
        rc_input(&c, d, 0, TPU_S32, 1, d7, v_small_int);
        rc_input(&c, d, 1, TPU_F32, 2, d23, v_mixed);
    }
    REQUIRE_OK(c.ctx, rc_run(&c));
    REQUIRE(c.nout == 2);
    for (int d = 0; d < 6; d++) {
        for (int64_t i = 0; i < 7; i++) {
            int64_t want = 0;
            for (int k = d % 2; k < 6; k += 2) want += (int64_t)v_small_int(k, i);
            CHECK_EQ_INT(((const int32_t *)c.out[d][0]->data)[i], want);
        }
        for (int64_t i = 0; i < 6; i++) {
            float want = -INFINITY;
            for (int k = 0; k < 6; k++) want = fmaxf(want, (float)v_mixed(k, i));
            CHECK(bits_equal_f32(((const float *)c.out[d][1]->data)[i], want));
        }
    }
    rc_close(&c);
}

/* all-reduce with a reducer that is not one plain op (the generic path) and u8 elements */
TEST(runtime_all_reduce_generic_reducer)
{
    rt_case c;
    const char *text = "HloModule g, replica_count=3\n"
                       "mix { a = u8[] parameter(0)\n b = u8[] parameter(1)\n m = u8[] maximum(a, b)\n"
                       " one = u8[] constant(1)\n ROOT r = u8[] add(m, one) }\n"
                       "ENTRY e {\n p = u8[4] parameter(0)\n ROOT ar = u8[4] all-reduce(p), replica_groups={}, to_apply=mix\n}\n";
    if (!rc_open(&c, "3", text)) { rc_close(&c); return; }
    int64_t dims[1] = {4};
    for (int d = 0; d < 3; d++) rc_input(&c, d, 0, TPU_U8, 1, dims, v_id);
    REQUIRE_OK(c.ctx, rc_run(&c));
    for (int64_t e = 0; e < 4; e++) {
        int ch = (int)(e / 2), first = (ch + 1) % 3;   /* 4 elements, chunks of 2 */
        int acc = (int)((uint8_t)v_id(first, e));
        for (int k = 1; k < 3; k++) {
            int x = (uint8_t)v_id((first + k) % 3, e);
            acc = (uint8_t)((x > acc ? x : acc) + 1);
        }
        for (int d = 0; d < 3; d++) CHECK_EQ_INT(((const uint8_t *)c.out[d][0]->data)[e], acc);
    }
    rc_close(&c);
}

/* ---- the other collectives ---- */

TEST(runtime_all_gather_reduce_scatter)
{
    rt_case c;
    const char *text = "HloModule ag, replica_count=4\n" ADD_F32
                       "ENTRY e {\n p = f32[2,3] parameter(0)\n q = s32[3] parameter(1)\n"
                       " g = (f32[2,6], s32[6]) all-gather(p, q), replica_groups={{0,3},{2,1}}, dimensions={1,0}\n"
                       " a = f32[8,3] all-gather(p), replica_groups={}, dimensions={0}\n"
                       " rs = f32[2,3] reduce-scatter(a), replica_groups={}, dimensions={0}, to_apply=add\n"
                       " st = (f32[2,3], f32[4,3]) all-gather-start(p), replica_groups={{0,1},{2,3}}, dimensions={0}\n"
                       " dn = f32[4,3] all-gather-done(st)\n"
                       " g0 = f32[2,6] get-tuple-element(g), index=0\n g1 = s32[6] get-tuple-element(g), index=1\n"
                       " ROOT r = (f32[2,6], s32[6], f32[8,3], f32[2,3], f32[4,3]) tuple(g0, g1, a, rs, dn)\n}\n";
    /* dimensions={1,0} is two dimensions: an error that says so */
    if (!rc_open(&c, "4", text)) { rc_close(&c); return; }
    int64_t d23[2] = {2, 3}, d3[1] = {3};
    for (int d = 0; d < 4; d++) {
        rc_input(&c, d, 0, TPU_F32, 2, d23, v_id);
        rc_input(&c, d, 1, TPU_S32, 1, d3, v_id);
    }
    CHECK(rc_run(&c) == TPU_ERR_SHAPE);
    CHECK_MSG(strstr(tpu_errmsg(c.ctx), "must name exactly one dimension") != NULL, "%s", tpu_errmsg(c.ctx));
    rc_close(&c);

    text = "HloModule ag, replica_count=4\n" ADD_F32
           "ENTRY e {\n p = f32[2,3] parameter(0)\n q = s32[3] parameter(1)\n"
           " g = (f32[4,3], s32[6]) all-gather(p, q), replica_groups={{0,3},{2,1}}, dimensions={0}\n"
           " a = f32[8,3] all-gather(p), replica_groups={}, dimensions={0}\n"
           " rs = f32[2,3] reduce-scatter(a), replica_groups={}, dimensions={0}, to_apply=add\n"
           " st = (f32[2,3], f32[4,3]) all-gather-start(p), replica_groups={{0,1},{2,3}}, dimensions={0}\n"
           " dn = f32[4,3] all-gather-done(st)\n"
           " g2 = f32[2,12] all-gather(p), replica_groups={{3,2,1,0}}, dimensions={1}\n"
           " g0 = f32[4,3] get-tuple-element(g), index=0\n g1 = s32[6] get-tuple-element(g), index=1\n"
           " ROOT r = (f32[4,3], s32[6], f32[8,3], f32[2,3], f32[4,3], f32[2,12]) tuple(g0, g1, a, rs, dn, g2)\n}\n";
    if (!rc_open(&c, "4", text)) { rc_close(&c); return; }
    for (int d = 0; d < 4; d++) {
        rc_input(&c, d, 0, TPU_F32, 2, d23, v_id);
        rc_input(&c, d, 1, TPU_S32, 1, d3, v_id);
    }
    REQUIRE_OK(c.ctx, rc_run(&c));
    REQUIRE(c.nout == 6);
    for (int d = 0; d < 4; d++) {
        const float *g0 = c.out[d][0]->data, *a = c.out[d][2]->data, *rs = c.out[d][3]->data, *dn = c.out[d][4]->data;
        const float *g2 = c.out[d][5]->data;
        const int32_t *g1 = c.out[d][1]->data;
        int grp[2] = {d == 0 || d == 3 ? 0 : 2, d == 0 || d == 3 ? 3 : 1};
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < 6; i++) CHECK_EQ_INT(g0[k * 6 + i], v_id(grp[k], i));
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < 3; i++) CHECK_EQ_INT(g1[k * 3 + i], v_id(grp[k], i));
        for (int k = 0; k < 4; k++)
            for (int i = 0; i < 6; i++) CHECK_EQ_INT(a[k * 6 + i], v_id(k, i));
        /* reduce-scatter of the gathered [8,3]: device d keeps rows 2d, 2d+1 summed over the 4 (equal) copies */
        for (int i = 0; i < 6; i++) CHECK_NEAR(rs[i], 4 * v_id(d, i), 0);
        int pair = d / 2 * 2;
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < 6; i++) CHECK_EQ_INT(dn[k * 6 + i], v_id(pair + k, i));
        /* gather along dimension 1 in group order 3,2,1,0: row r = [x3[r,:], x2[r,:], x1[r,:], x0[r,:]] */
        for (int r = 0; r < 2; r++)
            for (int k = 0; k < 4; k++)
                for (int j = 0; j < 3; j++) CHECK_EQ_INT(g2[r * 12 + k * 3 + j], v_id(3 - k, r * 3 + j));
    }
    rc_close(&c);
}

TEST(runtime_reduce_scatter_ring_order)
{
    rt_case c;
    const char *text = "HloModule rs, replica_count=4\n" ADD_F32
                       "ENTRY e {\n p = f32[3,8,5] parameter(0)\n"
                       " ROOT rs = f32[3,2,5] reduce-scatter(p), replica_groups={}, dimensions={1}, to_apply=add\n}\n";
    if (!rc_open(&c, "4", text)) { rc_close(&c); return; }
    int64_t dims[3] = {3, 8, 5};
    const float *x[4];
    for (int d = 0; d < 4; d++) x[d] = rc_input(&c, d, 0, TPU_F32, 3, dims, v_mixed)->data;
    REQUIRE_OK(c.ctx, rc_run(&c));
    for (int d = 0; d < 4; d++) {
        const float *r = c.out[d][0]->data;
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 2; b++)
                for (int e = 0; e < 5; e++) {
                    int64_t src = (a * 8 + d * 2 + b) * 5 + e;
                    float acc = x[(d + 1) % 4][src];
                    for (int k = 2; k <= 4; k++) acc = x[(d + k) % 4][src] + acc;
                    CHECK(bits_equal_f32(r[(a * 2 + b) * 5 + e], acc));
                }
    }
    rc_close(&c);
}

TEST(runtime_all_to_all_permute_broadcast)
{
    rt_case c;
    const char *text =
        "HloModule a2a, replica_count=4\n"
        "ENTRY e {\n p = s32[4,2] parameter(0)\n q = s32[3] parameter(1)\n"
        " a = s32[4,2] all-to-all(p), replica_groups={}, dimensions={0}\n"
        " t = (s32[3], s32[3]) all-to-all(q, q), replica_groups={{1,0},{2,3}}\n"
        " t0 = s32[3] get-tuple-element(t), index=0\n t1 = s32[3] get-tuple-element(t), index=1\n"
        " cp = s32[3] collective-permute(q), source_target_pairs={{0,1},{1,2},{2,0}}\n"
        " cs = s32[3] collective-permute-start(q), source_target_pairs={{3,0}}\n"
        " cd = s32[3] collective-permute-done(cs)\n"
        " b = s32[3] collective-broadcast(q), replica_groups={{2,0},{3,1}}\n"
        " ROOT r = (s32[4,2], s32[3], s32[3], s32[3], s32[3], s32[3]) tuple(a, t0, t1, cp, cd, b)\n}\n";
    if (!rc_open(&c, "4", text)) { rc_close(&c); return; }
    int64_t d42[2] = {4, 2}, d3[1] = {3};
    for (int d = 0; d < 4; d++) {
        rc_input(&c, d, 0, TPU_S32, 2, d42, v_id);
        rc_input(&c, d, 1, TPU_S32, 1, d3, v_id);
    }
    REQUIRE_OK(c.ctx, rc_run(&c));
    REQUIRE(c.nout == 6);
    for (int d = 0; d < 4; d++) {
        const int32_t *a = c.out[d][0]->data, *t0 = c.out[d][1]->data, *t1 = c.out[d][2]->data;
        const int32_t *cp = c.out[d][3]->data, *cd = c.out[d][4]->data, *b = c.out[d][5]->data;
        /* block k of the result (row k) is row d of device k */
        for (int k = 0; k < 4; k++)
            for (int j = 0; j < 2; j++) CHECK_EQ_INT(a[k * 2 + j], v_id(k, d * 2 + j));
        /* tuple form in group {1,0} / {2,3}: result k is member k's operand[my rank] (all operands equal q) */
        int g[2] = {d < 2 ? 1 : 2, d < 2 ? 0 : 3};
        for (int i = 0; i < 3; i++) {
            CHECK_EQ_INT(t0[i], v_id(g[0], i));
            CHECK_EQ_INT(t1[i], v_id(g[1], i));
        }
        int from = d == 1 ? 0 : d == 2 ? 1 : d == 0 ? 2 : -1;
        for (int i = 0; i < 3; i++) CHECK_EQ_INT(cp[i], from < 0 ? 0 : v_id(from, i));
        for (int i = 0; i < 3; i++) CHECK_EQ_INT(cd[i], d == 0 ? v_id(3, i) : 0);
        for (int i = 0; i < 3; i++) CHECK_EQ_INT(b[i], v_id(d % 2 == 0 ? 2 : 3, i));
    }
    tpu_system_stats s;
    tpu_system_last_stats(c.sys, &s);
    CHECK_EQ_INT(s.all_to_all, 2);
    CHECK_EQ_INT(s.collective_permute, 2);
    CHECK_EQ_INT(s.collective_broadcast, 1);
    CHECK_EQ_INT(s.collectives, 5);
    rc_close(&c);
}

/* replica-id / partition-id and the group modes on 2 replicas x 2 partitions */
TEST(runtime_partitions_and_modes)
{
    rt_case c;
    const char *text =
        "HloModule rp, replica_count=2, num_partitions=2\n" ADD_S32
        "ENTRY e {\n p = s32[2] parameter(0)\n r = u32[] replica-id()\n q = u32[] partition-id()\n"
        " rr = s32[] convert(r)\n qq = s32[] convert(q)\n"
        " cr = s32[2] all-reduce(p), replica_groups={}, to_apply=adds\n"
        " cp = s32[2] all-reduce(p), channel_id=1, replica_groups={{0,1}}, to_apply=adds\n"
        " fl = s32[2] all-reduce(p), channel_id=2, use_global_device_ids=true, replica_groups={{0,1,2,3}}, to_apply=adds\n"
        " pp = s32[2] collective-permute(p), channel_id=3, source_target_pairs={{0,1},{1,0}}\n"
        " ROOT t = (s32[], s32[], s32[2], s32[2], s32[2], s32[2]) tuple(rr, qq, cr, cp, fl, pp)\n}\n";
    if (!rc_open(&c, "4", text)) { rc_close(&c); return; }
    int64_t d2[1] = {2};
    for (int d = 0; d < 4; d++) rc_input(&c, d, 0, TPU_S32, 1, d2, v_id);
    REQUIRE_OK(c.ctx, rc_run(&c));
    REQUIRE(c.nout == 6);
    for (int d = 0; d < 4; d++) {
        int r = d / 2, p = d % 2;
        CHECK_EQ_INT(((int32_t *)c.out[d][0]->data)[0], r);
        CHECK_EQ_INT(((int32_t *)c.out[d][1]->data)[0], p);
        for (int i = 0; i < 2; i++) {
            /* cross-replica: devices p and 2+p */
            CHECK_EQ_INT(((int32_t *)c.out[d][2]->data)[i], v_id(p, i) + v_id(2 + p, i));
            /* cross-replica-and-partition: replicas {0,1}, each with both partitions = all four */
            CHECK_EQ_INT(((int32_t *)c.out[d][3]->data)[i], v_id(0, i) + v_id(1, i) + v_id(2, i) + v_id(3, i));
            CHECK_EQ_INT(((int32_t *)c.out[d][4]->data)[i], v_id(0, i) + v_id(1, i) + v_id(2, i) + v_id(3, i));
            /* cross-partition permute: swap the partitions of this replica */
            CHECK_EQ_INT(((int32_t *)c.out[d][5]->data)[i], v_id(2 * r + (1 - p), i));
        }
    }
    tpu_system_stats s;
    tpu_system_last_stats(c.sys, &s);
    CHECK(s.replicas == 2 && s.partitions == 2);
    rc_close(&c);
}

/* a while loop with collectives inside: every iteration meets the same iteration on the other devices */
TEST(runtime_while_loop_collectives)
{
    rt_case c;
    const char *text =
        "HloModule w, replica_count=3\n" ADD_F32
        "cond { s = (s32[], f32[4]) parameter(0)\n i = s32[] get-tuple-element(s), index=0\n"
        " n = s32[] constant(5)\n ROOT lt = pred[] compare(i, n), direction=LT }\n"
        "body { s = (s32[], f32[4]) parameter(0)\n i = s32[] get-tuple-element(s), index=0\n"
        " one = s32[] constant(1)\n j = s32[] add(i, one)\n v = f32[4] get-tuple-element(s), index=1\n"
        " h = f32[] constant(0.25)\n hb = f32[4] broadcast(h), dimensions={}\n"
        " ar = f32[4] all-reduce(v), replica_groups={}, to_apply=add\n"
        " sc = f32[4] multiply(ar, hb)\n"
        " pm = f32[4] collective-permute(sc), source_target_pairs={{0,1},{1,2},{2,0}}\n"
        " nx = f32[4] add(pm, v)\n"
        " ROOT t = (s32[], f32[4]) tuple(j, nx) }\n"
        "ENTRY e {\n p = f32[4] parameter(0)\n z = s32[] constant(0)\n s = (s32[], f32[4]) tuple(z, p)\n"
        " w = (s32[], f32[4]) while(s), condition=cond, body=body\n ROOT r = f32[4] get-tuple-element(w), index=1\n}\n";
    if (!rc_open(&c, "3", text)) { rc_close(&c); return; }
    int64_t d4[1] = {4};
    float v[3][4];
    for (int d = 0; d < 3; d++) {
        const float *x = rc_input(&c, d, 0, TPU_F32, 1, d4, v_mixed)->data;
        memcpy(v[d], x, sizeof v[d]);
    }
    REQUIRE_OK(c.ctx, rc_run(&c));
    for (int it = 0; it < 5; it++) {
        float ar[4], nv[3][4];
        const float *xs[3] = {v[0], v[1], v[2]};
        ref_ring_f32(xs, 3, 4, ar);
        for (int d = 0; d < 3; d++)
            for (int i = 0; i < 4; i++) nv[d][i] = ar[i] * 0.25f + v[d][i];   /* pm: from d-1, same ar everywhere */
        memcpy(v, nv, sizeof v);
    }
    for (int d = 0; d < 3; d++)
        for (int i = 0; i < 4; i++)
            CHECK_MSG(bits_equal_f32(((const float *)c.out[d][0]->data)[i], v[d][i]), "device %d [%d]: %.9g vs %.9g", d, i,
                      ((const float *)c.out[d][0]->data)[i], v[d][i]);
    tpu_system_stats s;
    tpu_system_last_stats(c.sys, &s);
    CHECK_EQ_INT(s.collectives, 10);
    /* the same system runs again (threads kept), with inputs given once for every device */
    for (int d = 1; d < 3; d++) c.inp[d] = NULL;
    REQUIRE_OK(c.ctx, rc_run(&c));
    for (int d = 1; d < 3; d++)
        for (int i = 0; i < 4; i++)
            CHECK(bits_equal_f32(((const float *)c.out[d][0]->data)[i], ((const float *)c.out[0][0]->data)[i]));
    rc_close(&c);
}

/* async wrappers: all-reduce-start/done and an async-start wrapping a reduce-scatter */
TEST(runtime_async_forms)
{
    rt_case c;
    const char *text =
        "HloModule as, replica_count=2\n" ADD_F32
        "wrapped { a = f32[4] parameter(0)\n ROOT rs = f32[2] reduce-scatter(a), replica_groups={}, dimensions={0}, to_apply=add }\n"
        "ENTRY e {\n p = f32[4] parameter(0)\n s = f32[4] all-reduce-start(p), replica_groups={}, to_apply=add\n"
        " d = f32[4] all-reduce-done(s)\n"
        " as = ((f32[4]), f32[2], s32[]) async-start(p), calls=wrapped\n ad = f32[2] async-done(as)\n"
        " ROOT t = (f32[4], f32[2]) tuple(d, ad)\n}\n";
    if (!rc_open(&c, "2", text)) { rc_close(&c); return; }
    int64_t d4[1] = {4};
    for (int d = 0; d < 2; d++) rc_input(&c, d, 0, TPU_F32, 1, d4, v_id);
    REQUIRE_OK(c.ctx, rc_run(&c));
    REQUIRE(c.nout == 2);
    for (int d = 0; d < 2; d++) {
        for (int i = 0; i < 4; i++) CHECK_NEAR(((float *)c.out[d][0]->data)[i], v_id(0, i) + v_id(1, i), 0);
        for (int i = 0; i < 2; i++) CHECK_NEAR(((float *)c.out[d][1]->data)[i], v_id(0, 2 * d + i) + v_id(1, 2 * d + i), 0);
    }
    rc_close(&c);
}

/* ---- failures never hang ---- */

TEST(runtime_device_failure_releases_others)
{
    rt_case c;
    const char *text =
        "HloModule f, replica_count=4\n" ADD_F32
        "okb { p = f32[4] parameter(0)\n ROOT r = f32[4] copy(p) }\n"
        "badb { p = f32[4] parameter(0)\n ROOT r = f32[4] custom-call(p), custom_call_target=\"NoSuchTarget\" }\n"
        "ENTRY e {\n p = f32[4] parameter(0)\n a0 = f32[4] all-reduce(p), replica_groups={}, to_apply=add\n"
        " r = u32[] replica-id()\n two = u32[] constant(2)\n is2 = pred[] compare(r, two), direction=EQ\n"
        " c = f32[4] conditional(is2, a0, a0), true_computation=badb, false_computation=okb\n"
        " ROOT ar = f32[4] all-reduce(c), replica_groups={}, to_apply=add\n}\n";
    if (!rc_open(&c, "4", text)) { rc_close(&c); return; }
    int64_t d4[1] = {4};
    for (int d = 0; d < 4; d++) rc_input(&c, d, 0, TPU_F32, 1, d4, v_id);
    tpu_status st = rc_run(&c);
    CHECK(st == TPU_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(tpu_errmsg(c.ctx), "device 2 (replica 2, partition 0)") != NULL, "%s", tpu_errmsg(c.ctx));
    CHECK(strstr(tpu_errmsg(c.ctx), "NoSuchTarget") != NULL);
    CHECK_EQ_INT(c.nout, 0);
    /* the system still works */
    tpu_module_free(c.m);
    const char *ok = "HloModule o, replica_count=4\n" ADD_F32
                     "ENTRY e {\n p = f32[4] parameter(0)\n ROOT ar = f32[4] all-reduce(p), replica_groups={}, to_apply=add\n}\n";
    REQUIRE_OK(c.ctx, tpu_module_parse(c.ctx, ok, strlen(ok), "o.hlo", &c.m));
    REQUIRE_OK(c.ctx, rc_run(&c));
    CHECK_NEAR(((float *)c.out[3][0]->data)[1], v_id(0, 1) + v_id(1, 1) + v_id(2, 1) + v_id(3, 1), 0);
    rc_close(&c);
}

TEST(runtime_divergence_detected)
{
    rt_case c;
    /* replica r runs 2 + r iterations: replica 0 finishes while replica 1 waits in a third all-reduce */
    const char *text =
        "HloModule dv, replica_count=2\n" ADD_F32
        "cond { s = (s32[], f32[2]) parameter(0)\n i = s32[] get-tuple-element(s), index=0\n"
        " r = u32[] replica-id()\n rs = s32[] convert(r)\n two = s32[] constant(2)\n n = s32[] add(rs, two)\n"
        " ROOT lt = pred[] compare(i, n), direction=LT }\n"
        "body { s = (s32[], f32[2]) parameter(0)\n i = s32[] get-tuple-element(s), index=0\n"
        " one = s32[] constant(1)\n j = s32[] add(i, one)\n v = f32[2] get-tuple-element(s), index=1\n"
        " ar = f32[2] all-reduce(v), replica_groups={}, to_apply=add\n ROOT t = (s32[], f32[2]) tuple(j, ar) }\n"
        "ENTRY e {\n p = f32[2] parameter(0)\n z = s32[] constant(0)\n s = (s32[], f32[2]) tuple(z, p)\n"
        " w = (s32[], f32[2]) while(s), condition=cond, body=body\n ROOT r = f32[2] get-tuple-element(w), index=1\n}\n";
    if (!rc_open(&c, "2", text)) { rc_close(&c); return; }
    int64_t d2[1] = {2};
    for (int d = 0; d < 2; d++) rc_input(&c, d, 0, TPU_F32, 1, d2, v_id);
    CHECK(rc_run(&c) == TPU_ERR_INVALID);
    CHECK_MSG(strstr(tpu_errmsg(c.ctx), "finished its program without reaching it") != NULL, "%s", tpu_errmsg(c.ctx));
    CHECK(strstr(tpu_errmsg(c.ctx), "execution 3") != NULL);
    rc_close(&c);

    /* devices wait in different collectives: a deadlock, reported */
    text = "HloModule dl, replica_count=3\n" ADD_F32
           "b0 { p = f32[2] parameter(0)\n ROOT a = f32[2] all-reduce(p), replica_groups={}, to_apply=add }\n"
           "b1 { p = f32[2] parameter(0)\n ROOT g = f32[2] collective-permute(p), source_target_pairs={{0,1}} }\n"
           "ENTRY e {\n p = f32[2] parameter(0)\n r = u32[] replica-id()\n z = u32[] constant(0)\n"
           " is0 = pred[] compare(r, z), direction=EQ\n"
           " ROOT c = f32[2] conditional(is0, p, p), true_computation=b0, false_computation=b1\n}\n";
    if (!rc_open(&c, "3", text)) { rc_close(&c); return; }
    for (int d = 0; d < 3; d++) rc_input(&c, d, 0, TPU_F32, 1, d2, v_id);
    CHECK(rc_run(&c) == TPU_ERR_INVALID);
    CHECK_MSG(strstr(tpu_errmsg(c.ctx), "deadlock") != NULL, "%s", tpu_errmsg(c.ctx));
    CHECK(strstr(tpu_errmsg(c.ctx), "all-reduce 'a'") != NULL && strstr(tpu_errmsg(c.ctx), "collective-permute 'g'") != NULL);
    rc_close(&c);
}

/* ---- the system and its inputs ---- */

TEST(runtime_system_setup_errors)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_system *sys = NULL;
    CHECK(tpu_system_new(ctx, "0", &sys) == TPU_ERR_INVALID);
    CHECK(tpu_system_new(ctx, "v3-12", &sys) != TPU_OK);
    CHECK(tpu_system_new(ctx, "", &sys) == TPU_ERR_INVALID);
    REQUIRE_OK(ctx, tpu_system_new(ctx, "v3-8", &sys));
    CHECK_EQ_INT(tpu_system_num_devices(sys), 8);
    CHECK_EQ_STR(tpu_system_chip(sys), "v3-8");
    CHECK(tpu_system_set_split(ctx, sys, 3, 2) == TPU_ERR_INVALID);
    CHECK_OK(ctx, tpu_system_set_split(ctx, sys, 4, 2));
    tpu_system_free(sys);
    REQUIRE_OK(ctx, tpu_system_new(ctx, "5:v5e", &sys));
    CHECK_EQ_INT(tpu_system_num_devices(sys), 5);
    tpu_system_free(sys);
    REQUIRE_OK(ctx, tpu_system_new(ctx, "3", &sys));
    /* a module compiled for 4 devices does not run on 3 */
    const char *text = "HloModule m4, replica_count=4\nENTRY e {\n ROOT r = u32[] replica-id()\n}\n";
    tpu_module *m = NULL;
    REQUIRE_OK(ctx, tpu_module_parse(ctx, text, strlen(text), "m4.hlo", &m));
    tpu_tensor **out[3];
    int nout = 0;
    CHECK(tpu_system_run(ctx, sys, m, NULL, NULL, 0, out, &nout) == TPU_ERR_INVALID);
    CHECK(strstr(tpu_errmsg(ctx), "compiled for 4 devices") != NULL);
    tpu_module_free(m);
    /* a module naming no counts: replicas (replica-id), or partitions (partition-id) */
    text = "HloModule any\nENTRY e {\n r = u32[] replica-id()\n p = u32[] partition-id()\n ROOT t = (u32[], u32[]) tuple(r, p)\n}\n";
    REQUIRE_OK(ctx, tpu_module_parse(ctx, text, strlen(text), "any.hlo", &m));
    REQUIRE_OK(ctx, tpu_system_run(ctx, sys, m, NULL, NULL, 0, out, &nout));
    CHECK_EQ_INT(((uint32_t *)tpu_tensor_data(out[2][1]))[0], 2);   /* partition-id read: 3 partitions */
    tpu_system_outputs_free(out, 3, nout);
    REQUIRE_OK(ctx, tpu_system_set_split(ctx, sys, 3, 1));
    REQUIRE_OK(ctx, tpu_system_run(ctx, sys, m, NULL, NULL, 0, out, &nout));
    CHECK_EQ_INT(((uint32_t *)tpu_tensor_data(out[2][0]))[0], 2);
    CHECK_EQ_INT(((uint32_t *)tpu_tensor_data(out[2][1]))[0], 0);
    tpu_system_outputs_free(out, 3, nout);
    tpu_module_free(m);
    /* a module with no header counts and an empty-group all-reduce still reduces over the system */
    text = "HloModule nc\n" ADD_F32 "ENTRY e {\n p = f32[2] parameter(0)\n ROOT a = f32[2] all-reduce(p), replica_groups={}, to_apply=add\n}\n";
    REQUIRE_OK(ctx, tpu_system_set_split(ctx, sys, 0, 0));
    REQUIRE_OK(ctx, tpu_module_parse(ctx, text, strlen(text), "nc.hlo", &m));
    tpu_tensor *x = NULL;
    REQUIRE_OK(ctx, tpu_tensor_new(ctx, TPU_F32, 1, (int64_t[]){2}, &x));
    ((float *)tpu_tensor_data(x))[0] = 1.5f;
    tpu_tensor **ins[3] = {&x, &x, &x};
    REQUIRE_OK(ctx, tpu_system_run(ctx, sys, m, NULL, ins, 1, out, &nout));
    CHECK_NEAR(((float *)tpu_tensor_data(out[1][0]))[0], 4.5, 0);
    tpu_system_outputs_free(out, 3, nout);
    /* wrong input count: an error naming the device */
    CHECK(tpu_system_run(ctx, sys, m, NULL, ins, 0, out, &nout) == TPU_ERR_INVALID);
    CHECK_MSG(strstr(tpu_errmsg(ctx), "takes 1 input") != NULL && strstr(tpu_errmsg(ctx), "device ") != NULL, "%s", tpu_errmsg(ctx));
    tpu_tensor_free(x);
    tpu_module_free(m);
    tpu_system_free(sys);
    tpu_ctx_free(ctx);
}

/* One device: the collectives of a one-device group are identities; the caller's thread runs it. */
TEST(runtime_single_device)
{
    rt_case c;
    const char *text = "HloModule one\n" ADD_F32
                       "ENTRY e {\n p = f32[3] parameter(0)\n a = f32[3] all-reduce(p), replica_groups={}, to_apply=add\n"
                       " ROOT g = f32[3] all-gather(a), replica_groups={{0}}, dimensions={0}\n}\n";
    if (!rc_open(&c, "1", text)) { rc_close(&c); return; }
    int64_t d3[1] = {3};
    rc_input(&c, 0, 0, TPU_F32, 1, d3, v_mixed);
    REQUIRE_OK(c.ctx, rc_run(&c));
    for (int i = 0; i < 3; i++) CHECK(bits_equal_f32(((float *)c.out[0][0]->data)[i], (float)v_mixed(0, i)));
    rc_close(&c);
}

/* A jax shard_map program as XLA:CPU compiled it for 4 devices (tests/golden/make_runtime_golden.py): every
 * output on every device equals XLA:CPU's, bit for bit. */
TEST(runtime_golden_shard_map)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    tpu_tensor **arr = NULL;
    char **names = NULL;
    int narr = 0;
    REQUIRE_OK(ctx, tpu_module_load(ctx, "tests/golden/runtime/shard_map.hlo", &m));
    REQUIRE_OK(ctx, tpu_npz_load(ctx, "tests/golden/runtime/shard_map.npz", &arr, &names, &narr));
    tpu_system *sys = NULL;
    REQUIRE_OK(ctx, tpu_system_new(ctx, "4", &sys));
    tpu_tensor *in[4][2] = {{NULL}};
    tpu_tensor **ins[4], **out[4];
    for (int i = 0; i < narr; i++) {
        int k, d, len = 0;
        if (sscanf(names[i], "arg%d_dev%d%n", &k, &d, &len) == 2 && !names[i][len] && k < 2 && d < 4) in[d][k] = arr[i];
    }
    for (int d = 0; d < 4; d++) ins[d] = in[d];
    int nout = 0;
    tpu_status st = tpu_system_run(ctx, sys, m, NULL, ins, 2, out, &nout);
    CHECK_OK(ctx, st);
    if (!st) {
        CHECK_EQ_INT(nout, 7);
        int compared = 0;
        for (int i = 0; i < narr; i++) {
            int o, d, len = 0;
            if (sscanf(names[i], "want%d_dev%d%n", &o, &d, &len) != 2 || names[i][len] || o >= nout || d >= 4) continue;
            const tpu_tensor *w = arr[i], *g = out[d][o];
            int same = w->dtype == g->dtype && w->nbytes == g->nbytes && !memcmp(w->data, g->data, w->nbytes);
            CHECK_MSG(same, "output %d of device %d differs from XLA:CPU", o, d);
            compared++;
        }
        CHECK_EQ_INT(compared, 28);
        tpu_system_stats s;
        tpu_system_last_stats(sys, &s);
        CHECK(s.partitions == 4 && s.collectives == 11);   /* 5 + 3 iterations x (permute, all-reduce) */
        tpu_system_outputs_free(out, 4, nout);
    }
    tpu_system_free(sys);
    tpu_tensors_free(arr, narr);
    tpu_names_free(names, narr);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* fewer elements than devices (empty chunks), a scalar, and an empty array */
TEST(runtime_all_reduce_small_shapes)
{
    rt_case c;
    const char *text = "HloModule sm, replica_count=5\n" ADD_F32
                       "ENTRY e {\n p = f32[3] parameter(0)\n q = f32[] parameter(1)\n z = f32[0,2] parameter(2)\n"
                       " a = f32[3] all-reduce(p), replica_groups={}, to_apply=add\n"
                       " b = f32[] all-reduce(q), replica_groups=[1,5]<=[5], to_apply=add\n"
                       " e = f32[0,2] all-reduce(z), replica_groups={}, to_apply=add\n"
                       " g = f32[0,2] all-gather(z), replica_groups={}, dimensions={0}\n"
                       " ROOT t = (f32[3], f32[], f32[0,2], f32[0,2]) tuple(a, b, e, g)\n}\n";
    if (!rc_open(&c, "5", text)) { rc_close(&c); return; }
    int64_t d3[1] = {3}, d02[2] = {0, 2};
    const float *x[5], *y[5];
    for (int d = 0; d < 5; d++) {
        x[d] = rc_input(&c, d, 0, TPU_F32, 1, d3, v_mixed)->data;
        y[d] = rc_input(&c, d, 1, TPU_F32, 0, NULL, v_mixed)->data;
        rc_input(&c, d, 2, TPU_F32, 2, d02, v_mixed);
    }
    REQUIRE_OK(c.ctx, rc_run(&c));
    REQUIRE(c.nout == 4);
    float ra[3], rb[1];
    ref_ring_f32(x, 5, 3, ra);
    ref_ring_f32(y, 5, 1, rb);
    for (int d = 0; d < 5; d++) {
        for (int i = 0; i < 3; i++) CHECK(bits_equal_f32(((float *)c.out[d][0]->data)[i], ra[i]));
        CHECK(bits_equal_f32(((float *)c.out[d][1]->data)[0], rb[0]));
        CHECK_EQ_INT(tpu_tensor_count(c.out[d][2]), 0);
        CHECK_EQ_INT(tpu_tensor_count(c.out[d][3]), 0);
    }
    rc_close(&c);
}
