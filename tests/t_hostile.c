/* t_hostile.c — hostile programs (the .hlo files in tests/hostile/): each once crashed, hung or ran although it should not,
 * and says in its header what must happen now, one "// expect:" line per rule:
 *   parse-error "TEXT"    loading fails and the message contains TEXT
 *   verify-error "TEXT"   it parses, the verifier reports TEXT, and run, memory and profile all refuse it
 *   run-ok                it verifies and runs on random inputs
 *   run-error "TEXT"      it verifies and running fails with TEXT (e.g. the step limit of 100000)
 *   plan-ok / plan-error "TEXT"   memory planning and profiling succeed / both fail with TEXT
 *   memory-ok, profile-error "TEXT"   one of the two
 * Every file also goes through the oracle the differential fuzz target uses (fuzz/oracle.h): a program that does
 * not verify is never run, planned or profiled; one that verifies never fails as an internal error. */
#include "test.h"
#include "../fuzz/oracle.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define HOSTILE_DIR "tests/hostile"

static int hostile_name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The quoted TEXT after `key` on an expect line, into buf; 0 if the line is not that rule. */
static int hostile_rule(const char *line, const char *key, char *buf, size_t n)
{
    size_t k = strlen(key);
    if (strncmp(line, key, k) || (line[k] && line[k] != ' ' && line[k] != '\n')) return 0;
    buf[0] = 0;
    const char *eol = strchr(line, '\n');
    if (!eol) eol = line + strlen(line);
    const char *q = memchr(line + k, '"', (size_t)(eol - line - k));
    const char *e = NULL;
    for (const char *p = q ? q + 1 : NULL; p && p < eol; p++)
        if (*p == '"') e = p;
    if (q && e) snprintf(buf, n, "%.*s", (int)(e - q - 1), q + 1);
    return 1;
}

static void hostile_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    REQUIRE(f != NULL);
    static char text[1 << 16];
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = 0;
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    tpu_status pst = tpu_module_parse(ctx, text, len, path, &m);
    oracle_result r;
    memset(&r, 0, sizeof r);
    const char *bad = NULL;
    if (!pst) {
        oracle_opts o = {100000, 0, 0};
        bad = oracle_check(ctx, m, &o, &r);
        CHECK_MSG(bad == NULL, "%s: %s (run: %s; memory: %s; profile: %s)", path, bad, r.run_msg, r.plan_msg, r.prof_msg);
    }
    int rules = 0;
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (strncmp(l, "// expect: ", 11)) continue;
        const char *rule = l + 11;
        char want[256];
        rules++;
        if (hostile_rule(rule, "parse-error", want, sizeof want)) {
            CHECK_MSG(pst != TPU_OK && strstr(tpu_errmsg(ctx), want), "%s: wanted a parse error with \"%s\", got %s: %s", path,
                      want, tpu_status_name(pst), pst ? tpu_errmsg(ctx) : "");
            continue;
        }
        if (pst) {
            test_fail(__FILE__, __LINE__, "%s does not parse: %s", path, tpu_errmsg(ctx));
            break;
        }
        if (hostile_rule(rule, "verify-error", want, sizeof want)) {
            CHECK_MSG(!r.verifies && strstr(r.verify_msg, want), "%s: wanted the verifier to say \"%s\", got \"%s\"", path,
                      want, r.verifies ? "(it verifies)" : r.verify_msg);
            CHECK_MSG(r.run_st == TPU_ERR_SHAPE && strstr(r.run_msg, "does not verify"), "%s: run: %s", path, r.run_msg);
        } else if (hostile_rule(rule, "run-ok", want, sizeof want)) {
            CHECK_MSG(r.verifies && r.run_st == TPU_OK, "%s: wanted it to run: %s %s", path, r.verify_msg, r.run_msg);
        } else if (hostile_rule(rule, "run-error", want, sizeof want)) {
            CHECK_MSG(r.verifies && r.run_st != TPU_OK && strstr(r.run_msg, want), "%s: wanted run to fail with \"%s\", got "
                      "%s: %s", path, want, tpu_status_name(r.run_st), r.run_msg);
        } else if (hostile_rule(rule, "plan-ok", want, sizeof want)) {
            CHECK_MSG(r.plan_st == TPU_OK && r.prof_st == TPU_OK, "%s: memory: %s; profile: %s", path, r.plan_msg, r.prof_msg);
        } else if (hostile_rule(rule, "memory-ok", want, sizeof want)) {
            CHECK_MSG(r.plan_st == TPU_OK, "%s: memory: %s", path, r.plan_msg);
        } else if (hostile_rule(rule, "profile-error", want, sizeof want)) {
            CHECK_MSG(r.prof_st != TPU_OK && strstr(r.prof_msg, want), "%s: wanted profile to fail with \"%s\", got \"%s\"",
                      path, want, r.prof_msg);
        } else if (hostile_rule(rule, "plan-error", want, sizeof want)) {
            CHECK_MSG(r.plan_st != TPU_OK && strstr(r.plan_msg, want) && r.prof_st != TPU_OK,
                      "%s: wanted memory and profile to fail with \"%s\", got \"%s\" / \"%s\"", path, want, r.plan_msg,
                      r.prof_msg);
        } else {
            test_fail(__FILE__, __LINE__, "%s: unknown rule '%.40s'", path, rule);
        }
    }
    CHECK_MSG(rules > 0, "%s has no '// expect:' line", path);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

TEST(hostile_programs)
{
    DIR *d = opendir(HOSTILE_DIR);
    REQUIRE(d != NULL);
    char *names[512];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 512) {
        size_t k = strlen(e->d_name);
        if (k > 4 && (!strcmp(e->d_name + k - 4, ".hlo") || (k > 8 && !strcmp(e->d_name + k - 8, ".pbtxt")))) {
            names[n] = malloc(strlen(HOSTILE_DIR) + k + 2);
            if (names[n]) sprintf(names[n++], "%s/%s", HOSTILE_DIR, e->d_name);
        }
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, hostile_name_cmp);
    CHECK(n >= 20);
    for (int i = 0; i < n; i++) {
        hostile_file(names[i]);
        free(names[i]);
    }
}

/* ---- lying inputs (issue 18, item 7): headers are compared before data are inflated or allocated ---- */

static size_t hostile_biggest;   /* the largest single allocation since the last reset */
static void *hostile_malloc(size_t n, void *u) { (void)u; if (n > hostile_biggest) hostile_biggest = n; return malloc(n); }
static void *hostile_realloc(void *p, size_t n, void *u) { (void)u; if (n > hostile_biggest) hostile_biggest = n; return realloc(p, n); }
static void hostile_free(void *p, void *u) { (void)u; free(p); }

static int hostile_refuse_big(void *user, const char *name, int index, tpu_dtype dtype, int rank, const int64_t *dims,
                              char *why, size_t n)
{
    (void)user, (void)name, (void)index, (void)dtype;
    if (rank == 1 && dims[0] > 1000) {
        snprintf(why, n, "%lld elements is not what the program takes", (long long)dims[0]);
        return 1;
    }
    return 0;
}

TEST(hostile_npz_headers_before_data)
{
    tpu_ctx *ctx = tpu_ctx_new();
    char path[] = "/tmp/tpusim-bomb-XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    close(fd);
    /* 32 MiB of zeros deflate to about 32 KiB: a small file that inflates a thousandfold */
    int64_t n = (int64_t)8 << 20;
    tpu_tensor *z = NULL;
    REQUIRE_OK(ctx, tpu_tensor_new(ctx, TPU_F32, 1, &n, &z));
    const char *name = "w";
    REQUIRE_OK(ctx, tpu_npz_save(ctx, path, &z, &name, 1, 1));
    tpu_tensor_free(z);
    tpu_tensor **ts = NULL;
    char **names = NULL;
    int cnt = 0;
    tpu_allocator a = {hostile_malloc, hostile_realloc, hostile_free, NULL};
    tpu_set_allocator(&a);
    /* the filter sees the header and refuses: nothing near 32 MiB is allocated */
    hostile_biggest = 0;
    tpu_status st = tpu_npz_load_filtered(ctx, path, hostile_refuse_big, NULL, &ts, &names, &cnt);
    size_t big1 = hostile_biggest;
    /* the input limit does the same without a filter */
    tpu_ctx_set_input_limit(ctx, 1 << 20);
    hostile_biggest = 0;
    tpu_status st2 = tpu_npz_load(ctx, path, &ts, &names, &cnt);
    size_t big2 = hostile_biggest;
    char msg2[512];
    snprintf(msg2, sizeof msg2, "%s", tpu_errmsg(ctx));
    tpu_set_allocator(NULL);
    CHECK_EQ_INT(st, TPU_ERR_INVALID);
    CHECK_MSG(big1 < (1 << 20), "the refused member still allocated %zu bytes", big1);
    CHECK_EQ_INT(st2, TPU_ERR_LIMIT);
    CHECK_MSG(strstr(msg2, "member 'w.npy': 32 MiB is more than the input limit of 1 MiB"), "%s", msg2);
    CHECK_MSG(big2 < (1 << 20), "a member over the input limit still allocated %zu bytes", big2);
    /* with the default limit and no filter it loads */
    tpu_ctx_set_input_limit(ctx, 0);
    CHECK_OK(ctx, tpu_npz_load(ctx, path, &ts, &names, &cnt));
    CHECK_EQ_INT(cnt, 1);
    tpu_tensors_free(ts, cnt);
    tpu_names_free(names, cnt);
    /* two members with one name */
    CHECK_EQ_INT(tpu_npz_load(ctx, HOSTILE_DIR "/dup_members.npz", &ts, &names, &cnt), TPU_ERR_PARSE);
    CHECK(strstr(tpu_errmsg(ctx), "two members are named 'a'") != NULL);
    unlink(path);
    tpu_ctx_free(ctx);
}

TEST(hostile_text_inputs)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    CHECK_EQ_INT(tpu_module_load(ctx, "/dev/zero", &m), TPU_ERR_PARSE);
    CHECK(strstr(tpu_errmsg(ctx), "not a text file (a NUL byte at offset 0)") != NULL);
    CHECK_EQ_INT(tpu_module_load(ctx, HOSTILE_DIR, &m), TPU_ERR_IO);
    CHECK(strstr(tpu_errmsg(ctx), "is a directory") != NULL);
    tpu_ctx_set_input_limit(ctx, 64);
    CHECK_EQ_INT(tpu_module_load(ctx, HOSTILE_DIR "/while_forever.hlo", &m), TPU_ERR_LIMIT);
    CHECK(strstr(tpu_errmsg(ctx), "more than the input limit of 64 bytes") != NULL);
    CHECK(m == NULL);
    tpu_ctx_free(ctx);
}

/* ---- outputs (item 8): whole or not at all, links kept, directories refused ---- */

TEST(hostile_outputs)
{
    tpu_ctx *ctx = tpu_ctx_new();
    char dir[] = "/tmp/tpusim-out-XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    char target[128], link[128];
    snprintf(target, sizeof target, "%s/target.npy", dir);
    snprintf(link, sizeof link, "%s/link.npy", dir);
    int64_t n = 3;
    tpu_tensor *t = NULL;
    REQUIRE_OK(ctx, tpu_tensor_new(ctx, TPU_F32, 1, &n, &t));
    CHECK_OK(ctx, tpu_npy_save(ctx, target, t));
    CHECK(symlink("target.npy", link) == 0);
    ((float *)tpu_tensor_data(t))[0] = 5;
    CHECK_OK(ctx, tpu_npy_save(ctx, link, t));
    struct stat sb;
    CHECK(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode));
    tpu_tensor *back = NULL;
    CHECK_OK(ctx, tpu_npy_load(ctx, target, &back));
    CHECK(back && tpu_tensor_get_f64(back, 0) == 5);
    tpu_tensor_free(back);
    CHECK_EQ_INT(tpu_npy_save(ctx, dir, t), TPU_ERR_IO);
    CHECK(strstr(tpu_errmsg(ctx), "is a directory") != NULL);
    /* nothing but the two files: no temporaries left */
    DIR *d = opendir(dir);
    int files = 0;
    for (struct dirent *e; d && (e = readdir(d));) files += e->d_name[0] != '.';
    if (d) closedir(d);
    CHECK_EQ_INT(files, 2);
    unlink(link);
    unlink(target);
    rmdir(dir);
    tpu_tensor_free(t);
    tpu_ctx_free(ctx);
}

/* ---- size (item 6): large generated programs go through every pass. A pass that turned quadratic again
 * would make this test take minutes instead of about a second (bench/scale.py measures the growth). ---- */

static char *hostile_gen(const char *kind, int n, size_t *len)
{
    size_t cap = (size_t)n * 400 + 4096, used = 0;
    char *b = malloc(cap);
    if (!b) return NULL;
#define EMIT(...) used += (size_t)snprintf(b + used, cap - used, __VA_ARGS__)
    EMIT("HloModule big\n");
    if (!strcmp(kind, "chain")) {
        EMIT("ENTRY e {\n  p = f32[8] parameter(0)\n  a0 = f32[8] add(p, p)\n");
        for (int i = 1; i < n; i++) EMIT("  a%d = f32[8] add(a%d, p)\n", i, i - 1);
        EMIT("  ROOT r = f32[8] negate(a%d)\n}\n", n - 1);
    } else if (!strcmp(kind, "calls")) {
        EMIT("f {\n  x = f32[8] parameter(0)\n  ROOT y = f32[8] negate(x)\n}\n");
        EMIT("ENTRY e {\n  p = f32[8] parameter(0)\n  c0 = f32[8] call(p), to_apply=f\n");
        for (int i = 1; i < n; i++) EMIT("  c%d = f32[8] call(c%d), to_apply=f\n", i, i - 1);
        EMIT("  ROOT r = f32[8] negate(c%d)\n}\n", n - 1);
    } else {   /* one instruction with n unknown attributes */
        EMIT("ENTRY e {\n  p = f32[8] parameter(0)\n  ROOT r = f32[8] negate(p)");
        for (int i = 0; i < n; i++) EMIT(", unknown_%d=%d", i, i);
        EMIT("\n}\n");
    }
#undef EMIT
    *len = used;
    return b;
}

TEST(hostile_large_programs)
{
    static const struct { const char *kind; int n; } cases[] = {{"chain", 100000}, {"calls", 30000}, {"attrs", 50000}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t len = 0;
        char *text = hostile_gen(cases[c].kind, cases[c].n, &len);
        REQUIRE(text != NULL);
        tpu_ctx *ctx = tpu_ctx_new();
        tpu_module *m = NULL;
        tpu_status st = tpu_module_parse(ctx, text, len, cases[c].kind, &m);
        CHECK_MSG(st == TPU_OK, "%s: %s", cases[c].kind, tpu_errmsg(ctx));
        if (!st) {
            oracle_result r;
            oracle_opts o = {0, 0, 0};
            const char *bad = oracle_check(ctx, m, &o, &r);
            CHECK_MSG(!bad, "%s: %s", cases[c].kind, bad);
            CHECK_MSG(r.verifies && r.run_st == TPU_OK && r.plan_st == TPU_OK && r.prof_st == TPU_OK, "%s: %s %s %s %s",
                      cases[c].kind, r.verify_msg, r.run_msg, r.plan_msg, r.prof_msg);
            tpu_report *rep = NULL;
            CHECK_OK(ctx, tpu_check(ctx, m, NULL, &rep));
            CHECK(rep && strlen(tpu_report_text(rep)) > 0);
            tpu_report_free(rep);
        }
        tpu_module_free(m);
        tpu_ctx_free(ctx);
        free(text);
    }
}

/* The replicated runtime verifies the module with the counts its devices see (an all-gather's result depends
 * on the group size), and keeps that verdict only for those counts. */
TEST(hostile_replicated_views_verify)
{
    static const char *text = "HloModule ag\nENTRY e {\n  p = f32[2] parameter(0)\n"
                              "  ROOT g = f32[8] all-gather(p), replica_groups={}, dimensions={0}\n}\n";
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    REQUIRE_OK(ctx, tpu_module_parse(ctx, text, strlen(text), "ag.hlo", &m));
    int64_t two = 2;
    tpu_tensor *x = NULL;
    REQUIRE_OK(ctx, tpu_tensor_new(ctx, TPU_F32, 1, &two, &x));
    for (int round = 0; round < 2; round++) {
        tpu_system *s4 = NULL, *s2 = NULL;
        tpu_tensor **in[4] = {&x, &x, &x, &x}, **out[4] = {NULL};
        int nout = 0;
        REQUIRE_OK(ctx, tpu_system_new(ctx, "4", &s4));
        CHECK_OK(ctx, tpu_system_run(ctx, s4, m, NULL, in, 1, out, &nout));
        tpu_system_outputs_free(out, 4, nout);
        REQUIRE_OK(ctx, tpu_system_new(ctx, "2", &s2));
        CHECK_EQ_INT(tpu_system_run(ctx, s2, m, NULL, in, 1, out, &nout), TPU_ERR_SHAPE);
        CHECK(strstr(tpu_errmsg(ctx), "does not verify") != NULL);
        tpu_system_free(s4);
        tpu_system_free(s2);
    }
    tpu_tensor_free(x);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}
