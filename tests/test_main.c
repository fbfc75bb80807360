/* test_main.c — runs the registered unit tests and prints "N passed, N failed, N skipped". */
#include "test.h"
#include <stdarg.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    const char *name, *file;
    test_fn     fn;
    test_fn_arg fn_arg;   /* instead of fn: a test registered with an argument */
    char       *arg;
} test_entry;
static test_entry *tests;
static int ntests, cap;
int test_current_failed;
static int current_skipped;
static const char *current_name;

void test_skip(const char *fmt, ...)
{
    fprintf(stderr, "  SKIP %s: ", current_name);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    current_skipped = 1;
}

static void test_add(test_entry e)
{
    if (ntests == cap) {
        cap = cap ? cap * 2 : 64;
        tests = realloc(tests, (size_t)cap * sizeof *tests);
        if (!tests) abort();
    }
    tests[ntests++] = e;
}

void test_register(const char *name, const char *file, test_fn fn) { test_add((test_entry){name, file, fn, NULL, NULL}); }

void test_register_arg(const char *name, const char *file, test_fn_arg fn, const char *arg)
{
    char *n = strdup(name), *a = strdup(arg);
    if (!n || !a) abort();
    test_add((test_entry){n, file, NULL, fn, a});
}

void test_fail(const char *file, int line, const char *fmt, ...)
{
    if (test_current_failed < 20) {
        fprintf(stderr, "  FAIL %s (%s:%d): ", current_name, file, line);
        va_list ap;
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
    }
    test_current_failed++;
}

const char *test_corpus(const char *rel)
{
    static char buf[8][1024];
    static int slot;
    char *b = buf[slot++ % 8];
    snprintf(b, 1024, "../shared/corpus/%s", rel);
    return access(b, R_OK) == 0 ? b : NULL;
}

const char *test_bin(void)
{
    const char *b = getenv("TPUSIM_BIN");
    return b ? b : "build/release/tpusim";
}

static int by_file_then_name(const void *a, const void *b)
{
    const test_entry *x = a, *y = b;
    int c = strcmp(x->file, y->file);
    return c ? c : strcmp(x->name, y->name);
}

int main(int argc, char **argv)
{
    qsort(tests, (size_t)ntests, sizeof *tests, by_file_then_name);
    int passed = 0, failed = 0, skipped = 0;
    int verbose = getenv("TEST_VERBOSE") != NULL;
    for (int i = 0; i < ntests; i++) {
        int want = argc < 2;
        for (int a = 1; a < argc; a++)
            if (strstr(tests[i].name, argv[a])) want = 1;
        if (!want) continue;
        current_name = tests[i].name;
        test_current_failed = 0;
        current_skipped = 0;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (tests[i].fn_arg) tests[i].fn_arg(tests[i].arg);
        else tests[i].fn();
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double dt = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
        if (test_current_failed) {
            failed++;
            fprintf(stderr, "FAIL %s (%d checks failed)\n", tests[i].name, test_current_failed);
        } else if (current_skipped) {
            skipped++;
        } else {
            passed++;
            if (verbose || dt > 2.0) fprintf(stderr, "ok   %s (%.1fs)\n", tests[i].name, dt);
        }
    }
    for (int i = 0; i < ntests; i++)
        if (tests[i].fn_arg) {
            free((char *)tests[i].name);
            free(tests[i].arg);
        }
    free(tests);
    printf("unit tests: %d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
