/* t_memory.c — the compile pipeline's memory model: tiling rules on the design's two example shapes, the
 * out-of-memory report, liveness and aliasing, the JSON form, and the mixed_bfloat16 policy. */
#include "test.h"
#include "compile/compile.h"
#include "compile/memory.h"
#include "test_browser.h"

#include <math.h>
#include <stdlib.h>

static tpu_module *parse(tpu_ctx *ctx, const char *text)
{
    tpu_module *m = NULL;
    if (tpu_module_parse(ctx, text, strlen(text), "test.hlo", &m) != TPU_OK) {
        test_fail(__FILE__, __LINE__, "parse: %s", tpu_errmsg(ctx));
        return NULL;
    }
    return m;
}

static tpu_memory *plan(tpu_ctx *ctx, tpu_module *m, const char *chip, const char *policy)
{
    tpu_memory_opts o = {chip, policy, 10};
    tpu_memory *mem = NULL;
    if (tpu_memory_plan(ctx, m, &o, &mem) != TPU_OK) test_fail(__FILE__, __LINE__, "plan: %s", tpu_errmsg(ctx));
    return mem;
}

/* design §5: s32[29360128,10]{1,0} pads 10 to 128 (12.8x); f32[128,256,896,18]{0,3,2,1} pads 18 to 24 */
TEST(memory_design_example_shapes)
{
    tpu_ctx *ctx = tpu_ctx_new();
    chp_slice s;
    REQUIRE_OK(ctx, cmp_resolve_chip(ctx, "v3-8", &s));
    static const hlo_layout l10 = {.rank = 2, .m2m = {1, 0}};
    hlo_shape a = {.dtype = TPU_S32, .rank = 2, .dims = {29360128, 10}, .layout = &l10};
    CHECK_EQ_INT(cmp_padded_bytes(&s.chip, &a), 15032385536LL);
    CHECK_EQ_INT(cmp_unpadded_bytes(&a), 1174405120LL);
    char buf[32];
    cmp_fmt_bytes(buf, sizeof buf, cmp_padded_bytes(&s.chip, &a));
    CHECK_EQ_STR(buf, "14.00G");
    cmp_fmt_bytes(buf, sizeof buf, cmp_unpadded_bytes(&a));
    CHECK_EQ_STR(buf, "1.09G");
    static const hlo_layout l4 = {.rank = 4, .m2m = {0, 3, 2, 1}};
    hlo_shape b = {.dtype = TPU_F32, .rank = 4, .dims = {128, 256, 896, 18}, .layout = &l4};
    cmp_fmt_bytes(buf, sizeof buf, cmp_padded_bytes(&s.chip, &b));
    CHECK_EQ_STR(buf, "2.62G");
    cmp_fmt_bytes(buf, sizeof buf, cmp_unpadded_bytes(&b));
    CHECK_EQ_STR(buf, "1.97G");
    ut_buf ub;
    ut_buf_init(&ub);
    cmp_print_tiled_shape(&ub, &s.chip, &a);
    CHECK_EQ_STR(ub.data, "s32[29360128,10]{1,0:T(8,128)}");
    ut_buf_free(&ub);
    tpu_ctx_free(ctx);
}

/* A one-hot of 29M labels over 10 classes next to logits of the same shape, in the row-major tiled layout
 * the real report shows (a TPU-compiled program carries its T(8,128) tiles): overflows a v3 core. */
#define OH_T "{1,0:T(8,128)}"
static const char *onehot_hlo =
    "HloModule onehot\n"
    "ENTRY main {\n"
    "  labels = s32[29360128]{0:T(1024)} parameter(0)\n"
    "  logits = s32[29360128,10]" OH_T " parameter(1)\n"
    "  lb = s32[29360128,10]" OH_T " broadcast(labels), dimensions={0}\n"
    "  io = s32[29360128,10]" OH_T " iota(), iota_dimension=1\n"
    "  eq = pred[29360128,10]{1,0:T(8,128)(4,1)} compare(lb, io), direction=EQ\n"
    "  one = s32[] constant(1)\n"
    "  zero = s32[] constant(0)\n"
    "  ones = s32[29360128,10]" OH_T " broadcast(one), dimensions={}\n"
    "  zeros = s32[29360128,10]" OH_T " broadcast(zero), dimensions={}\n"
    "  oh = s32[29360128,10]" OH_T " select(eq, ones, zeros), metadata={op_type=\"OneHot\" op_name=\"model/loss/one_hot\"}\n"
    "  ROOT t = (s32[29360128,10]" OH_T ", s32[29360128,10]" OH_T ") tuple(oh, logits)\n"
    "}\n";

/* The same program as an unoptimized dump writes it (default layouts): the TPU compiler is free to choose,
 * and it picks {0,1} for the one-hot, 10 rows padded to 16 (measured with libtpu: 1.75G, not 14G). */
TEST(memory_unconstrained_onehot_gets_the_compact_layout)
{
    static const char *hlo =
        "HloModule onehot2\n"
        "ENTRY main {\n"
        "  labels = s32[29360128]{0} parameter(0)\n"
        "  lb = s32[29360128,10]{1,0} broadcast(labels), dimensions={0}\n"
        "  io = s32[29360128,10]{1,0} iota(), iota_dimension=1\n"
        "  eq = pred[29360128,10]{1,0} compare(lb, io), direction=EQ\n"
        "  ROOT oh = s32[29360128,10]{1,0} convert(eq)\n"
        "}\n";
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = parse(ctx, hlo);
    REQUIRE(m);
    tpu_memory *mem = plan(ctx, m, "v3-8", NULL);
    REQUIRE(mem);
    CHECK(tpu_memory_fits(mem));
    CHECK(strstr(tpu_memory_report(mem), "Shape: s32[29360128,10]{0,1:T(8,128)}") != NULL);
    CHECK(strstr(tpu_memory_report(mem), "Size: 1.75G") != NULL);
    tpu_memory_free(mem);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

TEST(memory_oom_report_has_the_tpu_shape)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = parse(ctx, onehot_hlo);
    REQUIRE(m);
    tpu_memory *mem = plan(ctx, m, "v3-8", NULL);
    REQUIRE(mem);
    CHECK(!tpu_memory_fits(mem));
    const char *r = tpu_memory_report(mem);
    /* the current compiler's two forms: the framework's exception first, then the compiler's own line */
    CHECK(strstr(r, "RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO temporaries (") == r);
    CHECK(strstr(r, ") exceeds available HBM (15.48G).\n") != NULL);
    CHECK(strstr(r, "\nXLA:TPU compile permanent error. Ran out of memory in memory space hbm. Used ") != NULL);
    CHECK(strstr(r, " of 15.48G hbm. Exceeded hbm capacity by ") != NULL);
    CHECK(strstr(r, "Per device: one TensorCore of v3.") != NULL);
    CHECK(strstr(r, "Total hbm usage >= ") != NULL);
    CHECK(strstr(r, "    reserved ") != NULL);
    CHECK(strstr(r, "Largest program allocations in hbm:\n  1. Size: 14.00G\n") != NULL);
    CHECK(strstr(r, "Operator: op_type=\"OneHot\" op_name=\"model/loss/one_hot\"") != NULL);
    CHECK(strstr(r, "Shape: s32[29360128,10]{1,0:T(8,128)}") != NULL);
    CHECK(strstr(r, "Unpadded size: 1.09G") != NULL);
    CHECK(strstr(r, "Extra memory due to padding: 12.91G (12.8x expansion)") != NULL);
    CHECK(strstr(r, "Allocation type: Output") != NULL);
    /* the same program fits a v5p core (95 GiB) */
    tpu_memory *big = plan(ctx, m, "v5p-8", NULL);
    REQUIRE(big);
    CHECK(tpu_memory_fits(big));
    tpu_memory_free(big);
    tpu_memory_free(mem);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* Liveness: a chain a -> b -> c of 1 MiB buffers (fusion is blocked by a custom-call-free unfusible op:
 * sort) keeps at most two alive at a time. */
TEST(memory_liveness_frees_dead_buffers)
{
    static const char *hlo =
        "HloModule chain\n"
        "lt { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT c = pred[] compare(a, b), direction=LT }\n"
        "ENTRY main {\n"
        "  p = f32[512,512]{1,0} parameter(0)\n"
        "  s1 = f32[512,512]{1,0} sort(p), dimensions={1}, to_apply=lt\n"
        "  s2 = f32[512,512]{1,0} sort(s1), dimensions={1}, to_apply=lt\n"
        "  s3 = f32[512,512]{1,0} sort(s2), dimensions={1}, to_apply=lt\n"
        "  ROOT s4 = f32[512,512]{1,0} sort(s3), dimensions={1}, to_apply=lt\n"
        "}\n";
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = parse(ctx, hlo);
    REQUIRE(m);
    tpu_memory *mem = plan(ctx, m, "v4-8", NULL);
    REQUIRE(mem);
    /* argument 1 MiB; program: two 1 MiB buffers live at once (input and output of each sort); plus the
     * comparator's three scalars per sort, each a 1 KiB thread-local allocation on v4 */
    CHECK_EQ_INT(tpu_memory_peak_bytes(mem), (3 << 20) + 4 * 3 * 1024);
    tpu_memory_free(mem);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* Aliasing: get-tuple-element, tuple and bitcast share buffers; a while loop updates its state in place;
 * a donated argument (input_output_alias) holds the output. */
TEST(memory_aliasing)
{
    static const char *hlo =
        "HloModule alias, input_output_alias={ {0}: (0, {}, may-alias) }\n"
        "lt { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT c = pred[] compare(a, b), direction=LT }\n"
        "cond { s = (s32[], f32[1024,256]) parameter(0)\n i = s32[] get-tuple-element(s), index=0\n"
        "  n = s32[] constant(3)\n ROOT c = pred[] compare(i, n), direction=LT }\n"
        "body { s = (s32[], f32[1024,256]) parameter(0)\n i = s32[] get-tuple-element(s), index=0\n"
        "  x = f32[1024,256] get-tuple-element(s), index=1\n one = s32[] constant(1)\n i2 = s32[] add(i, one)\n"
        "  y = f32[1024,256] sort(x), dimensions={1}, to_apply=lt\n ROOT t = (s32[], f32[1024,256]) tuple(i2, y) }\n"
        "ENTRY main {\n"
        "  p = f32[1024,256]{1,0} parameter(0)\n"
        "  z = s32[] constant(0)\n"
        "  t = (s32[], f32[1024,256]) tuple(z, p)\n"
        "  w = (s32[], f32[1024,256]) while(t), condition=cond, body=body\n"
        "  r = f32[1024,256] get-tuple-element(w), index=1\n"
        "  ROOT out = (f32[1024,256]) tuple(r)\n"
        "}\n";
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = parse(ctx, hlo);
    REQUIRE(m);
    chp_slice s;
    REQUIRE_OK(ctx, cmp_resolve_chip(ctx, "v4-8", &s));
    cmp_program *p = NULL;
    REQUIRE_OK(ctx, cmp_compile(ctx, m, &s.chip, NULL, &p));
    /* the loop state and the output are the argument's buffer: no output allocation */
    CHECK_EQ_INT(p->args_padded, 1 << 20);
    CHECK_EQ_INT(p->outputs_padded, 0);
    /* the body's sort needs its own 1 MiB buffer while the loop runs */
    CHECK(p->entry->peak >= 1 << 20);
    CHECK(p->entry->peak <= (2 << 20) + 4096);
    cmp_program_free(p);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

TEST(memory_json_fields)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = parse(ctx, onehot_hlo);
    REQUIRE(m);
    tpu_memory *mem = plan(ctx, m, "v3-8", NULL);
    REQUIRE(mem);
    const char *j = tpu_memory_json(mem);
    REQUIRE(j);
    const char *keys[] = {"\"peak_bytes\"", "\"hbm_capacity_bytes\"", "\"padded_bytes\"", "\"unpadded_bytes\"",
                          "\"fits\":\tfalse", "\"largest\"", "\"shape\":\t\"s32[29360128,10]{1,0:T(8,128)}\"",
                          "\"op_name\":\t\"model/loss/one_hot\""};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) CHECK_MSG(strstr(j, keys[i]) != NULL, "JSON lacks %s", keys[i]);
    tpu_memory_free(mem);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* mixed_bfloat16 on a real train step: the rewritten program verifies, keeps its signature, needs less
 * memory, and computes nearly what the f32 program does. */
TEST(memory_policy_mixed_bfloat16)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL, *r = NULL;
    REQUIRE_OK(ctx, tpu_module_load(ctx, "tests/conformance/cases/mlp_train_sgd/program.hlo", &m));
    REQUIRE_OK(ctx, tpu_module_apply_policy(ctx, m, "mixed_bfloat16", &r));
    char *text = NULL;
    REQUIRE_OK(ctx, tpu_module_to_string(ctx, r, &text));
    CHECK(strstr(text, "bf16[") != NULL);
    tpu_free(text);
    /* same signature */
    CHECK_EQ_INT(tpu_module_num_params(r), tpu_module_num_params(m));
    tpu_memory *a = plan(ctx, m, "v5e", NULL), *b = plan(ctx, m, "v5e", "mixed_bfloat16");
    REQUIRE(a && b);
    /* (libtpu compiles this step and its bf16-compute form for v5e to 276.5 and 260.5 KiB of HBM: both prefetch
     * the same 8 arguments, one table each; tpusim's tables follow the arguments prefetched, not its prefetch
     * windows, of which the bf16 form has more) */
    CHECK_MSG(tpu_memory_peak_bytes(b) <= tpu_memory_peak_bytes(a), "mixed policy uses more: %lld > %lld",
              (long long)tpu_memory_peak_bytes(b), (long long)tpu_memory_peak_bytes(a));
    /* run both on the same inputs: same output types, values within bf16 accuracy */
    tpu_tensor **ins = NULL, **o1 = NULL, **o2 = NULL;
    int nin = 0, n1 = 0, n2 = 0;
    REQUIRE_OK(ctx, tpu_random_inputs(ctx, m, 5, &ins, &nin));
    tpu_run_opts opts = tpu_run_opts_default();
    REQUIRE_OK(ctx, tpu_run(ctx, m, &opts, ins, nin, &o1, &n1));
    REQUIRE_OK(ctx, tpu_run(ctx, r, &opts, ins, nin, &o2, &n2));
    CHECK_EQ_INT(n1, n2);
    for (int i = 0; i < n1 && i < n2; i++) {
        CHECK_EQ_INT(tpu_tensor_dtype(o1[i]), tpu_tensor_dtype(o2[i]));
        double worst = 0, scale = 0;
        for (int64_t k = 0; k < tpu_tensor_count(o1[i]); k++) {
            double x = tpu_tensor_get_f64(o1[i], k), y = tpu_tensor_get_f64(o2[i], k);
            if (fabs(x - y) > worst) worst = fabs(x - y);
            if (fabs(x) > scale) scale = fabs(x);
        }
        CHECK_MSG(worst <= 0.05 * (scale > 1 ? scale : 1), "output %d differs by %g (scale %g)", i, worst, scale);
    }
    tpu_tensors_free(ins, nin);
    tpu_tensors_free(o1, n1);
    tpu_tensors_free(o2, n2);
    tpu_memory_free(a);
    tpu_memory_free(b);
    tpu_module_free(r);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* Every corpus program gets a memory report; the Llama train step is planned quickly (timed by the CLI
 * test, not here). */
TEST(memory_every_corpus_program)
{
    const char *files[] = {"hlo/mobilenet_v2.hlo", "hlo/hlo_llama31_8b_bf16_1x8.hlo",
                           "hlo/nv_maxtext_1n1g_jit_train_step_before_optimization.hlo"};
    tpu_ctx *ctx = tpu_ctx_new();
    int seen = 0;
    for (int i = 0; i < 3; i++) {
        const char *p = test_corpus(files[i]);
        if (!p) continue;
        seen++;
        tpu_module *m = NULL;
        REQUIRE_OK(ctx, tpu_module_load(ctx, p, &m));
        tpu_memory *mem = plan(ctx, m, "v4-8", NULL);
        CHECK_MSG(mem != NULL, "%s", p);
        if (mem) CHECK(tpu_memory_peak_bytes(mem) > 0);
        tpu_memory_free(mem);
        tpu_module_free(m);
    }
    tpu_ctx_free(ctx);
    if (!seen) test_skip("../shared/corpus absent");
}

/* The memory viewer as a person sees it: the HTML page rendered by headless Chromium. The program keeps
 * 2x-padded f32[64,64,64] temporaries alive (64 lanes of 128), so the picture has an unpadded (dark blue)
 * and a padding (light blue) area of similar size over the arguments' grey floor, and the largest buffers
 * as coloured bars. */
TEST(memory_viewer_in_headless_chromium)
{
    const char *chrome = test_find_chromium();
    if (!chrome) {
        test_skip("no chromium on PATH (install it with scripts/deps.sh, or set TPUSIM_CHROMIUM)");
        return;
    }
    const char *hlo = "HloModule viewer\nENTRY e {\n  x = f32[64,64,64]{2,1,0} parameter(0)\n"
                      "  a = f32[64,64,64]{2,1,0} exponential(x)\n  b = f32[64,64,64]{2,1,0} sine(x)\n"
                      "  c = f32[64,64,64]{2,1,0} cosine(x)\n  d = f32[64,64,64]{2,1,0} log(a)\n"
                      "  s = f32[64,64,64]{2,1,0} add(b, c)\n  t = f32[64,64,64]{2,1,0} multiply(s, d)\n"
                      "  u = f32[64,64,64]{2,1,0} tanh(t)\n  ROOT r = (f32[64,64,64]{2,1,0}, f32[64,64,64]{2,1,0}) tuple(u, a)\n}\n";
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = parse(ctx, hlo);
    REQUIRE(m);
    tpu_memory *mem = plan(ctx, m, "v3-8", NULL);
    REQUIRE(mem);
    char html[256], png[256], dom[256], prof[256], cmd[2048];
    test_tmp_path(html, sizeof html, "memory.html");
    test_tmp_path(png, sizeof png, "memory.png");
    test_tmp_path(dom, sizeof dom, "memory-dom.html");
    test_tmp_path(prof, sizeof prof, "memory-chrome");
    REQUIRE_OK(ctx, tpu_memory_write_html(ctx, mem, html));
    const char *flags = "--headless --no-sandbox --disable-gpu --no-first-run --no-default-browser-check --hide-scrollbars "
                        "--disable-extensions --disable-dev-shm-usage";
    snprintf(cmd, sizeof cmd, "timeout 60 '%s' %s --user-data-dir='%s' --dump-dom 'file://%s' > '%s' 2>/dev/null", chrome, flags,
             prof, html, dom);
    int rc = system(cmd);
    char *d = test_slurp(dom, NULL);
    CHECK_MSG(rc == 0 && d, "chromium --dump-dom failed (%d): %s", rc, cmd);
    if (d) {
        CHECK(strstr(d, "<svg") && strstr(d, "Largest buffers") && strstr(d, "peak "));
        CHECK(strstr(d, "far above this chart") != NULL);   /* 8M of 16G: the axis fits the program */
        CHECK(strstr(d, "f32[64,64,64]{2,1,0:T(8,128)}") != NULL);
        free(d);
    }
    snprintf(cmd, sizeof cmd, "timeout 60 '%s' %s --user-data-dir='%s' --window-size=1200,1000 --screenshot='%s' 'file://%s' "
             ">/dev/null 2>&1", chrome, flags, prof, png, html);
    rc = system(cmd);
    size_t n = 0;
    unsigned char *data = (unsigned char *)test_slurp(png, &n), *rgb = NULL;
    CHECK_MSG(rc == 0 && data, "chromium --screenshot failed (%d): %s", rc, cmd);
    int w = 0, h = 0;
    if (data) {
        CHECK_MSG(test_png_decode(data, n, &w, &h, &rgb) == 0, "screenshot is not a PNG this test can read");
        free(data);
    }
    if (rgb) {
        long total = (long)w * h;
        long white = test_pixels_near(rgb, w, h, 0xffffff, 2);
        long unpadded = test_pixels_near(rgb, w, h, 0x1f77b4, 8), padding = test_pixels_near(rgb, w, h, 0xaec7e8, 8);
        long floor = test_pixels_near(rgb, w, h, 0xc7c7c7, 6), bar = test_pixels_near(rgb, w, h, 0xe45756, 30);
        CHECK_MSG(white < total * 0.97, "the page is blank (%ld of %ld pixels white)", white, total);
        CHECK_MSG(unpadded > 10000 && padding > 10000, "data %ld and padding %ld pixels", unpadded, padding);
        /* 2x padding: the two areas are of the same order */
        CHECK_MSG(padding > unpadded / 4 && unpadded > padding / 4, "data %ld vs padding %ld pixels", unpadded, padding);
        CHECK_MSG(floor > 2000, "argument floor: %ld grey pixels", floor);
        CHECK_MSG(bar > 300, "largest-buffer bar: %ld red pixels", bar);
        free(rgb);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s' '%s' '%s'", html, png, dom, prof);
    if (system(cmd) != 0) fprintf(stderr, "  note: could not remove %s\n", prof);
    tpu_memory_free(mem);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* Peak bytes of an HLO text planned for a chip (MiB). */
static double peak_mib(const char *hlo, const char *chip)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = parse(ctx, hlo);
    tpu_memory *mem = m ? plan(ctx, m, chip, NULL) : NULL;
    double r = mem ? (double)tpu_memory_peak_bytes(mem) / (1 << 20) : -1;
    tpu_memory_free(mem);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
    return r;
}

/* MiB of temporaries the plan keeps in VMEM (the JSON's vmem_temp_bytes). */
static double vmem_mib(const char *hlo, const char *chip)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = parse(ctx, hlo);
    tpu_memory *mem = m ? plan(ctx, m, chip, NULL) : NULL;
    const char *j = mem ? tpu_memory_json(mem) : NULL, *k = j ? strstr(j, "\"vmem_temp_bytes\"") : NULL;
    double r = k && strchr(k, ':') ? strtod(strchr(k, ':') + 1, NULL) / (1 << 20) : -1;
    tpu_memory_free(mem);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
    return r;
}

/* MiB of n tuple index tables at the top of the HBM heap on v5e and later: each argument prefetched into VMEM is
 * an async copy whose table (512 B on v5e, 32 B on v6e and v7) libtpu keeps in a 16 KiB heap slot of its own for
 * the whole program, so n of them above the heap's other buffers raise its top by n - 1 slots and one table
 * (compile.c, cmp_tuple_tables). The checks below that moved when tpusim added them name the arguments
 * prefetched. */
static double tables_mib(int n, const char *chip)
{
    return n ? ((n - 1) * 16384.0 + (strcmp(chip, "v5e") ? 32 : 512)) / (1 << 20) : 0;
}

/* src with its first `from` replaced by `to`, into dst; 0 if src has no `from` */
static int text_replace(char *dst, size_t n, const char *src, const char *from, const char *to)
{
    const char *at = strstr(src, from);
    if (!at) return 0;
    snprintf(dst, n, "%.*s%s%s", (int)(at - src), src, to, at + strlen(from));
    return 1;
}

/* Three bf16 layers as in mlp_infer_bf16: w2 (32 MiB), the largest argument only matmuls read, is the
 * cross-program prefetch, in VMEM from the start until its reader. */
static const char *mlp3 =
    "HloModule mlp3\n"
    "ENTRY main {\n"
    "  x = bf16[8192,1024]{1,0} parameter(0)\n"
    "  w1 = bf16[1024,4096]{1,0} parameter(1)\n"
    "  w2 = bf16[4096,4096]{1,0} parameter(2)\n"
    "  w3 = bf16[4096,1024]{1,0} parameter(3)\n"
    "  h1 = bf16[8192,4096]{1,0} dot(x, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
    "  h2 = bf16[8192,4096]{1,0} dot(h1, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
    "  ROOT o = bf16[8192,1024]{1,0} dot(h2, w3), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
    "}\n";

/* Memory-space assignment (v5e and later) gives a temporary whose producer and readers are all compute-bound
 * matmuls (MXU time over their HBM time) what VMEM the others leave (MSA's benefit of it is negative). Alone
 * (fat) h takes VMEM on v5e; on v6e (95.9 MiB) the cross-program prefetch of a, b's prefetch and h would take
 * 96 MiB (three 32 MiB values do not fit there: libtpu's batchnorm_nchw_train), so h is in HBM. In mlp3 the
 * cross-program prefetch of w2 and the prefetches leave no room for the 64 MiB activations, which stay in HBM
 * as mlp_infer_bf16's do in libtpu's programs. A thin contraction (memory-bound) keeps its 32 MiB temporary
 * in VMEM. */
TEST(memory_vmem_compute_bound_temporaries_come_last)
{
    static const char *fat =
        "HloModule fat\n"
        "ENTRY main {\n"
        "  a = bf16[4096,4096]{1,0} parameter(0)\n"
        "  b = bf16[4096,4096]{1,0} parameter(1)\n"
        "  h = bf16[4096,4096]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "  ROOT o = bf16[4096,4096]{1,0} dot(h, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "}\n";
    static const char *thin =
        "HloModule thin\n"
        "ENTRY main {\n"
        "  a = bf16[4096,128]{1,0} parameter(0)\n"
        "  b = bf16[128,4096]{1,0} parameter(1)\n"
        "  c = bf16[4096,128]{1,0} parameter(2)\n"
        "  h = bf16[4096,4096]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "  ROOT o = bf16[4096,128]{1,0} dot(h, c), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "}\n";
    /* arguments 64 MiB + output 32, h in VMEM; b prefetched for the second matmul (one table) */
    CHECK(fabs(peak_mib(fat, "v5e") - (96 + tables_mib(1, "v5e"))) < 1e-9);
    CHECK(fabs(peak_mib(fat, "v6e") - (128 + tables_mib(1, "v6e"))) < 1e-9);
    /* arguments 64 MiB + h1 and h2 (64 each, both alive at the second layer) in HBM; w2 and w3 prefetched */
    CHECK(fabs(peak_mib(mlp3, "v5e") - (192 + tables_mib(2, "v5e"))) < 1e-9);
    CHECK(fabs(peak_mib(mlp3, "v6e") - (192 + tables_mib(2, "v6e"))) < 1e-9);
    CHECK(fabs(vmem_mib(mlp3, "v5e")) < 1e-9);
    CHECK(fabs(vmem_mib(mlp3, "v6e")) < 1e-9);
    /* arguments 3 MiB + output 1: h in VMEM; c prefetched */
    CHECK(fabs(peak_mib(thin, "v5e") - (4 + tables_mib(1, "v5e"))) < 1e-9);
}

/* MSA's benefit counts the bytes each use moves, as XLA's cost analysis does: the gather reads 8 MiB of rows of
 * the 48.8 MiB table t, the scatter in place reads and writes its 8 MiB of updates of the zero table zt, and the
 * fill writing zt moves nothing (XLA fuses it into the scatter). Both then have the same benefit (8 MiB and the
 * update's 48.8 MiB read) and t's prefetch goes first among equals: on v6e (95.9 MiB) zt no longer fits and stays
 * in HBM, as the scatter's table does in libtpu's embedding_train. Counting whole arrays would put zt (written,
 * updated and read: three uses) in VMEM instead (57 MiB of VMEM temporaries, peak 98 MiB). */
TEST(memory_vmem_benefit_counts_bytes_accessed)
{
    static const char *emb =
        "HloModule emb\n"
        "add {\n  p = f32[] parameter(0)\n  q = f32[] parameter(1)\n  ROOT s = f32[] add(p, q)\n}\n"
        "ENTRY main {\n"
        "  t = f32[100000,128]{1,0} parameter(0)\n"
        "  i = s32[16384,1]{1,0} parameter(1)\n"
        "  g = f32[16384,128]{1,0} gather(t, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, "
        "index_vector_dim=1, slice_sizes={1,128}\n"
        "  gg = f32[16384,128]{1,0} multiply(g, g)\n"
        "  z = f32[] constant(0)\n"
        "  zt = f32[100000,128]{1,0} broadcast(z), dimensions={}\n"
        "  sc = f32[100000,128]{1,0} scatter(zt, i, gg), update_window_dims={1}, inserted_window_dims={0}, "
        "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add\n"
        "  c = f32[] constant(0.01)\n"
        "  cb = f32[100000,128]{1,0} broadcast(c), dimensions={}\n"
        "  m = f32[100000,128]{1,0} multiply(sc, cb)\n"
        "  ROOT o = f32[100000,128]{1,0} subtract(t, m)\n"
        "}\n";
    CHECK(fabs(vmem_mib(emb, "v6e") - 8) < 0.1);   /* the gathered rows only */
    CHECK(peak_mib(emb, "v6e") > 146);             /* t, zt and the output in HBM */
}

/* Whether a matmul is compute-bound counts everything its op reads and writes, as MSA's cost analysis times a
 * fusion: in mlp3 every op is compute-bound, but adding to h2 four 64 MiB slices of a 256 MiB argument (too
 * large to prefetch) makes the second layer's op memory-bound, and a 64 MiB activation gets VMEM. */
TEST(memory_vmem_compute_bound_counts_the_whole_op)
{
    static const char *epi =
        "HloModule mlp3e\n"
        "ENTRY main {\n"
        "  x = bf16[8192,1024]{1,0} parameter(0)\n"
        "  w1 = bf16[1024,4096]{1,0} parameter(1)\n"
        "  w2 = bf16[4096,4096]{1,0} parameter(2)\n"
        "  w3 = bf16[4096,1024]{1,0} parameter(3)\n"
        "  e = bf16[8192,16384]{1,0} parameter(4)\n"
        "  h1 = bf16[8192,4096]{1,0} dot(x, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "  d2 = bf16[8192,4096]{1,0} dot(h1, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "  e1 = bf16[8192,4096]{1,0} slice(e), slice={[0:8192], [0:4096]}\n"
        "  e2 = bf16[8192,4096]{1,0} slice(e), slice={[0:8192], [4096:8192]}\n"
        "  e3 = bf16[8192,4096]{1,0} slice(e), slice={[0:8192], [8192:12288]}\n"
        "  e4 = bf16[8192,4096]{1,0} slice(e), slice={[0:8192], [12288:16384]}\n"
        "  s1 = bf16[8192,4096]{1,0} add(d2, e1)\n"
        "  s2 = bf16[8192,4096]{1,0} add(s1, e2)\n"
        "  s3 = bf16[8192,4096]{1,0} add(s2, e3)\n"
        "  h2 = bf16[8192,4096]{1,0} add(s3, e4)\n"
        "  ROOT o = bf16[8192,1024]{1,0} dot(h2, w3), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "}\n";
    CHECK(fabs(vmem_mib(mlp3, "v6e")) < 1e-9);
    CHECK(fabs(vmem_mib(epi, "v6e") - 64) < 1e-9);
}

/* Argument prefetches compete with temporaries in MSA's order: b (64 MiB), read by the last op, could be copied
 * in behind the reduction of c (as long as the copy), but its one read ranks below the 64 MiB matmul result t
 * (written by a memory-bound matmul and read twice), so on v5e (112 MiB) t takes VMEM and b's copy no longer
 * fits beside it (no prefetch, no tuple table). With c small nothing hides the copy that late either. */
TEST(memory_vmem_argument_prefetch_takes_room)
{
    static const char *hidden =
        "HloModule p\n"
        "add {\n  p = f32[] parameter(0)\n  q = f32[] parameter(1)\n  ROOT s = f32[] add(p, q)\n}\n"
        "ENTRY main {\n"
        "  x = f32[4096,128]{1,0} parameter(0)\n"
        "  y = f32[128,4096]{1,0} parameter(1)\n"
        "  b = f32[4096,4096]{1,0} parameter(2)\n"
        "  c = f32[4096,4096]{1,0} parameter(3)\n"
        "  t = f32[4096,4096]{1,0} dot(x, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "  z = f32[] constant(0)\n"
        "  r1 = f32[4096]{0} reduce(t, z), dimensions={1}, to_apply=add\n"
        "  r1b = f32[4096,4096]{1,0} broadcast(r1), dimensions={0}\n"
        "  r = f32[4096]{0} reduce(c, z), dimensions={1}, to_apply=add\n"
        "  rb = f32[4096,4096]{1,0} broadcast(r), dimensions={0}\n"
        "  s = f32[4096,4096]{1,0} add(t, b)\n"
        "  s2 = f32[4096,4096]{1,0} add(s, r1b)\n"
        "  ROOT o = f32[4096,4096]{1,0} add(s2, rb)\n"
        "}\n";
    char small[2048];
    REQUIRE(text_replace(small, sizeof small, hidden, "c = f32[4096,4096]", "c = f32[4096,8]"));
    CHECK(fabs(vmem_mib(hidden, "v5e") - 64) < 1);
    CHECK(fabs(vmem_mib(small, "v5e") - 64) < 1);
    CHECK(vmem_mib(hidden, "v3") == 0);
    /* arguments 132 MiB and the output 64 MiB; t in VMEM */
    CHECK(fabs(peak_mib(hidden, "v5e") - 196) < 1e-9);
}

/* MSA's order: a buffer's benefit (per use, the HBM time of the bytes a memory-bound op moves of it) over the
 * square root of its size favours large buffers read far apart over short ones. b (64 MiB f32, written by a
 * thin memory-bound matmul, read by the next op and by the last) and s (56 MiB, stored bf16, written and read
 * by two thin matmuls over 3 positions) do not both fit in v5e's 112 MiB: MSA's benefit puts b there
 * (3 x 64 / sqrt(64) = 24 against 3 x 56 / sqrt(56) = 22.4) and s in HBM, where reads per live position would
 * have chosen s (3/3 against 3/5), as vit_patch_train on v5e shows libtpu does not. */
TEST(memory_vmem_msa_benefit_order)
{
    static const char *ord =
        "HloModule ord\n"
        "add {\n  p = f32[] parameter(0)\n  q = f32[] parameter(1)\n  ROOT s = f32[] add(p, q)\n}\n"
        "ENTRY main {\n"
        "  x = f32[4096,128]{1,0} parameter(0)\n"
        "  y = f32[128,4096]{1,0} parameter(1)\n"
        "  u = f32[4096,128]{1,0} parameter(2)\n"
        "  v = f32[128,7168]{1,0} parameter(3)\n"
        "  w = f32[7168,128]{1,0} parameter(4)\n"
        "  b = f32[4096,4096]{1,0} dot(x, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "  z = f32[] constant(0)\n"
        "  r1 = f32[4096]{0} reduce(b, z), dimensions={1}, to_apply=add\n"
        "  s = f32[4096,7168]{1,0} dot(u, v), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "  d1 = f32[4096,128]{1,0} dot(s, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "  d2 = f32[128,7168]{1,0} dot(u, s), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
        "  e1 = f32[] reduce(d1, z), dimensions={0,1}, to_apply=add\n"
        "  e2 = f32[] reduce(d2, z), dimensions={0,1}, to_apply=add\n"
        "  e = f32[] add(e1, e2)\n"
        "  eb = f32[4096]{0} broadcast(e), dimensions={}\n"
        "  t = f32[4096]{0} add(r1, eb)\n"
        "  tb = f32[4096,4096]{1,0} broadcast(t), dimensions={0}\n"
        "  ROOT o = f32[4096,4096]{1,0} add(b, tb)\n"
        "}\n";
    CHECK(fabs(vmem_mib(ord, "v5e") - 64) < 0.1);   /* b and small values; s (56 MiB) in HBM */
}

/* An elementwise value two matmuls read, combining two full-size arrays, is written once (8 MiB) on v3;
 * v5e recomputes it in both matmuls (chip mxu_recompute_operands). Of one full-size array (a GELU-like
 * s * tanh(s)) it is recomputed everywhere. */
TEST(memory_operand_of_two_matmuls_written_once)
{
    static const char *two =
        "HloModule two\n"
        "ENTRY main {\n"
        "  q = bf16[2048,128]{1,0} parameter(0)\n"
        "  k = bf16[2048,128]{1,0} parameter(1)\n"
        "  s = bf16[2048,2048]{1,0} parameter(2)\n"
        "  p = bf16[2048,2048]{1,0} parameter(3)\n"
        "  d = bf16[2048,2048]{1,0} multiply(s, p)\n"
        "  dq = bf16[2048,128]{1,0} dot(d, k), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "  dk = bf16[2048,128]{1,0} dot(d, q), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
        "  ROOT t = (bf16[2048,128]{1,0}, bf16[2048,128]{1,0}) tuple(dq, dk)\n"
        "}\n";
    static const char *one =
        "HloModule one\n"
        "ENTRY main {\n"
        "  q = bf16[2048,128]{1,0} parameter(0)\n"
        "  k = bf16[2048,128]{1,0} parameter(1)\n"
        "  s = bf16[2048,2048]{1,0} parameter(2)\n"
        "  t = bf16[2048,2048]{1,0} tanh(s)\n"
        "  d = bf16[2048,2048]{1,0} multiply(s, t)\n"
        "  dq = bf16[2048,128]{1,0} dot(d, k), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "  dk = bf16[2048,128]{1,0} dot(d, q), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
        "  ROOT r = (bf16[2048,128]{1,0}, bf16[2048,128]{1,0}) tuple(dq, dk)\n"
        "}\n";
    /* arguments 17 MiB, outputs 1 MiB, d 8 MiB; on v5e s, p and q are prefetched (three tables) */
    CHECK(fabs(peak_mib(two, "v3") - 26) < 1e-9);
    CHECK(fabs(peak_mib(two, "v5e") - (18 + tables_mib(3, "v5e"))) < 1e-9);
    CHECK(fabs(peak_mib(one, "v3") - 10) < 1e-9);
}

/* v6e decides by the width of the reading matmuls: dS·K over heads of 128 columns (under its 256-wide MXU)
 * writes the 128 MiB dS once, as v3 does; with 256 columns it is recomputed in both, as on v5e. The value is
 * larger than v6e's VMEM budget for temporaries (96 MiB), so it lands in HBM when written. */
TEST(memory_operand_of_two_matmuls_by_matmul_width)
{
    char narrow[1024], wide[1024];
    for (int i = 0; i < 2; i++) {
        int w = i ? 256 : 128;
        snprintf(i ? wide : narrow, sizeof narrow,
                 "HloModule two\n"
                 "ENTRY main {\n"
                 "  q = bf16[8192,%d]{1,0} parameter(0)\n"
                 "  k = bf16[8192,%d]{1,0} parameter(1)\n"
                 "  s = bf16[8192,8192]{1,0} parameter(2)\n"
                 "  p = bf16[8192,8192]{1,0} parameter(3)\n"
                 "  d = bf16[8192,8192]{1,0} multiply(s, p)\n"
                 "  dq = bf16[8192,%d]{1,0} dot(d, k), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                 "  dk = bf16[8192,%d]{1,0} dot(d, q), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
                 "  ROOT t = (bf16[8192,%d]{1,0}, bf16[8192,%d]{1,0}) tuple(dq, dk)\n"
                 "}\n", w, w, w, w, w, w);
    }
    /* arguments 256 MiB + q, k; outputs dq, dk; d 128 MiB when written; prefetched: q and k where d is written
     * (the first matmul runs after it), q alone where d is recomputed (k is read by the first op) */
    CHECK(fabs(peak_mib(narrow, "v6e") - (260 + 4 + 128 + tables_mib(2, "v6e"))) < 1e-9);
    CHECK(fabs(peak_mib(wide, "v6e") - (264 + 8 + tables_mib(1, "v6e"))) < 1e-9);
    CHECK(fabs(peak_mib(narrow, "v5e") - (260 + 4 + tables_mib(1, "v5e"))) < 1e-9);
    CHECK(fabs(peak_mib(wide, "v3") - (264 + 8 + 128)) < 1e-9);
    CHECK(fabs(peak_mib(narrow, "v7") - (260 + 4 + 128 + tables_mib(2, "v7"))) < 1e-9);   /* v7 as v6e (256-wide MXU) */
}

/* A stable sort becomes, in libtpu's programs, a sort of the keys and an s32 iota: a tuple result whose index table
 * takes a 16 KiB slot of the HBM heap (rank1_degenerate's buffer assignments on v5e and v6e); tpusim adds it on
 * the chips with memory-space assignment. Alone in the heap beside the output (an allocation outside libtpu's
 * heap) it adds one table: 512 B on v5e, 32 B on v6e. An unstable sort of one operand keeps an array result;
 * v3 has no tables in tpusim. */
TEST(memory_stable_sort_takes_a_tuple_table)
{
    static const char *stable =
        "HloModule s\n"
        "cmp {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT lt = pred[] compare(a, b), direction=LT\n}\n"
        "ENTRY main {\n"
        "  x = f32[1000]{0} parameter(0)\n"
        "  ROOT s = f32[1000]{0} sort(x), dimensions={0}, is_stable=true, to_apply=cmp\n"
        "}\n";
    char unstable[1024];
    REQUIRE(text_replace(unstable, sizeof unstable, stable, ", is_stable=true", ""));
    CHECK(fabs(peak_mib(stable, "v5e") - peak_mib(unstable, "v5e") - tables_mib(1, "v5e")) < 1e-9);
    CHECK(fabs(peak_mib(stable, "v6e") - peak_mib(unstable, "v6e") - tables_mib(1, "v6e")) < 1e-9);
    CHECK(fabs(peak_mib(stable, "v3") - peak_mib(unstable, "v3")) < 1e-9);
}

/* libtpu's HBM heap puts every temporary at a multiple of 16 KiB. A chain of four small matmuls on v3: the
 * output r (4 KiB, an allocation of its own in libtpu: not aligned) goes first, at 0; a (bf16, 2 KiB) also at 0,
 * live before r; b, live with a, at 16 KiB; c, live with b and r, at 32 KiB: a 34 KiB heap (6 KiB unaligned). */
TEST(memory_heap_offsets_are_16k_aligned)
{
    static const char *hlo =
        "HloModule align\n"
        "ENTRY main {\n"
        "  x = f32[8,128]{1,0} parameter(0)\n"
        "  w = f32[128,128]{1,0} parameter(1)\n"
        "  a = f32[8,128]{1,0} dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "  b = f32[8,128]{1,0} dot(a, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "  c = f32[8,128]{1,0} dot(b, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "  ROOT r = f32[8,128]{1,0} dot(c, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "}\n";
    CHECK(fabs(peak_mib(hlo, "v3") * 1024 - (68 + 34)) < 1e-9);   /* arguments 68 KiB + heap */
}

/* A dot whose users are all elementwise members of one loop op heads that op (output fusion): its result
 * is not written to HBM, however many of the op's members read it. */
TEST(memory_dot_heads_the_loop_of_its_elementwise_users)
{
    static const char *hlo =
        "HloModule join\n"
        "ENTRY main {\n"
        "  a = f32[1024,1024]{1,0} parameter(0)\n"
        "  b = f32[1024,1024]{1,0} parameter(1)\n"
        "  x = f32[1024,1024]{1,0} parameter(2)\n"
        "  d = f32[1024,1024]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "  e1 = f32[1024,1024]{1,0} multiply(d, x)\n"
        "  ROOT e2 = f32[1024,1024]{1,0} add(d, e1)\n"
        "}\n";
    CHECK(fabs(peak_mib(hlo, "v3") - 16) < 1e-9);   /* arguments 12 MiB + output 4 */
}

/* A prefix scan along a long minor dimension (cummax over 2048 lanes) copies its operand with that dimension
 * major first: one more operand-sized temporary (8 MiB). A short window does not. Both also hold the
 * reducer's three scalars (1 KiB each on v3). */
TEST(memory_long_prefix_scan_copies_its_operand)
{
    static const char *scan =
        "HloModule scan\n"
        "mx { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT c = f32[] maximum(a, b) }\n"
        "ENTRY main {\n"
        "  x = f32[1024,2048]{1,0} parameter(0)\n"
        "  ninf = f32[] constant(-inf)\n"
        "  ROOT r = f32[1024,2048]{1,0} reduce-window(x, ninf), window={size=1x2048 pad=0_0x2047_0}, to_apply=mx\n"
        "}\n";
    static const char *shrt =
        "HloModule short\n"
        "mx { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT c = f32[] maximum(a, b) }\n"
        "ENTRY main {\n"
        "  x = f32[1024,2048]{1,0} parameter(0)\n"
        "  ninf = f32[] constant(-inf)\n"
        "  ROOT r = f32[1024,2048]{1,0} reduce-window(x, ninf), window={size=1x8 pad=0_0x7_0}, to_apply=mx\n"
        "}\n";
    CHECK(fabs(peak_mib(scan, "v3") - (24 + 3.0 / 1024)) < 1e-9);
    CHECK(fabs(peak_mib(shrt, "v3") - (16 + 3.0 / 1024)) < 1e-9);
}

/* A dot whose users all belong to reductions is computed inside the first of them (a multi-output output
 * fusion, as libtpu fuses layernorm's dY·Wᵀ into the two column sums that are its only readers): no 4 MiB
 * buffer for it. */
TEST(memory_dot_read_only_by_reductions_is_not_written)
{
    static const char *hlo =
        "HloModule red\n"
        "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT c = f32[] add(a, b) }\n"
        "ENTRY main {\n"
        "  a = f32[1024,1024]{1,0} parameter(0)\n"
        "  w = f32[1024,1024]{1,0} parameter(1)\n"
        "  x = f32[1024,1024]{1,0} parameter(2)\n"
        "  z = f32[] constant(0)\n"
        "  d = f32[1024,1024]{1,0} dot(a, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "  m = f32[1024,1024]{1,0} multiply(d, x)\n"
        "  r1 = f32[1024]{0} reduce(m, z), dimensions={0}, to_apply=add\n"
        "  r2 = f32[1024]{0} reduce(d, z), dimensions={0}, to_apply=add\n"
        "  ROOT t = (f32[1024]{0}, f32[1024]{0}) tuple(r1, r2)\n"
        "}\n";
    CHECK(fabs(peak_mib(hlo, "v3") - (12 + 8.0 / 1024)) < 1e-9);   /* arguments 12 MiB + two 4 KiB outputs */
}

/* Program bytes (peak less arguments) of an HLO text planned for a chip. */
static int64_t program_bytes(const char *hlo, const char *chip)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = parse(ctx, hlo);
    tpu_memory *mem = m ? plan(ctx, m, chip, NULL) : NULL;
    tpu_memory_stats st = {0};
    if (mem) tpu_memory_get_stats(mem, &st);
    tpu_memory_free(mem);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
    return mem ? st.peak_bytes - st.argument_bytes : -1;
}

/* An f32 activation read only by a depthwise convolution (groups of one input feature: the vector unit, not
 * the MXU) stays f32; read by an ordinary convolution at default precision it is stored as bf16, the
 * rounding the MXU does anyway. f32[32,56,56,192] is 98 MiB, 49 as bf16. */
TEST(memory_depthwise_convolution_operands_stay_f32)
{
    static const char *dw =
        "HloModule dw\n"
        "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT c = f32[] add(a, b) }\n"
        "ENTRY main {\n"
        "  x = f32[32,56,56,32]{3,2,1,0} parameter(0)\n"
        "  p = f32[1,1,32,192]{3,2,1,0} parameter(1)\n"
        "  w = f32[3,3,1,192]{3,2,1,0} parameter(2)\n"
        "  h = f32[32,56,56,192]{3,2,1,0} convolution(x, p), window={size=1x1}, dim_labels=b01f_01io->b01f\n"
        "  d = f32[32,56,56,192]{3,2,1,0} convolution(h, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, "
        "feature_group_count=192\n"
        "  z = f32[] constant(0)\n"
        "  ROOT r = f32[] reduce(d, z), dimensions={0,1,2,3}, to_apply=add\n"
        "}\n";
    static const char *full =
        "HloModule full\n"
        "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT c = f32[] add(a, b) }\n"
        "ENTRY main {\n"
        "  x = f32[32,56,56,32]{3,2,1,0} parameter(0)\n"
        "  p = f32[1,1,32,192]{3,2,1,0} parameter(1)\n"
        "  w = f32[3,3,192,192]{3,2,1,0} parameter(2)\n"
        "  h = f32[32,56,56,192]{3,2,1,0} convolution(x, p), window={size=1x1}, dim_labels=b01f_01io->b01f\n"
        "  d = f32[32,56,56,192]{3,2,1,0} convolution(h, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f\n"
        "  z = f32[] constant(0)\n"
        "  ROOT r = f32[] reduce(d, z), dimensions={0,1,2,3}, to_apply=add\n"
        "}\n";
    CHECK_EQ_INT(program_bytes(dw, "v3") - program_bytes(full, "v3"), 49 << 20);
}

/* Stored as bf16 through a ReLU-gradient select fused into the convolution reading it (libtpu fuses the select
 * into the gradient's convolution: conv_transpose_train's `convolution_select_fusion`, bf16): g is 8 MiB, not
 * 16. A transposed convolution's result (lhs dilation) stays f32 although a convolution reads it (that
 * program's `fusion.11`, f32 on v3, v5e and v6e): c is 64 MiB, not 32. On v3 every temporary is in HBM. */
TEST(memory_stored_dtype_through_select_not_transposed_conv)
{
    static const char *sel =
        "HloModule sel\n"
        "ENTRY main {\n"
        "  a = f32[8,64,64,128]{3,2,1,0} parameter(0)\n"
        "  k = f32[3,3,128,128]{3,2,1,0} parameter(1)\n"
        "  m = f32[8,64,64,128]{3,2,1,0} parameter(2)\n"
        "  g = f32[8,64,64,128]{3,2,1,0} convolution(a, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f\n"
        "  z = f32[] constant(0)\n"
        "  zb = f32[8,64,64,128]{3,2,1,0} broadcast(z), dimensions={}\n"
        "  p = pred[8,64,64,128]{3,2,1,0} compare(m, zb), direction=GT\n"
        "  s = f32[8,64,64,128]{3,2,1,0} select(p, g, zb)\n"
        "  ROOT r = f32[8,64,64,128]{3,2,1,0} convolution(s, k), window={size=3x3 pad=1_1x1_1}, "
        "dim_labels=b01f_01io->b01f\n"
        "}\n";
    static const char *tc =
        "HloModule tc\n"
        "ENTRY main {\n"
        "  x = f32[8,64,64,128]{3,2,1,0} parameter(0)\n"
        "  w = f32[4,4,128,128]{3,2,1,0} parameter(1)\n"
        "  v = f32[3,3,128,128]{3,2,1,0} parameter(2)\n"
        "  c = f32[8,128,128,128]{3,2,1,0} convolution(x, w), window={size=4x4 pad=2_2x2_2 lhs_dilate=2x2}, "
        "dim_labels=b01f_01io->b01f\n"
        "  ROOT r = f32[8,64,64,128]{3,2,1,0} convolution(c, v), window={size=3x3 stride=2x2 pad=1_1x1_1}, "
        "dim_labels=b01f_01io->b01f\n"
        "}\n";
    /* arguments 32.5625 MiB, output 16, g 8 */
    CHECK(fabs(peak_mib(sel, "v3") - 56.5625) < 1e-9);
    /* arguments 17.5625 MiB, output 16, c 64 */
    CHECK(fabs(peak_mib(tc, "v3") - 97.5625) < 1e-9);
}
