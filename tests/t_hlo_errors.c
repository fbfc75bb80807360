/* t_hlo_errors.c — malformed HLO text and HloModuleProto text: each gives the right status and a message that
 * names file:line:col and what was expected; nothing crashes or leaks (run under ASan). Also: failing
 * allocation number N while parsing gives a clean out-of-memory error. */
#include "test.h"
#include "hlo/hlo.h"

#include <stdlib.h>

#define HDR "HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n"

typedef struct {
    const char *text;
    tpu_status  st;
    const char *where;   /* "L:C" the message must hold after the file name */
    const char *what;    /* a piece of the message */
} err_case;

static const err_case cases[] = {
    /* structure */
    {"", TPU_ERR_PARSE, "1:1", "no computations"},
    {"HloModule m\n", TPU_ERR_PARSE, "2:1", "no computations"},
    {"HloModule m\nENTRY e {\n  p = f32[] parameter(0)\n", TPU_ERR_PARSE, "2:9", "not closed"},
    {"HloModule m\nENTRY e {\n}\n", TPU_ERR_PARSE, "2:9", "has no instructions"},
    {"HloModule m\nENTRY e {\n  p = f32[] parameter(0)\n}\nHloModule n\n", TPU_ERR_PARSE, "5:1", "second HloModule"},
    {"HloModule m\nENTRY e (p: f32[]) f32[] {\n  p = f32[] parameter(0)\n}\n", TPU_ERR_PARSE, "2:20", "'->'"},
    {"HloModule\n", TPU_ERR_PARSE, "2:1", "module name"},
    /* instructions */
    {HDR "  ROOT r = f32[2] frobnicate(p)\n}\n", TPU_ERR_PARSE, "4:19", "unknown opcode 'frobnicate'"},
    {HDR "  ROOT r = f32[2] custom-call-start(p)\n}\n", TPU_ERR_PARSE, "4:19", "needs a shape ((operand shapes), result, ...)"},
    {HDR "  ROOT r f32[2] add(p, p)\n}\n", TPU_ERR_PARSE, "4:10", "expected '='"},
    {HDR "  ROOT r = f32[2] add(p)\n}\n", TPU_ERR_PARSE, "4:19", "add takes 2 operands, got 1"},
    {HDR "  ROOT r = f32[2] add(p, q)\n}\n", TPU_ERR_PARSE, "4:8", "uses 'q', which is not defined"},
    {HDR "  p = f32[2] negate(p)\n}\n", TPU_ERR_PARSE, "4:3", "defined twice"},
    {HDR "  ROOT a = f32[2] negate(p)\n  ROOT b = f32[2] negate(p)\n}\n", TPU_ERR_PARSE, "5:8", "two ROOT"},
    {HDR "  q = f32[2] parameter(0)\n}\n", TPU_ERR_PARSE, "4:3", "appears twice"},
    {HDR "  q = f32[2] parameter(2)\n}\n", TPU_ERR_PARSE, "2:9", "parameter(2) but only 2 instructions"},
    {HDR "  a = f32[2] add(p, b)\n  b = f32[2] add(p, a)\n}\n", TPU_ERR_PARSE, "4:3", "cycle"},
    {HDR "  r = parameter(1)\n}\n", TPU_ERR_PARSE, "4:7", "needs its result shape"},
    {HDR "  ROOT r = f32[2] add(p, p), control-predecessors={x}\n}\n", TPU_ERR_PARSE, "4:30", "control predecessor 'x'"},
    /* shapes and layouts */
    {HDR "  ROOT r = f33[2] negate(p)\n}\n", TPU_ERR_PARSE, "4:12", "unknown element type 'f33'"},
    {"HloModule m\nENTRY e {\n  p = f32[2,3]{0,0} parameter(0)\n}\n", TPU_ERR_PARSE, "3:15", "not a permutation"},
    {"HloModule m\nENTRY e {\n  p = f32[2,3]{0} parameter(0)\n}\n", TPU_ERR_PARSE, "3:15", "layout has 1 entries"},
    {"HloModule m\nENTRY e {\n  p = f32[2,3]{1,0:Q(4)} parameter(0)\n}\n", TPU_ERR_PARSE, "3:20", "unknown layout item"},
    {"HloModule m\nENTRY e {\n  p = f32[99999999999999999999] parameter(0)\n}\n", TPU_ERR_PARSE, "3:11", "out of range"},
    {"HloModule m\nENTRY e {\n  p = f32[-4] parameter(0)\n}\n", TPU_ERR_PARSE, "3:11", "negative dimension"},
    {"HloModule m\nENTRY e {\n  p = f32[2 parameter(0)\n}\n", TPU_ERR_PARSE, "3:13", "expected ']'"},
    {"HloModule m\nENTRY e {\n  p = token[2] parameter(0)\n}\n", TPU_ERR_PARSE, "3:7", "token has no dimensions"},
    /* attributes */
    {HDR "  ROOT r = f32[2] reverse(p), dimensions={a}\n}\n", TPU_ERR_PARSE, "4:43", "expected an integer"},
    {HDR "  ROOT r = f32[2] sort(p), dimensions={0}, is_stable=yes, to_apply=%c\n}\n", TPU_ERR_PARSE, "4:54",
     "expected true or false"},
    {HDR "  ROOT r = f32[2] negate(p), metadata={op_name=\"abc}\n}\n", TPU_ERR_PARSE, "4:48", "unterminated string"},
    {HDR "  ROOT r = f32[2] negate(p), dimensions={0}, dimensions={0}\n}\n", TPU_ERR_PARSE, "4:46", "given twice"},
    {HDR "  ROOT r = f32[2] negate(p), window={size=3x3 stride=2}\n}\n", TPU_ERR_PARSE, "4:47", "different ranks"},
    {HDR "  ROOT r = f32[2] negate(p), dim_labels=b01_01io->b01f\n}\n", TPU_ERR_PARSE, "4:41", "lacks its b/f"},
    {HDR "  ROOT r = f32[2] pad(p, p), padding=1_\n}\n", TPU_ERR_PARSE, "4:40", "expected an integer after '_'"},
    {HDR "  ROOT r = f32[2] all-reduce(p), replica_groups=[2,2]<=[3], to_apply=%a\n}\n", TPU_ERR_PARSE, "4:59",
     "do not match"},
    {HDR "  ROOT r = f32[2] map(p), to_apply=%nope\n}\n", TPU_ERR_PARSE, "4:27", "'nope', which is not defined"},
    {"HloModule m\nc {\n  a = f32[] parameter(0)\n  ROOT r = f32[] call(a), to_apply=%d\n}\n"
     "d {\n  a = f32[] parameter(0)\n  ROOT r = f32[] call(a), to_apply=%c\n}\n"
     "ENTRY e {\n  a = f32[] parameter(0)\n  ROOT r = f32[] call(a), to_apply=%c\n}\n",
     TPU_ERR_PARSE, "2:1", "recursion"},
    /* found by fuzz_hlo: an inline body in the module header crashed */
    {"HloModule c, to_apply={ a = f32[] parameter(0) }\nENTRY e {\n  ROOT p = f32[] parameter(0)\n}\n", TPU_ERR_PARSE, "1:23",
     "only allowed in an instruction"},
    /* literals */
    {"HloModule m\nENTRY e {\n  ROOT c = f32[3] constant({1, 2})\n}\n", TPU_ERR_PARSE, "3:28", "2 elements in dimension 0"},
    {"HloModule m\nENTRY e {\n  ROOT c = s8[] constant(300)\n}\n", TPU_ERR_PARSE, "3:26", "out of range for s8"},
    {"HloModule m\nENTRY e {\n  ROOT c = f32[2,2] constant({ {...}, {1, 2} })\n}\n", TPU_ERR_PARSE, "3:33", "can only stand for a whole constant"},
    {"HloModule m\nENTRY e {\n  ROOT c = f32[] constant(abc)\n}\n", TPU_ERR_PARSE, "3:27", "expected a f32 value"},
    /* found by fuzz_hlo: a huge constant shape made the parser allocate 200 GB before reading any value */
    {"HloModule m\nENTRY e {\n  ROOT c = f32[55555555553] constant({1})\n}\n", TPU_ERR_PARSE, "3:38",
     "has 55555555553 values but only"},
    /* inference of left-out shapes */
    {"HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  q = f32[3] parameter(1)\n  ROOT r = add(p, q)\n}\n",
     TPU_ERR_SHAPE, "5:8", "different dimensions"},
    {"HloModule m\nENTRY e {\n  p = f32[2,3] parameter(0)\n  ROOT r = transpose(p), dimensions={0,0}\n}\n",
     TPU_ERR_SHAPE, "4:8", "twice"},
    /* HloModuleProto text */
    {"hlo_module {\n  name: \"m\"\n  computations {\n    name: \"c\"\n    instructions {\n      name: \"p\"\n"
     "      opcode: \"frob\"\n    }\n  }\n}\n", TPU_ERR_PARSE, "7:7", "unknown opcode 'frob'"},
    {"hlo_module {\n  name: \"m\"\n  computations {\n", TPU_ERR_PARSE, "3:3", "not closed"},
    {"name: \"m\nunterminated\"\n", TPU_ERR_PARSE, "1:", "unterminated string"},
    {"name: \"m\"\ncomputations {\n  name: \"c\"\n  instructions {\n    name: \"a\"\n    opcode: \"negate\"\n"
     "    shape { element_type: F32 }\n    id: 2\n    operand_ids: 7\n  }\n}\n", TPU_ERR_PARSE, "9:5",
     "operand id 7"},
    {"name: \"m\"\ncomputations {\n  name: \"c\"\n  instructions {\n    name: \"a\"\n    opcode: \"parameter\"\n"
     "    shape { element_type: Q32 }\n  }\n}\n", TPU_ERR_PARSE, "7:13", "unknown element_type Q32"},
    {"name: \"m\"\ncomputations {\n  name: \"c\" instructions { name: \"a\" opcode: \"parameter\"\n"
     "    shape { element_type: F32 dimensions: 2 dimensions: 3 layout { minor_to_major: 0 } } }\n}\n",
     TPU_ERR_PARSE, "4:59", "minor_to_major entries"},
    {"name: \"m\" computations }\n", TPU_ERR_PARSE, "1:24", "expected ':' or '{'"},
};

static int contains(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

TEST(hlo_errors_line_col_and_message)
{
    tpu_ctx *ctx = tpu_ctx_new();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const err_case *c = &cases[i];
        tpu_module *m = NULL;
        tpu_status st = tpu_module_parse(ctx, c->text, strlen(c->text), "bad.hlo", &m);
        const char *msg = tpu_errmsg(ctx);
        CHECK_MSG(st == c->st, "case %zu: status %s, wanted %s (%s)", i, tpu_status_name(st), tpu_status_name(c->st), msg);
        CHECK_MSG(m == NULL, "case %zu: a module came back with an error", i);
        char where[64];
        snprintf(where, sizeof where, "bad.hlo:%s", c->where);
        CHECK_MSG(contains(msg, where), "case %zu: message lacks '%s': %s", i, where, msg);
        CHECK_MSG(contains(msg, c->what), "case %zu: message lacks '%s': %s", i, c->what, msg);
        tpu_module_free(m);
    }
    tpu_ctx_free(ctx);
}

/* Deep nesting is refused with a message, not a stack overflow. */
TEST(hlo_errors_deep_nesting)
{
    tpu_ctx *ctx = tpu_ctx_new();
    char *buf = malloc(40000);
    REQUIRE(buf);
    /* a tuple shape 5000 deep */
    int n = sprintf(buf, "HloModule m\nENTRY e {\n  p = ");
    for (int i = 0; i < 5000; i++) buf[n++] = '(';
    strcpy(buf + n, "f32[]");
    tpu_module *m = NULL;
    tpu_status st = tpu_module_parse(ctx, buf, strlen(buf), "deep.hlo", &m);
    CHECK_EQ_INT(st, TPU_ERR_PARSE);
    CHECK_MSG(contains(tpu_errmsg(ctx), "nested more than"), "%s", tpu_errmsg(ctx));
    /* nested operand instructions 3000 deep */
    n = sprintf(buf, "HloModule m\nENTRY e {\n  p = f32[] parameter(0)\n  ROOT r = f32[] ");
    for (int i = 0; i < 3000; i++) n += sprintf(buf + n, "negate(");
    n += sprintf(buf + n, "p");
    for (int i = 0; i < 3000; i++) buf[n++] = ')';
    strcpy(buf + n, "\n}\n");
    st = tpu_module_parse(ctx, buf, strlen(buf), "deep.hlo", &m);
    CHECK_EQ_INT(st, TPU_ERR_PARSE);
    CHECK_MSG(contains(tpu_errmsg(ctx), "deep.hlo:4:") && contains(tpu_errmsg(ctx), "nested"), "%s", tpu_errmsg(ctx));
    /* proto messages 3000 deep */
    n = 0;
    for (int i = 0; i < 3000; i++) n += sprintf(buf + n, "a {");
    buf[n] = 0;
    st = tpu_module_parse(ctx, buf, strlen(buf), "deep.pb", &m);
    CHECK_EQ_INT(st, TPU_ERR_PARSE);
    free(buf);
    tpu_ctx_free(ctx);
}

TEST(hlo_errors_nul_and_garbage)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    const char nul[] = "HloModule m\nENTRY e {\n  p = f32[] para\0meter(0)\n}\n";
    tpu_status st = tpu_module_parse(ctx, nul, sizeof nul - 1, "nul.hlo", &m);
    CHECK_EQ_INT(st, TPU_ERR_PARSE);
    CHECK_MSG(contains(tpu_errmsg(ctx), "NUL"), "%s", tpu_errmsg(ctx));
    const char *junk[] = {"}", "{", ")", "%", "ENTRY", "ENTRY {", "a {", "a { b = }", "HloModule m, x=", "#",
                          "a { b = f32[] c(", "a { b = f32[]{ parameter(0) }", "a: {", "a { ROOT }", "x:"};
    for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++) {
        st = tpu_module_parse(ctx, junk[i], strlen(junk[i]), "junk.hlo", &m);
        CHECK_MSG(st != TPU_OK && !m, "junk %zu '%s' parsed", i, junk[i]);
        CHECK_MSG(contains(tpu_errmsg(ctx), "junk.hlo:"), "junk %zu: %s", i, tpu_errmsg(ctx));
        tpu_module_free(m);
    }
    tpu_ctx_free(ctx);
}

/* Unknown attributes are kept and warned about, never fatal. */
TEST(hlo_errors_unknown_attribute_warns)
{
    tpu_ctx *ctx = tpu_ctx_new();
    const char *t = "HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT r = f32[2] negate(p), frobs={1 2}\n}\n";
    tpu_module *m = NULL;
    REQUIRE_OK(ctx, tpu_module_parse(ctx, t, strlen(t), "w.hlo", &m));
    CHECK_MSG(contains(tpu_warnings(ctx), "w.hlo:4:30") && contains(tpu_warnings(ctx), "frobs"), "%s", tpu_warnings(ctx));
    char *s = NULL;
    REQUIRE_OK(ctx, tpu_module_to_string(ctx, m, &s));
    CHECK(contains(s, "frobs={1 2}"));
    tpu_free(s);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* ---- allocation failures: every allocation N fails once, the parse reports out of memory, nothing leaks ---- */
static long alloc_count, alloc_fail_at;

static void *fail_malloc(size_t n, void *u)
{
    (void)u;
    if (++alloc_count == alloc_fail_at) return NULL;
    return malloc(n);
}

static void *fail_realloc(void *p, size_t n, void *u)
{
    (void)u;
    if (++alloc_count == alloc_fail_at) return NULL;
    return realloc(p, n);
}

static void fail_free(void *p, void *u)
{
    (void)u;
    free(p);
}

static void alloc_failures(const char *text, const char *what)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_allocator a = {fail_malloc, fail_realloc, fail_free, NULL};
    int ok_seen = 0;
    for (alloc_fail_at = 1; alloc_fail_at < 5000 && !ok_seen; alloc_fail_at++) {
        alloc_count = 0;
        tpu_set_allocator(&a);
        tpu_module *m = NULL;
        tpu_status st = tpu_module_parse(ctx, text, strlen(text), "oom.hlo", &m);
        char *s = NULL;
        if (st == TPU_OK) st = tpu_module_to_string(ctx, m, &s);
        tpu_set_allocator(NULL);
        if (st == TPU_OK) ok_seen = 1;
        else CHECK_MSG(st == TPU_ERR_NOMEM, "%s: failing allocation %ld gave %s: %s", what, alloc_fail_at,
                       tpu_status_name(st), tpu_errmsg(ctx));
        tpu_free(s);
        tpu_module_free(m);
    }
    CHECK_MSG(ok_seen, "%s: never succeeded", what);
    tpu_ctx_free(ctx);
}

TEST(hlo_errors_allocation_failures)
{
    alloc_failures("HloModule m, entry_computation_layout={(f32[2]{0})->f32[]}\n"
                   "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = add(a, b) }\n"
                   "ENTRY e {\n  p = f32[2]{0} parameter(0)\n  c = f32[] constant(0)\n"
                   "  ROOT r = reduce(p, f32[] negate(c)), dimensions={0}, to_apply={ x = f32[] parameter(0)\n"
                   "   y = f32[] parameter(1)\n ROOT z = f32[] maximum(x, y) }, metadata={op_name=\"r\" source_line=3}\n}\n",
                   "text");
    alloc_failures("hlo_module { name: \"m\" entry_computation_name: \"c\" computations { name: \"c\" id: 1 root_id: 2\n"
                   " instructions { name: \"p\" opcode: \"parameter\" id: 1 shape { element_type: F32 dimensions: 4\n"
                   "  layout { minor_to_major: 0 } } metadata { op_name: \"x\" } }\n"
                   " instructions { name: \"n\" opcode: \"negate\" id: 2 operand_ids: 1 shape { element_type: F32\n"
                   "  dimensions: 4 } frontend_attributes { map { key: \"k\" value: \"v\" } } } } }\n",
                   "proto");
}
