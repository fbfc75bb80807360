/* t_formats.c — the program formats a loader tells apart (tpu_program_format), StableHLO through a context's
 * converter (a fake one here: no Python needed) and the error without one, '-' as standard input, and the
 * entry parameters' names (tpu_module_param_name). The real converter (jaxlib in a child Python) is tested
 * in tests/cli/t_formats.sh and python/tests/api. */
#include "test.h"
#include "test_browser.h"

#include <stdlib.h>
#include <unistd.h>

static const char *fmt_hlo = "HloModule neg\nENTRY main {\n  x.1 = f32[4]{0} parameter(0)\n  ROOT n = f32[4]{0} negate(x.1)\n}\n";

TEST(program_format_from_the_bytes)
{
    CHECK_EQ_STR(tpu_program_format(fmt_hlo, strlen(fmt_hlo)), "hlo");
    const char *mlir = "module @jit_f attributes {mhlo.num_partitions = 1 : i32} {\n  func.func public @main() {\n  }\n}\n";
    CHECK_EQ_STR(tpu_program_format(mlir, strlen(mlir)), "stablehlo");
    const char *mlir2 = "// a comment\n#loc1 = loc(\"x\")\nmodule {\n}\n";
    CHECK_EQ_STR(tpu_program_format(mlir2, strlen(mlir2)), "stablehlo");
    const char *func = "func.func @main() {\n}\n";
    CHECK_EQ_STR(tpu_program_format(func, strlen(func)), "stablehlo");
    const char *modname = "HloModule module\n";   /* the word module inside HLO text is not MLIR */
    CHECK_EQ_STR(tpu_program_format(modname, strlen(modname)), "hlo");
    const char *ptext = "hlo_module {\n  name: \"m\"\n}\n";
    CHECK_EQ_STR(tpu_program_format(ptext, strlen(ptext)), "hlo-proto-text");
    CHECK_EQ_STR(tpu_program_format("ML\xefR\x0dStableHLO", 14), "stablehlo-bytecode");
    CHECK_EQ_STR(tpu_program_format(NULL, 0), "hlo");
    /* a FlatBuffer (root offset 12) holding a byte vector of MLIR bytecode at an aligned offset */
    unsigned char fb[64] = {12, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 0, 0, 0, 0, 12, 0, 0, 0, 'M', 'L', 0xef, 'R', 1, 2, 3, 4, 5, 6, 7, 8};
    CHECK_EQ_STR(tpu_program_format(fb, sizeof fb), "jax-export");
    fb[16] = 60;   /* a length past the end: not a vector */
    CHECK(strcmp(tpu_program_format(fb, sizeof fb), "jax-export") != 0);
    /* the files jax writes (tests/golden/stablehlo/gen.py) */
    const char *files[][2] = {{"tests/golden/stablehlo/mlp.mlir", "stablehlo"},
                              {"tests/golden/stablehlo/mlp.mlirbc", "stablehlo-bytecode"},
                              {"tests/golden/stablehlo/mlp.jax_exported", "jax-export"},
                              {"tests/golden/proto/dump_after.pb", "hlo-proto"},
                              {"tests/golden/proto/dump_snapshot.pb", "hlo-proto"}};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        size_t n = 0;
        char *d = test_slurp(files[i][0], &n);
        CHECK_MSG(d, "cannot read %s", files[i][0]);
        if (d) CHECK_MSG(!strcmp(tpu_program_format(d, n), files[i][1]), "%s: %s, not %s", files[i][0], tpu_program_format(d, n), files[i][1]);
        free(d);
    }
}

typedef struct fmt_conv {
    int         calls;
    size_t      len;
    char        head[8];
    const char *answer;   /* NULL: fail */
} fmt_conv;

static tpu_status fmt_converter(void *user, tpu_ctx *ctx, const void *stablehlo, size_t len, const char *what, char **out,
                                size_t *out_len)
{
    fmt_conv *c = user;
    c->calls++;
    c->len = len;
    memcpy(c->head, stablehlo, len < 8 ? len : 8);
    if (!c->answer) return tpu_set_error(ctx, TPU_ERR_PARSE, "%s: jaxlib says no", what);
    *out = malloc(strlen(c->answer) + 1);
    if (!*out) return TPU_ERR_NOMEM;
    strcpy(*out, c->answer);
    *out_len = strlen(c->answer);
    return TPU_OK;
}

TEST(stablehlo_through_the_context_converter)
{
    tpu_ctx *ctx = tpu_ctx_new();
    const char *mlir = "module @jit_neg {\n  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n  }\n}\n";
    tpu_module *m = NULL;
    /* no converter: a clear refusal that says what it is and what to install */
    CHECK(tpu_module_parse(ctx, mlir, strlen(mlir), "f.mlir", &m) == TPU_ERR_UNSUPPORTED && !m);
    CHECK_MSG(strstr(tpu_errmsg(ctx), "f.mlir: StableHLO (MLIR text)") && strstr(tpu_errmsg(ctx), "pip install jax==0.10.2"),
              "%s", tpu_errmsg(ctx));
    fmt_conv c = {0};
    c.answer = fmt_hlo;
    tpu_ctx_set_converter(ctx, fmt_converter, &c);
    REQUIRE_OK(ctx, tpu_module_parse(ctx, mlir, strlen(mlir), "f.mlir", &m));
    CHECK_EQ_INT(c.calls, 1);
    CHECK_EQ_INT(c.len, strlen(mlir));
    CHECK_EQ_STR(tpu_module_name(m), "neg");
    CHECK_EQ_STR(tpu_module_param_name(m, 0), "x.1");
    CHECK(tpu_module_param_name(m, 1) == NULL && tpu_module_param_name(m, -1) == NULL);
    tpu_module_free(m);
    m = NULL;
    /* a jax export: the converter gets the bytecode inside, not the FlatBuffer */
    unsigned char fb[64] = {12, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 0, 0, 0, 0, 12, 0, 0, 0, 'M', 'L', 0xef, 'R', 1, 2, 3, 4, 5, 6, 7, 8};
    REQUIRE_OK(ctx, tpu_module_parse(ctx, (const char *)fb, sizeof fb, "f.jax_exported", &m));
    CHECK_EQ_INT(c.len, 12);
    CHECK(!memcmp(c.head, "ML\xefR", 4));
    tpu_module_free(m);
    m = NULL;
    /* the converter's error is the loader's; errors in the HLO it made say so */
    c.answer = NULL;
    CHECK(tpu_module_parse(ctx, mlir, strlen(mlir), "f.mlir", &m) == TPU_ERR_PARSE && !m);
    CHECK_EQ_STR(tpu_errmsg(ctx), "f.mlir: jaxlib says no");
    c.answer = "HloModule bad\nENTRY main {\n  ROOT x = f32[4]{0} nosuchop()\n}\n";
    CHECK(tpu_module_parse(ctx, mlir, strlen(mlir), "f.mlir", &m) == TPU_ERR_PARSE);
    CHECK_MSG(strstr(tpu_errmsg(ctx), "f.mlir (as HLO):3:"), "%s", tpu_errmsg(ctx));
    /* a converter that answers StableHLO again is not followed around in circles */
    c.answer = mlir;
    CHECK(tpu_module_parse(ctx, mlir, strlen(mlir), "f.mlir", &m) == TPU_ERR_INTERNAL);
    /* removed: refused again */
    tpu_ctx_set_converter(ctx, NULL, NULL);
    CHECK(tpu_module_parse(ctx, mlir, strlen(mlir), "f.mlir", &m) == TPU_ERR_UNSUPPORTED);
    tpu_ctx_free(ctx);
}

TEST(convert_with_python_reports_a_missing_python)
{
    tpu_ctx *ctx = tpu_ctx_new();
    char *out = NULL;
    size_t n = 0;
    tpu_status st = tpu_convert_with_python((void *)"/nonexistent/python3", ctx, "module {}", 9, "x.mlir", &out, &n);
    CHECK(st == TPU_ERR_UNSUPPORTED && !out);
    CHECK_MSG(strstr(tpu_errmsg(ctx), "x.mlir:") && strstr(tpu_errmsg(ctx), "TPUSIM_PYTHON"), "%s", tpu_errmsg(ctx));
    tpu_ctx_free(ctx);
}

TEST(load_reads_standard_input_for_dash)
{
    char path[256];
    test_tmp_path(path, sizeof path, "stdin.hlo");
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fputs(fmt_hlo, f);
    fclose(f);
    /* point this process's stdin at the file for the duration */
    int saved = dup(0);
    REQUIRE(saved >= 0);
    REQUIRE(freopen(path, "r", stdin) != NULL);
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    CHECK_OK(ctx, tpu_module_load(ctx, "-", &m));
    if (m) CHECK_EQ_STR(tpu_module_name(m), "neg");
    tpu_module_free(m);
    tpu_ctx_free(ctx);
    dup2(saved, 0);
    close(saved);
    clearerr(stdin);
    remove(path);
}
