/* t_hostile.c — hostile programs (the .hlo files in tests/hostile/): each once crashed, hung or ran although it should not,
 * and says in its header what must happen now, one "// expect:" line per rule:
 *   parse-error "TEXT"    loading fails and the message contains TEXT
 *   verify-error "TEXT"   it parses, the verifier reports TEXT, and run, memory and profile all refuse it
 *   run-ok                it verifies and runs on random inputs
 *   run-error "TEXT"      it verifies and running fails with TEXT (e.g. the step limit of 100000)
 *   plan-ok / plan-error "TEXT"   memory planning (and profiling) succeeds / fails with TEXT
 * Every file also goes through the oracle the differential fuzz target uses (fuzz/oracle.h): a program that does
 * not verify is never run, planned or profiled; one that verifies never fails as an internal error. */
#include "test.h"
#include "../fuzz/oracle.h"

#include <dirent.h>
#include <stdlib.h>

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
