/* t_scale.c — tpusim scale (src/profile/scale.c): weak scaling of the ResNet-50 pod example over v2 slices,
 * strong scaling with one program file per per-device batch, the GPU rows, time to train and cost, the
 * errors, and the chart in headless Chromium. */
#include "test.h"
#include "test_browser.h"

#include <stdlib.h>
#include <unistd.h>

#define RESNET "examples/resnet50_pod/step_b32.hlo"

static double json_num(const char *json, const char *row, const char *key)
{
    char pat[96];
    snprintf(pat, sizeof pat, "\"name\": \"%s\"", row);
    const char *r = strstr(json, pat);
    if (!r) return NAN;
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *k = strstr(r, pat);
    return k ? strtod(k + strlen(pat), NULL) : NAN;
}

TEST(scale_resnet50_weak_over_v2_slices)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_scale_opts o = {0};
    o.program = RESNET;
    o.slices = "v2-8,v2-32,v2-128,v2-256,v2-512";
    o.dataset_size = 1281167;
    o.epochs = 90;
    o.prices = "v2-8=1.125,v2=1.50,V100=2.48";
    tpu_scale *s = NULL;
    REQUIRE_OK(ctx, tpu_scale_run(ctx, &o, &s));
    const char *t = tpu_scale_table(s), *j = tpu_scale_json(s);
    CHECK(strstr(t, "weak scaling, 32 samples per device per step") != NULL);
    CHECK(strstr(t, "v2-512") && strstr(t, "8x V100") && strstr(t, "8x A100") && strstr(t, "8x H100"));
    /* per-device batch 32, global batch 32 x devices; the step barely changes: near-linear */
    CHECK_EQ_INT((long long)json_num(j, "v2-512", "global_batch"), 16384);
    double s8 = json_num(j, "v2-8", "samples_per_s"), s512 = json_num(j, "v2-512", "samples_per_s");
    CHECK_NEAR(json_num(j, "v2-512", "speedup"), s512 / s8, 1e-3 * s512 / s8);
    double eff = json_num(j, "v2-512", "efficiency");
    CHECK_MSG(eff > 0.9 && eff < 1.1, "v2-512 efficiency %g", eff);
    /* its collectives span the slice: more devices, a different collective time than on v2-8 */
    CHECK(json_num(j, "v2-512", "collective_s") > 0 && json_num(j, "v2-512", "collective_s") != json_num(j, "v2-8", "collective_s"));
    /* what ran beside compute is part of the collectives' time, and the step is what is left of it */
    const char *sl[] = {"v2-8", "v2-32", "v2-128", "v2-256", "v2-512"};
    for (int k = 0; k < 5; k++) {
        double c = json_num(j, sl[k], "collective_s"), h = json_num(j, sl[k], "collective_hidden_s");
        CHECK_MSG(h >= 0 && h <= c * (1 + 1e-9), "%s: %g s hidden of %g s", sl[k], h, c);
    }
    /* time to train = ceil(N E / G) steps; cost = hours x chips x price */
    double steps = json_num(j, "v2-512", "steps_to_train"), step = json_num(j, "v2-512", "step_time_s");
    CHECK_NEAR(steps, ceil(1281167.0 * 90 / 16384), 0.5);
    CHECK_NEAR(json_num(j, "v2-512", "time_to_train_s"), steps * step, 1e-6 * steps * step);
    CHECK_NEAR(json_num(j, "v2-512", "cost"), steps * step / 3600 * 256 * 1.50, 1e-6 * steps * step);
    CHECK_NEAR(json_num(j, "v2-8", "price_per_hour"), 1.125, 1e-12);
    CHECK_NEAR(json_num(j, "8x V100", "cost"), json_num(j, "8x V100", "time_to_train_s") / 3600 * 8 * 2.48, 1e-3);
    /* the GPUs: faster per device on this small per-device batch, and in the published order */
    double v100 = json_num(j, "8x V100", "samples_per_s"), a100 = json_num(j, "8x A100", "samples_per_s");
    double h100 = json_num(j, "8x H100", "samples_per_s");
    CHECK_MSG(v100 > 0 && v100 < a100 && a100 < h100, "V100 %g, A100 %g, H100 %g samples/s", v100, a100, h100);
    tpu_scale_free(s);
    tpu_ctx_free(ctx);
}

/* A data-parallel matmul step written for any per-device batch b: x f32[b,256] @ w, gradient all-reduce; the
 * weights are state (donated), the batch is x. */
static void write_step(const char *dir, int b)
{
    char path[512];
    snprintf(path, sizeof path, "%s/mm_b%d.hlo", dir, b);
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "HloModule mm_b%d, input_output_alias={ {}: (0, {}, may-alias) }\nadd { a = f32[] parameter(0)\n c = f32[] parameter(1)\n ROOT s = f32[] add(a, c) }\n"
               "ENTRY e {\n w = f32[256,1024] parameter(0)\n x = f32[%d,256] parameter(1)\n"
               " y = f32[%d,1024] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
               " g = f32[256,1024] dot(x, y), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
               " ROOT r = f32[256,1024] all-reduce(g), replica_groups={}, to_apply=add\n}\n", b, b, b);
    fclose(f);
}

TEST(scale_strong_with_one_program_per_batch)
{
    tpu_ctx *ctx = tpu_ctx_new();
    char dir[256], pattern[512];
    test_tmp_path(dir, sizeof dir, "scale");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    REQUIRE(system(cmd) == 0);
    for (int b = 8; b <= 1024; b *= 2) write_step(dir, b);
    snprintf(pattern, sizeof pattern, "%s/mm_b{b}.hlo", dir);
    tpu_scale_opts o = {0};
    o.program = pattern;
    o.slices = "v4-8,v4-16,v4-32";   /* 4, 8, 16 devices */
    o.global_batch = 1024;
    o.gpus = "V100";
    tpu_scale *s = NULL;
    REQUIRE_OK(ctx, tpu_scale_run(ctx, &o, &s));
    const char *j = tpu_scale_json(s);
    CHECK(strstr(tpu_scale_table(s), "strong scaling, a global batch of 1024") != NULL);
    CHECK_EQ_INT((long long)json_num(j, "v4-8", "batch_per_device"), 256);
    CHECK_EQ_INT((long long)json_num(j, "v4-32", "batch_per_device"), 64);
    CHECK_EQ_INT((long long)json_num(j, "v4-32", "global_batch"), 1024);
    CHECK_EQ_INT((long long)json_num(j, "8x V100", "batch_per_device"), 128);
    /* a fixed global batch on 4x the chips: faster, but the all-reduce does not shrink: below linear */
    double sp = json_num(j, "v4-32", "speedup"), eff = json_num(j, "v4-32", "efficiency");
    CHECK_MSG(sp > 1 && eff < 1, "v4-32: speed-up %g, efficiency %g", sp, eff);
    tpu_scale_free(s);
    /* without {b}: the program's batch must be the one needed */
    char fixed[512];
    snprintf(fixed, sizeof fixed, "%s/mm_b64.hlo", dir);
    o.program = fixed;
    CHECK(tpu_scale_run(ctx, &o, &s) == TPU_ERR_INVALID);
    CHECK(strstr(tpu_errmsg(ctx), "takes 64 samples per device; 256 are needed here: put {b} in the program's name") != NULL);
    /* a global batch that does not split, both batches, a slice that does not exist, an unknown GPU */
    o.program = pattern;
    o.global_batch = 1026;
    CHECK(tpu_scale_run(ctx, &o, &s) == TPU_ERR_INVALID);
    CHECK(strstr(tpu_errmsg(ctx), "the global batch 1026 does not split over the 4 devices of v4-8") != NULL);
    o.global_batch = 1024;
    o.per_core_batch = 8;
    CHECK(tpu_scale_run(ctx, &o, &s) == TPU_ERR_INVALID);
    o.per_core_batch = 0;
    o.slices = "v3-8,v3-12";
    CHECK(tpu_scale_run(ctx, &o, &s) == TPU_ERR_INVALID);
    CHECK(strstr(tpu_errmsg(ctx), "v3 slices come in 8, 32, 64") != NULL);
    o.slices = "v4-8";
    o.gpus = "P100";
    CHECK(tpu_scale_run(ctx, &o, &s) == TPU_ERR_INVALID);
    CHECK(strstr(tpu_errmsg(ctx), "tpusim knows V100, A100 and H100") != NULL);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    tpu_ctx_free(ctx);
}

static int count_of(const char *s, const char *w)
{
    int n = 0;
    for (const char *p = strstr(s, w); p; p = strstr(p + 1, w)) n++;
    return n;
}

TEST(scale_chart_in_headless_chromium)
{
    const char *chrome = test_find_chromium();
    if (!chrome) {
        test_skip("no chromium on PATH (install it with scripts/deps.sh, or set TPUSIM_CHROMIUM)");
        return;
    }
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_scale_opts o = {0};
    o.program = RESNET;
    o.slices = "v2-8,v2-32,v2-128,v2-512";
    tpu_scale *s = NULL;
    REQUIRE_OK(ctx, tpu_scale_run(ctx, &o, &s));
    char html[256], png[256], dom[256], prof[256], cmd[2048];
    test_tmp_path(html, sizeof html, "scale.html");
    test_tmp_path(png, sizeof png, "scale.png");
    test_tmp_path(dom, sizeof dom, "scale-dom.html");
    test_tmp_path(prof, sizeof prof, "scale-chrome");
    REQUIRE_OK(ctx, tpu_scale_write_html(ctx, s, html));
    const char *flags = "--headless --no-sandbox --disable-gpu --no-first-run --no-default-browser-check --hide-scrollbars "
                        "--disable-extensions --disable-dev-shm-usage";
    snprintf(cmd, sizeof cmd, "timeout 60 '%s' %s --user-data-dir='%s' --dump-dom 'file://%s' > '%s' 2>/dev/null", chrome,
             flags, prof, html, dom);
    int rc = system(cmd);
    char *d = test_slurp(dom, NULL);
    CHECK_MSG(rc == 0 && d, "chromium --dump-dom failed (%d): %s", rc, cmd);
    if (d) {
        CHECK(strstr(d, "id=\"scaling\"") && strstr(d, "id=\"throughput\"") && strstr(d, "id=\"efficiency\""));
        CHECK_EQ_INT(count_of(d, "class=\"tpu\""), 4);      /* a point per slice */
        CHECK_EQ_INT(count_of(d, "class=\"gpu\""), 3);      /* and per GPU server */
        CHECK_EQ_INT(count_of(d, "class=\"eff\""), 4);      /* an efficiency bar per slice */
        CHECK(strstr(d, "v2-512") && strstr(d, "8x H100"));
        free(d);
    }
    snprintf(cmd, sizeof cmd, "timeout 60 '%s' %s --user-data-dir='%s' --window-size=1100,900 --screenshot='%s' 'file://%s' "
             ">/dev/null 2>&1", chrome, flags, prof, png, html);
    rc = system(cmd);
    size_t n = 0;
    unsigned char *data = (unsigned char *)test_slurp(png, &n), *rgb = NULL;
    CHECK_MSG(rc == 0 && data, "chromium --screenshot failed (%d)", rc);
    int w = 0, h = 0;
    if (data && test_png_decode(data, n, &w, &h, &rgb) == 0) {
        /* the throughput line and points (blue), the GPU squares (orange), the efficiency bars (green) */
        CHECK_MSG(test_pixels_near(rgb, w, h, 0x1f77b4, 10) > 300, "no blue throughput line on screen");
        CHECK_MSG(test_pixels_near(rgb, w, h, 0xff7f0e, 10) > 50, "no orange GPU marks on screen");
        CHECK_MSG(test_pixels_near(rgb, w, h, 0x2ca02c, 10) > 5000, "no green efficiency bars on screen");
        free(rgb);
    } else {
        CHECK_MSG(0, "the screenshot is not a PNG this test can read");
    }
    free(data);
    unlink(html);
    unlink(png);
    unlink(dom);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", prof);
    CHECK(system(cmd) == 0);
    tpu_scale_free(s);
    tpu_ctx_free(ctx);
}
