/* t_scalesim.c — the systolic model (timing/systolic.h) and the SCALE-Sim compatible layer mode
 * (compat/scalesim.h): every row of the SCALE-Sim result tables in the corpus, reports byte-identical to
 * SCALE-Sim 3.0.0 on the golden cases (tests/golden/scalesim, made by make_golden.py), every corpus
 * topology x config, and clear file:line errors on malformed input. */
#include "test.h"
#include "compat/scalesim.h"
#include "timing/systolic.h"
#include "util/util.h"
#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- helpers ---- */

static char *ss_t_read(const char *path)
{
    char *data = NULL;
    size_t len = 0;
    tpu_ctx *ctx = tpu_ctx_new();
    if (ut_read_file(ctx, path, &data, &len) != TPU_OK) data = NULL;
    tpu_ctx_free(ctx);
    return data;
}

static int ss_t_lines(const char *s)
{
    int n = 0;
    for (; s && *s; s++) n += *s == '\n';
    return n;
}

/* rm -r for the small trees the tests make */
static void ss_t_rmtree(const char *path)
{
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char p[1024];
            snprintf(p, sizeof p, "%s/%s", path, e->d_name);
            ss_t_rmtree(p);
        }
        closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

static const char *ss_reports[] = {"COMPUTE_REPORT.csv", "BANDWIDTH_REPORT.csv", "DETAILED_ACCESS_REPORT.csv"};

/* A config like the one that produced the LUT (LLMCompass: 1 MB SRAMs, CALC). */
static void ss_t_lut_config(ss_config *c, int64_t rows, int64_t cols, tim_dataflow df)
{
    ss_config_init(c);
    c->array_rows = rows;
    c->array_cols = cols;
    c->ifmap_kb = c->filter_kb = c->ofmap_kb = 1024;
    c->df = df;
    c->user_bw = false;
}

/* ---- the closed-form model ---- */

TEST(systolic_fold_formulas)
{
    tim_array a = {8, 4};
    tim_systolic_result r;
    /* os: Sr=M, Sc=N, T=K, fold = T + R + C - 2 */
    REQUIRE(tim_systolic_gemm(&a, 20, 10, 7, TIM_DF_OS, &r) == TPU_OK);
    CHECK_EQ_INT(r.row_folds, 3);
    CHECK_EQ_INT(r.col_folds, 3);
    CHECK_EQ_INT(r.fold_cycles, 7 + 8 + 4 - 2);
    CHECK_EQ_INT(r.cycles, 9 * 17 - 1);
    CHECK_EQ_INT(r.macs, 20 * 10 * 7);
    CHECK_EQ_INT(r.ofmap_writes, 200 + 9 * (8 + 4));
    /* ws: Sr=K, Sc=N, T=M, fold = 2R + C + T - 2 */
    REQUIRE(tim_systolic_gemm(&a, 20, 10, 7, TIM_DF_WS, &r) == TPU_OK);
    CHECK_EQ_INT(r.row_folds, 1);
    CHECK_EQ_INT(r.col_folds, 3);
    CHECK_EQ_INT(r.fold_cycles, 16 + 4 + 20 - 2);
    CHECK_EQ_INT(r.fill_cycles, 8);
    CHECK_EQ_INT(r.filter_reads, 70);
    /* is: Sr=K, Sc=M, T=N */
    REQUIRE(tim_systolic_gemm(&a, 20, 10, 7, TIM_DF_IS, &r) == TPU_OK);
    CHECK_EQ_INT(r.col_folds, 5);
    CHECK_EQ_INT(r.fold_cycles, 16 + 4 + 10 - 2);
    CHECK_EQ_INT(r.ifmap_reads, 140);
    /* the TPU timing model's use: one 128x128 weight-stationary MXU */
    tim_array mxu = {128, 128};
    REQUIRE(tim_systolic_gemm(&mxu, 1024, 1024, 1024, TIM_DF_WS, &r) == TPU_OK);
    CHECK_EQ_INT(r.folds, 64);
    CHECK_EQ_INT(r.cycles, 64 * (256 + 128 + 1024 - 2) - 1);
    CHECK_NEAR(r.mapping_efficiency, 1.0, 0);
    /* bad arguments */
    CHECK(tim_systolic_gemm(&a, 0, 1, 1, TIM_DF_OS, &r) == TPU_ERR_INVALID);
    tim_array bad = {0, 4};
    CHECK(tim_systolic_gemm(&bad, 1, 1, 1, TIM_DF_OS, &r) == TPU_ERR_INVALID);
    /* conv -> GEMM, SCALE-Sim's output size ceil((H - R + s) / s) */
    tim_conv cv = {224, 224, 7, 7, 3, 64, 2, 2};
    int64_t M, N, K;
    REQUIRE(tim_conv_to_gemm(&cv, &M, &N, &K) == TPU_OK);
    CHECK_EQ_INT(M, 110 * 110);
    CHECK_EQ_INT(N, 64);
    CHECK_EQ_INT(K, 147);
}

/* The fold geometry must carry exactly the SRAM accesses the model counts. */
TEST(systolic_fold_geometry_counts)
{
    tim_array arrs[] = {{8, 4}, {3, 5}, {16, 16}};
    for (int ai = 0; ai < 3; ai++)
        for (int df = 0; df < 3; df++) {
            tim_systolic_result r;
            REQUIRE(tim_systolic_gemm(&arrs[ai], 21, 13, 9, (tim_dataflow)df, &r) == TPU_OK);
            int64_t in = 0, fl = 0, out = 0;
            for (int64_t fc = 0; fc < r.col_folds; fc++)
                for (int64_t fr = 0; fr < r.row_folds; fr++) {
                    tim_fold f;
                    tim_systolic_fold(&arrs[ai], (tim_dataflow)df, &r, fr, fc, &f);
                    for (int64_t t = 0; t < f.cycles; t++) {
                        int64_t c0, c1;
                        tim_stream_lanes(&f.ifmap, t, &c0, &c1);
                        in += c1 >= c0 ? c1 - c0 + 1 : 0;
                        tim_stream_lanes(&f.filter, t, &c0, &c1);
                        fl += c1 >= c0 ? c1 - c0 + 1 : 0;
                        tim_stream_lanes(&f.ofmap, t, &c0, &c1);
                        out += c1 >= c0 ? c1 - c0 + 1 : 0;
                    }
                }
            CHECK_EQ_INT(in, r.ifmap_reads);
            CHECK_EQ_INT(fl, r.filter_reads);
            /* SCALE-Sim's os counter adds the tile's height + width per fold */
            CHECK_EQ_INT(out, df == TIM_DF_OS ? r.ofmap_writes - r.folds * (arrs[ai].rows + arrs[ai].cols)
                                              : r.ofmap_writes);
        }
}

TEST(systolic_ratio_is_correctly_rounded)
{
    /* expected values are Python's int / int */
    CHECK(tim_ratio(1, 3) == 1.0 / 3.0);
    CHECK(tim_ratio(6871947673600LL, 4349LL * 16384) == 96442.95240285122);
    CHECK(tim_ratio(9007199254740993LL, 1) == 9007199254740992.0);      /* 2^53 + 1: ties to even */
    CHECK(tim_ratio(9007199254740995LL, 1) == 9007199254740996.0);
    CHECK(tim_ratio(9223372036854775807LL, 3) == 3.0744573456182584e+18);
    CHECK(tim_ratio(-7, 2) == -3.5);
}

TEST(scalesim_float_repr)
{
    /* Python's repr of the same doubles */
    struct { double x; const char *s; } t[] = {
        {100.0, "100.0"}, {5.886, "5.886"}, {0.1, "0.1"}, {1.0 / 3.0, "0.3333333333333333"},
        {1e-05, "1e-05"}, {0.0001, "0.0001"}, {1e16, "1e+16"}, {9999999999999998.0, "9999999999999998.0"},
        {-66.0, "-66.0"}, {2.1238938053097347, "2.1238938053097347"}, {123456789012345680.0, "1.2345678901234568e+17"},
        {0.0, "0.0"}, {1.5e-7, "1.5e-07"}, {28.571428571428573, "28.571428571428573"},
    };
    char buf[64];
    for (int i = 0; i < UT_ARRAY_LEN(t); i++) {
        ss_format_float(t[i].x, buf, sizeof buf);
        CHECK_EQ_STR(buf, t[i].s);
    }
}

/* ---- every row of the SCALE-Sim result tables (M,N,K,rows,cols,df,cycles,util%) ---- */

TEST(scalesim_lut_every_row)
{
    static const char *files[] = {"scalesim/lut/look_up_table_8_8.csv", "scalesim/lut/look_up_table_64_64.csv",
                                  "scalesim/lut/look_up_table_128_128.csv"};
    int total = 0, model_ok = 0, sim_ok = 0, files_seen = 0;
    tpu_ctx *ctx = tpu_ctx_new();
    for (int fi = 0; fi < 3; fi++) {
        const char *path = test_corpus(files[fi]);
        char *text = path ? ss_t_read(path) : NULL;
        if (!text) continue;
        files_seen++;
        char *save = NULL;
        for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
            long long M, N, K, R, C, cyc;
            char df[8], util[32];
            if (sscanf(line, "%lld,%lld,%lld,%lld,%lld,%7[a-z],%lld,%31s", &M, &N, &K, &R, &C, df, &cyc, util) != 8) {
                test_fail(__FILE__, __LINE__, "%s: unreadable row '%s'", files[fi], line);
                continue;
            }
            total++;
            char want[48];   /* the table was re-saved by pandas: "22.3" for 22.300 */
            snprintf(want, sizeof want, "%.3f", strtod(util, NULL));
            tim_dataflow d = !strcmp(df, "os") ? TIM_DF_OS : !strcmp(df, "ws") ? TIM_DF_WS : TIM_DF_IS;
            tim_array arr = {R, C};
            tim_systolic_result r;
            char u[48];
            if (tim_systolic_gemm(&arr, M, N, K, d, &r) == TPU_OK) {
                snprintf(u, sizeof u, "%.3f", r.utilization * 100);
                if (r.cycles == cyc && !strcmp(u, want)) model_ok++;
                else test_fail(__FILE__, __LINE__, "model: %s -> %lld cycles, %s%%", line, (long long)r.cycles, u);
            }
            /* the full emulation (SCALE-Sim's memory walk) must agree too */
            ss_config cfg;
            ss_t_lut_config(&cfg, R, C, d);
            ss_layer l = {(char *)"lut", 0, M, K, 1, K, 1, N, 1, 1};
            ss_layer_result res;
            if (ss_simulate_layer(ctx, &cfg, &l, &res) == TPU_OK) {
                snprintf(u, sizeof u, "%.3f", res.overall_util);
                if (res.total_cycles == cyc && res.stall_cycles == 0 && !strcmp(u, want)) sim_ok++;
                else test_fail(__FILE__, __LINE__, "emulation: %s -> %lld cycles, %s%%", line,
                               (long long)res.total_cycles, u);
            } else {
                test_fail(__FILE__, __LINE__, "emulation: %s: %s", line, tpu_errmsg(ctx));
            }
        }
        ut_free(text);
    }
    tpu_ctx_free(ctx);
    if (!files_seen) return;   /* corpus absent */
    CHECK_EQ_INT(files_seen, 3);
    CHECK_EQ_INT(total, 481 + 416 + 141);
    CHECK_EQ_INT(model_ok, total);
    CHECK_EQ_INT(sim_ok, total);
    printf("    LUT rows matched: model %d/%d, emulation %d/%d\n", model_ok, total, sim_ok, total);
}

/* ---- golden reports from SCALE-Sim 3.0.0 ---- */

TEST(scalesim_golden_reports_identical)
{
    const char *root = "tests/golden/scalesim";
    DIR *d = opendir(root);
    REQUIRE(d);
    char tmpl[] = "/tmp/tpusim-ss-XXXXXX";
    REQUIRE(mkdtemp(tmpl));
    int cases = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char dir[512], cfgp[600], topo[600], modep[600];
        snprintf(dir, sizeof dir, "%s/%s", root, e->d_name);
        snprintf(modep, sizeof modep, "%s/mode", dir);
        char *mode = ss_t_read(modep);
        if (!mode) continue;   /* make_golden.py */
        snprintf(cfgp, sizeof cfgp, "%s/config.cfg", dir);
        snprintf(topo, sizeof topo, "%s/topology.csv", dir);
        tpu_ctx *ctx = tpu_ctx_new();
        tpu_scalesim_opts o = tpu_scalesim_opts_default();
        o.config_path = cfgp;
        o.topology_path = topo;
        o.gemm = !strncmp(mode, "gemm", 4);
        o.out_dir = tmpl;
        char *rd = NULL;
        int n = 0;
        tpu_status st = tpu_scalesim_run(ctx, &o, &rd, &n);
        CHECK_MSG(st == TPU_OK, "%s: %s", e->d_name, tpu_errmsg(ctx));
        if (st == TPU_OK) {
            cases++;
            for (int i = 0; i < 3; i++) {
                char want_p[700], got_p[1200];
                snprintf(want_p, sizeof want_p, "%s/%s", dir, ss_reports[i]);
                snprintf(got_p, sizeof got_p, "%s/%s", rd, ss_reports[i]);
                char *want = ss_t_read(want_p), *got = ss_t_read(got_p);
                CHECK_MSG(want && got && !strcmp(want, got), "%s/%s differs from SCALE-Sim's:\n--- want\n%s--- got\n%s",
                          e->d_name, ss_reports[i], want ? want : "(missing)\n", got ? got : "(missing)\n");
                ut_free(want);
                ut_free(got);
            }
        }
        tpu_free(rd);
        ut_free(mode);
        tpu_ctx_free(ctx);
    }
    closedir(d);
    ss_t_rmtree(tmpl);
    CHECK(cases >= 12);
}

/* ---- every corpus topology x config produces the three reports ---- */

TEST(scalesim_corpus_every_topology_and_config)
{
    static const char *topos[] = {"alexnet", "Resnet18", "Resnet50", "NCF", "gpt2", "test_mnk_input"};
    static const int gemm[] = {0, 0, 0, 1, 1, 1};
    static const int layers[] = {5, 21, 54, 12, 6, 1};
    static const char *cfgs[] = {"eyeriss", "google", "scale"};
    static const char *runs[] = {"eyeriss", "GoogleTPU_v1_os", "scale_example_run_32x32_ws"};
    char probe[64];
    snprintf(probe, sizeof probe, "scalesim/configs/scale.cfg");
    if (!test_corpus(probe)) {
        test_skip("../shared/corpus absent");
        return;
    }
    char tmpl[] = "/tmp/tpusim-ss-XXXXXX";
    REQUIRE(mkdtemp(tmpl));
    for (int ti = 0; ti < 6; ti++)
        for (int ci = 0; ci < 3; ci++) {
            char cfgrel[128], toporel[128], cfgp[512], topop[512], out[600];
            snprintf(cfgrel, sizeof cfgrel, "scalesim/configs/%s.cfg", cfgs[ci]);
            snprintf(cfgp, sizeof cfgp, "%s", test_corpus(cfgrel));
            snprintf(toporel, sizeof toporel, "scalesim/topologies/%s.csv", topos[ti]);
            snprintf(topop, sizeof topop, "%s", test_corpus(toporel));
            snprintf(out, sizeof out, "%s/%s", tmpl, topos[ti]);
            tpu_ctx *ctx = tpu_ctx_new();
            tpu_scalesim_opts o = tpu_scalesim_opts_default();
            o.config_path = cfgp;
            o.topology_path = topop;
            o.gemm = gemm[ti];
            o.out_dir = out;
            char *rd = NULL;
            int n = 0;
            tpu_status st = tpu_scalesim_run(ctx, &o, &rd, &n);
            CHECK_MSG(st == TPU_OK, "%s x %s: %s", topos[ti], cfgs[ci], tpu_errmsg(ctx));
            if (st == TPU_OK) {
                CHECK_EQ_INT(n, layers[ti]);
                char want_dir[700];
                snprintf(want_dir, sizeof want_dir, "%s/%s", out, runs[ci]);
                CHECK_EQ_STR(rd, want_dir);
                for (int i = 0; i < 3; i++) {
                    char p[1200];
                    snprintf(p, sizeof p, "%s/%s", rd, ss_reports[i]);
                    char *s = ss_t_read(p);
                    CHECK_MSG(s && ss_t_lines(s) == n + 1, "%s x %s: %s has %d lines", topos[ti], cfgs[ci],
                              ss_reports[i], ss_t_lines(s));
                    ut_free(s);
                }
            }
            tpu_free(rd);
            tpu_ctx_free(ctx);
        }
    ss_t_rmtree(tmpl);
}

/* ---- topology quirks ---- */

TEST(scalesim_topology_quirks)
{
    tpu_ctx *ctx = tpu_ctx_new();
    ss_topology t;
    /* first line is always the header; trailing commas; blank rows; a row of commas; extra columns; DP */
    const char *conv = "Layer name, H, W, R, S, C, N, stride,\n"
                       "\n"
                       ",,,,,,,,,,,\n"
                       "  Conv1 ,224,224,7,7,3,64,2,,,110,110,12100\r\n"
                       "DPconv,10,12,3,3,4,1,1,\n"
                       "sparse,5,5,1,1,2,2,1,2:4,\n"
                       "noComma,8,8,1,1,1,1,1";
    REQUIRE_OK(ctx, ss_topology_parse(ctx, conv, strlen(conv), "t.csv", false, &t));
    REQUIRE(t.n == 1 + 4 + 1 + 1);
    CHECK_EQ_STR(t.layers[0].name, "Conv1");
    CHECK_EQ_INT(t.layers[0].line, 4);
    CHECK_EQ_INT(t.layers[0].stride_w, 2);
    CHECK_EQ_STR(t.layers[1].name, "DPconvChannel_0");
    CHECK_EQ_STR(t.layers[4].name, "DPconvChannel_3");
    CHECK_EQ_INT(t.layers[4].channels, 1);
    CHECK_EQ_INT(t.layers[5].filters, 2);
    CHECK_EQ_INT(t.layers[6].ifmap_h, 8);
    CHECK(strstr(tpu_warnings(ctx), "t.csv:4: extra columns") != NULL);
    ss_topology_free(&t);
    /* GEMM rows map to SCALE-Sim's conv: ifmap M x K, filter 1 x K, N filters */
    const char *g = "Layer, M, N, K,\nQKT,1024,512,64,\nTest 1, 256, 128, 256,1";
    REQUIRE_OK(ctx, ss_topology_parse(ctx, g, strlen(g), "g.csv", true, &t));
    REQUIRE(t.n == 2);
    CHECK_EQ_INT(t.layers[0].ifmap_h, 1024);
    CHECK_EQ_INT(t.layers[0].ifmap_w, 64);
    CHECK_EQ_INT(t.layers[0].filter_w, 64);
    CHECK_EQ_INT(t.layers[0].filters, 512);
    CHECK_EQ_STR(t.layers[1].name, "Test 1");
    ss_topology_free(&t);
    tpu_ctx_free(ctx);
}

/* ---- malformed input: clear errors with file:line ---- */

static const char *ss_good_cfg =
    "[general]\nrun_name = t\n\n[architecture_presets]\nArrayHeight: 8\nArrayWidth: 8\nIfmapSramSzkB: 1\n"
    "FilterSramSzkB: 1\nOfmapSramSzkB: 1\nIfmapOffset: 0\nFilterOffset: 10000000\nOfmapOffset: 20000000\n"
    "Dataflow : os\nBandwidth : 10\n\n[run_presets]\nInterfaceBandwidth: CALC\n";

TEST(scalesim_config_ok_and_v2_v3)
{
    tpu_ctx *ctx = tpu_ctx_new();
    ss_config c;
    REQUIRE_OK(ctx, ss_config_parse(ctx, ss_good_cfg, strlen(ss_good_cfg), "ok.cfg", &c));
    CHECK_EQ_STR(c.run_name, "t");
    CHECK_EQ_INT(c.array_rows, 8);
    CHECK(!c.has_layout);
    CHECK(c.df == TIM_DF_OS);
    ss_config_free(&c);
    /* the corpus configs (v3, with and without [layout]) */
    static const char *names[] = {"eyeriss", "google", "scale"};
    for (int i = 0; i < 3; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "scalesim/configs/%s.cfg", names[i]);
        const char *p = test_corpus(rel);
        if (!p) continue;
        CHECK_OK(ctx, ss_config_load(ctx, p, &c));
        ss_config_free(&c);
    }
    tpu_ctx_free(ctx);
}

static void ss_t_bad_cfg(const char *text, const char *want)
{
    tpu_ctx *ctx = tpu_ctx_new();
    ss_config c;
    tpu_status st = ss_config_parse(ctx, text, strlen(text), "bad.cfg", &c);
    CHECK_MSG(st == TPU_ERR_PARSE, "expected a parse error for: %s", want);
    CHECK_MSG(strstr(tpu_errmsg(ctx), want) != NULL, "error '%s' lacks '%s'", tpu_errmsg(ctx), want);
    if (st == TPU_OK) ss_config_free(&c);
    tpu_ctx_free(ctx);
}

static char *ss_t_replace(const char *s, const char *from, const char *to)
{
    const char *p = strstr(s, from);
    if (!p) return ut_strdup(s);
    ut_buf b;
    ut_buf_init(&b);
    ut_buf_put(&b, s, (size_t)(p - s));
    ut_buf_puts(&b, to);
    ut_buf_puts(&b, p + strlen(from));
    return ut_buf_take(&b);
}

TEST(scalesim_config_errors_name_file_and_line)
{
    struct { const char *from, *to, *want; } t[] = {
        {"ArrayHeight: 8", "ArrayHeight: eight", "bad.cfg:5: ArrayHeight = 'eight' is not an integer"},
        {"ArrayWidth: 8", "ArrayWidth: 0", "bad.cfg:6: ArrayWidth = 0 is out of range"},
        {"Dataflow : os", "Dataflow : WS", "bad.cfg:13: Dataflow = 'WS'"},
        {"InterfaceBandwidth: CALC", "InterfaceBandwidth: FAST", "bad.cfg:17: InterfaceBandwidth = 'FAST'"},
        {"[run_presets]", "[run_presets", "bad.cfg:16: section header without ']'"},
        {"Bandwidth : 10", "Bandwidth : 10,x", "bad.cfg:14: Bandwidth = '10,x'"},
        {"Bandwidth : 10", "Bandwidth 10", "bad.cfg:14: expected 'key = value'"},
        {"ArrayHeight: 8\n", "", "bad.cfg: [architecture_presets] has no ArrayHeight"},
        {"run_name = t\n", "", "bad.cfg: [general] has no run_name"},
        {"run_name = t", "run_name = ../x", "bad.cfg:2: run_name '../x'"},
        {"ArrayWidth: 8", "ArrayWidth: 8\narraywidth: 9", "bad.cfg:7: arraywidth is set twice"},
        {"[general]", "x = 1\n[general]", "bad.cfg:1: 'x = 1' comes before any [section]"},
        {"InterfaceBandwidth: CALC", "InterfaceBandwidth: USER", "bad.cfg:"},   /* fine; replaced below */
    };
    for (int i = 0; i < UT_ARRAY_LEN(t) - 1; i++) {
        char *s = ss_t_replace(ss_good_cfg, t[i].from, t[i].to);
        ss_t_bad_cfg(s, t[i].want);
        ut_free(s);
    }
    /* USER mode needs Bandwidth */
    char *s = ss_t_replace(ss_good_cfg, "InterfaceBandwidth: CALC", "InterfaceBandwidth: USER");
    char *s2 = ss_t_replace(s, "Bandwidth : 10\n", "");
    ss_t_bad_cfg(s2, "bad.cfg: InterfaceBandwidth is USER but [architecture_presets] has no Bandwidth");
    ut_free(s);
    ut_free(s2);
}

static void ss_t_bad_topo(const char *text, bool gemm, const char *want)
{
    tpu_ctx *ctx = tpu_ctx_new();
    ss_topology t;
    tpu_status st = ss_topology_parse(ctx, text, strlen(text), "bad.csv", gemm, &t);
    CHECK_MSG(st == TPU_ERR_PARSE, "expected a parse error for: %s", want);
    CHECK_MSG(strstr(tpu_errmsg(ctx), want) != NULL, "error '%s' lacks '%s'", tpu_errmsg(ctx), want);
    if (st == TPU_OK) ss_topology_free(&t);
    tpu_ctx_free(ctx);
}

TEST(scalesim_topology_errors_name_file_and_line)
{
    ss_t_bad_topo("h\nc1,8,8,3,3,1,1,1,\nc2,8,8,3,x,1,1,1,\n", false, "bad.csv:3: column 5 (filter width) = 'x'");
    ss_t_bad_topo("h\nc1,8,8,3,3,1,1,\n", false, "bad.csv:2: expected 8 values");
    ss_t_bad_topo("h\ng,8,8,8,\n", false, "a GEMM topology needs -i gemm");
    ss_t_bad_topo("h\nc1,4,8,5,3,1,1,1,\n", false, "bad.csv:2: the 5x3 filter is larger than the 4x8 IFMAP");
    ss_t_bad_topo("h\nc1,8,8,3,3,0,1,1,\n", false, "bad.csv:2: column 6 (channels) = 0 must be between 1");
    ss_t_bad_topo("h\n\ng,8,8\n", true, "bad.csv:3: expected 4 values");
    ss_t_bad_topo("h\ng,8,-8,8,\n", true, "bad.csv:2: column 3 (N) = -8");
    ss_t_bad_topo("h\ng,8,8,99999999999999999999,\n", true, "bad.csv:2: column 4 (K)");
}

TEST(scalesim_run_errors)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_scalesim_opts o = tpu_scalesim_opts_default();
    CHECK(tpu_scalesim_run(ctx, &o, NULL, NULL) == TPU_ERR_INVALID);
    o.config_path = "/nonexistent/x.cfg";
    CHECK(tpu_scalesim_run(ctx, &o, NULL, NULL) == TPU_ERR_IO);
    CHECK(strstr(tpu_errmsg(ctx), "/nonexistent/x.cfg") != NULL);
    /* unsupported features are refused, not silently ignored */
    ss_config c;
    char *s = ss_t_replace(ss_good_cfg, "InterfaceBandwidth: CALC", "InterfaceBandwidth: CALC\nUseRamulatorTrace: True");
    REQUIRE_OK(ctx, ss_config_parse(ctx, s, strlen(s), "r.cfg", &c));
    ss_layer l = {(char *)"x", 2, 8, 8, 3, 3, 1, 1, 1, 1};
    ss_layer_result r;
    CHECK(ss_simulate_layer(ctx, &c, &l, &r) == TPU_ERR_UNSUPPORTED);
    CHECK(strstr(tpu_errmsg(ctx), "UseRamulatorTrace") != NULL);
    ss_config_free(&c);
    ut_free(s);
    tpu_ctx_free(ctx);
}
