/* t_hlo_parse.c — the HLO parser and printer: every corpus file parses, print -> parse gives the same
 * module (and so does a clone), and malformed text gives file:line:col errors. */
#include "test.h"
#include "hlo/hlo.h"

#include <dirent.h>
#include <stdlib.h>

/* Parses text, prints it, parses the print, and checks the two modules are equal and the second print is
 * identical to the first. */
static void roundtrip_module(tpu_ctx *ctx, tpu_module *m, const char *what)
{
    char *s1 = NULL, *s2 = NULL;
    tpu_module *m2 = NULL;
    if (tpu_module_to_string(ctx, m, &s1) != TPU_OK) { CHECK_MSG(0, "%s: print failed", what); return; }
    tpu_status st = tpu_module_parse(ctx, s1, strlen(s1), "printed", &m2);
    CHECK_MSG(st == TPU_OK, "%s: re-parse of printed module failed: %s", what, tpu_errmsg(ctx));
    if (st == TPU_OK) {
        char why[256] = "";
        CHECK_MSG(hlo_module_equal(m, m2, why, sizeof why), "%s: printed module differs: %s", what, why);
        if (tpu_module_to_string(ctx, m2, &s2) == TPU_OK)
            CHECK_MSG(!strcmp(s1, s2), "%s: second print differs from the first", what);
    }
    /* a clone of a clone, the first freed: equal to the module, prints the same, points only into itself */
    hlo_module *c1 = NULL, *c2 = NULL;
    CHECK_OK(ctx, hlo_module_clone(ctx, m, &c1));
    if (c1) CHECK_OK(ctx, hlo_module_clone(ctx, c1, &c2));
    hlo_module_free(c1);
    if (c2) {
        char why[256] = "";
        CHECK_MSG(hlo_module_equal(m, c2, why, sizeof why), "%s: clone differs: %s", what, why);
        char *s3 = NULL;
        if (tpu_module_to_string(ctx, c2, &s3) == TPU_OK) CHECK_MSG(!strcmp(s1, s3), "%s: the clone prints differently", what);
        tpu_free(s3);
    }
    hlo_module_free(c2);
    tpu_free(s1);
    tpu_free(s2);
    tpu_module_free(m2);
}

static int corpus_files(const char *dir, char names[][256], int max)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        size_t l = strlen(e->d_name);
        if (l > 4 && !strcmp(e->d_name + l - 4, ".hlo")) snprintf(names[n++], 256, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    return n;
}

TEST(corpus_parser_tests_parse_and_roundtrip)
{
    const char *dir = test_corpus("hlo/xla-parser-tests");
    if (!dir) { test_skip("../shared/corpus absent"); return; }
    static char names[128][256];
    int n = corpus_files(dir, names, 128);
    CHECK(n >= 30);
    int modules = 0;
    tpu_ctx *ctx = tpu_ctx_new();
    for (int i = 0; i < n; i++) {
        tpu_module **ms = NULL;
        int count = 0;
        tpu_status st = tpu_module_load_split(ctx, names[i], &ms, &count);
        CHECK_MSG(st == TPU_OK, "%s: %s", names[i], tpu_errmsg(ctx));
        for (int k = 0; k < count; k++) {
            char what[512];
            snprintf(what, sizeof what, "%.400s module %d", names[i], k + 1);
            roundtrip_module(ctx, ms[k], what);
        }
        modules += count;
        tpu_modules_free(ms, count);
    }
    tpu_ctx_free(ctx);
    CHECK(modules > 100);
}

TEST(corpus_big_programs_parse_and_roundtrip)
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
        tpu_status st = tpu_module_load(ctx, p, &m);
        CHECK_MSG(st == TPU_OK, "%s: %s", p, tpu_errmsg(ctx));
        if (m) roundtrip_module(ctx, m, p);
        tpu_module_free(m);
    }
    tpu_ctx_free(ctx);
    if (!seen) test_skip("../shared/corpus absent");
}
