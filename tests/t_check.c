/* t_check.c — the TPU compatibility check: what the report says about corpus programs and small snippets
 * (dynamic shapes, custom-calls, element types, elided constants), its text and JSON forms, and chips. */
#include "test.h"
#include "verify/verify.h"

static tpu_report *check_text(const char *text, const char *chip)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    tpu_report *r = NULL;
    if (tpu_module_parse(ctx, text, strlen(text), "k.hlo", &m) == TPU_OK) {
        if (tpu_check(ctx, m, chip, &r) != TPU_OK) fprintf(stderr, "  check failed: %s\n", tpu_errmsg(ctx));
    } else {
        fprintf(stderr, "  parse failed: %s\n", tpu_errmsg(ctx));
    }
    tpu_module_free(m);
    tpu_ctx_free(ctx);
    return r;
}

static tpu_report *check_file(const char *rel, const char *chip, int module)
{
    const char *p = test_corpus(rel);
    if (!p) return NULL;
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module **ms = NULL;
    int n = 0;
    tpu_report *r = NULL;
    if (tpu_module_load_split(ctx, p, &ms, &n) == TPU_OK && module < n) tpu_check(ctx, ms[module], chip, &r);
    tpu_modules_free(ms, n);
    tpu_ctx_free(ctx);
    return r;
}

static int count_category(const tpu_report *r, const char *cat, ver_severity sev)
{
    int n = 0;
    for (int i = 0; i < r->nproblems; i++) n += !strcmp(r->problems[i].category, cat) && r->problems[i].sev == sev;
    return n;
}

TEST(check_mobilenet_compatible)
{
    tpu_report *r = check_file("hlo/mobilenet_v2.hlo", "v5e", 0);
    if (!r) { test_skip("../shared/corpus absent"); return; }
    CHECK_MSG(tpu_report_compatible(r), "%s", tpu_report_text(r));
    CHECK_EQ_INT(tpu_report_num_problems(r), 0);
    CHECK(strstr(tpu_report_text(r), "verdict: compatible with TPU v5e") != NULL);
    tpu_report_free(r);
}

/* Bounded dynamic dimensions compile on a TPU (padded to the bound: checked with libtpu) and are warnings;
 * unbounded ones are refused. */
TEST(check_dynamic_shapes_flagged)
{
    tpu_report *r = check_file("hlo/xla-parser-tests/import_bounded_dynamism.hlo", NULL, 0);
    if (!r) return;
    CHECK(tpu_report_compatible(r));
    CHECK_EQ_INT(count_category(r, "dynamic shape", VER_WARNING), 2);
    const char *t = tpu_report_text(r);
    CHECK_MSG(strstr(t, "dynamic shape f32[1,1,<=1801] — XLA:TPU pads it to its bound") &&
              strstr(t, "pad to the bound and mask"), "%s", t);
    tpu_report_free(r);
    /* the proto-format file with a bounded dimension */
    r = check_file("hlo/xla-parser-tests/dynamic_param.hlo", NULL, 0);
    if (!r) return;
    CHECK_EQ_INT(count_category(r, "dynamic shape", VER_WARNING), 1);
    CHECK(strstr(tpu_report_text(r), "dynamic shape f32[<=2]") != NULL);
    tpu_report_free(r);
    /* '?' has no bound */
    r = check_text("HloModule t\nENTRY e {\n  p = f32[2,?] parameter(0)\n  ROOT n = f32[2,?] negate(p)\n}\n", NULL);
    REQUIRE(r);
    CHECK(!tpu_report_compatible(r));
    CHECK_EQ_INT(count_category(r, "dynamic shape", VER_ERROR), 2);
    CHECK(strstr(tpu_report_text(r), "k.hlo:4:8: %n (negate): dynamic shape f32[2,?] — the TPU compiler needs static") != NULL);
    tpu_report_free(r);
}

TEST(check_custom_calls)
{
    const char *t = "HloModule c\nENTRY e {\n  p = f32[4] parameter(0)\n"
                    "  a = f32[4] custom-call(p), custom_call_target=\"Sharding\", sharding={replicated}\n"
                    "  b = f32[4] custom-call(a), custom_call_target=\"xla_python_cpu_callback\", "
                    "metadata={op_name=\"jit(f)/pure_callback\" source_file=\"model.py\" source_line=42}\n"
                    "  c = f32[4] custom-call(b), custom_call_target=\"__cudnn$convForward\"\n"
                    "  d = f32[4] custom-call(c), custom_call_target=\"my_op\"\n"
                    "  ROOT e = f32[4] custom-call(d), custom_call_target=\"tpu_custom_call\"\n}\n";
    tpu_report *r = check_text(t, NULL);
    REQUIRE(r);
    CHECK_EQ_INT(r->nerrors, 3);
    CHECK_EQ_INT(count_category(r, "custom-call", VER_NOTE), 1);
    const char *s = tpu_report_text(r);
    CHECK_MSG(strstr(s, "k.hlo:5:3: %b (custom-call): custom-call 'xla_python_cpu_callback' calls back into the host") &&
              strstr(s, "Custom emitter for xla_python_cpu_callback not found"),
              "%s", s);
    CHECK(strstr(s, "op_name=\"jit(f)/pure_callback\" at model.py:42") != NULL);
    CHECK(strstr(s, "'__cudnn$convForward' is a GPU") != NULL);
    CHECK(strstr(s, "'my_op' is not one the TPU compiler knows") != NULL);
    CHECK(strstr(s, "[custom-call] 3") != NULL);
    CHECK(strstr(s, "fix: ") != NULL);
    CHECK(strstr(s, "Sharding") == NULL);   /* a no-op marker is not a problem */
    tpu_report_free(r);
}

/* f64 and c128 are emulated (warnings); fft of c128/f64 and reduce-precision of f64 are refused. */
TEST(check_element_types)
{
    const char *t = "HloModule t\nENTRY e {\n  p = f64[4] parameter(0)\n  a = f64[4] add(p, p)\n"
                    "  b = s64[4] bitcast-convert(a)\n  c = c128[4] convert(a)\n  f = c128[4] fft(c), fft_type=FFT, "
                    "fft_length={4}\n  g = f64[4] reduce-precision(a), exponent_bits=8, mantissa_bits=7\n"
                    "  ROOT r = (s64[4], c128[4], f64[4]) tuple(b, f, g)\n}\n";
    tpu_report *r = check_text(t, NULL);
    REQUIRE(r);
    CHECK_EQ_INT(count_category(r, "element type", VER_WARNING), 2);   /* the f64 add, the c128 convert */
    CHECK_EQ_INT(count_category(r, "element type", VER_ERROR), 2);     /* the fft, the reduce-precision */
    const char *s = tpu_report_text(r);
    CHECK_MSG(strstr(s, "f64 — TPUs have no float64 hardware"), "%s", s);
    CHECK(strstr(s, "k.hlo:7:3: %f (fft): fft of c128 — the TPU has FFTs for c64/f32 only") != NULL);
    CHECK(strstr(s, "reduce-precision of f64") != NULL);
    CHECK(strstr(s, "bitcast-convert") == NULL);   /* compiles with current libtpu */
    CHECK(!tpu_report_compatible(r));
    tpu_report_free(r);
    /* f64 alone: a warning, still compatible */
    r = check_text("HloModule t\nENTRY e {\n  p = f64[4] parameter(0)\n  ROOT a = f64[4] multiply(p, p)\n}\n", NULL);
    REQUIRE(r);
    CHECK(tpu_report_compatible(r));
    CHECK_EQ_INT(tpu_report_num_problems(r), 1);
    tpu_report_free(r);
}

TEST(check_chips_and_fp8)
{
    const char *t = "HloModule t\nENTRY e {\n  a = f8e4m3fn[16,32] parameter(0)\n  b = f8e4m3fn[32,8] parameter(1)\n"
                    "  ROOT d = bf16[16,8] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
    tpu_report *r = check_text(t, "v5p");
    REQUIRE(r);
    CHECK(tpu_report_compatible(r));
    CHECK_EQ_INT(count_category(r, "element type", VER_NOTE), 1);
    tpu_report_free(r);
    r = check_text(t, "TPU7x");   /* an alias of v7, which has fp8 matrix units */
    REQUIRE(r);
    CHECK_EQ_INT(r->nproblems, 0);
    CHECK(strstr(tpu_report_text(r), "TPU v7") != NULL);
    tpu_report_free(r);
    r = check_text(t, "v5e-8");
    REQUIRE(r);
    CHECK(strstr(tpu_report_verdict(r), "TPU v5e") != NULL);
    tpu_report_free(r);
    /* unknown generations are refused */
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    REQUIRE_OK(ctx, tpu_module_parse(ctx, t, strlen(t), "k.hlo", &m));
    tpu_report *bad = NULL;
    CHECK_EQ_INT(tpu_check(ctx, m, "v9", &bad), TPU_ERR_INVALID);
    CHECK(bad == NULL);
    CHECK(strstr(tpu_errmsg(ctx), "unknown TPU generation 'v9'") != NULL);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

TEST(check_lists_every_problem_with_json)
{
    /* an elided constant (note), a shape error, two dynamic shapes, a host transfer (note) */
    const char *t = "HloModule t\nFileNames\n1 \"src.py\"\nFunctionNames\n1 \"f\"\nFileLocations\n"
                    "1 {file_name_id=1 function_name_id=1 line=77 end_line=77 column=1 end_column=2}\n"
                    "StackFrames\n1 {file_location_id=1 parent_frame_id=0}\n\n"
                    "ENTRY e {\n  c = f32[64,64] constant({...})\n  x = f32[64,64] negate(c), metadata={stack_frame_id=1}\n"
                    "  y = f32[64,32] exponential(x)\n  d = f32[<=8] parameter(0)\n  n = f32[<=8] negate(d)\n"
                    "  tok = token[] after-all()\n  s = (f32[64,64], u32[], token[]) send(x, tok), channel_id=1, "
                    "is_host_transfer=true\n  ROOT r = tuple(y, n)\n}\n";
    tpu_report *r = check_text(t, NULL);
    REQUIRE(r);
    CHECK_EQ_INT(r->nerrors, 1);     /* y's shape */
    CHECK_EQ_INT(r->nwarnings, 3);   /* d, n, and the tuple holding a bounded dynamic shape */
    CHECK_EQ_INT(r->nnotes, 2);
    CHECK_EQ_INT(tpu_report_num_problems(r), 4);
    const char *s = tpu_report_text(r);
    CHECK_MSG(strstr(s, "k.hlo:14:3: %y (exponential): exponential: declared shape f32[64,32]"), "%s", s);
    CHECK(strstr(s, "[dynamic shape] 3") != NULL);
    CHECK(strstr(s, "[elided constant] 1") != NULL);
    CHECK(strstr(s, "not run") != NULL);
    CHECK(strstr(s, "verdict: NOT COMPATIBLE with a TPU: 1 error, 3 warnings, 2 notes") != NULL);
    const char *j = tpu_report_json(r);
    CHECK(strstr(j, "\"compatible\":false,\"errors\":1,\"warnings\":3,\"notes\":2") != NULL);
    CHECK(strstr(j, "\"where\":\"k.hlo:14:3\",\"instruction\":\"y\",\"opcode\":\"exponential\"") != NULL);
    CHECK(strstr(j, "\"verdict\":\"NOT COMPATIBLE") != NULL);
    tpu_report_free(r);
    /* a shape error's source comes from the stack frame when metadata has only stack_frame_id */
    r = check_text("HloModule t\nFileNames\n1 \"src.py\"\nFunctionNames\n1 \"f\"\nFileLocations\n"
                   "1 {file_name_id=1 function_name_id=1 line=77 end_line=77 column=1 end_column=2}\n"
                   "StackFrames\n1 {file_location_id=1 parent_frame_id=0}\n\nENTRY e {\n  p = f32[2] parameter(0)\n"
                   "  ROOT x = f32[3] negate(p), metadata={op_name=\"neg\" stack_frame_id=1}\n}\n", NULL);
    REQUIRE(r);
    CHECK_MSG(strstr(tpu_report_text(r), "op_name=\"neg\" at src.py:77"), "%s", tpu_report_text(r));
    tpu_report_free(r);
}

TEST(check_gpu_program_flagged)
{
    tpu_report *r = check_file("hlo/hlo_llama31_8b_bf16_1x8.hlo", NULL, 0);
    if (!r) return;
    /* exported for GPU: TransformerEngine fused-attention kernels */
    CHECK(!tpu_report_compatible(r));
    CHECK(count_category(r, "custom-call", VER_ERROR) > 0);
    CHECK_EQ_INT(count_category(r, "shape", VER_ERROR), 0);
    tpu_report_free(r);
}

/* Programs the TPU compiler optimized (libtpu's own output, tests/reference/hlo/NAME.opt.hlo) check clean: its
 * bf16 copies of f32 values, selects of mixed float branches and internal custom-calls (ConcatBitcast,
 * AllocateBuffer, AssumeGatherIndicesInBound) are how XLA:TPU writes programs, not errors. */
TEST(check_tpu_compiled_programs_compatible)
{
    static const char *const progs[] = {"cnn_nchw_train", "conv_small_features", "embedding", "mlp_train_bf16.v5e",
                                        "scan_rnn", "transformer_train_bf16"};
    for (size_t i = 0; i < sizeof progs / sizeof *progs; i++) {
        char path[256];
        snprintf(path, sizeof path, "tests/reference/hlo/%s.opt.hlo", progs[i]);
        tpu_ctx *ctx = tpu_ctx_new();
        tpu_module *m = NULL;
        tpu_report *r = NULL;
        CHECK_MSG(tpu_module_load(ctx, path, &m) == TPU_OK, "%s: %s", path, tpu_errmsg(ctx));
        if (m) CHECK_MSG(tpu_check(ctx, m, "v5e", &r) == TPU_OK, "%s: %s", path, tpu_errmsg(ctx));
        if (r) CHECK_MSG(r->nerrors == 0 && r->nwarnings == 0, "%s: %s", path, tpu_report_text(r));
        tpu_report_free(r);
        tpu_module_free(m);
        tpu_ctx_free(ctx);
    }
}

/* Mixed float precision is the compiler's privilege: the same copy in a program with plain layouts is
 * an error, and a compiled program still gets errors for other mismatches. */
TEST(check_mixed_precision_only_in_compiled_programs)
{
    const char *plain = "HloModule c\nENTRY e {\n  p = f32[8,128]{1,0} parameter(0)\n"
                        "  ROOT c = bf16[8,128]{1,0} copy(p)\n}\n";
    const char *tiled = "HloModule c\nENTRY e {\n  p = f32[8,128]{1,0:T(8,128)} parameter(0)\n"
                        "  q = pred[8,128]{1,0:T(8,128)(4,1)} parameter(1)\n"
                        "  c = bf16[8,128]{1,0:T(8,128)(2,1)} copy(p)\n"
                        "  s = bf16[8,128]{1,0:T(8,128)(2,1)} select(q, c, p)\n"
                        "  ROOT i = s32[8,128]{1,0:T(8,128)} copy(s)\n}\n";
    tpu_report *r = check_text(plain, NULL);
    REQUIRE(r);
    CHECK_EQ_INT(r->nerrors, 1);
    CHECK(strstr(tpu_report_text(r), "element type bf16, expected f32") != NULL);
    tpu_report_free(r);
    r = check_text(tiled, NULL);
    REQUIRE(r);
    CHECK_EQ_INT(r->nerrors, 1);   /* only the s32 copy of a bf16 value */
    CHECK_MSG(strstr(tpu_report_text(r), "k.hlo:7:") != NULL, "%s", tpu_report_text(r));
    tpu_report_free(r);
}
