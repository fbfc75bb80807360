/* t_verify.c — shape inference per op family (shapes left out of the text are inferred when a module loads)
 * and the verifier (declared shapes that disagree with the operands are caught, with the right message and
 * file:line:col). Every corpus module verifies except the files that really are inconsistent. */
#include "test.h"
#include "verify/verify.h"

#include <dirent.h>

/* Parses "HloModule t\n<comps>\nENTRY e {\n<body>\n}" and returns the root's shape as text (no layout). */
static const char *infer_root(const char *comps, const char *body, char *out, size_t n)
{
    static char text[4096];
    snprintf(text, sizeof text, "HloModule t\n%s\nENTRY e {\n%s\n}\n", comps, body);
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    tpu_status st = tpu_module_parse(ctx, text, strlen(text), "t.hlo", &m);
    if (st) {
        snprintf(out, n, "ERROR %s", tpu_errmsg(ctx));
    } else {
        ut_buf b;
        ut_buf_init(&b);
        hlo_shape_print(&b, &m->entry->root->shape, 0);
        snprintf(out, n, "%s", b.data ? b.data : "");
        ut_buf_free(&b);
    }
    tpu_module_free(m);
    tpu_ctx_free(ctx);
    return out;
}

#define ADD "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
#define MAX2 "max2 { a = f32[] parameter(0)\n b = s32[] parameter(1)\n c = f32[] parameter(2)\n d = s32[] parameter(3)\n" \
             " m = f32[] maximum(a, c)\n n = s32[] maximum(b, d)\n ROOT t = (f32[], s32[]) tuple(m, n) }\n"
#define LT "lt { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = pred[] compare(a, b), direction=LT }\n"
#define GE "ge { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = pred[] compare(a, b), direction=GE }\n"
#define CALLEE "callee { a = f32[4] parameter(0)\n b = s32[] parameter(1)\n ROOT t = (s32[], f32[4]) tuple(b, a) }\n"
#define COND "cond { s = (s32[], f32[3]) parameter(0)\n i = s32[] get-tuple-element(s), index=0\n" \
             " n = s32[] constant(4)\n ROOT lt = pred[] compare(i, n), direction=LT }\n"
#define BODY "body { s = (s32[], f32[3]) parameter(0)\n i = s32[] get-tuple-element(s), index=0\n" \
             " one = s32[] constant(1)\n j = s32[] add(i, one)\n v = f32[3] get-tuple-element(s), index=1\n" \
             " ROOT t = (s32[], f32[3]) tuple(j, v) }\n"
#define BR0 "br0 { x = f32[2] parameter(0)\n ROOT n = f32[2] negate(x) }\n"
#define BR1 "br1 { x = s32[] parameter(0)\n ROOT c = f32[2] broadcast(f32[] constant(1)), dimensions={} }\n"

typedef struct {
    const char *comps, *body, *want;
} infer_case;

static const infer_case infer_cases[] = {
    /* elementwise */
    {"", "p = c64[2,3] parameter(0)\nROOT r = abs(p)", "f32[2,3]"},
    {"", "p = f32[2,3] parameter(0)\nROOT r = is-finite(p)", "pred[2,3]"},
    {"", "p = f32[2] parameter(0)\nq = f32[2] parameter(1)\nROOT r = compare(p, q), direction=GE", "pred[2]"},
    {"", "p = f64[2] parameter(0)\nq = f64[2] parameter(1)\nROOT r = complex(p, q)", "c128[2]"},
    {"", "p = bf16[4] parameter(0)\nq = f32[4] parameter(1)\nROOT r = multiply(p, q)", "f32[4]"},
    {"", "p = pred[3] parameter(0)\nq = s8[3] parameter(1)\nROOT r = select(p, q, q)", "s8[3]"},
    {"", "lo = f32[] parameter(0)\nx = f32[5] parameter(1)\nROOT r = clamp(lo, x, lo)", "f32[5]"},
    {"", "p = f32[<=8] parameter(0)\nROOT r = exponential(p)", "f32[<=8]"},
    /* nested operand instructions */
    {"", "a = f32[2] parameter(0)\nb = f32[2] parameter(1)\nROOT r = add(f32[2] multiply(a, b), negate(a))", "f32[2]"},
    /* data movement */
    {"", "p = f32[2,3,4] parameter(0)\nROOT r = transpose(p), dimensions={2,0,1}", "f32[4,2,3]"},
    {"", "p = f32[2,3] parameter(0)\nROOT r = reverse(p), dimensions={1}", "f32[2,3]"},
    {"", "p = f32[3] parameter(0)\nROOT r = broadcast(p), dimensions={2,4}", "f32[2,4,3]"},
    {"", "p = f32[2,3] parameter(0)\nq = f32[2,5] parameter(1)\nROOT r = concatenate(p, q, p), dimensions={1}", "f32[2,11]"},
    {"", "p = f32[3,4] parameter(0)\nc = f32[] constant(0)\nROOT r = pad(p, c), padding=1_2x0_0_2", "f32[6,10]"},
    {"", "p = f32[3,4] parameter(0)\nc = f32[] constant(0)\nROOT r = pad(p, c), padding=-1_0x1_1", "f32[2,6]"},
    {"", "p = (f32[2], (s32[], pred[4])) parameter(0)\nROOT r = get-tuple-element(p), index=1", "(s32[], pred[4])"},
    {"", "p = f32[2] parameter(0)\nq = s32[] parameter(1)\nROOT r = tuple(p, q, p)", "(f32[2], s32[], f32[2])"},
    {"", "p = f32[8,4] parameter(0)\ni = s32[5,1] parameter(1)\nROOT r = gather(p, i), offset_dims={1}, "
         "collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,4}", "f32[5,4]"},
    {"", "p = f32[3,4,5] parameter(0)\ni = s32[7,2] parameter(1)\nROOT r = gather(p, i), offset_dims={1,2}, "
         "collapsed_slice_dims={1}, start_index_map={1,2}, index_vector_dim=1, slice_sizes={3,1,2}", "f32[7,3,2]"},
    {ADD, "o = f32[8,4] parameter(0)\ni = s32[3] parameter(1)\nu = f32[3,4] parameter(2)\nROOT r = scatter(o, i, u), "
          "update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, "
          "to_apply=add", "f32[8,4]"},
    /* reductions, windows, sort */
    {ADD, "p = f32[2,3,4] parameter(0)\nc = f32[] constant(0)\nROOT r = reduce(p, c), dimensions={0,2}, to_apply=add",
     "f32[3]"},
    {MAX2, "p = f32[4,5] parameter(0)\nq = s32[4,5] parameter(1)\na = f32[] constant(0)\nb = s32[] constant(0)\n"
           "ROOT r = reduce(p, q, a, b), dimensions={1}, to_apply=max2", "(f32[4], s32[4])"},
    {ADD, "p = f32[1,9,9,3] parameter(0)\nc = f32[] constant(0)\nROOT r = reduce-window(p, c), "
          "window={size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x1_1x0_0}, to_apply=add", "f32[1,5,5,3]"},
    {GE ADD, "p = f32[4,6] parameter(0)\ns = f32[2,3] parameter(1)\nc = f32[] constant(0)\nROOT r = "
             "select-and-scatter(p, s, c), window={size=2x2 stride=2x2}, select=ge, scatter=add", "f32[4,6]"},
    {ADD, "p = f32[4] parameter(0)\nq = f32[4] parameter(1)\nROOT r = map(p, q), dimensions={0}, to_apply=add", "f32[4]"},
    {LT, "p = f32[4,3] parameter(0)\nROOT r = sort(p), dimensions={0}, to_apply=lt", "f32[4,3]"},
    {"", "p = f32[4,10] parameter(0)\nROOT r = topk(p), k=3, largest=true", "(f32[4,3], s32[4,3])"},
    /* dot, convolution */
    {"", "a = f32[2,16,32] parameter(0)\nb = f32[2,32,8] parameter(1)\nROOT r = dot(a, b), lhs_batch_dims={0}, "
         "lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}", "f32[2,16,8]"},
    {"", "a = bf16[4,6] parameter(0)\nb = s4[6,5] parameter(1)\nROOT r = dot(a, b), lhs_contracting_dims={1}, "
         "rhs_contracting_dims={0}", "bf16[4,5]"},
    {"", "a = f32[4] parameter(0)\nROOT r = dot(a, a), lhs_contracting_dims={0}, rhs_contracting_dims={0}", "f32[]"},
    {"", "a = f32[10,8] parameter(0)\nb = f32[3,8,6] parameter(1)\ng = s32[3] parameter(2)\nROOT r = ragged-dot(a, b, g), "
         "lhs_contracting_dims={1}, rhs_contracting_dims={1}, lhs_ragged_dims={0}, rhs_group_dims={0}", "f32[10,6]"},
    {"", "x = f32[8,32,32,3] parameter(0)\nk = f32[3,3,3,16] parameter(1)\nROOT r = convolution(x, k), "
         "window={size=3x3 stride=2x2 pad=1_1x1_1}, dim_labels=b01f_01io->b01f", "f32[8,16,16,16]"},
    {"", "x = f32[1,3,28,28] parameter(0)\nk = f32[8,3,5,5] parameter(1)\nROOT r = convolution(x, k), "
         "window={size=5x5 rhs_dilate=2x2}, dim_labels=bf01_oi01->bf01", "f32[1,8,20,20]"},
    {"", "x = f32[2,10,10,32] parameter(0)\nk = f32[3,3,1,32] parameter(1)\nROOT r = convolution(x, k), "
         "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=32", "f32[2,10,10,32]"},
    {"", "x = f32[2,7,7,4] parameter(0)\nk = f32[3,3,4,4] parameter(1)\nROOT r = convolution(x, k), "
         "window={size=3x3 stride=2x2 lhs_dilate=2x2}, dim_labels=b01f_01io->b01f", "f32[2,6,6,4]"},
    /* linear algebra, fft, batch norm */
    {"", "p = f32[3,8] parameter(0)\nROOT r = fft(c64[3,8] convert(p)), fft_type=FFT, fft_length={8}", "c64[3,8]"},
    {"", "p = f32[3,8] parameter(0)\nROOT r = fft(p), fft_type=RFFT, fft_length={8}", "c64[3,5]"},
    {"", "p = c64[3,5] parameter(0)\nROOT r = fft(p), fft_type=IRFFT, fft_length={8}", "f32[3,8]"},
    {"", "p = f32[2,4,4] parameter(0)\nROOT r = cholesky(p), lower=true", "f32[2,4,4]"},
    {"", "a = f32[4,4] parameter(0)\nb = f32[4,7] parameter(1)\nROOT r = triangular-solve(a, b), left_side=true, lower=true",
     "f32[4,7]"},
    {"", "x = f32[8,4,4,16] parameter(0)\ns = f32[16] parameter(1)\nROOT r = batch-norm-training(x, s, s), "
         "epsilon=0.001, feature_index=3", "(f32[8,4,4,16], f32[16], f32[16])"},
    /* control flow */
    {COND BODY, "z = s32[] constant(0)\nv = f32[3] parameter(0)\nt = tuple(z, v)\nROOT w = while(t), condition=cond, body=body",
     "(s32[], f32[3])"},
    {BR0 BR1, "i = s32[] parameter(0)\nx = f32[2] parameter(1)\nROOT r = conditional(i, x, i), branch_computations={br0, br1}",
     "f32[2]"},
    {CALLEE, "a = f32[4] parameter(0)\nb = s32[] parameter(1)\nROOT r = call(a, b), to_apply=callee", "(s32[], f32[4])"},
    /* shapes left out on a nested instruction, and an inline to_apply body */
    {"", "p = f32[4,6] parameter(0)\nc = f32[] constant(0)\nROOT r = reduce(exponential(p), c), dimensions={1}, "
         "to_apply={ x = f32[] parameter(0)\n y = f32[] parameter(1)\n ROOT z = add(x, y) }", "f32[4]"},
    /* misc */
    {"", "t = token[] parameter(0)\nROOT r = after-all(t, t)", "token[]"},
    {"", "p = f32[3,4] parameter(0)\nROOT r = get-dimension-size(p), dimensions={1}", "s32[]"},
    {"", "p = f32[3,4] parameter(0)\ns = s32[] parameter(1)\nROOT r = set-dimension-size(p, s), dimensions={1}", "f32[3,<=4]"},
    {"", "ROOT r = partition-id()", "u32[]"},
    {"", "p = f32[3] parameter(0)\nROOT r = opt-barrier(p)", "f32[3]"},
};

TEST(verify_infers_left_out_shapes)
{
    char got[600];
    for (size_t i = 0; i < sizeof infer_cases / sizeof infer_cases[0]; i++) {
        const infer_case *c = &infer_cases[i];
        infer_root(c->comps, c->body, got, sizeof got);
        CHECK_MSG(!strcmp(got, c->want), "case %zu (%.60s...): got %s, wanted %s", i, c->body, got, c->want);
    }
}

/* Verifies text; returns the report (caller frees). */
static ver_report *verify_text(const char *text)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    ver_report *r = NULL;
    if (tpu_module_parse(ctx, text, strlen(text), "v.hlo", &m) == TPU_OK) {
        r = ver_report_new(m->name, NULL);
        ver_verify_module(ctx, m, r);
    } else {
        fprintf(stderr, "  parse failed: %s\n", tpu_errmsg(ctx));
    }
    tpu_module_free(m);
    tpu_ctx_free(ctx);
    return r;
}

/* Collectives (their shapes must be written): the group size comes from replica_groups or the header. */
TEST(verify_collective_shapes)
{
    static const struct { const char *hdr, *body; int errors; } cases[] = {
        {"replica_count=4", "p = f32[2,3] parameter(0)\nROOT r = f32[2,12] all-gather(p), dimensions={1}", 0},
        {"replica_count=4", "p = f32[2,3] parameter(0)\nROOT r = f32[2,3] all-gather(p), dimensions={1}", 1},
        {"replica_count=4", "p = f32[2,3] parameter(0)\nROOT r = f32[4,3] all-gather(p), replica_groups={{0,1},{2,3}}, "
                            "dimensions={0}", 0},
        {"num_partitions=8", "p = f32[16] parameter(0)\nROOT r = f32[64] all-gather(p), channel_id=1, "
                             "replica_groups=[2,4]<=[8], use_global_device_ids=true, dimensions={0}", 0},
        {"replica_count=2, num_partitions=4", "p = f32[16] parameter(0)\nROOT r = f32[128] all-gather(p), channel_id=1, "
                                              "dimensions={0}, use_global_device_ids=false", 0},
        {"num_partitions=4", "p = f32[16] parameter(0)\nROOT r = f32[16] all-to-all(p), channel_id=1, dimensions={0}", 0},
        {"num_partitions=3", "p = f32[16] parameter(0)\nROOT r = f32[16] all-to-all(p), channel_id=1, dimensions={0}", 1},
        {"", ADD "ENTRY e2 {\np = f32[4,6] parameter(0)\nROOT r = f32[4,6] all-reduce(p), replica_groups={{0},{1,2}}, "
             "to_apply=add", 0},
        {"", "p = f32[4] parameter(0)\nROOT r = f32[4] collective-permute(p), source_target_pairs={{0,1},{1,0}}", 0},
        {"", "p = f32[4] parameter(0)\nROOT r = f32[4] collective-permute(p), source_target_pairs={{0,1,2}}", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[1024];
        snprintf(text, sizeof text, "HloModule t%s%s\nENTRY e {\n%s\n}\n", cases[i].hdr[0] ? ", " : "", cases[i].hdr,
                 cases[i].body);
        if (strstr(cases[i].body, "ENTRY e2"))   /* a body that brings its own computations */
            snprintf(text, sizeof text, "HloModule t\n%s\n}\n", cases[i].body + 0);
        ver_report *r = verify_text(text);
        CHECK_MSG(r != NULL, "case %zu did not parse", i);
        if (!r) continue;
        CHECK_MSG(r->nerrors == cases[i].errors, "case %zu: %d errors, expected %d (%s)", i, r->nerrors, cases[i].errors,
                  r->nproblems ? r->problems[0].msg : "-");
        tpu_report_free(r);
    }
}

typedef struct {
    const char *comps, *body;
    const char *where;   /* "L:C" of the bad instruction */
    const char *what;
} bad_case;

/* Body lines start on line 4 ("HloModule t", comps on line 2, "ENTRY e {" on line 3); comps are one line. */
static const bad_case bad_cases[] = {
    {"", "a = f32[8,64] parameter(0)\nb = f32[32,16] parameter(1)\nROOT r = f32[8,16] dot(a, b), "
         "lhs_contracting_dims={1}, rhs_contracting_dims={0}", "6:6",
     "dot: contracting dimension sizes differ: lhs dim 1 is 64, rhs dim 0 is 32"},
    {"", "a = f32[2] parameter(0)\nROOT r = f32[3] add(a, a)", "5:6",
     "add: declared shape f32[3] differs from the shape its operands give, f32[2] (dimension 0 is 3, expected 2)"},
    {"", "a = f32[2] parameter(0)\nb = s32[2] parameter(1)\nROOT r = f32[2] add(a, b)", "6:6", "different element types"},
    {"", "a = f32[2] parameter(0)\nb = f32[3] parameter(1)\nROOT r = f32[2] add(a, b)", "6:6", "no implicit broadcast"},
    {"", "a = f32[2,3] parameter(0)\nROOT r = f32[3,2] transpose(a), dimensions={0,0}", "5:6", "lists dimension 0 twice"},
    {"", "a = f32[4,4] parameter(0)\nROOT r = f32[2,4] slice(a), slice={[3:5], [0:4]}", "5:6", "outside [0:4]"},
    {"", "a = f32[3] parameter(0)\nROOT r = f32[3,4] broadcast(a), dimensions={1}", "5:6",
     "operand dimension 0 has size 3 but result dimension 1 has size 4"},
    {"", "a = f32[2,3] parameter(0)\nb = f32[3,3] parameter(1)\nROOT r = f32[5,3] concatenate(a, b), dimensions={1}", "6:6",
     "differs from operand 0"},
    {ADD, "a = f32[2,3] parameter(0)\nc = f32[] constant(0)\nROOT r = f32[2] reduce(a, c), dimensions={2}, to_apply=add",
     "6:6", "out of range for rank 2"},
    {ADD, "a = f32[2,3] parameter(0)\nc = s32[] constant(0)\nROOT r = s32[2] reduce(a, c), dimensions={1}, to_apply=add",
     "6:6", "parameter 0 is f32[], expected s32[]"},
    {"", "x = f32[8,32,32,3] parameter(0)\nk = f32[3,3,4,16] parameter(1)\nROOT r = f32[8,32,32,16] convolution(x, k), "
         "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f", "6:6",
     "input features 3 / feature_group_count 1 = 3, but the kernel's input feature dimension is 4"},
    {"", "x = f32[8,32,32,3] parameter(0)\nk = f32[5,5,3,16] parameter(1)\nROOT r = f32[8,32,32,16] convolution(x, k), "
         "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f", "6:6", "window size 3 in spatial dimension 0"},
    {"", "x = f32[8,32,32,3] parameter(0)\nk = f32[3,3,3,16] parameter(1)\nROOT r = f32[8,32,32,16] convolution(x, k), "
         "window={size=3x3}, dim_labels=b01f_01io->b01f", "6:6", "dimension 1 is 32, expected 30"},
    {"", "p = f32[8,4] parameter(0)\ni = s32[5,1] parameter(1)\nROOT r = f32[5,4] gather(p, i), offset_dims={1}, "
         "collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={2,4}", "6:6",
     "collapsed or batching dimension 0 must have slice size 1"},
    {"", "p = (f32[2], s32[]) parameter(0)\nROOT r = f32[2] get-tuple-element(p), index=2", "5:6", "index=2 out of range"},
    {"", "p = f32[3,4] parameter(0)\nc = f32[] constant(0)\nROOT r = f32[1,4] pad(p, c), padding=-2_-2x0_0", "6:6",
     "negative size"},
    {COND BODY, "v = f32[3] parameter(0)\nz = f32[] constant(0)\nt = (f32[], f32[3]) tuple(z, v)\n"
                "ROOT w = (f32[], f32[3]) while(t), condition=cond, body=body", "7:6",
     "condition computation 'cond' parameter 0 is (s32[], f32[3]), expected (f32[], f32[3])"},
    {BR0 BR1, "i = pred[] parameter(0)\nx = f32[2] parameter(1)\nROOT r = f32[2] conditional(i, x, i), "
              "branch_computations={br0, br1}", "6:6", "a pred selector needs true_computation"},
    {"", "p = f32[2,3] parameter(0)\nROOT r = f32[2,12] all-gather(p), replica_groups={{0,1,2}}, dimensions={1}", "5:6",
     "dimension 1 is 12, expected 9"},
    {ADD, "p = f32[2,5] parameter(0)\nROOT r = f32[2,2] reduce-scatter(p), replica_groups={{0,1}}, dimensions={1}, "
          "to_apply=add", "5:6", "(5) is not divisible by the 2 participants"},
    {"", "p = f32[2] parameter(0)\nROOT r = f32[2] custom-call(p, p), custom_call_target=\"x\", "
         "operand_layout_constraints={f32[2]{0}}", "5:6", "lists 1 shapes for 2 operands"},
    {LT, "p = f32[4] parameter(0)\nROOT r = f32[4] sort(p), dimensions={0}, to_apply=lt, is_stable=true\n"
         "q = s32[4] parameter(1)\ns = (f32[4], s32[4]) sort(p, q), dimensions={0}, to_apply=lt", "7:1",
     "comparator computation 'lt' takes 2 parameters, expected 4"},
    {"", "a = f32[2] parameter(0)\nROOT r = f32[2] reshape(a)\nb = f32[3] reshape(a)", "6:1", "element counts differ"},
    {"", "a = f32[2] parameter(0)\nROOT r = f32[2] dynamic-slice(a, s32[] constant(0)), dynamic_slice_sizes={3}", "5:6",
     "does not fit"},
    /* absurd sizes give messages, not wrapped arithmetic */
    {"", "p = f32[4611686018427387903] parameter(0)\nc = f32[] constant(0)\nROOT q = f32[1] pad(p, c), "
         "padding=4611686018427387903_4611686018427387903_9", "6:6", "the padded size overflows"},
    {ADD, "p = f32[4611686018427387903] parameter(0)\nc = f32[] constant(0)\nROOT q = f32[1] reduce-window(p, c), "
          "window={size=9223372036854775807 lhs_dilate=3}, to_apply=add", "6:6", "sizes overflow"},
    {"", "p = f32[4] parameter(0)\nROOT b = s8[4] bitcast(p)", "5:6", "different sizes in bits"},
};

TEST(verify_catches_wrong_shapes)
{
    char text[4096];
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const bad_case *c = &bad_cases[i];
        snprintf(text, sizeof text, "HloModule t\n%s\nENTRY e {\n%s\n}\n", c->comps[0] ? "" : "", c->body);
        if (c->comps[0]) {
            /* computations on line 2 must be one line: join them */
            char comps[2048];
            size_t k = 0;
            for (const char *q = c->comps; *q && k + 2 < sizeof comps; q++) comps[k++] = *q == '\n' ? ' ' : *q;
            comps[k] = 0;
            snprintf(text, sizeof text, "HloModule t\n%s\nENTRY e {\n%s\n}\n", comps, c->body);
        }
        ver_report *r = verify_text(text);
        CHECK_MSG(r != NULL, "case %zu did not parse", i);
        if (!r) continue;
        int found = 0;
        char where[32];
        snprintf(where, sizeof where, "v.hlo:%s", c->where);
        for (int k = 0; k < r->nproblems; k++)
            if (strstr(r->problems[k].msg, c->what) && !strcmp(r->problems[k].where, where)) found = 1;
        CHECK_MSG(found, "case %zu: no problem at %s saying '%s'; got %d: %s @ %s", i, where, c->what, r->nproblems,
                  r->nproblems ? r->problems[0].msg : "-", r->nproblems ? r->problems[0].where : "-");
        tpu_report_free(r);
    }
}

TEST(verify_signature_and_entry_layout)
{
    const char *t = "HloModule t, entry_computation_layout={(f32[2]{0})->f32[3]{0}}\n"
                    "ENTRY e (p: f32[2]) -> s32[2] {\n  p = f32[2] parameter(0)\n  ROOT n = f32[2] negate(p)\n}\n";
    ver_report *r = verify_text(t);
    REQUIRE(r);
    CHECK_EQ_INT(r->nerrors, 2);
    int sig = 0, lay = 0;
    for (int k = 0; k < r->nproblems; k++) {
        sig |= strstr(r->problems[k].msg, "says it returns s32[2]") != NULL;
        lay |= strstr(r->problems[k].msg, "entry_computation_layout gives the result as f32[3]") != NULL;
    }
    CHECK(sig && lay);
    tpu_report_free(r);
}

static int corpus_hlo_files(const char *dir, char names[][512], int max)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        size_t l = strlen(e->d_name);
        if (l > 4 && !strcmp(e->d_name + l - 4, ".hlo")) snprintf(names[n++], 512, "%.300s/%.200s", dir, e->d_name);
    }
    closedir(d);
    return n;
}

/* Every corpus module verifies, except these, which XLA's own importer tests feed to its parser unverified and
 * which XLA's ShapeVerifier would reject too (checked against hlo_verifier.cc / shape_inference.cc):
 *  - import.hlo: a 3x3 window over a 2x2 kernel; map/sort/select-and-scatter computations returning 1-tuples;
 *    a reduce whose init value is f32[4]; rng-bit-generator without its (state, values) tuple;
 *  - layouts_and_names.hlo: entry_computation_layout says f32 for an f16 parameter;
 *  - operand_convert_for_convolution.hlo module 2: a pred convolution of f8e8m0fnu (the test expects an error);
 *  - while.hlo: broadcast of f32[1] into f32[3] (HLO broadcast needs equal sizes);
 *  - import_async.hlo: a recv of f32[128,32] whose recv-done says f32[128,21]. */
TEST(verify_corpus_modules)
{
    static const struct { const char *file; int errors; } expected[] = {
        {"import.hlo", 6}, {"import_async.hlo", 1}, {"layouts_and_names.hlo", 2}, {"operand_convert_for_convolution.hlo", 1}, {"while.hlo", 2}};
    const char *dirs[] = {"hlo", "hlo/xla-parser-tests"};
    static char names[256][512];
    int modules = 0, clean = 0;
    tpu_ctx *ctx = tpu_ctx_new();
    for (int d = 0; d < 2; d++) {
        const char *dir = test_corpus(dirs[d]);
        if (!dir) continue;
        int n = corpus_hlo_files(dir, names, 256);
        for (int i = 0; i < n; i++) {
            tpu_module **ms = NULL;
            int count = 0;
            if (tpu_module_load_split(ctx, names[i], &ms, &count) != TPU_OK) {
                CHECK_MSG(0, "%s: %s", names[i], tpu_errmsg(ctx));
                continue;
            }
            int errors = 0;
            for (int k = 0; k < count; k++) {
                ver_report *r = ver_report_new("m", NULL);
                ver_verify_module(ctx, ms[k], r);
                errors += r->nerrors;
                clean += r->nerrors == 0;
                tpu_report_free(r);
            }
            modules += count;
            const char *base = strrchr(names[i], '/') + 1;
            int want = 0;
            for (size_t e = 0; e < sizeof expected / sizeof expected[0]; e++)
                if (!strcmp(base, expected[e].file)) want = expected[e].errors;
            CHECK_MSG(errors == want, "%s: %d shape errors, expected %d", names[i], errors, want);
            tpu_modules_free(ms, count);
        }
    }
    tpu_ctx_free(ctx);
    if (modules) fprintf(stderr, "  %d corpus modules, %d verify cleanly\n", modules, clean);
}

/* The async shorthand (custom-call-start) becomes async-start with a wrapped computation that verifies. */
TEST(verify_async_shorthand)
{
    const char *t = "HloModule m\nENTRY e {\n  a = f32[10] parameter(0)\n"
                    "  s = ((f32[10]), f32[20], s32[]) custom-call-start(a), async_execution_thread=\"t\", "
                    "custom_call_target=\"bar\"\n  u = ((f32[10]), f32[20], s32[]) custom-call-update(s)\n"
                    "  ROOT d = f32[20] custom-call-done(u)\n}\n";
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    REQUIRE_OK(ctx, tpu_module_parse(ctx, t, strlen(t), "a.hlo", &m));
    CHECK_EQ_INT(m->ncomps, 2);
    CHECK_EQ_INT(m->entry->instrs[1]->op, HLO_ASYNC_START);
    CHECK_EQ_INT(m->comps[0]->root->op, HLO_CUSTOM_CALL);
    CHECK(hlo_attr_str(m->comps[0]->root, HK_CUSTOM_CALL_TARGET) != NULL);
    ver_report *r = ver_report_new("m", NULL);
    CHECK_EQ_INT(ver_verify_module(ctx, m, r), 0);
    tpu_report_free(r);
    char *s = NULL;
    REQUIRE_OK(ctx, tpu_module_to_string(ctx, m, &s));
    CHECK(strstr(s, "}, execution_thread=\"t\"") != NULL);
    tpu_module *m2 = NULL;
    CHECK_OK(ctx, tpu_module_parse(ctx, s, strlen(s), "p.hlo", &m2));
    if (m2) CHECK(hlo_module_equal(m, m2, NULL, 0));
    tpu_free(s);
    tpu_module_free(m);
    tpu_module_free(m2);
    tpu_ctx_free(ctx);
}

/* HloModuleProto text: called_computation_ids map to condition/body (XLA's order is body, condition), the
 * module verifies, and it round-trips through HLO text. */
TEST(verify_proto_while)
{
    const char *t =
        "hlo_module {\n name: \"w\"\n entry_computation_id: 3\n"
        " computations { name: \"body\" id: 1 root_id: 2\n"
        "  instructions { name: \"s\" opcode: \"parameter\" id: 1 shape { element_type: F32 dimensions: 2 } }\n"
        "  instructions { name: \"n\" opcode: \"negate\" id: 2 operand_ids: 1 shape { element_type: F32 dimensions: 2 } } }\n"
        " computations { name: \"cond\" id: 2 root_id: 2\n"
        "  instructions { name: \"s\" opcode: \"parameter\" id: 1 shape { element_type: F32 dimensions: 2 } }\n"
        "  instructions { name: \"c\" opcode: \"constant\" id: 2 shape { element_type: PRED }\n"
        "   literal { shape { element_type: PRED } preds: false } } }\n"
        " computations { name: \"main\" id: 3 root_id: 2\n"
        "  instructions { name: \"p\" opcode: \"parameter\" id: 1 shape { element_type: F32 dimensions: 2 layout { minor_to_major: 0 } } }\n"
        "  instructions { name: \"w\" opcode: \"while\" id: 2 operand_ids: 1 called_computation_ids: 1 called_computation_ids: 2\n"
        "   shape { element_type: F32 dimensions: 2 } metadata { op_name: \"loop\" source_file: \"x.py\" source_line: 9 } } }\n"
        "}\n";
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    REQUIRE_OK(ctx, tpu_module_parse(ctx, t, strlen(t), "w.pbtxt", &m));
    const hlo_instr *w = m->entry->root;
    CHECK_EQ_INT(w->op, HLO_WHILE);
    const hlo_attr *c = hlo_attr_find(w, HK_CONDITION), *b = hlo_attr_find(w, HK_BODY);
    REQUIRE(c && b);
    CHECK_EQ_STR(c->v.comps.v[0]->name, "cond");
    CHECK_EQ_STR(b->v.comps.v[0]->name, "body");
    CHECK_EQ_STR(hlo_meta(w, "op_name"), "loop");
    CHECK_EQ_INT(w->line, 13);
    ver_report *r = ver_report_new("w", NULL);
    CHECK_EQ_INT(ver_verify_module(ctx, m, r), 0);
    tpu_report_free(r);
    char *s = NULL;
    REQUIRE_OK(ctx, tpu_module_to_string(ctx, m, &s));
    CHECK(strstr(s, "condition=%cond, body=%body") != NULL);
    tpu_module *m2 = NULL;
    CHECK_OK(ctx, tpu_module_parse(ctx, s, strlen(s), "w.hlo", &m2));
    char why[200] = "";
    if (m2) CHECK_MSG(hlo_module_equal(m, m2, why, sizeof why), "%s", why);
    tpu_free(s);
    tpu_module_free(m);
    tpu_module_free(m2);
    tpu_ctx_free(ctx);
}

/* A nested operand's invented name gives way to the same name defined later in the text, and the operand
 * stays bound to the nested instruction. */
TEST(verify_nested_operand_names)
{
    const char *t = "HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  r = f32[2] add(negate(p), p)\n"
                    "  negate.anon = f32[2] exponential(p)\n  ROOT t = tuple(r, negate.anon)\n}\n";
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    REQUIRE_OK(ctx, tpu_module_parse(ctx, t, strlen(t), "n.hlo", &m));
    const hlo_instr *t0 = m->entry->root;
    REQUIRE(t0->nops == 2);
    CHECK_EQ_INT(t0->ops[0]->ops[0]->op, HLO_NEGATE);
    CHECK_EQ_STR(t0->ops[0]->ops[0]->name, "negate.anon.1");
    CHECK_EQ_INT(t0->ops[1]->op, HLO_EXP);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}
