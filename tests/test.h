/* test.h — the unit-test harness. A test is `TEST(name) { ... }` in any tests/t_*.c file; it registers
 * itself. CHECK* macros record a failure with file:line and go on; REQUIRE* return from the test.
 * Run: build/<mode>/unit-tests [substring ...]   (only tests whose name contains a substring). */
#ifndef TPU_TEST_H
#define TPU_TEST_H

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <stdint.h>
#include "tpusim.h"

typedef void (*test_fn)(void);
typedef void (*test_fn_arg)(const char *arg);
void test_register(const char *name, const char *file, test_fn fn);
/* One test per item of a list found at start (one per conformance case): fn(arg) runs under `name` (both
 * copied). Call from a constructor. */
void test_register_arg(const char *name, const char *file, test_fn_arg fn, const char *arg);
void test_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
extern int test_current_failed;
/* Marks the running test as skipped (counted apart, never as passed) with the reason; return after it. */
void test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define TEST(name)                                                          \
    static void test_##name(void);                                          \
    __attribute__((constructor)) static void test_reg_##name(void)          \
    { test_register(#name, __FILE__, test_##name); }                         \
    static void test_##name(void)

#define CHECK(cond) do { if (!(cond)) test_fail(__FILE__, __LINE__, "CHECK(%s)", #cond); } while (0)
#define REQUIRE(cond) do { if (!(cond)) { test_fail(__FILE__, __LINE__, "REQUIRE(%s)", #cond); return; } } while (0)
#define CHECK_MSG(cond, ...) do { if (!(cond)) test_fail(__FILE__, __LINE__, __VA_ARGS__); } while (0)
#define CHECK_EQ_INT(a, b) do { long long a_ = (long long)(a), b_ = (long long)(b); \
    if (a_ != b_) test_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, a_, b_); } while (0)
#define CHECK_EQ_STR(a, b) do { const char *a_ = (a), *b_ = (b); \
    if (!a_ || !b_ || strcmp(a_, b_)) test_fail(__FILE__, __LINE__, "%s == %s: \"%s\" != \"%s\"", #a, #b, \
        a_ ? a_ : "(null)", b_ ? b_ : "(null)"); } while (0)
#define CHECK_NEAR(a, b, tol) do { double a_ = (double)(a), b_ = (double)(b); \
    if (!(fabs(a_ - b_) <= (tol))) test_fail(__FILE__, __LINE__, "%s ~= %s: %.9g vs %.9g (tol %g)", #a, #b, a_, b_, (double)(tol)); } while (0)
#define CHECK_OK(ctx, expr) do { tpu_status st_ = (expr); if (st_ != TPU_OK) \
    test_fail(__FILE__, __LINE__, "%s -> %s: %s", #expr, tpu_status_name(st_), tpu_errmsg(ctx)); } while (0)
#define REQUIRE_OK(ctx, expr) do { tpu_status st_ = (expr); if (st_ != TPU_OK) { \
    test_fail(__FILE__, __LINE__, "%s -> %s: %s", #expr, tpu_status_name(st_), tpu_errmsg(ctx)); return; } } while (0)

/* Path of a file in the shared corpus ("../shared/corpus/<rel>"), or NULL if the corpus is absent. */
const char *test_corpus(const char *rel);
/* Path of the CLI binary (TPUSIM_BIN), for tests that run it. */
const char *test_bin(void);

#endif
