/* t_train.c — `tpusim train` (src/train/): the example order and the schedules against python/tpusim's
 * reference values; signature.json, program and dataset errors that name the file and the key or field;
 * replicated training (8 replicas, gradients all-reduced on the runtime) against single-core training on the
 * full global batch; checkpoint/resume and steps-per-exec giving identical bytes; evaluation with the padded,
 * masked last batch. Uses examples/digits_mlp (docs/step_dir.md). */
#include "test.h"
#include "train/train.h"
#include "train/trn_trainer.h"
#include "profile/profile.h"
#include "test_browser.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define DIGITS "examples/digits_mlp"

static int tt_has_digits(void)
{
    if (access(DIGITS "/signature.json", R_OK) == 0) return 1;
    test_skip("%s not found; run from the repository root", DIGITS);
    return 0;
}

static char *tt_tmpdir(void)
{
    static char buf[8][64];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, 64, "/tmp/tpusim-ttrain.XXXXXX");
    return mkdtemp(b);
}

static void tt_rm_rf(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[1024];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (!lstat(p, &sb) && S_ISDIR(sb.st_mode)) tt_rm_rf(p);
        else unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static char *tt_read(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (b) b[n] = 0;
    fclose(f);
    if (len) *len = (size_t)n;
    return b;
}

static void tt_write(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(data, 1, len, f);
    fclose(f);
}

/* ---- order and schedules ---- */

TEST(train_epoch_order_matches_python)
{
    int64_t o[10];
    static const int64_t a[10] = {6, 3, 2, 9, 8, 1, 4, 7, 0, 5};   /* tpusim.data.epoch_order(10, 0, 0) */
    static const int64_t b[10] = {2, 5, 7, 6, 8, 1, 9, 4, 0, 3};   /* tpusim.data.epoch_order(10, 7, 3) */
    trn_epoch_order(10, 0, 0, 1, o);
    for (int i = 0; i < 10; i++) CHECK_EQ_INT(o[i], a[i]);
    trn_epoch_order(10, 7, 3, 1, o);
    for (int i = 0; i < 10; i++) CHECK_EQ_INT(o[i], b[i]);
    trn_epoch_order(10, 7, 3, 0, o);
    for (int i = 0; i < 10; i++) CHECK_EQ_INT(o[i], i);
}

TEST(train_schedules_match_python)
{
    /* values from python/tpusim/schedules.value (the reference), in double */
    trn_sched oc = {.kind = TRN_SCHED_ONE_CYCLE, .max_lr = 0.01, .pct_start = 0.3, .div_factor = 25, .final_div_factor = 1e4,
                    .total_steps = -1, .cos = 1};
    static const int64_t ts[] = {0, 1, 48, 49, 50, 100, 164, 200};
    static const double want[] = {0.0003999999999999993, 0.0004100664340589838, 0.009997482731418471, 0.009999537611139154,
                                  0.009995839013366929, 0.005845926402683325, 4e-08, 4e-08};
    for (int i = 0; i < 8; i++) CHECK_NEAR(trn_sched_value(&oc, ts[i], 165), want[i], 1e-15);
    CHECK(isnan(trn_sched_value(&oc, 3, 1)));   /* no total: neither in the spec nor --steps */
    trn_sched lin = {.kind = TRN_SCHED_ONE_CYCLE, .max_lr = 0.05, .pct_start = 0.25, .div_factor = 25, .final_div_factor = 1e4,
                     .total_steps = 10, .cos = 0};
    static const double wl[10] = {0.002, 0.034, 0.04666668, 0.04000004, 0.0333334, 0.02666676, 0.020000120000000003,
                                  0.013333480000000002, 0.00666684, 1.9999999999881224e-07};
    for (int t = 0; t < 10; t++) CHECK_NEAR(trn_sched_value(&lin, t, 999), wl[t], 1e-15);
    trn_sched sd = {.kind = TRN_SCHED_STEP, .initial = 0.1, .step_size = 3, .gamma = 0.5};
    static const int64_t st[] = {0, 2, 3, 7, 9};
    static const double ws[] = {0.1, 0.1, 0.05, 0.025, 0.0125};
    for (int i = 0; i < 5; i++) CHECK_NEAR(trn_sched_value(&sd, st[i], 0), ws[i], 1e-17);
    trn_sched c = {.kind = TRN_SCHED_CONSTANT, .value = 0.3};
    CHECK_NEAR(trn_sched_value(&c, 12345, 0), 0.3, 0);
}

TEST(train_lr_scaling_rule)
{
    if (!tt_has_digits()) return;
    tpu_ctx *ctx = tpu_ctx_new();
    trn_sig *s = NULL;
    REQUIRE_OK(ctx, trn_sig_load(ctx, DIGITS, &s));
    CHECK_NEAR(trn_lr_scale(s, 8), 1.0, 0);
    CHECK_NEAR(trn_lr_scale(s, 1), 0.125, 0);
    /* fed value = schedule x scale, rounded to f32 once */
    CHECK_EQ_INT(trn_hyper_value(s, 0, 0, 165, 1) == (float)(0.0003999999999999993 * 0.125), 1);
    CHECK_EQ_INT(trn_hyper_value(s, 0, 50, 165, 8) == (float)0.009995839013366929, 1);
    trn_sig_free(s);
    tpu_ctx_free(ctx);
}

/* ---- signature errors ---- */

/* A copy of the digits signature with `from` replaced by `to` (programs and data by absolute paths), loaded
 * through the trainer; returns its status and leaves the message in ctx. */
static tpu_status tt_sig_variant(tpu_ctx *ctx, const char *from, const char *to, int train)
{
    size_t len;
    char *text = tt_read(DIGITS "/signature.json", &len);
    if (!text) return TPU_ERR_IO;
    char cwd[512], abs[700], *dir = tt_tmpdir();
    if (!getcwd(cwd, sizeof cwd) || !dir) {
        free(text);
        return TPU_ERR_IO;
    }
    /* make the STEP_DIR's relative names absolute, then apply the variant */
    const char *rel[] = {"\"step.hlo\"", "\"grad.hlo\"", "\"apply.hlo\"", "\"eval.hlo\"", "\"init_state.npz\"", "\"data/train\"",
                         "\"data/test\"", "\"data/train.tpuds\"", "\"data/test.tpuds\""};
    char *cur = text;
    for (int r = -1; r < (int)(sizeof rel / sizeof rel[0]); r++) {
        const char *f = r < 0 ? from : rel[r];
        char rep[800];
        if (r < 0) snprintf(rep, sizeof rep, "%s", to);
        else {
            snprintf(abs, sizeof abs, "%s/%s/%.*s", cwd, DIGITS, (int)strlen(rel[r]) - 2, rel[r] + 1);
            snprintf(rep, sizeof rep, "\"%s\"", abs);
        }
        char *p = strstr(cur, f);
        if (!p && r < 0) test_fail(__FILE__, __LINE__, "the variant's text '%s' is not in the signature", f);
        if (!p) continue;
        size_t n = strlen(cur) - strlen(f) + strlen(rep) + 1;
        char *nt = malloc(n);
        snprintf(nt, n, "%.*s%s%s", (int)(p - cur), cur, rep, p + strlen(f));
        free(cur);
        cur = nt;
    }
    char path[128];
    snprintf(path, sizeof path, "%s/signature.json", dir);
    tt_write(path, cur, strlen(cur));
    free(cur);
    tpu_status st;
    if (train) {
        tpu_train_opts o = tpu_train_opts_default();
        o.steps = 5;
        tpu_trainer *tr = NULL;
        st = tpu_trainer_new(ctx, dir, &o, &tr);
        tpu_trainer_free(tr);
    } else {
        trn_sig *s = NULL;
        st = trn_sig_load(ctx, dir, &s);
        trn_sig_free(s);
    }
    tt_rm_rf(dir);
    return st;
}

static void tt_expect_err(tpu_ctx *ctx, tpu_status st, const char *needle1, const char *needle2)
{
    CHECK_MSG(st != TPU_OK, "expected an error mentioning %s", needle1);
    const char *m = tpu_errmsg(ctx);
    CHECK_MSG(strstr(m, needle1) != NULL, "message lacks '%s': %s", needle1, m);
    if (needle2) CHECK_MSG(strstr(m, needle2) != NULL, "message lacks '%s': %s", needle2, m);
}

TEST(train_signature_errors_name_file_and_key)
{
    if (!tt_has_digits()) return;
    tpu_ctx *ctx = tpu_ctx_new();
    trn_sig *s = NULL;
    REQUIRE_OK(ctx, trn_sig_load(ctx, DIGITS, &s));
    CHECK_EQ_INT(s->nstate, 19);
    CHECK_EQ_INT(s->nparam, 6);
    CHECK_EQ_INT(s->nstat, 0);
    CHECK_EQ_INT(s->B, 16);
    CHECK_EQ_INT(s->has_eval, 1);
    CHECK(s->ebatch[2].source == NULL);   /* @mask */
    CHECK_EQ_INT(s->lr_hyper, 0);
    trn_sig_free(s);

    tt_expect_err(ctx, tt_sig_variant(ctx, "\"tpusim.step_dir\"", "\"tpusim.other\"", 0), "signature.json: key 'format'", NULL);
    tt_expect_err(ctx, tt_sig_variant(ctx, "\"version\": 1", "\"version\": 2", 0), "key 'version'", "version 1");
    tt_expect_err(ctx, tt_sig_variant(ctx, "\"role\": \"counter\"", "\"role\": \"countr\"", 0), "key 'state[6].role'", "countr");
    tt_expect_err(ctx, tt_sig_variant(ctx, "\"name\": \"params/w0\", \"dtype\": \"f32\"", "\"name\": \"params/w0\", \"dtype\": \"s32\"", 0),
                  "key 'state[0].role'", "floating point");
    tt_expect_err(ctx, tt_sig_variant(ctx, "\"kind\": \"one_cycle\"", "\"kind\": \"cosine\"", 0), "hypers[0].schedule.kind",
                  "unknown schedule kind");
    tt_expect_err(ctx, tt_sig_variant(ctx, "\"loss_metric\": \"loss\"", "\"loss_metric\": \"xent\"", 0), "key 'loss_metric'", NULL);
    tt_expect_err(ctx, tt_sig_variant(ctx, "\"dtype\": \"u8\"", "\"dtype\": \"u9\"", 0), "key 'batch[0].dtype'", "u9");
    tt_expect_err(ctx, tt_sig_variant(ctx, "\"per_replica_batch\": 16,", "", 0), "key 'per_replica_batch'", "missing");
    tt_expect_err(ctx, tt_sig_variant(ctx, "\"grad_reduce\": \"mean\"", "\"grad_reduce\": \"sum\"", 0), "key 'grad_reduce'", NULL);
    tt_expect_err(ctx, tt_sig_variant(ctx, "\"source\": \"@mask\"", "\"source\": \"mask\"", 1), "no array 'mask'", "eval input");
    tt_expect_err(ctx, tt_sig_variant(ctx, "\"programs\": {", "\"programs\": {{", 0), "signature.json:", "not valid JSON");
    /* a program that disagrees with the signature, found when the trainer loads it */
    tt_expect_err(ctx, tt_sig_variant(ctx, "\"shape\": [64, 128], \"role\": \"param\"", "\"shape\": [64, 129], \"role\": \"param\"", 1),
                  "parameter 0 is f32[64,128], but the signature's state params/w0 is f32[64,129]", NULL);
    /* the dataset disagrees with a batch input */
    tt_expect_err(ctx, tt_sig_variant(ctx, "\"dtype\": \"u8\", \"shape\": [16, 64], \"source\": \"x\"}",
                                      "\"dtype\": \"f32\", \"shape\": [16, 64], \"source\": \"x\"}", 1),
                  "array 'x' is u8[64] per example, batch input 'x' wants f32[64]", NULL);
    CHECK_EQ_INT(tt_sig_variant(ctx, "\"name\": \"digits_mlp\"", "\"name\": \"digits_mlp\"", 1), TPU_OK);
    tpu_trainer *tr = NULL;
    tpu_train_opts o = tpu_train_opts_default();
    o.steps = 5;
    o.cores = 4;
    tt_expect_err(ctx, tpu_trainer_new(ctx, DIGITS, &o, &tr), "1 or all 8", NULL);
    tt_expect_err(ctx, tpu_trainer_new(ctx, "/nonexistent/dir", &o, &tr), "is not a STEP_DIR", NULL);
    CHECK(tr == NULL);
    tpu_ctx_free(ctx);
}

/* ---- datasets ---- */

/* A valid .tpuds file: x u8[4] per example, y s32[] per example, 3 examples. */
static size_t tt_tpuds(uint8_t *f)
{
    memset(f, 0, 8192 + 64);
    memcpy(f, "TPUSIMDS", 8);
    uint32_t ver = 1, A = 2;
    uint64_t n = 3, hs = 4096, fs = 8192 + 12;
    memcpy(f + 8, &ver, 4);
    memcpy(f + 12, &A, 4);
    memcpy(f + 16, &n, 8);
    memcpy(f + 24, &hs, 8);
    memcpy(f + 32, &fs, 8);
    uint8_t *e = f + 64;
    memcpy(e, "x", 1);
    memcpy(e + 48, "u8", 2);
    uint32_t r = 1;
    memcpy(e + 56, &r, 4);
    int64_t d0 = 4;
    memcpy(e + 64, &d0, 8);
    uint64_t off = 4096, nb = 12;
    memcpy(e + 112, &off, 8);
    memcpy(e + 120, &nb, 8);
    e = f + 64 + 128;
    memcpy(e, "y", 1);
    memcpy(e + 48, "s32", 3);
    off = 8192;
    memcpy(e + 112, &off, 8);
    memcpy(e + 120, &nb, 8);
    for (int i = 0; i < 12; i++) f[4096 + i] = (uint8_t)(10 + i);
    int32_t y[3] = {7, -1, 42};
    memcpy(f + 8192, y, 12);
    return (size_t)fs;
}

static tpu_status tt_open_bytes(tpu_ctx *ctx, const char *dir, const uint8_t *f, size_t len)
{
    char p[128];
    snprintf(p, sizeof p, "%s/d.tpuds", dir);
    tt_write(p, f, len);
    trn_dataset *d = NULL;
    tpu_status st = trn_data_open(ctx, p, &d);
    trn_data_free(d);
    return st;
}

TEST(train_cached_format_reader)
{
    tpu_ctx *ctx = tpu_ctx_new();
    char *dir = tt_tmpdir();
    REQUIRE(dir);
    static uint8_t f[8192 + 64], g[8192 + 64];
    size_t len = tt_tpuds(f);
    char p[128];
    snprintf(p, sizeof p, "%s/d.tpuds", dir);
    tt_write(p, f, len);
    trn_dataset *d = NULL;
    REQUIRE_OK(ctx, trn_data_open(ctx, p, &d));
    CHECK_EQ_INT(d->n, 3);
    CHECK_EQ_INT(d->narr, 2);
    CHECK_EQ_INT(d->cached, 1);
    int x = trn_data_find(d, "x"), y = trn_data_find(d, "y");
    REQUIRE(x >= 0 && y >= 0);
    uint8_t ex[4];
    int32_t yv;
    trn_data_copy(d, x, 2, ex);
    CHECK_EQ_INT(ex[0], 18);
    CHECK_EQ_INT(ex[3], 21);
    trn_data_copy(d, y, 2, &yv);
    CHECK_EQ_INT(yv, 42);
    trn_data_free(d);
    /* each corruption names the file and the field */
    struct {
        size_t at;
        uint64_t v;
        int bytes;
        const char *msg;
    } bad[] = {
        {0, 'X', 1, "field 'magic'"},
        {8, 2, 4, "field 'version' is 2"},
        {12, 0, 4, "field 'num_arrays' is 0"},
        {24, 64, 8, "field 'header_size'"},
        {32, 9999, 8, "field 'file_size' is 9999"},
        {64 + 48, 0x333366, 4, "field 'dtype' is 'f33'"},   /* "f33" */
        {64 + 56, 7, 4, "field 'rank' is 7"},
        {64 + 120, 13, 8, "field 'nbytes' is 13, but 3 examples of u8[4] are 12 bytes"},
        {64 + 112, 4097, 8, "field 'offset' is 4097"},
        {64 + 128 + 112, 12288, 8, "runs past the end of the file"},
        {64, 0, 1, "field 'name'"},
        {64 + 128 + 112, 4096, 8, "arrays 'x' and 'y' overlap (bytes 4096..4108 and 4096..4108)"},   /* issue 18 */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memcpy(g, f, len);
        memcpy(g + bad[i].at, &bad[i].v, (size_t)bad[i].bytes);
        tpu_status st = tt_open_bytes(ctx, dir, g, len);
        tt_expect_err(ctx, st, bad[i].msg, "d.tpuds");
    }
    tt_expect_err(ctx, tt_open_bytes(ctx, dir, f, len - 1), "field 'file_size'", "truncated");
    tt_expect_err(ctx, tt_open_bytes(ctx, dir, f, 40), "too short", NULL);
    tt_rm_rf(dir);
    tpu_ctx_free(ctx);
}

TEST(train_npz_shards_reader_and_errors)
{
    tpu_ctx *ctx = tpu_ctx_new();
    char *dir = tt_tmpdir();
    REQUIRE(dir);
    char p[256];
    tpu_tensor *x = NULL, *y = NULL, *x5 = NULL, *y2 = NULL;
    REQUIRE_OK(ctx, tpu_tensor_new(ctx, TPU_U8, 2, (int64_t[]){3, 4}, &x));
    REQUIRE_OK(ctx, tpu_tensor_new(ctx, TPU_S32, 1, (int64_t[]){3}, &y));
    REQUIRE_OK(ctx, tpu_tensor_new(ctx, TPU_U8, 2, (int64_t[]){2, 5}, &x5));
    REQUIRE_OK(ctx, tpu_tensor_new(ctx, TPU_S32, 1, (int64_t[]){2}, &y2));
    for (int i = 0; i < 12; i++) ((uint8_t *)tpu_tensor_data(x))[i] = (uint8_t)i;
    for (int i = 0; i < 3; i++) ((int32_t *)tpu_tensor_data(y))[i] = 100 + i;
    tpu_tensor *xy[2] = {x, y};
    const char *nxy[2] = {"x", "y"};
    /* two good shards, read in name order and concatenated */
    snprintf(p, sizeof p, "%s/good", dir);
    mkdir(p, 0777);
    snprintf(p, sizeof p, "%s/good/shard-00001.npz", dir);
    REQUIRE_OK(ctx, tpu_npz_save(ctx, p, xy, nxy, 2, 1));
    ((int32_t *)tpu_tensor_data(y))[0] = 7;
    snprintf(p, sizeof p, "%s/good/shard-00000.npz", dir);
    REQUIRE_OK(ctx, tpu_npz_save(ctx, p, xy, nxy, 2, 0));
    snprintf(p, sizeof p, "%s/good", dir);
    trn_dataset *d = NULL;
    REQUIRE_OK(ctx, trn_data_open(ctx, p, &d));
    CHECK_EQ_INT(d->n, 6);
    int32_t v;
    trn_data_copy(d, trn_data_find(d, "y"), 0, &v);
    CHECK_EQ_INT(v, 7);
    trn_data_copy(d, trn_data_find(d, "y"), 3, &v);
    CHECK_EQ_INT(v, 100);
    trn_entry want[1] = {{.name = "img", .dtype = TPU_F32, .rank = 2, .dims = {16, 4}, .source = "x"}};
    tt_expect_err(ctx, trn_data_check(ctx, d, want, 1, 1, "batch input"), "array 'x' is u8[4] per example, batch input 'img' wants f32[4]", NULL);
    want[0].source = "pixels";
    tt_expect_err(ctx, trn_data_check(ctx, d, want, 1, 1, "batch input"), "no array 'pixels'", "it holds 'x', 'y'");
    want[0].source = "x";
    want[0].dtype = TPU_U8;
    CHECK_OK(ctx, trn_data_check(ctx, d, want, 1, 6, "batch input"));
    tt_expect_err(ctx, trn_data_check(ctx, d, want, 1, 7, "batch input"), "6 examples make no global batch of 7", NULL);
    trn_data_free(d);
    /* a shard whose per-example shape differs */
    tpu_tensor *xy5[2] = {x5, y2};
    snprintf(p, sizeof p, "%s/good/shard-00002.npz", dir);
    REQUIRE_OK(ctx, tpu_npz_save(ctx, p, xy5, nxy, 2, 0));
    snprintf(p, sizeof p, "%s/good", dir);
    tt_expect_err(ctx, trn_data_open(ctx, p, &d), "shard-00002.npz: array 'x' is u8[5] per example, but u8[4] in", NULL);
    /* a shard without y */
    snprintf(p, sizeof p, "%s/good/shard-00002.npz", dir);
    REQUIRE_OK(ctx, tpu_npz_save(ctx, p, xy, nxy, 1, 0));
    snprintf(p, sizeof p, "%s/good", dir);
    tt_expect_err(ctx, trn_data_open(ctx, p, &d), "shard-00002.npz holds 1 arrays", NULL);
    /* arrays of different lengths inside one shard */
    tpu_tensor *xy2[2] = {x, y2};
    snprintf(p, sizeof p, "%s/good/shard-00002.npz", dir);
    REQUIRE_OK(ctx, tpu_npz_save(ctx, p, xy2, nxy, 2, 0));
    snprintf(p, sizeof p, "%s/good", dir);
    tt_expect_err(ctx, trn_data_open(ctx, p, &d), "array 'y' has 2 examples, array 'x' 3", NULL);
    /* .npz and .tpuds mixed; nothing at all; no such path */
    snprintf(p, sizeof p, "%s/good/shard-00002.npz", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/good/x.tpuds", dir);
    tt_write(p, "TPUSIMDS", 8);
    snprintf(p, sizeof p, "%s/good", dir);
    tt_expect_err(ctx, trn_data_open(ctx, p, &d), "mixes .npz shards and .tpuds files", NULL);
    snprintf(p, sizeof p, "%s/empty", dir);
    mkdir(p, 0777);
    tt_expect_err(ctx, trn_data_open(ctx, p, &d), "holds no .npz shards or .tpuds files", NULL);
    tt_expect_err(ctx, trn_data_open(ctx, "/nonexistent/data", &d), "/nonexistent/data", NULL);
    tpu_tensor_free(x);
    tpu_tensor_free(y);
    tpu_tensor_free(x5);
    tpu_tensor_free(y2);
    tt_rm_rf(dir);
    tpu_ctx_free(ctx);
}

TEST(train_digits_cached_equals_shards)
{
    if (!tt_has_digits()) return;
    tpu_ctx *ctx = tpu_ctx_new();
    trn_dataset *a = NULL, *b = NULL;
    REQUIRE_OK(ctx, trn_data_open(ctx, DIGITS "/data/train", &a));
    REQUIRE_OK(ctx, trn_data_open(ctx, DIGITS "/data/train.tpuds", &b));
    CHECK_EQ_INT(a->n, 1437);
    CHECK_EQ_INT(b->n, 1437);
    CHECK_EQ_INT(a->nparts, 2);
    for (int k = 0; k < a->narr; k++) {
        int kb = trn_data_find(b, a->arr[k].name);
        REQUIRE(kb >= 0);
        uint8_t ea[256], eb[256];
        int same = 1;
        for (int64_t i = 0; i < a->n; i++) {
            trn_data_copy(a, k, i, ea);
            trn_data_copy(b, kb, i, eb);
            same &= !memcmp(ea, eb, a->arr[k].ex_bytes);
        }
        CHECK_MSG(same, "array %s differs between the shards and the .tpuds file", a->arr[k].name);
    }
    trn_data_free(a);
    trn_data_free(b);
    tpu_ctx_free(ctx);
}

/* ---- training ---- */

/* resume: 0 a fresh model_dir, 1 --resume, 2 --overwrite */
static tpu_trainer *tt_trainer(tpu_ctx *ctx, int cores, int64_t steps, const char *model_dir, int resume, int K)
{
    tpu_train_opts o = tpu_train_opts_default();
    o.cores = cores;
    o.steps = steps;
    o.model_dir = model_dir;
    o.resume = resume == 1;
    o.overwrite = resume == 2;
    o.steps_per_exec = K;
    tpu_trainer *tr = NULL;
    if (tpu_trainer_new(ctx, DIGITS, &o, &tr) != TPU_OK) test_fail(__FILE__, __LINE__, "trainer: %s", tpu_errmsg(ctx));
    return tr;
}

static int tt_same_state(const tpu_trainer *a, const tpu_trainer *b)
{
    for (int i = 0; i < tpu_trainer_num_state(a); i++) {
        const tpu_tensor *x = tpu_trainer_state(a, i, NULL), *y = tpu_trainer_state(b, i, NULL);
        if (tpu_tensor_nbytes(x) != tpu_tensor_nbytes(y) || memcmp(tpu_tensor_cdata(x), tpu_tensor_cdata(y), tpu_tensor_nbytes(x)))
            return 0;
    }
    return 1;
}

/* bf16 round to nearest even (finite values; the test data have no NaN) */
static uint16_t tt_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* The mean of n tensors of one shape (f32 or bf16) into acc[0]: summed in f32 in plain order on the host,
 * times 1/n, rounded to the element type. */
static void tt_mean_into(tpu_tensor **xs, int n)
{
    tpu_tensor *a = xs[0];
    int64_t c = tpu_tensor_count(a);
    for (int64_t i = 0; i < c; i++) {
        float sum = 0;
        for (int k = 0; k < n; k++) sum += (float)tpu_tensor_get_f64(xs[k], i);
        float m = sum * (1.0f / (float)n);
        if (tpu_tensor_dtype(a) == TPU_BF16) ((uint16_t *)tpu_tensor_data(a))[i] = tt_bf16(m);
        else ((float *)tpu_tensor_data(a))[i] = m;
    }
}

/* Single-core training on the full global batch, written out plainly over the public API: the exported
 * grad.hlo is fixed at the per-replica batch B, so one core takes the global batch of 8B as 8 micro-batches
 * (gradient accumulation). The loss is a mean, so the mean of the micro-batch gradients is the gradient of
 * the global batch's mean loss; it differs from one grad at batch 8B only in the f32 order of the batch
 * sums. The new statistics are the mean of the micro-batches' (what the all-reduce gives each replica).
 * Means in plain order on the host (not the runtime's ring); apply.hlo with the hypers of the 8-replica run.
 * Returns the state after `steps` steps. */
static tpu_tensor **tt_single_core_full_batch(tpu_ctx *ctx, const char *dir, int steps, int64_t total)
{
    trn_sig *s = NULL;
    trn_dataset *d = NULL;
    tpu_module *grad = NULL, *apply = NULL;
    tpu_tensor **state = NULL;
    if (trn_sig_load(ctx, dir, &s) || trn_data_open(ctx, s->data_train, &d) || tpu_module_load(ctx, s->prog[TRN_GRAD], &grad) ||
        tpu_module_load(ctx, s->prog[TRN_APPLY], &apply) || trn_sig_load_state(ctx, s, s->init_state, &state)) {
        test_fail(__FILE__, __LINE__, "setup: %s", tpu_errmsg(ctx));
        goto done;
    }
    int S = s->nstate, P = s->nparam, T = s->nstat, N = s->nbatch, H = s->nhyper;
    int64_t *order = malloc((size_t)d->n * sizeof *order);
    trn_pipe_cfg pc = {d, s, 8, s->seed, s->shuffle, 0, steps, 1, 0, 0, 0};
    tpu_run_opts ro = tpu_run_opts_default();
    for (int t = 0; t < steps; t++) {
        trn_epoch_order(d->n, s->seed, t / (d->n / (8 * s->B)), s->shuffle, order);
        trn_batch *b = NULL;
        if (trn_make_batch(ctx, &pc, t, order, &b)) break;
        tpu_tensor **out[8] = {0};
        int nout = 0, ok = 1;
        for (int mb = 0; mb < 8 && ok; mb++) {   /* micro-batch mb = rows [mb*B, (mb+1)*B) of the global batch */
            tpu_tensor *in[64];
            memcpy(in, state, (size_t)S * sizeof *in);
            memcpy(in + S, b->t + mb * N, (size_t)N * sizeof *in);
            if (tpu_run(ctx, grad, &ro, in, S + N, &out[mb], &nout)) {
                test_fail(__FILE__, __LINE__, "grad: %s", tpu_errmsg(ctx));
                ok = 0;
            }
        }
        for (int k = 0; ok && k < P + T; k++) {
            tpu_tensor *xs[8];
            for (int mb = 0; mb < 8; mb++) xs[mb] = out[mb][k];
            tt_mean_into(xs, 8);
        }
        for (int j = 0; ok && j < T; j++) {   /* the averaged statistics go into the state before apply */
            tpu_tensor_free(state[s->stat_idx[j]]);
            state[s->stat_idx[j]] = out[0][P + j];
            out[0][P + j] = NULL;
        }
        tpu_tensor *hyp[8], *in[128];
        for (int h = 0; h < H; h++) {
            tpu_tensor_new(ctx, TPU_F32, 0, NULL, &hyp[h]);
            *(float *)tpu_tensor_data(hyp[h]) = trn_hyper_value(s, h, t, total, 8);
        }
        memcpy(in, state, (size_t)S * sizeof *in);
        if (ok) memcpy(in + S, out[0], (size_t)P * sizeof *in);
        memcpy(in + S + P, hyp, (size_t)H * sizeof *in);
        tpu_tensor **ns = NULL;
        int nns = 0;
        if (ok && tpu_run(ctx, apply, &ro, in, S + P + H, &ns, &nns)) test_fail(__FILE__, __LINE__, "apply: %s", tpu_errmsg(ctx));
        for (int h = 0; h < H; h++) tpu_tensor_free(hyp[h]);
        for (int mb = 0; mb < 8; mb++) tpu_tensors_free(out[mb], nout);
        trn_batch_free(b);
        if (!ns) break;
        tpu_tensors_free(state, S);
        state = ns;
    }
    free(order);
done:
    tpu_module_free(grad);
    tpu_module_free(apply);
    trn_data_free(d);
    trn_sig_free(s);
    return state;
}

/* Trains `steps` steps on all 8 replicas of a v3-8 and compares every param and stat with the plain
 * single-core reference: |difference| <= tol_f32 max(1, |value|) (f32 entries) or <= 2^-7 |value| (bf16: the two
 * sums may round to neighbouring bf16 values). Returns how far training moved the params. */
static double tt_compare_replicated(tpu_ctx *ctx, const char *dir, int steps, int64_t total, double tol_f32)
{
    tpu_train_opts o = tpu_train_opts_default();
    o.steps = total;
    tpu_trainer *tr = NULL;
    if (tpu_trainer_new(ctx, dir, &o, &tr)) {
        test_fail(__FILE__, __LINE__, "trainer: %s", tpu_errmsg(ctx));
        return 0;
    }
    CHECK_EQ_INT(tpu_trainer_replicas(tr), 8);
    CHECK_OK(ctx, tpu_trainer_train(ctx, tr, steps));
    CHECK_EQ_INT(tpu_trainer_step(tr), steps);
    tpu_tensor **ref = tt_single_core_full_batch(ctx, dir, steps, total), **init = NULL;
    trn_sig *s = NULL;
    double moved = 0;
    if (!ref || trn_sig_load(ctx, dir, &s) || trn_sig_load_state(ctx, s, s->init_state, &init)) {
        test_fail(__FILE__, __LINE__, "reference: %s", tpu_errmsg(ctx));
        goto done;
    }
    for (int i = 0; i < s->nstate; i++) {
        if (s->state[i].role != TRN_PARAM && s->state[i].role != TRN_STAT) continue;
        const tpu_tensor *a = tpu_trainer_state(tr, i, NULL);
        double worst = 0, bad = 0;
        for (int64_t k = 0; k < tpu_tensor_count(a); k++) {
            double x = tpu_tensor_get_f64(a, k), y = tpu_tensor_get_f64(ref[i], k), z = tpu_tensor_get_f64(init[i], k);
            double tol = tpu_tensor_dtype(a) == TPU_BF16 ? fabs(y) / 128 + 1e-30 : tol_f32 * fmax(1.0, fabs(y));
            worst = fmax(worst, fabs(x - y));
            if (fabs(x - y) > tol) bad = fmax(bad, fabs(x - y));
            if (s->state[i].role == TRN_PARAM) moved = fmax(moved, fabs(x - z));
        }
        CHECK_MSG(bad == 0, "%s: %s differs from the single-core reference by %g", dir, s->state[i].name, bad);
        if (getenv("TPUSIM_TEST_VERBOSE")) printf("  %s: max difference %g\n", s->state[i].name, worst);
    }
done:
    if (ref && s) tpu_tensors_free(ref, s->nstate);
    if (init) tpu_tensors_free(init, s->nstate);
    trn_sig_free(s);
    tpu_trainer_free(tr);
    return moved;
}

TEST(train_replicated_equals_single_core_full_batch)
{
    if (!tt_has_digits()) return;
    tpu_ctx *ctx = tpu_ctx_new();
    /* digits: Adam moves the parameters by ~1.7e-3 in 4 steps (lr ~4e-4); the two runs agree to the f32
     * rounding of the gradient sums (measured: 7.5e-9) */
    double moved = tt_compare_replicated(ctx, DIGITS, 4, 165, 1e-7);
    CHECK_MSG(moved > 1e-4, "the parameters hardly moved (%g): the comparison would prove nothing", moved);
    tpu_ctx_free(ctx);
}

TEST(train_replicated_batch_norm_stats_and_bf16)
{
    /* tests/train/bn_tiny: running mean/var ("stat") averaged over the replicas, a bf16 weight whose
     * gradient is all-reduced as f32 and rounded back */
    if (access("tests/train/bn_tiny/signature.json", R_OK)) {
        test_skip("tests/train/bn_tiny not found");
        return;
    }
    tpu_ctx *ctx = tpu_ctx_new();
    double moved = tt_compare_replicated(ctx, "tests/train/bn_tiny", 6, 30, 2e-6);   /* measured: 4.8e-7 (var) */
    CHECK_MSG(moved > 1e-2, "the parameters hardly moved (%g)", moved);
    tpu_ctx_free(ctx);
}

TEST(train_resume_and_steps_per_exec_identical)
{
    if (!tt_has_digits()) return;
    tpu_ctx *ctx = tpu_ctx_new();
    char *da = tt_tmpdir(), *db = tt_tmpdir();
    REQUIRE(da && db);
    /* uninterrupted: 6 steps */
    tpu_trainer *a = tt_trainer(ctx, 0, 6, da, 0, 1);
    REQUIRE(a);
    REQUIRE_OK(ctx, tpu_trainer_train(ctx, a, 0));
    /* 3 steps, checkpoint, a new process (trainer) resumes and does the other 3 */
    tpu_trainer *b = tt_trainer(ctx, 0, 6, db, 0, 1);
    REQUIRE(b);
    REQUIRE_OK(ctx, tpu_trainer_train(ctx, b, 3));
    REQUIRE_OK(ctx, tpu_trainer_save(ctx, b));
    tpu_trainer_free(b);
    b = tt_trainer(ctx, 0, 6, db, 1, 1);
    REQUIRE(b);
    CHECK_EQ_INT(tpu_trainer_step(b), 3);
    REQUIRE_OK(ctx, tpu_trainer_train(ctx, b, 0));
    CHECK_EQ_INT(tpu_trainer_step(b), 6);
    CHECK_MSG(tt_same_state(a, b), "resumed state differs from the uninterrupted run");
    /* the checkpoints on disk are the same bytes */
    char pa[128], pb[128];
    size_t la = 0, lb = 0;
    snprintf(pa, sizeof pa, "%s/state.npz", da);
    snprintf(pb, sizeof pb, "%s/state.npz", db);
    char *fa = tt_read(pa, &la), *fb = tt_read(pb, &lb);
    CHECK(fa && fb && la == lb && !memcmp(fa, fb, la));
    free(fa);
    free(fb);
    /* metrics.jsonl: steps 1..6 once each */
    snprintf(pb, sizeof pb, "%s/metrics.jsonl", db);
    fb = tt_read(pb, NULL);
    REQUIRE(fb);
    for (int t = 1; t <= 6; t++) {
        char key[48];
        snprintf(key, sizeof key, "{\"step\": %d, \"epoch\"", t);
        char *h = strstr(fb, key);
        CHECK_MSG(h && !strstr(h + 1, key), "metrics.jsonl: step %d not exactly once", t);
    }
    CHECK(strstr(fb, "\"sim_step_time_s\"") != NULL);
    CHECK(strstr(fb, "{\"step\": 6, \"eval\": {\"accuracy\": ") != NULL);
    free(fb);
    tpu_trainer_free(b);
    /* K = 4 steps per host call: the same state, records of 4 and 2 steps */
    tpu_trainer *c = tt_trainer(ctx, 0, 6, db, 2, 4);
    REQUIRE(c);
    REQUIRE_OK(ctx, tpu_trainer_train(ctx, c, 0));
    CHECK_MSG(tt_same_state(a, c), "--steps-per-exec 4 changed the result");
    fb = tt_read(pb, NULL);
    CHECK(fb && strstr(fb, "{\"step\": 4, \"epoch\": 0, \"steps\": 4") && strstr(fb, "{\"step\": 6, \"epoch\": 0, \"steps\": 2"));
    free(fb);
    tpu_trainer_free(c);
    tpu_trainer_free(a);
    tt_rm_rf(da);
    tt_rm_rf(db);
    tpu_ctx_free(ctx);
}

TEST(train_torn_checkpoint_rolls_forward)
{
    if (!tt_has_digits()) return;
    tpu_ctx *ctx = tpu_ctx_new();
    char *d = tt_tmpdir();
    REQUIRE(d);
    char pj[128], pt[128], old[128];
    snprintf(pj, sizeof pj, "%s/progress.json", d);
    snprintf(pt, sizeof pt, "%s/progress.json.tmp", d);
    snprintf(old, sizeof old, "%s/old.json", d);
    tpu_trainer *a = tt_trainer(ctx, 1, 10, d, 0, 1);
    REQUIRE(a);
    REQUIRE_OK(ctx, tpu_trainer_train(ctx, a, 2));
    REQUIRE_OK(ctx, tpu_trainer_save(ctx, a));
    rename(pj, old);
    REQUIRE_OK(ctx, tpu_trainer_train(ctx, a, 4));
    REQUIRE_OK(ctx, tpu_trainer_save(ctx, a));
    /* the crash came after state.npz's rename and before progress.json's */
    rename(pj, pt);
    rename(old, pj);
    tpu_trainer *b = tt_trainer(ctx, 1, 10, d, 1, 1);
    REQUIRE(b);
    CHECK_EQ_INT(tpu_trainer_step(b), 4);
    CHECK(tt_same_state(a, b));
    CHECK(access(pt, F_OK) != 0);   /* the roll-forward finished the rename */
    tpu_trainer_free(b);
    /* without the temporary file the mismatch is an error, not a silent wrong resume */
    size_t len;
    char *text = tt_read(pj, &len);
    REQUIRE(text);
    char *c = strstr(text, "\"state_crc32\": ");
    REQUIRE(c);
    c[15] = c[15] == '1' ? '2' : '1';
    tt_write(pj, text, len);
    free(text);
    tpu_train_opts o = tpu_train_opts_default();
    o.cores = 1;
    o.steps = 10;
    o.model_dir = d;
    o.resume = 1;
    tt_expect_err(ctx, tpu_trainer_new(ctx, DIGITS, &o, &b), "torn checkpoint", NULL);
    tpu_trainer_free(a);
    tt_rm_rf(d);
    tpu_ctx_free(ctx);
}

TEST(train_eval_masked_last_batch_any_replica_count)
{
    if (!tt_has_digits()) return;
    tpu_ctx *ctx = tpu_ctx_new();
    /* 360 test examples: 8 replicas x 16 take 128 per global batch, the third is 104 real rows and 24 padded */
    tpu_trainer *a = tt_trainer(ctx, 0, 20, NULL, 0, 1), *b = tt_trainer(ctx, 1, 20, NULL, 0, 1);
    REQUIRE(a && b);
    REQUIRE_OK(ctx, tpu_trainer_evaluate(ctx, a));
    REQUIRE_OK(ctx, tpu_trainer_evaluate(ctx, b));
    double acc8 = tpu_trainer_eval_value(a, "accuracy"), acc1 = tpu_trainer_eval_value(b, "accuracy");
    /* correct/count are whole numbers: exact whatever the replica count and padding */
    CHECK_EQ_INT(acc8 == acc1, 1);
    CHECK(acc8 > 0 && acc8 < 0.5);   /* an untrained model */
    CHECK_EQ_INT(fabs(acc8 * 360 - floor(acc8 * 360 + 0.5)) < 1e-9, 1);
    CHECK_NEAR(tpu_trainer_eval_value(a, "loss"), tpu_trainer_eval_value(b, "loss"), 1e-5);
    CHECK(isnan(tpu_trainer_eval_value(a, "nonexistent")));
    /* trained 20 steps on 8 replicas the accuracy rises */
    REQUIRE_OK(ctx, tpu_trainer_train(ctx, a, 0));
    CHECK(tpu_trainer_eval_value(a, "accuracy") > acc8 + 0.2);
    CHECK(tpu_trainer_metric(a, "loss") < 2.3);
    tpu_trainer_free(a);
    tpu_trainer_free(b);
    tpu_ctx_free(ctx);
}

TEST(train_finish_reports_time_and_files)
{
    if (!tt_has_digits()) return;
    tpu_ctx *ctx = tpu_ctx_new();
    char *d = tt_tmpdir();
    REQUIRE(d);
    tpu_train_opts o = tpu_train_opts_default();
    o.steps = 3;
    o.model_dir = d;
    o.input_rate = 1000;   /* what-if: a host pipeline of 1000 samples/s starves a v3-8 */
    tpu_trainer *tr = NULL;
    REQUIRE_OK(ctx, tpu_trainer_new(ctx, DIGITS, &o, &tr));
    REQUIRE_OK(ctx, tpu_trainer_train(ctx, tr, 0));
    tpu_train_result r;
    REQUIRE_OK(ctx, tpu_trainer_finish(ctx, tr, &r));
    CHECK_EQ_INT(r.steps, 3);
    CHECK_EQ_INT(r.global_batch, 128);
    CHECK(r.sim_allreduce_s > 0);   /* the all-reduce ran on the runtime, timed by the ICI model */
    CHECK_NEAR(r.sim_step_s, r.sim_program_s + r.sim_allreduce_s, 1e-15);
    CHECK(r.input_bound);
    CHECK(r.sim_program_s >= 16.0 / (1000.0 / 8) * 0.999);   /* 16 samples per device at 125/s */
    CHECK(r.input_samples_per_s > 0);
    CHECK(r.profile_html && access(r.profile_html, R_OK) == 0);
    CHECK(r.trace_json && access(r.trace_json, R_OK) == 0);
    CHECK(r.memory_html && access(r.memory_html, R_OK) == 0);
    CHECK(r.advice && strstr(r.advice, "input pipeline"));
    /* the profile, its report and trace show the step the trainer predicts: the all-reduce included */
    CHECK_NEAR(tpu_profile_step_time(tr->prof), r.sim_step_s, 1e-12);
    size_t n = 0;
    char *html = r.profile_html ? test_slurp(r.profile_html, &n) : NULL, *trace = r.trace_json ? test_slurp(r.trace_json, &n) : NULL;
    CHECK_MSG(html && strstr(html, "all-reduce (gradients, runtime)"), "profile.html lacks the all-reduce");
    CHECK_MSG(trace && strstr(trace, "\"all-reduce (gradients, runtime)\""), "trace.json lacks the all-reduce");
    char st[64];   /* the report's step-time card, formatted as it formats times */
    double s = r.sim_step_s;
    if (s >= 1) snprintf(st, sizeof st, "step time<b>%.3g s</b>", s);
    else if (s >= 1e-3) snprintf(st, sizeof st, "step time<b>%.3g ms</b>", s * 1e3);
    else snprintf(st, sizeof st, "step time<b>%.3g us</b>", s * 1e6);
    CHECK_MSG(html && strstr(html, st), "profile.html does not show the step time %s", st);
    free(html);
    free(trace);
    tpu_trainer_free(tr);
    tt_rm_rf(d);
    tpu_ctx_free(ctx);
}

TEST(train_lr_find_writes_points)
{
    if (!tt_has_digits()) return;
    tpu_ctx *ctx = tpu_ctx_new();
    char *d = tt_tmpdir();
    REQUIRE(d);
    char out[128], p[128];
    snprintf(out, sizeof out, "%s/lr.json", d);
    tpu_train_opts o = tpu_train_opts_default();
    o.steps = 30;
    o.cores = 1;
    double sug = 0;
    REQUIRE_OK(ctx, tpu_train_lr_find(ctx, DIGITS, &o, 1e-5, 10, out, &sug));
    CHECK(sug > 1e-5 && sug < 10);
    char *j = tt_read(out, NULL);
    CHECK(j && strstr(j, "\"hyper\": \"learning_rate\", \"replicas\": 1, \"per_replica_batch\": 16"));
    CHECK(j && strstr(j, "{\"step\": 0, \"lr\": 1.0000000000000001e-05, \"loss\": "));
    free(j);
    snprintf(p, sizeof p, "%s/lr.jsonl", d);
    CHECK(access(p, R_OK) == 0);
    snprintf(p, sizeof p, "%s/lr.svg", d);
    j = tt_read(p, NULL);
    CHECK(j && strstr(j, "<svg") && strstr(j, "suggested"));
    free(j);
    tt_expect_err(ctx, tpu_train_lr_find(ctx, DIGITS, &o, 1, 0.1, out, &sug), "--lr-min", NULL);
    tt_rm_rf(d);
    tpu_ctx_free(ctx);
}
