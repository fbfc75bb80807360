/* t_profile.c — the profile's output formats: the JSON object (fields the CLI promises), the Chrome trace
 * (parses as JSON, one track per core, every track has events, times consistent with the step), the HTML
 * report (its charts are there; rendered in headless Chromium, the screenshot shows them), and the what-if
 * pieces of the public API. The Chromium test skips, saying so, when no Chromium is installed. */
#include "test.h"
#include "test_browser.h"
#include "profile/profile.h"

#include <cJSON.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static const char *mlp_hlo =
    "HloModule mlp\n"
    "ENTRY main {\n"
    "  x = bf16[1024,512]{1,0} parameter(0)\n"
    "  w1 = bf16[512,2048]{1,0} parameter(1)\n"
    "  w2 = bf16[2048,256]{1,0} parameter(2)\n"
    "  h = bf16[1024,2048]{1,0} dot(x, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
    "  z = bf16[] constant(0)\n"
    "  zb = bf16[1024,2048]{1,0} broadcast(z), dimensions={}\n"
    "  r = bf16[1024,2048]{1,0} maximum(h, zb)\n"
    "  e = bf16[1024,2048]{1,0} exponential(r)\n"
    "  ROOT y = bf16[1024,256]{1,0} dot(e, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
    "}\n";

static tpu_profile *profile(tpu_ctx *ctx, const char *text, const char *chip, tpu_module **mo, int steps, double rate)
{
    tpu_module *m = NULL;
    if (tpu_module_parse(ctx, text, strlen(text), "t.hlo", &m) != TPU_OK) {
        test_fail(__FILE__, __LINE__, "parse: %s", tpu_errmsg(ctx));
        return NULL;
    }
    tpu_profile_opts o = {0};
    o.chip = chip;
    o.steps = steps;
    o.input_rate = rate;
    tpu_profile *p = NULL;
    if (tpu_profile_program(ctx, m, &o, &p) != TPU_OK) {
        test_fail(__FILE__, __LINE__, "profile: %s", tpu_errmsg(ctx));
        tpu_module_free(m);
        return NULL;
    }
    *mo = m;
    return p;
}

TEST(profile_json_fields)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    tpu_profile *p = profile(ctx, mlp_hlo, "v4-8", &m, 1, 0);
    REQUIRE(p);
    const char *j = tpu_profile_json(p);
    REQUIRE(j);
    cJSON *o = cJSON_Parse(j);
    REQUIRE(o);
    const char *num[] = {"step_time_s", "flops", "mxu_utilization", "hbm_bytes", "device_time_s", "host_time_s",
                         "idle_time_s", "flops_per_s", "peak_flops", "devices", "batch"};
    for (size_t i = 0; i < sizeof num / sizeof *num; i++) {
        cJSON *f = cJSON_GetObjectItemCaseSensitive(o, num[i]);
        CHECK_MSG(cJSON_IsNumber(f), "JSON field %s missing or not a number", num[i]);
    }
    cJSON *bound = cJSON_GetObjectItemCaseSensitive(o, "bound");
    CHECK(cJSON_IsString(bound) && !strcmp(bound->valuestring, tpu_profile_bound(p)));
    CHECK_NEAR(cJSON_GetObjectItemCaseSensitive(o, "step_time_s")->valuedouble, tpu_profile_step_time(p), 1e-15);
    double flops = cJSON_GetObjectItemCaseSensitive(o, "flops")->valuedouble;
    double want = 2.0 * 1024 * 512 * 2048 + 2.0 * 1024 * 2048 * 256;
    CHECK_MSG(flops >= want && flops < want * 1.01, "flops %g, the two matmuls are %g", flops, want);
    cJSON *ops = cJSON_GetObjectItemCaseSensitive(o, "ops");
    REQUIRE(cJSON_IsArray(ops) && cJSON_GetArraySize(ops) >= 2);
    double sum = 0, last = 1e30;
    cJSON *e;
    cJSON_ArrayForEach(e, ops) {
        cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name"), *t = cJSON_GetObjectItemCaseSensitive(e, "time_s");
        cJSON *b = cJSON_GetObjectItemCaseSensitive(e, "bound");
        CHECK(cJSON_IsString(name) && cJSON_IsNumber(t) && cJSON_IsString(b));
        if (!cJSON_IsNumber(t)) continue;
        CHECK_MSG(t->valuedouble <= last, "ops are sorted by time, largest first");
        last = t->valuedouble;
        sum += t->valuedouble;
    }
    double dev = cJSON_GetObjectItemCaseSensitive(o, "device_time_s")->valuedouble;
    CHECK_NEAR(sum, dev, 1e-9 * dev);
    cJSON *bb = cJSON_GetObjectItemCaseSensitive(o, "time_by_bound_s");
    CHECK(cJSON_IsObject(bb) && cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(bb, "compute")));
    cJSON_Delete(o);
    tpu_profile_free(p);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

TEST(profile_trace_format)
{
    tpu_ctx *ctx = tpu_ctx_new();
    const char *chips[] = {"v3-8", "v4-8", "v5e-8"};
    for (size_t c = 0; c < 3; c++) {
        tpu_module *m = NULL;
        tpu_profile *p = profile(ctx, mlp_hlo, chips[c], &m, 3, 1000);   /* slow input: idle spans too */
        if (!p) continue;
        char path[256];
        test_tmp_path(path, sizeof path, "trace.json");
        REQUIRE_OK(ctx, tpu_profile_write_trace(ctx, p, path));
        char *text = test_slurp(path, NULL);
        unlink(path);
        REQUIRE(text);
        cJSON *o = cJSON_Parse(text);
        free(text);
        REQUIRE(o);
        cJSON *ev = cJSON_GetObjectItemCaseSensitive(o, "traceEvents");
        REQUIRE(cJSON_IsArray(ev));
        int tracks[64] = {0}, named[64] = {0}, ntracks = 0, launches = 0, idle = 0, ops = 0;
        double step = tpu_profile_step_time(p), end = 0;
        cJSON *e;
        cJSON_ArrayForEach(e, ev) {
            const char *ph = cJSON_GetObjectItemCaseSensitive(e, "ph")->valuestring;
            int pid = cJSON_GetObjectItemCaseSensitive(e, "pid")->valueint, tid = cJSON_GetObjectItemCaseSensitive(e, "tid")->valueint;
            const char *name = cJSON_GetObjectItemCaseSensitive(e, "name")->valuestring;
            if (!strcmp(ph, "M")) {
                if (pid == 1 && !strcmp(name, "thread_name") && tid < 64) {
                    named[tid] = 1;
                    ntracks++;
                }
                continue;
            }
            CHECK_EQ_STR(ph, "X");
            double ts = cJSON_GetObjectItemCaseSensitive(e, "ts")->valuedouble, dur = cJSON_GetObjectItemCaseSensitive(e, "dur")->valuedouble;
            CHECK(ts >= 0 && dur >= 0);
            if (ts + dur > end) end = ts + dur;
            if (pid == 1 && tid < 64) tracks[tid]++;
            if (pid == 2 && tid == 0) launches++;
            const char *cat = cJSON_GetObjectItemCaseSensitive(e, "cat")->valuestring;
            if (!strcmp(cat, "idle")) idle++;
            if (pid == 1 && cJSON_GetObjectItemCaseSensitive(e, "args") &&
                cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(e, "args"), "opcode"))
                ops++;
        }
        /* one track per TensorCore: 8 on v3-8 (8 devices x 1), 8 on v4-8 (4 megacore devices x 2), 8 on v5e-8 */
        CHECK_EQ_INT(ntracks, 8);
        for (int k = 0; k < ntracks; k++) CHECK_MSG(named[k] && tracks[k] > 0, "%s: core track %d has no events", chips[c], k);
        CHECK_EQ_INT(launches, 3);
        CHECK_EQ_INT(idle, 3 * ntracks);
        CHECK(ops >= 2);
        CHECK_NEAR(end, 3 * step * 1e6, 3 * step * 1e6 * 1e-6 + 1e-3);
        cJSON_Delete(o);
        tpu_profile_free(p);
        tpu_module_free(m);
    }
    tpu_ctx_free(ctx);
}

/* A failing write names the file. */
TEST(profile_write_errors)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    tpu_profile *p = profile(ctx, mlp_hlo, "v3-8", &m, 1, 0);
    REQUIRE(p);
    CHECK(tpu_profile_write_trace(ctx, p, "/nonexistent-dir/t.json") == TPU_ERR_IO);
    CHECK(strstr(tpu_errmsg(ctx), "/nonexistent-dir/t.json") != NULL);
    CHECK(tpu_profile_write_html(ctx, p, "/nonexistent-dir/r.html") == TPU_ERR_IO);
    tpu_profile_free(p);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

static int count_of(const char *s, const char *what)
{
    int n = 0;
    for (const char *q = s; (q = strstr(q, what)); q++) n++;
    return n;
}

TEST(profile_html_structure)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    tpu_profile *p = profile(ctx, mlp_hlo, "v5e-8", &m, 1, 0);
    REQUIRE(p);
    char path[256];
    test_tmp_path(path, sizeof path, "report.html");
    REQUIRE_OK(ctx, tpu_profile_write_html(ctx, p, path));
    char *h = test_slurp(path, NULL);
    unlink(path);
    REQUIRE(h);
    CHECK(!strncmp(h, "<!DOCTYPE html>", 15));
    const char *ids[] = {"id=\"bounds\"", "id=\"timeline\"", "id=\"topops\"", "id=\"roofline\"", "id=\"byopcode\"",
                         "id=\"advice\"", "id=\"summary\""};
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) CHECK_MSG(strstr(h, ids[i]) != NULL, "HTML lacks %s", ids[i]);
    CHECK_EQ_INT(count_of(h, "<svg"), count_of(h, "</svg>"));
    CHECK(count_of(h, "class=\"topop\"") >= 2);
    CHECK(count_of(h, "class=\"pt\"") >= 2);
    CHECK(strstr(h, "<script") == NULL);   /* self-contained, no scripts */
    free(h);
    tpu_profile_free(p);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

static int lines_of(const char *s)
{
    int n = 0;
    for (; s && *s; s++) n += *s == '\n';
    return n;
}

/* The summary is cached per `top`: a short summary asked first (tpusim profile --top 1 --html) neither
 * shortens a later longer one nor the HTML report's (which shows 30 ops). */
TEST(profile_summary_top_not_cached_across_calls)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    tpu_profile *p = profile(ctx, mlp_hlo, "v5e-8", &m, 1, 0);
    REQUIRE(p);
    int one = lines_of(tpu_profile_summary(p, 1));
    int all = lines_of(tpu_profile_summary(p, 30));
    CHECK_MSG(all > one, "top 30: %d lines, top 1: %d", all, one);
    CHECK_EQ_INT(lines_of(tpu_profile_summary(p, 1)), one);
    char path[256];
    test_tmp_path(path, sizeof path, "report_top.html");
    REQUIRE_OK(ctx, tpu_profile_write_html(ctx, p, path));
    char *h = test_slurp(path, NULL);
    unlink(path);
    REQUIRE(h);
    const char *sum = strstr(h, "<pre id=\"summary\">");
    CHECK(sum != NULL);
    if (sum) {
        const char *end = strstr(sum, "</pre>");
        int n = 0;
        for (const char *c = sum; end && c < end; c++) n += *c == '\n';
        CHECK_MSG(n == all - 1 || n == all, "HTML summary: %d lines, top 30 summary: %d", n, all);
    }
    free(h);
    tpu_profile_free(p);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

TEST(profile_html_in_headless_chromium)
{
    const char *chrome = test_find_chromium();
    if (!chrome) {
        test_skip("no chromium on PATH (install it with scripts/deps.sh, or set TPUSIM_CHROMIUM)");
        return;
    }
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    /* a memory-bound and a compute-bound op, and a slow input pipeline: blue, orange and grey in the charts */
    tpu_profile *p = profile(ctx, mlp_hlo, "v3-8", &m, 1, 20000);
    REQUIRE(p);
    char html[256], png[256], dom[256], prof[256], cmd[2048];
    test_tmp_path(html, sizeof html, "report.html");
    test_tmp_path(png, sizeof png, "shot.png");
    test_tmp_path(dom, sizeof dom, "dom.html");
    test_tmp_path(prof, sizeof prof, "chrome-profile");
    REQUIRE_OK(ctx, tpu_profile_write_html(ctx, p, html));
    const char *flags = "--headless --no-sandbox --disable-gpu --no-first-run --no-default-browser-check --hide-scrollbars "
                        "--disable-extensions --disable-dev-shm-usage";
    /* 1. the DOM Chromium builds has every chart with its marks */
    snprintf(cmd, sizeof cmd, "timeout 60 '%s' %s --user-data-dir='%s' --dump-dom 'file://%s' > '%s' 2>/dev/null", chrome, flags,
             prof, html, dom);
    int rc = system(cmd);
    char *d = test_slurp(dom, NULL);
    CHECK_MSG(rc == 0 && d, "chromium --dump-dom failed (%d): %s", rc, cmd);
    if (d) {
        CHECK(strstr(d, "id=\"roofline\"") && strstr(d, "id=\"timeline\"") && strstr(d, "id=\"bounds\""));
        CHECK(count_of(d, "<rect") >= 8);
        CHECK(strstr(d, "Where the step goes") != NULL);
        free(d);
    }
    /* 2. the screenshot shows the charts: the bound colours of the step bar and the op bars are on screen */
    snprintf(cmd, sizeof cmd, "timeout 60 '%s' %s --user-data-dir='%s' --window-size=1200,1600 --screenshot='%s' 'file://%s' "
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
        CHECK(w >= 1000 && h >= 1000);
        long white = test_pixels_near(rgb, w, h, 0xffffff, 2);
        long compute = test_pixels_near(rgb, w, h, 0x4c78a8, 6), memory = test_pixels_near(rgb, w, h, 0xf58518, 6);
        long idle = test_pixels_near(rgb, w, h, 0xd3d3d3, 4);
        CHECK_MSG(white < (long)w * h * 0.97, "the page is blank (%ld of %ld pixels white)", white, (long)w * h);
        CHECK_MSG(compute > 2000, "too few compute-blue pixels: %ld", compute);
        CHECK_MSG(memory + idle > 2000, "too few memory-orange / idle-grey pixels: %ld + %ld", memory, idle);
        free(rgb);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s' '%s' '%s'", html, png, dom, prof);
    if (system(cmd) != 0) fprintf(stderr, "  note: could not remove %s\n", prof);
    tpu_profile_free(p);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* Every corpus program profiles on the three chips the issue names (the small ones here; the Llama and
 * MaxText programs in tests/cli/t_profile.sh). */
TEST(profile_corpus_mobilenet)
{
    const char *path = test_corpus("hlo/mobilenet_v2.hlo");
    if (!path) {
        test_skip("../shared/corpus absent");
        return;
    }
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    REQUIRE_OK(ctx, tpu_module_load(ctx, path, &m));
    const char *chips[] = {"v3-8", "v4-8", "v5e-8"};
    double prev = 1e30;
    for (int c = 0; c < 3; c++) {
        tpu_profile_opts o = {0};
        o.chip = chips[c];
        tpu_profile *p = NULL;
        CHECK_OK(ctx, tpu_profile_program(ctx, m, &o, &p));
        if (!p) continue;
        double s = tpu_profile_step_time(p);
        /* a PyTorch/XLA MobileNet v2 train step at batch 96 in f32: memory bound, tens of ms */
        CHECK_MSG(s > 10e-3 && s < 1, "%s: step %g s", chips[c], s);
        CHECK_EQ_STR(tpu_profile_bound(p), "memory");
        CHECK_EQ_INT(tpu_profile_batch(p), 96);
        if (c == 1) CHECK(s < prev);   /* v4's megacore device beats a v3 core */
        prev = s;
        CHECK(tpu_profile_advice(p) != NULL);
        tpu_profile_free(p);
    }
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* The advisor's rules run alone: the input-pipeline rule fires on a starved device with its gain, a rule
 * whose condition does not hold adds nothing, and each pointer is one the full advice gives. */
TEST(profile_advisor_rule_alone)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    tpu_profile *p = profile(ctx, mlp_hlo, "v5e-8", &m, 1, 10.0);   /* 10 samples/s: the device waits */
    REQUIRE(p);
    ut_buf b;
    ut_buf_init(&b);
    double gain = 0;
    CHECK_OK(ctx, prf_advise_rule(ctx, p, "input", &b, &gain));
    CHECK_MSG(b.data && !strncmp(b.data, "The input pipeline is the bottleneck", 36), "%s", b.data ? b.data : "(nothing)");
    CHECK(gain > 0);
    const char *all = tpu_profile_advice(p);
    CHECK(all && b.data && strstr(all, b.data) != NULL);
    ut_buf_free(&b);
    ut_buf_init(&b);
    CHECK_OK(ctx, prf_advise_rule(ctx, p, "does_not_fit", &b, &gain));
    CHECK(b.len == 0 && gain == 0);
    ut_buf_free(&b);
    CHECK_EQ_INT(prf_advise_rule(ctx, p, "no_such_rule", &b, NULL), TPU_ERR_INVALID);
    int n = 0;
    while (prf_advise_rule_name(n)) n++;
    CHECK_EQ_INT(n, 11);
    tpu_profile_free(p);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* What-if in the library: a row per slice beside the base, a cost column with prices, and a slice that does
 * not resolve named in the error while the others keep their rows. */
TEST(profile_compare_table)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    tpu_profile *p = profile(ctx, mlp_hlo, "v4-8", &m, 1, 0);
    REQUIRE(p);
    tpu_profile_opts o = {0};
    o.chip = "v4-8";
    char *t = NULL;
    CHECK_OK(ctx, tpu_profile_compare(ctx, m, &o, p, "v5e-8,v6e-8", "v4=3.22,v5e=1.2", &t));
    CHECK(t && strstr(t, "v4-8 (this)") && strstr(t, "v5e-8") && strstr(t, "v6e-8") && strstr(t, "$/1000 steps"));
    CHECK(t && count_of(t, "   $") == 3);   /* the header, v4 and v5e (v6e has no price) */
    tpu_free(t);
    t = NULL;
    CHECK(tpu_profile_compare(ctx, m, &o, p, "v5e-8,no-such-chip", NULL, &t) != TPU_OK);
    CHECK(strstr(tpu_errmsg(ctx), "no-such-chip: ") != NULL);
    CHECK(t && strstr(t, "v5e-8") && !strstr(t, "no-such-chip"));
    tpu_free(t);
    tpu_profile_free(p);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}
