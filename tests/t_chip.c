/* t_chip.c — the chip table (every generation sane and self-consistent), slice names and their errors,
 * chip files good and bad, the HBM tiling rules (design §5 examples), and the public tpu_chip API. */
#include "test.h"
#include "chip/chip.h"

#include <cjson/cJSON.h>
#include <stdlib.h>

#define MiB ((int64_t)1 << 20)
#define GiB ((int64_t)1 << 30)

static const chp_chip *gen(const char *name)
{
    const chp_chip *c = chp_generation_find(name);
    if (!c) test_fail(__FILE__, __LINE__, "generation %s missing", name);
    return c;
}

/* ---- the table ---- */

TEST(chip_every_generation_is_sane)
{
    tpu_ctx *ctx = tpu_ctx_new();
    static const char *want[] = {"v2", "v3", "v4", "v5e", "v5p", "v6e", "v7"};
    REQUIRE(chp_num_generations() == 7);
    for (int i = 0; i < chp_num_generations(); i++) {
        const chp_chip *c = chp_generation_at(i);
        CHECK_EQ_STR(c->name, want[i]);
        CHECK_OK(ctx, chp_chip_validate(ctx, c, c->name));
        CHECK(c->builtin);
        CHECK_MSG(c->source && strlen(c->source) > 20, "%s: no source", c->name);
        CHECK(c->generation >= 2 && c->generation <= 7);
        CHECK(c->mxu_rows == c->mxu_cols && (c->mxu_rows == 128 || c->mxu_rows == 256));
        CHECK_MSG((c->mxu_rows == 256) == (c->generation >= 6), "%s: MXU size", c->name);
        CHECK(c->vpu_sublanes == 8 && c->vpu_lanes == 128);
        CHECK(c->ici_links == 2 * c->torus_dims);          /* one link each way per torus dimension */
        CHECK(c->hbm_usable_bytes + c->hbm_reserved_bytes <= chp_device_hbm_bytes(c));
        CHECK(c->hbm_usable_bytes > chp_device_hbm_bytes(c) * 9 / 10);
        CHECK(c->vmem_bytes >= 16 * MiB && c->vmem_bytes <= 128 * MiB);
        CHECK(c->hbm_bw > 5e11 && c->hbm_bw < 1e13);
        CHECK(c->peak_int8_ops == 0 || c->peak_int8_ops >= c->peak_bf16_flops);
        CHECK(c->max_slice_chips <= c->max_pod_chips);
        CHECK(c->op_overhead_s > 0 && c->op_overhead_s < 1e-4);
        /* newer generations are not slower */
        if (i > 0) CHECK(c->peak_bf16_flops > chp_generation_at(i - 1)->peak_bf16_flops * 0.5);
        /* every alias and the Cloud prefix find the same generation */
        CHECK(chp_generation_find(c->cloud_prefix) == c);
    }
    CHECK(chp_generation_find("V5LITEPOD") == gen("v5e"));
    CHECK(chp_generation_find("ironwood") == gen("v7"));
    CHECK(chp_generation_find("trillium") == gen("v6e"));
    CHECK(chp_generation_find("v8") == NULL);
    tpu_ctx_free(ctx);
}

/* peak = 2 x rows x cols x MXUs x cores x clock where the clock is public. Where it is not, the implied clock
 * must be plausible — except v6e and v7, whose documented MXU counts imply 3.5 and 4.4 GHz: those two carry a
 * note explaining the mismatch (see the generation table). */
TEST(chip_peak_matches_mxu_arithmetic)
{
    for (int i = 0; i < chp_num_generations(); i++) {
        const chp_chip *c = chp_generation_at(i);
        double units = 2.0 * c->mxu_rows * c->mxu_cols * c->mxus_per_core * c->cores_per_chip;
        double clk = chp_mxu_clock_hz(c);
        if (c->clock_hz > 0) {
            CHECK_MSG(fabs(units * c->clock_hz - c->peak_bf16_flops) < 0.01 * c->peak_bf16_flops,
                      "%s: 2*%d*%d*%d*%d*%g = %g vs peak %g", c->name, c->mxu_rows, c->mxu_cols, c->mxus_per_core,
                      c->cores_per_chip, c->clock_hz, units * c->clock_hz, c->peak_bf16_flops);
        } else if (!strcmp(c->name, "v6e") || !strcmp(c->name, "v7")) {
            CHECK_MSG(clk > 3e9 && c->note && strstr(c->note, "GHz"), "%s: implied clock %g", c->name, clk);
        } else {
            CHECK_MSG(clk > 0.5e9 && clk < 3e9, "%s: implied clock %g", c->name, clk);
        }
    }
    CHECK_NEAR(chp_mxu_clock_hz(gen("v2")), 700e6, 1);
    CHECK_NEAR(chp_mxu_clock_hz(gen("v3")), 940e6, 1);
    CHECK_NEAR(chp_mxu_clock_hz(gen("v4")), 1050e6, 1);
    CHECK_NEAR(chp_mxu_clock_hz(gen("v5e")), 1.5e9, 1);
    CHECK_NEAR(chp_mxu_clock_hz(gen("v5p")), 1.751e9, 0.001e9);
    CHECK_NEAR(chp_core_peak_flops(gen("v4")), 137.5e12, 1e9);
    CHECK_NEAR(chp_device_peak_flops(gen("v4")), 275e12, 1e9);   /* megacore: the device is the chip */
    CHECK_NEAR(chp_device_peak_flops(gen("v3")), 61.5e12, 1e9);
}

/* The all-reduce bandwidth per pod the Cloud docs give equals chips x links x per-link bandwidth. */
TEST(chip_ici_matches_pod_allreduce_bandwidth)
{
    struct { const char *g; double pod_allreduce; } k[] = {
        {"v3", 340e12}, {"v4", 1.1e15}, {"v5e", 51.2e12}, {"v6e", 102.4e12},
    };
    for (int i = 0; i < UT_ARRAY_LEN(k); i++) {
        const chp_chip *c = gen(k[i].g);
        double per_chip = k[i].pod_allreduce / c->max_pod_chips;
        double ours = c->ici_links * c->ici_link_bw;
        CHECK_MSG(fabs(per_chip - ours) < 0.05 * ours, "%s: %g vs %g", k[i].g, per_chip, ours);
    }
    /* bidirectional per-chip figures of the v5p and TPU7x docs: 1200 GB/s */
    CHECK_NEAR(gen("v5p")->ici_links * gen("v5p")->ici_link_bw * 2, 1200e9, 1);
    CHECK_NEAR(gen("v7")->ici_links * gen("v7")->ici_link_bw * 2, 1200e9, 1);
}

/* The capacities real XLA:TPU out-of-memory reports print ("Used X of 15.48G hbm"), to two decimals. */
TEST(chip_usable_hbm_matches_oom_reports)
{
    struct { const char *g; const char *of, *reserved; } k[] = {
        {"v2", "7.48", "530.00"}, {"v3", "15.48", "530.00"}, {"v4", "30.75", "1280.00"}, {"v5e", "15.75", NULL},
        {"v5p", "95.74", NULL},   {"v6e", "31.25", "260.00"}, {"v7", "94.75", NULL},
    };
    char buf[32];
    for (int i = 0; i < UT_ARRAY_LEN(k); i++) {
        const chp_chip *c = gen(k[i].g);
        snprintf(buf, sizeof buf, "%.2f", (double)c->hbm_usable_bytes / GiB);
        CHECK_EQ_STR(buf, k[i].of);
        if (k[i].reserved) {
            snprintf(buf, sizeof buf, "%.2f", (double)c->hbm_reserved_bytes / MiB);
            CHECK_EQ_STR(buf, k[i].reserved);
        }
    }
    CHECK_EQ_INT(chp_device_hbm_bytes(gen("v3")), 16 * GiB);    /* per core */
    CHECK_EQ_INT(chp_device_hbm_bytes(gen("v4")), 32 * GiB);    /* megacore: per chip */
    CHECK_EQ_INT(chp_device_hbm_bytes(gen("v7")), 96 * GiB);    /* per chiplet */
}

/* ---- slices ---- */

static void check_slice(const char *name, const char *canon, int chips, int cores, int hosts, int nd, int d0, int d1,
                        int d2, int wraps)
{
    tpu_ctx *ctx = tpu_ctx_new();
    chp_slice s;
    tpu_status st = chp_slice_parse(ctx, name, &s);
    CHECK_MSG(st == TPU_OK, "%s: %s", name, tpu_errmsg(ctx));
    if (st == TPU_OK) {
        CHECK_EQ_STR(s.name, canon);
        CHECK_MSG(s.chips == chips && s.cores == cores && s.hosts == hosts,
                  "%s: chips %d cores %d hosts %d, want %d %d %d", name, s.chips, s.cores, s.hosts, chips, cores, hosts);
        CHECK_MSG(s.ndims == nd && s.dims[0] == d0 && s.dims[1] == d1 && (nd == 2 || s.dims[2] == d2),
                  "%s: topology %dx%dx%d", name, s.dims[0], s.dims[1], s.dims[2]);
        int w = 0;
        for (int i = 0; i < s.ndims; i++) w |= s.wrap[i] << i;
        CHECK_MSG(w == wraps, "%s: wraparound mask %d, want %d", name, w, wraps);
    }
    tpu_ctx_free(ctx);
}

TEST(chip_slice_names)
{
    /* v2/v3: TensorCores, 2-D; wraparound only along a full side of the pod (16 / 32 chips) */
    check_slice("v2-8", "v2-8", 4, 8, 1, 2, 2, 2, 0, 0);
    check_slice("v2-32", "v2-32", 16, 32, 4, 2, 4, 4, 0, 0);
    check_slice("v2-256", "v2-256", 128, 256, 32, 2, 8, 16, 0, 2);
    check_slice("v2-512", "v2-512", 256, 512, 64, 2, 16, 16, 0, 3);
    check_slice("v3-8", "v3-8", 4, 8, 1, 2, 2, 2, 0, 0);
    check_slice("v3-32", "v3-32", 16, 32, 4, 2, 4, 4, 0, 0);
    check_slice("v3-64", "v3-64", 32, 64, 8, 2, 4, 8, 0, 0);
    check_slice("V3-1024", "v3-1024", 512, 1024, 128, 2, 16, 32, 0, 2);
    check_slice("v3-2048", "v3-2048", 1024, 2048, 256, 2, 32, 32, 0, 3);
    /* v4: TensorCores, 3-D; whole 4x4x4 cubes are tori, smaller slices meshes */
    check_slice("v4-8", "v4-8", 4, 8, 1, 3, 2, 2, 1, 0);
    check_slice("v4-16", "v4-16", 8, 16, 2, 3, 2, 2, 2, 0);
    check_slice("v4-32", "v4-32", 16, 32, 4, 3, 2, 2, 4, 0);
    check_slice("v4-64", "v4-64", 32, 64, 8, 3, 2, 4, 4, 0);
    check_slice("v4-128", "v4-128", 64, 128, 16, 3, 4, 4, 4, 7);
    check_slice("v4-256", "v4-256", 128, 256, 32, 3, 4, 4, 8, 7);
    check_slice("v4-1536", "v4-1536", 768, 1536, 192, 3, 8, 8, 12, 7);
    check_slice("v4-4096", "v4-4096", 2048, 4096, 512, 3, 8, 16, 16, 7);
    check_slice("v4-8192", "v4-8192", 4096, 8192, 1024, 3, 16, 16, 16, 7);
    /* v5p: cores; the documented shapes */
    check_slice("v5p-8", "v5p-8", 4, 8, 1, 3, 2, 2, 1, 0);
    check_slice("v5p-128", "v5p-128", 64, 128, 16, 3, 4, 4, 4, 7);
    check_slice("v5p-1024", "v5p-1024", 512, 1024, 128, 3, 8, 8, 8, 7);
    check_slice("v5p-12288", "v5p-12288", 6144, 12288, 1536, 3, 16, 16, 24, 7);
    /* v5e / v6e: chips; 8 chips on one host, then 4 per host */
    check_slice("v5litepod-1", "v5litepod-1", 1, 1, 1, 2, 1, 1, 0, 0);
    check_slice("v5litepod-8", "v5litepod-8", 8, 8, 1, 2, 2, 4, 0, 0);
    check_slice("v5litepod-16", "v5litepod-16", 16, 16, 4, 2, 4, 4, 0, 0);
    check_slice("v5e-16", "v5litepod-16", 16, 16, 4, 2, 4, 4, 0, 0);
    check_slice("v5litepod-128", "v5litepod-128", 128, 128, 32, 2, 8, 16, 0, 2);
    check_slice("v5litepod-256", "v5litepod-256", 256, 256, 64, 2, 16, 16, 0, 3);
    check_slice("v6e-8", "v6e-8", 8, 8, 1, 2, 2, 4, 0, 0);
    check_slice("trillium-64", "v6e-64", 64, 64, 16, 2, 8, 8, 0, 0);
    /* TPU7x: cores (2 per chip); tpu7x-8 is one 4-chip host */
    check_slice("tpu7x-8", "tpu7x-8", 4, 8, 1, 3, 2, 2, 1, 0);
    check_slice("tpu7x-2", "tpu7x-2", 1, 2, 1, 3, 1, 1, 1, 0);
    check_slice("v7-128", "tpu7x-128", 64, 128, 16, 3, 4, 4, 4, 7);
    check_slice("ironwood-18432", "tpu7x-18432", 9216, 18432, 2304, 3, 16, 24, 24, 7);
    /* bare generations: one chip */
    check_slice("v5e", "v5e", 1, 1, 1, 2, 1, 1, 0, 0);
    check_slice("v4", "v4", 1, 2, 1, 3, 1, 1, 1, 0);
    check_slice("tpu7x", "v7", 1, 2, 1, 3, 1, 1, 1, 0);
}

static void check_slice_error(const char *name, const char *want)
{
    tpu_ctx *ctx = tpu_ctx_new();
    chp_slice s;
    tpu_status st = chp_slice_parse(ctx, name, &s);
    CHECK_MSG(st == (strstr(name, ".json") ? TPU_ERR_IO : TPU_ERR_INVALID), "%s: status %s", name,
              tpu_status_name(st));
    CHECK_MSG(strstr(tpu_errmsg(ctx), want), "%s: message '%s' lacks '%s'", name, tpu_errmsg(ctx), want);
    tpu_ctx_free(ctx);
}

TEST(chip_slice_errors)
{
    check_slice_error("v3-12", "v3-12: v3 slices come in 8, 32, 64, 128, 256, 512, 1024 and 2048 cores");
    check_slice_error("v3-9", "not a whole number of chips");
    check_slice_error("v3-4096", "v3 slices come in");
    check_slice_error("v2-1024", "v2 slices come in 8, 32, 128, 256 and 512 cores");
    check_slice_error("v4-96", "multiples of 128 cores up to 8192");
    check_slice_error("v4-2", "v4 slices come in");            /* one chip only by its bare name */
    check_slice_error("v5p-2", "v5p slices come in");
    check_slice_error("v5p-12416", "up to 12288");
    check_slice_error("v5litepod-2", "v5e slices come in 1, 4, 8, 16, 32, 64, 128 and 256 chips");
    check_slice_error("v6e-512", "v6e slices come in");
    check_slice_error("tpu7x-3", "not a whole number of chips");
    check_slice_error("v3-08", "'08' is not a slice size");
    check_slice_error("v3-99999999999", "is not a slice size");
    check_slice_error("v9-8", "unknown chip 'v9-8'");
    check_slice_error("v3-", "unknown chip");
    check_slice_error("v3-x8", "unknown chip");
    check_slice_error("", "no chip given");
    check_slice_error("no/such/chip.json", "cannot open");
}

TEST(chip_slice_make_dims)
{
    tpu_ctx *ctx = tpu_ctx_new();
    chp_slice s;
    int d2[2] = {16, 8}, d3[3] = {2, 4, 4}, bad3[3] = {4, 4, 6}, big2[2] = {32, 16};
    REQUIRE_OK(ctx, chp_slice_make_dims(ctx, gen("v5e"), 2, d2, &s));
    CHECK(s.chips == 128 && s.wrap[0] && !s.wrap[1]);
    CHECK_EQ_STR(s.name, "v5litepod-128");
    REQUIRE_OK(ctx, chp_slice_make_dims(ctx, gen("v4"), 3, d3, &s));
    CHECK_EQ_STR(s.name, "v4-64");
    CHECK(chp_slice_make_dims(ctx, gen("v4"), 3, bad3, &s) == TPU_ERR_INVALID);
    CHECK(strstr(tpu_errmsg(ctx), "whole cubes"));
    CHECK(chp_slice_make_dims(ctx, gen("v5e"), 2, big2, &s) == TPU_ERR_INVALID);
    CHECK(chp_slice_make_dims(ctx, gen("v5e"), 3, d3, &s) == TPU_ERR_INVALID);
    CHECK(strstr(tpu_errmsg(ctx), "needs 2 dimensions"));
    tpu_ctx_free(ctx);
}

/* ---- chip files ---- */

static tpu_status parse_chip(tpu_ctx *ctx, const char *json, chp_slice *s)
{
    return chp_chip_parse_json(ctx, json, strlen(json), "t.json", s);
}

TEST(chip_file_example)
{
    tpu_ctx *ctx = tpu_ctx_new();
    chp_slice s;
    REQUIRE_OK(ctx, chp_slice_parse(ctx, "examples/chips/v5e-2x-hbm.json", &s));
    CHECK_EQ_STR(s.chip.name, "v5e-2x-hbm");
    CHECK(!s.chip.builtin);
    CHECK_EQ_INT(s.chip.hbm_bytes, 32 * GiB);
    CHECK_EQ_INT(s.chip.hbm_usable_bytes, 32 * GiB - 256 * MiB);   /* follows the new HBM; v5e's reserve kept */
    CHECK_NEAR(s.chip.hbm_bw, 1228.5e9, 1);
    CHECK_NEAR(s.chip.peak_bf16_flops, 197e12, 1);                  /* untouched */
    CHECK_EQ_INT(s.chip.generation, 5);
    CHECK(s.chips == 16 && s.dims[0] == 4 && s.dims[1] == 4 && s.hosts == 4);
    CHECK_EQ_STR(s.name, "v5e-2x-hbm:4x4");
    tpu_ctx_free(ctx);
}

TEST(chip_file_overrides_and_derived_figures)
{
    tpu_ctx *ctx = tpu_ctx_new();
    chp_slice s;
    /* twice the MXUs: the peak follows (v5e's clock is public) */
    REQUIRE_OK(ctx, parse_chip(ctx, "{\"name\": \"v5e-8mxu\", \"base\": \"v5e\", \"mxus_per_core\": 8}", &s));
    CHECK_NEAR(s.chip.peak_bf16_flops, 2 * 196.608e12, 1e9);
    CHECK_NEAR(s.chip.peak_int8_ops, 393e12 * 2 * 196.608 / 197, 1e10);
    CHECK(s.chips == 1);
    CHECK_EQ_STR(s.name, "v5e-8mxu");
    /* v6e's clock is not public: the implied one carries over */
    REQUIRE_OK(ctx, parse_chip(ctx, "{\"name\": \"t6\", \"base\": \"trillium\", \"mxus_per_core\": 4}", &s));
    CHECK_NEAR(s.chip.peak_bf16_flops, 2 * 918e12, 1e9);
    /* a clock change */
    REQUIRE_OK(ctx, parse_chip(ctx, "{\"name\": \"fast\", \"base\": \"v4\", \"clock_ghz\": 2.1}", &s));
    CHECK_NEAR(s.chip.peak_bf16_flops, 2.0 * 128 * 128 * 4 * 2 * 2.1e9, 1e3);
    /* an explicit peak wins, and the base's clock no longer applies when the arithmetic changes */
    REQUIRE_OK(ctx, parse_chip(ctx, "{\"name\": \"p\", \"base\": \"v4\", \"mxus_per_core\": 8, "
                                    "\"peak_bf16_tflops\": 500}", &s));
    CHECK_NEAR(s.chip.peak_bf16_flops, 500e12, 1);
    CHECK(s.chip.clock_hz == 0);
    /* peak and clock that disagree: accepted with a warning */
    tpu_warnings_clear(ctx);
    REQUIRE_OK(ctx, parse_chip(ctx, "{\"name\": \"w\", \"base\": \"v5e\", \"clock_ghz\": 1.5, "
                                    "\"peak_bf16_tflops\": 400}", &s));
    CHECK(strstr(tpu_warnings(ctx), "disagrees"));
    /* a 3-D topology of whole cubes */
    REQUIRE_OK(ctx, parse_chip(ctx, "{\"name\": \"big\", \"base\": \"v5p\", \"topology\": [4, 4, 8]}", &s));
    CHECK(s.chips == 128 && s.wrap[0] && s.wrap[2] && s.hosts == 32);
    CHECK_EQ_STR(s.name, "big:4x4x8");
    /* tiling of another generation */
    REQUIRE_OK(ctx, parse_chip(ctx, "{\"name\": \"x\", \"base\": \"v5e\", \"tiling\": \"v7\"}", &s));
    CHECK_EQ_INT(s.chip.generation, 7);
    /* a complete chip without a base */
    const char *full =
        "{\n"
        "  \"name\": \"tiny\", \"cores_per_chip\": 1, \"mxus_per_core\": 1, \"mxu_rows\": 32, \"mxu_cols\": 32,\n"
        "  \"clock_ghz\": 1, \"hbm_gib\": 4, \"hbm_gb_s\": 100, \"vmem_mib\": 8, \"torus\": \"2d\",\n"
        "  \"pod_dims\": [4, 4], \"max_pod_chips\": 16, \"ici_links\": 4, \"ici_link_gb_s\": 10,\n"
        "  \"topology\": [2, 4]\n"
        "}\n";
    REQUIRE_OK(ctx, parse_chip(ctx, full, &s));
    CHECK_NEAR(s.chip.peak_bf16_flops, 2.0 * 32 * 32 * 1e9, 1);
    CHECK_EQ_INT(s.chip.hbm_usable_bytes, 4 * GiB);
    CHECK_EQ_INT(s.chip.max_slice_chips, 16);
    CHECK_EQ_INT(s.chip.chips_per_host, 4);
    CHECK_EQ_INT(s.chip.generation, 6);
    CHECK(s.chips == 8 && s.hosts == 2 && !s.wrap[0] && s.wrap[1]);
    tpu_ctx_free(ctx);
}

TEST(chip_file_errors_name_the_problem)
{
    struct { const char *json, *want; } k[] = {
        {"{\"name\": \"a\", \"base\": \"v5e\", \"hbm_gb\": 32}", "unknown key 'hbm_gb' (did you mean 'hbm_gib'?"},
        {"{\"name\": \"a\", \"base\": \"v5e\", \"frobnicate\": 1}", "unknown key 'frobnicate'"},
        {"{\"name\": \"a\", \"base\": \"v5e\", \"mxu_rows\": \"128\"}", "'mxu_rows' must be a number, got a string"},
        {"{\"name\": \"a\", \"base\": \"v5e\", \"mxu_rows\": -3}", "'mxu_rows' must be from 1 to 4096, got -3"},
        {"{\"name\": \"a\", \"base\": \"v5e\", \"mxus_per_core\": 2.5}", "'mxus_per_core' must be a whole number"},
        {"{\"name\": \"a\", \"base\": \"v5e\", \"hbm_gib\": 0}", "'hbm_gib' must be from"},
        {"{\"name\": \"a\", \"base\": \"v5e\", \"hbm_usable_gib\": 20}", "'hbm_usable_gib' (20.00 GiB)"},
        {"{\"name\": \"a\", \"base\": \"v4\", \"cores_per_device\": 3}", "'cores_per_device' (3) must divide"},
        {"{\"name\": \"a\", \"base\": \"v5e\", \"max_slice_chips\": 512}", "'max_slice_chips' (512)"},
        {"{\"name\": \"a\", \"base\": \"v9\"}", "'base' must name a built-in generation"},
        {"{\"name\": \"a\", \"base\": 5}", "'base' must be a string, got a number"},
        {"{\"base\": \"v5e\"}", "missing key 'name'"},
        {"{\"name\": \"a b\", \"base\": \"v5e\"}", "'name' may hold only"},
        {"{\"name\": \"a\", \"base\": \"v5e\", \"name\": \"b\"}", "key 'name' appears twice"},
        {"{\"name\": \"a\", \"base\": \"v5e\", \"topology\": [32, 32]}", "larger than the largest slice (256 chips)"},
        {"{\"name\": \"a\", \"base\": \"v5e\", \"topology\": [2, 32]}", "does not fit in the 16x16 pod"},
        {"{\"name\": \"a\", \"base\": \"v5e\", \"topology\": [4, 4, 4]}", "needs 2 dimensions"},
        {"{\"name\": \"a\", \"base\": \"v5e\", \"topology\": [4, 0]}", "'topology' entry 1 must be a whole number"},
        {"{\"name\": \"a\", \"base\": \"v4\", \"topology\": [4, 4, 6]}", "whole cubes"},
        {"{\"name\": \"a\", \"base\": \"v5e\", \"torus\": \"4d\"}", "'torus' must be \"2d\" or \"3d\""},
        {"{\"name\": \"a\", \"base\": \"v5e\", \"tiling\": \"v1\"}", "'tiling' must name a generation"},
        {"{\"name\": \"a\", \"base\": \"v5e\", \"pod_dims\": [8, 8]}", "hold 64 chips but 'max_pod_chips' is 256"},
        {"{\"name\": \"a\", \"mxu_rows\": 128}", "missing key"},
        {"{\"name\": \"a\", \"cores_per_chip\": 1, \"mxus_per_core\": 1, \"mxu_rows\": 8, \"mxu_cols\": 8, "
         "\"hbm_gib\": 1, \"hbm_gb_s\": 1, \"vmem_mib\": 1, \"torus\": \"2d\", \"max_pod_chips\": 4, "
         "\"ici_links\": 0, \"ici_link_gb_s\": 0, \"pod_dims\": [2, 2]}", "give 'peak_bf16_tflops' or 'clock_ghz'"},
        {"[1, 2]", "holds one JSON object"},
    };
    tpu_ctx *ctx = tpu_ctx_new();
    chp_slice s;
    for (int i = 0; i < UT_ARRAY_LEN(k); i++) {
        tpu_status st = parse_chip(ctx, k[i].json, &s);
        CHECK_MSG(st == TPU_ERR_INVALID || st == TPU_ERR_PARSE, "case %d: %s", i, tpu_status_name(st));
        CHECK_MSG(strstr(tpu_errmsg(ctx), k[i].want) && !strncmp(tpu_errmsg(ctx), "t.json", 6),
                  "case %d: '%s' lacks '%s'", i, tpu_errmsg(ctx), k[i].want);
    }
    /* syntax errors give line:col */
    CHECK(parse_chip(ctx, "{\n  \"name\": \"a\",\n  \"base\" \"v5e\"\n}", &s) == TPU_ERR_PARSE);
    CHECK_MSG(strstr(tpu_errmsg(ctx), "t.json:3:"), "%s", tpu_errmsg(ctx));
    CHECK(parse_chip(ctx, "", &s) == TPU_ERR_PARSE);
    CHECK(chp_chip_parse_json(ctx, "{\"name\": \"a\", \"base\": \"v5e\"} trailing", 6, "t.json", &s) == TPU_ERR_PARSE);
    tpu_ctx_free(ctx);
}

static int chip_t_fail_at, chip_t_calls;
static void *chip_t_malloc(size_t n, void *u)
{
    (void)u;
    return ++chip_t_calls == chip_t_fail_at ? NULL : malloc(n);
}
static void *chip_t_realloc(void *p, size_t n, void *u)
{
    (void)u;
    return ++chip_t_calls == chip_t_fail_at ? NULL : realloc(p, n);
}
static void chip_t_free(void *p, void *u)
{
    (void)u;
    free(p);
}

TEST(chip_file_fails_each_allocation_cleanly)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_allocator a = {chip_t_malloc, chip_t_realloc, chip_t_free, NULL};
    int ok = 0;
    for (chip_t_fail_at = 1; chip_t_fail_at < 200 && !ok; chip_t_fail_at++) {
        chip_t_calls = 0;
        tpu_chip *c = NULL;
        tpu_set_allocator(&a);
        tpu_status st = tpu_chip_get(ctx, "examples/chips/v5e-2x-hbm.json", &c);
        tpu_set_allocator(NULL);
        if (st == TPU_OK) ok = 1;
        else CHECK_MSG(st == TPU_ERR_NOMEM, "failing allocation %d: %s (%s)", chip_t_fail_at, tpu_status_name(st),
                       tpu_errmsg(ctx));
        tpu_chip_free(c);
    }
    CHECK_MSG(ok && chip_t_fail_at > 5, "loaded after %d allocations", chip_t_fail_at);
    tpu_ctx_free(ctx);
}

/* ---- tiling (design §5) ---- */

TEST(chip_padded_bytes_design_examples)
{
    /* s32[29360128,10]{1,0}: 10 pads to 128 — 14.00 GiB padded, 1.09 GiB unpadded (12.8x) */
    int64_t d1[2] = {29360128, 10};
    int m1[2] = {1, 0};
    int64_t p1 = chp_padded_bytes(gen("v3"), TPU_S32, 2, d1, m1);
    CHECK_EQ_INT(p1, 15032385536LL);
    char buf[32];
    snprintf(buf, sizeof buf, "%.2f", (double)p1 / GiB);
    CHECK_EQ_STR(buf, "14.00");
    snprintf(buf, sizeof buf, "%.2f", (double)chp_unpadded_bytes(TPU_S32, 2, d1) / GiB);
    CHECK_EQ_STR(buf, "1.09");
    /* f32[128,256,896,18]{0,3,2,1}: minor dim 0 (128), second-minor dim 3 (18 -> 24) — 2.62 vs 1.97 GiB */
    int64_t d2[4] = {128, 256, 896, 18};
    int m2[4] = {0, 3, 2, 1};
    int64_t p2 = chp_padded_bytes(gen("v3"), TPU_F32, 4, d2, m2);
    CHECK_EQ_INT(p2, 128LL * 256 * 896 * 24 * 4);
    snprintf(buf, sizeof buf, "%.2f", (double)p2 / GiB);
    CHECK_EQ_STR(buf, "2.62");
    snprintf(buf, sizeof buf, "%.2f", (double)chp_unpadded_bytes(TPU_F32, 4, d2) / GiB);
    CHECK_EQ_STR(buf, "1.97");
    /* the same array in the default layout pads 18 -> 128 instead */
    CHECK_EQ_INT(chp_padded_bytes(gen("v3"), TPU_F32, 4, d2, NULL), 128LL * 256 * 896 * 128 * 4);
    /* NULL chip: the v2..v6e rules */
    CHECK_EQ_INT(chp_padded_bytes(NULL, TPU_S32, 2, d1, m1), 15032385536LL);
}

TEST(chip_padded_bytes_rules)
{
    const chp_chip *v5e = gen("v5e"), *v7 = gen("v7");
    int64_t d[2] = {37, 6144};
    /* bf16: T(8,128)(2,1) before TPU7x, T(16,128)(2,1) on it */
    CHECK_EQ_INT(chp_padded_bytes(v5e, TPU_BF16, 2, d, NULL), 40LL * 6144 * 2);
    CHECK_EQ_INT(chp_padded_bytes(v7, TPU_BF16, 2, d, NULL), 48LL * 6144 * 2);
    /* 8-bit on v5e: 32 rows only for a multiple of 32, else 8 (measured with libtpu); 4-bit: 64 rows, two per
     * byte; pred is 8-bit */
    CHECK_EQ_INT(chp_padded_bytes(v5e, TPU_S8, 2, d, NULL), 40LL * 6144);
    CHECK_EQ_INT(chp_padded_bytes(v5e, TPU_PRED, 2, d, NULL), 40LL * 6144);
    int64_t d64[2] = {64, 6144}, d3[2] = {3, 6144};
    CHECK_EQ_INT(chp_padded_bytes(v5e, TPU_S8, 2, d64, NULL), 64LL * 6144);
    CHECK_EQ_INT(chp_padded_bytes(v5e, TPU_S8, 2, d3, NULL), 4LL * 6144);
    CHECK_EQ_INT(chp_padded_bytes(gen("v3"), TPU_F32, 2, d3, NULL), 4LL * 6144 * 4);
    CHECK_EQ_INT(chp_padded_bytes(gen("v3"), TPU_BF16, 2, d3, NULL), 4LL * 6144 * 2);
    /* every array takes at least 1 KiB up to v4, 512 bytes from v5e */
    CHECK_EQ_INT(chp_padded_bytes(gen("v3"), TPU_F32, 0, NULL, NULL), 1024);
    CHECK_EQ_INT(chp_padded_bytes(v5e, TPU_F32, 0, NULL, NULL), 512);
    CHECK_EQ_INT(chp_padded_bytes(v5e, TPU_S4, 2, d, NULL), 64LL * 6144 / 2);
    CHECK_EQ_INT(chp_padded_bytes(v5e, TPU_F32, 2, d, NULL), 40LL * 6144 * 4);
    CHECK_EQ_INT(chp_padded_bytes(v5e, TPU_F64, 2, d, NULL), 40LL * 6144 * 8);
    CHECK_EQ_INT(chp_padded_bytes(v5e, TPU_C64, 2, d, NULL), 40LL * 6144 * 8);
    /* rank 1: the next power of two of the length within [128 x words-per-element, 1024] */
    int64_t n;
    n = 2048; CHECK_EQ_INT(chp_padded_bytes(v5e, TPU_S32, 1, &n, NULL), 2048 * 4);
    n = 2049; CHECK_EQ_INT(chp_padded_bytes(v5e, TPU_S32, 1, &n, NULL), 3072 * 4);
    n = 16;   CHECK_EQ_INT(chp_padded_bytes(v5e, TPU_S32, 1, &n, NULL), 128 * 4);
    n = 301;  CHECK_EQ_INT(chp_padded_bytes(v5e, TPU_S32, 1, &n, NULL), 512 * 4);
    n = 128;  CHECK_EQ_INT(chp_padded_bytes(v5e, TPU_BF16, 1, &n, NULL), 256 * 2);
    n = 6144; CHECK_EQ_INT(chp_padded_bytes(v5e, TPU_BF16, 1, &n, NULL), 6144 * 2);
    n = 1;    CHECK_EQ_INT(chp_padded_bytes(v5e, TPU_PRED, 1, &n, NULL), 512);
    /* scalars are tiled like one element: 512 bytes */
    CHECK_EQ_INT(chp_padded_bytes(v5e, TPU_F32, 0, NULL, NULL), 512);
    CHECK_EQ_INT(chp_padded_bytes(v5e, TPU_S8, 0, NULL, NULL), 512);
    /* non-arrays and empty arrays */
    CHECK_EQ_INT(chp_padded_bytes(v5e, TPU_TUPLE, 0, NULL, NULL), 0);
    CHECK_EQ_INT(chp_padded_bytes(v5e, TPU_TOKEN, 0, NULL, NULL), 0);
    int64_t z[2] = {0, 5};
    CHECK_EQ_INT(chp_padded_bytes(v5e, TPU_F32, 2, z, NULL), 0);
    /* overflow saturates */
    int64_t huge[3] = {1LL << 40, 1LL << 20, 1LL << 10};
    CHECK_EQ_INT(chp_padded_bytes(v5e, TPU_F32, 3, huge, NULL), INT64_MAX);
    /* bad minor_to_major falls back to the default layout */
    int badm[2] = {5, 0};
    CHECK_EQ_INT(chp_padded_bytes(v5e, TPU_F32, 2, d, badm), 40LL * 6144 * 4);
}

TEST(chip_tile_strings)
{
    const chp_chip *v5e = gen("v5e"), *v7 = gen("v7");
    int64_t d2[2] = {8, 8}, n;
    char s[64];
    chp_tile_str(v5e, TPU_F32, 2, d2, s, sizeof s);   CHECK_EQ_STR(s, "T(8,128)");
    chp_tile_str(v5e, TPU_BF16, 2, d2, s, sizeof s);  CHECK_EQ_STR(s, "T(8,128)(2,1)");
    chp_tile_str(v7, TPU_BF16, 2, d2, s, sizeof s);   CHECK_EQ_STR(s, "T(16,128)(2,1)");
    chp_tile_str(v5e, TPU_F8E4M3FN, 2, d2, s, sizeof s); CHECK_EQ_STR(s, "T(8,128)(4,1)");
    int64_t d32[2] = {32, 8};
    chp_tile_str(v5e, TPU_F8E4M3FN, 2, d32, s, sizeof s); CHECK_EQ_STR(s, "T(32,128)(4,1)");
    n = 2048; chp_tile_str(v5e, TPU_S32, 1, &n, s, sizeof s); CHECK_EQ_STR(s, "T(1024)");
    n = 16;   chp_tile_str(v5e, TPU_S32, 1, &n, s, sizeof s); CHECK_EQ_STR(s, "T(128)");
    n = 6144; chp_tile_str(v5e, TPU_BF16, 1, &n, s, sizeof s); CHECK_EQ_STR(s, "T(1024)(128)(2,1)");
    n = 128;  chp_tile_str(v5e, TPU_BF16, 1, &n, s, sizeof s); CHECK_EQ_STR(s, "T(256)(128)(2,1)");
    n = 1;    chp_tile_str(v5e, TPU_PRED, 1, &n, s, sizeof s); CHECK_EQ_STR(s, "T(512)(128)(4,1)");
    chp_tile_str(v5e, TPU_U32, 0, NULL, s, sizeof s); CHECK_EQ_STR(s, "T(128)");
    chp_tile_str(v5e, TPU_TUPLE, 0, NULL, s, sizeof s); CHECK_EQ_STR(s, "");
}

/* ---- public API and printing ---- */

TEST(chip_public_api)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_chip *c = NULL;
    REQUIRE_OK(ctx, tpu_chip_get(ctx, "v5litepod-16", &c));
    CHECK_EQ_STR(tpu_chip_name(c), "v5litepod-16");
    CHECK_EQ_STR(tpu_chip_generation(c), "v5e");
    CHECK_EQ_INT(tpu_chip_num_chips(c), 16);
    CHECK_EQ_INT(tpu_chip_num_cores(c), 16);
    CHECK_EQ_INT(tpu_chip_num_hosts(c), 4);
    CHECK_NEAR(tpu_chip_peak_flops(c), 16 * 197e12, 1);
    CHECK_EQ_INT(tpu_chip_hbm_bytes(c), 256 * GiB);
    CHECK_EQ_INT(tpu_chip_hbm_usable_bytes(c), 16 * GiB - 256 * MiB);
    tpu_chip_free(c);
    tpu_chip_free(NULL);
    c = (tpu_chip *)1;
    CHECK(tpu_chip_get(ctx, "v3-12", &c) == TPU_ERR_INVALID && c == NULL);
    CHECK_EQ_INT(tpu_chips_count(), 7);
    CHECK_EQ_STR(tpu_chips_name(0), "v2");
    CHECK_EQ_STR(tpu_chips_name(6), "v7");
    CHECK(tpu_chips_name(7) == NULL);
    tpu_ctx_free(ctx);
}

static char *print_to_string(int table, const char *name, int json)
{
    tpu_ctx *ctx = tpu_ctx_new();
    FILE *f = tmpfile();
    char *out = NULL;
    if (!f) return NULL;
    tpu_status st;
    if (table) {
        st = tpu_chips_print(ctx, f, json);
    } else {
        tpu_chip *c = NULL;
        st = tpu_chip_get(ctx, name, &c);
        if (!st) st = tpu_chip_print(ctx, c, f, json);
        tpu_chip_free(c);
    }
    if (st == TPU_OK) {
        long n = ftell(f);
        rewind(f);
        out = calloc(1, (size_t)n + 1);
        if (out && fread(out, 1, (size_t)n, f) != (size_t)n) out[0] = 0;
    }
    fclose(f);
    tpu_ctx_free(ctx);
    return out;
}

TEST(chip_printing)
{
    char *t = print_to_string(1, NULL, 0);
    REQUIRE(t);
    CHECK(strstr(t, "v5litepod-N (chips)") && strstr(t, "tpu7x-N (cores)") && strstr(t, "2307"));
    free(t);
    t = print_to_string(1, NULL, 1);
    REQUIRE(t);
    cJSON *j = cJSON_Parse(t);
    CHECK(cJSON_IsArray(j) && cJSON_GetArraySize(j) == 7);
    cJSON *v4 = cJSON_GetArrayItem(j, 2);
    CHECK(cJSON_GetObjectItem(v4, "cmem_bytes") && cJSON_GetObjectItem(v4, "cmem_bytes")->valuedouble == 134217728);
    cJSON_Delete(j);
    free(t);
    t = print_to_string(0, "v4-64", 1);
    REQUIRE(t);
    j = cJSON_Parse(t);
    CHECK(cJSON_IsObject(j));
    CHECK(cJSON_GetObjectItem(j, "chips") && cJSON_GetObjectItem(j, "chips")->valueint == 32);
    cJSON *topo = cJSON_GetObjectItem(j, "topology");
    CHECK(cJSON_GetArraySize(topo) == 3 && cJSON_GetArrayItem(topo, 2)->valueint == 4);
    CHECK(cJSON_GetObjectItem(j, "peak_bf16_flops")->valuedouble == 32 * 275e12);
    cJSON_Delete(j);
    free(t);
    t = print_to_string(0, "v3-32", 0);
    REQUIRE(t);
    CHECK(strstr(t, "v3-32: 16 v3 chips, 32 TensorCores") && strstr(t, "15.48 GiB of 16 GiB per device") &&
          strstr(t, "1.968 PFLOP/s") && strstr(t, "512 GiB"));
    free(t);
}
