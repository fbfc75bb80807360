/* t_hlo_proto_bin.c — the binary HloModuleProto reader (src/hlo/hlo_proto_bin.c). Golden protos from jax
 * 0.10.2 and XLA's dumps (tests/golden/proto/, made by tests/golden/make_proto_golden.py) must read as the same
 * module as the HLO text XLA prints for them and run to identical outputs; hand-made malformed bytes must give
 * errors naming the byte offset and field path; truncated, corrupted bytes and failing allocations must end
 * in a clean error, never a crash. */
#include "test.h"
#include "hlo/hlo.h"
#include "hlo/hlo_proto.h"

#include <stdlib.h>

#define GOLD "tests/golden/proto/"

/* every case the generator writes; `run`: 1 on one device, 4 on four (partitions), 0 not runnable */
static const struct {
    const char *name;
    int         run;
} pbt_cases[] = {
    {"mlp", 1}, {"conv", 1}, {"gather_scatter", 1}, {"control", 1}, {"sort", 1}, {"rng", 1}, {"misc", 1},
    {"dtypes_tiles", 1}, {"collectives", 4}, {"attributes", 0}, {"dump_before", 1}, {"dump_after", 1},
    {"dump_snapshot", 1},
};

#define PBT_NCASES ((int)(sizeof pbt_cases / sizeof pbt_cases[0]))

static int contains(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }

static const char *pbt_w(const tpu_ctx *ctx)
{
    const char *w = tpu_warnings(ctx);
    return w ? w : "";
}

static uint8_t *pbt_read(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0, r;
    uint8_t *b = malloc(cap);
    while (b && (r = fread(b + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            uint8_t *nb = realloc(b, cap *= 2);
            if (!nb) free(b);
            b = nb;
        }
    }
    fclose(f);
    *len = n;
    return b;
}

/* ---- a small protobuf writer for hand-made inputs ---- */
typedef struct pbw {
    uint8_t b[8192];
    size_t  n;
} pbw;

static void w_raw(pbw *w, const void *p, size_t n)
{
    if (w->n + n > sizeof w->b) abort();   /* a test bug, not a reader bug */
    memcpy(w->b + w->n, p, n);
    w->n += n;
}

static void w_varint(pbw *w, uint64_t v)
{
    do {
        uint8_t c = (uint8_t)(v & 0x7f);
        v >>= 7;
        c |= v ? 0x80 : 0;
        w_raw(w, &c, 1);
    } while (v);
}

static void w_tag(pbw *w, int num, int wt) { w_varint(w, (uint64_t)num << 3 | (uint64_t)wt); }
static void w_int(pbw *w, int num, uint64_t v) { w_tag(w, num, 0), w_varint(w, v); }
static void w_bytes(pbw *w, int num, const void *p, size_t n) { w_tag(w, num, 2), w_varint(w, n), w_raw(w, p, n); }
static void w_str(pbw *w, int num, const char *s) { w_bytes(w, num, s, strlen(s)); }
static void w_msg(pbw *w, int num, const pbw *m) { w_bytes(w, num, m->b, m->n); }

/* ShapeProto f32[n]{0} */
static void w_shape_f32(pbw *w, int num, int n)
{
    pbw s = {{0}, 0}, l = {{0}, 0};
    w_int(&s, 2, 11);   /* element_type: F32 */
    w_int(&s, 3, (uint64_t)n);
    w_int(&l, 1, 0);    /* minor_to_major: 0 */
    w_msg(&s, 5, &l);
    w_msg(w, num, &s);
}

/* HloInstructionProto: name, opcode, shape f32[2], id, operands (unpacked) */
static void w_instr(pbw *w, const char *name, const char *op, int id, int operand)
{
    pbw in = {{0}, 0};
    w_str(&in, 1, name);
    w_str(&in, 2, op);
    w_shape_f32(&in, 3, 2);
    w_int(&in, 35, (uint64_t)id);
    if (operand) w_int(&in, 36, (uint64_t)operand);
    w_msg(w, 2, &in);
}

/* a valid module: ENTRY e { p = parameter(0); ROOT n = negate(p) } with `extra` appended to the module */
static void w_module(pbw *m, const pbw *extra_instr)
{
    pbw c = {{0}, 0};
    w_str(&c, 1, "e");
    w_instr(&c, "p", "parameter", 1, 0);
    w_instr(&c, "n", "negate", 2, 1);
    if (extra_instr) w_raw(&c, extra_instr->b, extra_instr->n);
    w_int(&c, 5, 1);    /* id */
    w_int(&c, 6, 2);    /* root_id */
    m->n = 0;
    w_str(m, 1, "m");
    w_str(m, 2, "e");
    w_msg(m, 3, &c);
    w_int(m, 6, 1);     /* entry_computation_id */
}

static tpu_status pbt_parse(tpu_ctx *ctx, const pbw *w, tpu_module **m)
{
    tpu_warnings_clear(ctx);
    return tpu_module_parse_proto(ctx, w->b, w->n, "t.pb", m);
}

TEST(proto_bin_schema_table)
{
    char why[200] = "";
    CHECK_MSG(hlo_proto_bin_schema_check(why, sizeof why), "%s", why);
}

/* Each golden proto reads as the module XLA's text for it reads as: equal IR, equal prints, same verdict. */
TEST(proto_bin_golden_reads_like_text)
{
    tpu_ctx *ctx = tpu_ctx_new();
    int n = 0;
    for (int i = 0; i < PBT_NCASES; i++) {
        char pb[256], hlo[256], why[256] = "";
        snprintf(pb, sizeof pb, GOLD "%s.pb", pbt_cases[i].name);
        snprintf(hlo, sizeof hlo, GOLD "%s.hlo", pbt_cases[i].name);
        tpu_module *a = NULL, *b = NULL, *c = NULL;
        tpu_warnings_clear(ctx);
        CHECK_OK(ctx, tpu_module_load(ctx, pb, &a));
        CHECK_MSG(!contains(pbt_w(ctx), "unknown field"), "%s: %s", pb, pbt_w(ctx));
        CHECK_OK(ctx, tpu_module_load(ctx, hlo, &b));
        size_t len = 0;
        uint8_t *bytes = pbt_read(pb, &len);
        CHECK_MSG(bytes && len > 100, "%s unreadable", pb);
        if (bytes) CHECK_OK(ctx, tpu_module_parse_proto(ctx, bytes, len, pb, &c));
        free(bytes);
        if (a && b && c) {
            CHECK_MSG(hlo_module_equal(a, b, why, sizeof why), "%s vs %s: %s", pb, hlo, why);
            CHECK_MSG(hlo_module_equal(c, b, why, sizeof why), "%s (bytes) vs %s: %s", pb, hlo, why);
            char *sa = NULL, *sb = NULL;
            CHECK_OK(ctx, tpu_module_to_string(ctx, a, &sa));
            CHECK_OK(ctx, tpu_module_to_string(ctx, b, &sb));
            CHECK_MSG(sa && sb && !strcmp(sa, sb), "%s prints differently from %s", pb, hlo);
            tpu_free(sa);
            tpu_free(sb);
            tpu_report *ra = NULL, *rb = NULL;
            CHECK_OK(ctx, tpu_check(ctx, a, "v5e", &ra));
            CHECK_OK(ctx, tpu_check(ctx, b, "v5e", &rb));
            if (ra && rb) CHECK_EQ_STR(tpu_report_verdict(ra), tpu_report_verdict(rb));
            tpu_report_free(ra);
            tpu_report_free(rb);
            n++;
        }
        tpu_module_free(a);
        tpu_module_free(b);
        tpu_module_free(c);
    }
    CHECK_EQ_INT(n, 13);
    tpu_ctx_free(ctx);
}

static int pbt_same_outputs(tpu_tensor **x, tpu_tensor **y, int n)
{
    for (int i = 0; i < n; i++) {
        if (tpu_tensor_dtype(x[i]) != tpu_tensor_dtype(y[i]) || tpu_tensor_nbytes(x[i]) != tpu_tensor_nbytes(y[i]) ||
            memcmp(tpu_tensor_data(x[i]), tpu_tensor_data(y[i]), tpu_tensor_nbytes(x[i])))
            return 0;
    }
    return 1;
}

/* Runs a module on `devices` devices with the given inputs; outputs per device. */
static tpu_status pbt_run(tpu_ctx *ctx, const tpu_module *m, int devices, tpu_tensor **in, int nin,
                          tpu_tensor ***out, int *nout)
{
    if (devices == 1) return tpu_run(ctx, m, NULL, in, nin, &out[0], nout);
    tpu_system *sys = NULL;
    tpu_status st = tpu_system_new(ctx, "4", &sys);
    tpu_tensor **const inputs[4] = {in, in, in, in};
    if (!st) st = tpu_system_run(ctx, sys, m, NULL, inputs, nin, out, nout);
    tpu_system_free(sys);
    return st;
}

/* The module read from the proto and the one read from the text compute the same bits. */
TEST(proto_bin_golden_runs_like_text)
{
    tpu_ctx *ctx = tpu_ctx_new();
    int runs = 0;
    for (int i = 0; i < PBT_NCASES; i++) {
        int dev = pbt_cases[i].run;
        if (!dev) continue;
        char pb[256], hlo[256];
        snprintf(pb, sizeof pb, GOLD "%s.pb", pbt_cases[i].name);
        snprintf(hlo, sizeof hlo, GOLD "%s.hlo", pbt_cases[i].name);
        tpu_module *a = NULL, *b = NULL;
        tpu_tensor **in = NULL, **oa[4] = {0}, **ob[4] = {0};
        int nin = 0, na = 0, nb = 0;
        if (tpu_module_load(ctx, pb, &a) || tpu_module_load(ctx, hlo, &b) || tpu_random_inputs(ctx, b, 7, &in, &nin)) {
            CHECK_MSG(0, "%s: %s", pb, tpu_errmsg(ctx));
        } else {
            tpu_status sa = pbt_run(ctx, a, dev, in, nin, oa, &na);
            CHECK_MSG(sa == TPU_OK, "%s: %s", pb, tpu_errmsg(ctx));
            tpu_status sb = pbt_run(ctx, b, dev, in, nin, ob, &nb);
            CHECK_MSG(sb == TPU_OK, "%s: %s", hlo, tpu_errmsg(ctx));
            if (!sa && !sb) {
                CHECK_EQ_INT(na, nb);
                for (int d = 0; d < dev && na == nb; d++)
                    CHECK_MSG(pbt_same_outputs(oa[d], ob[d], na), "%s: device %d outputs differ from the text's", pb, d);
                runs++;
            }
            if (dev == 1) {
                tpu_tensors_free(oa[0], na);
                tpu_tensors_free(ob[0], nb);
            } else {
                if (!sa) tpu_system_outputs_free(oa, dev, na);
                if (!sb) tpu_system_outputs_free(ob, dev, nb);
            }
        }
        tpu_tensors_free(in, nin);
        tpu_module_free(a);
        tpu_module_free(b);
    }
    CHECK_EQ_INT(runs, 12);
    tpu_ctx_free(ctx);
}

/* HloProto, HloSnapshot, HloModuleProtoWithConfig and HloUnoptimizedSnapshot are told apart from the bytes. */
TEST(proto_bin_wrappers)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    tpu_warnings_clear(ctx);
    REQUIRE_OK(ctx, tpu_module_load(ctx, GOLD "dump_after.pb", &m));   /* HloProto */
    CHECK_MSG(contains(pbt_w(ctx), "buffer_assignment: warning: wrapper field 'buffer_assignment'"), "%s",
              pbt_w(ctx));
    CHECK(hlo_module_attr(m, HK_IS_SCHEDULED) != NULL);
    tpu_module_free(m);
    tpu_warnings_clear(ctx);
    REQUIRE_OK(ctx, tpu_module_load(ctx, GOLD "dump_snapshot.pb", &m));   /* HloSnapshot */
    CHECK_MSG(contains(pbt_w(ctx), "arguments[0]: warning: wrapper field 'arguments'"), "%s", pbt_w(ctx));
    CHECK_MSG(contains(pbt_w(ctx), "hlo.hlo_module.device_assignment"), "%s", pbt_w(ctx));
    tpu_module_free(m);

    pbw mod, w = {{0}, 0}, cfg = {{0}, 0}, dbg = {{0}, 0};
    w_module(&mod, NULL);
    w_int(&dbg, 1, 1);
    w_int(&cfg, 4, 4);        /* replica_count */
    w_int(&cfg, 5, 2);        /* num_partitions */
    w_msg(&cfg, 14, &dbg);    /* debug_options: not program, read silently */
    w_int(&cfg, 2, 99);       /* seed */
    w_msg(&w, 1, &mod);
    w_msg(&w, 2, &cfg);
    REQUIRE_OK(ctx, pbt_parse(ctx, &w, &m));   /* HloModuleProtoWithConfig */
    CHECK_EQ_INT(hlo_module_replica_count(m), 4);
    CHECK_EQ_INT(hlo_module_num_partitions(m), 2);
    CHECK_MSG(!*pbt_w(ctx), "%s", pbt_w(ctx));
    tpu_module_free(m);
    w.n = 0;
    w_msg(&w, 1, &mod);
    w_int(&w, 3, 1);          /* version: an HloUnoptimizedSnapshot */
    CHECK_OK(ctx, pbt_parse(ctx, &w, &m));
    tpu_module_free(m);
    m = NULL;
    /* the plain module, through the text entry point too (binary is told from text by its bytes) */
    CHECK_OK(ctx, tpu_module_parse(ctx, (const char *)mod.b, mod.n, "t.bin", &m));
    CHECK(m && m->entry->root->op == HLO_NEGATE && !strcmp(m->name, "m"));
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* Protobuf's own rules: packed or not, last value of a singular field wins, unknown fields (groups too) are
 * skipped with one warning each. */
TEST(proto_bin_wire_rules)
{
    tpu_ctx *ctx = tpu_ctx_new();
    pbw m, extra = {{0}, 0};
    tpu_module *mod = NULL;
    /* an add whose operand_ids are packed */
    pbw in = {{0}, 0}, ids = {{0}, 0};
    w_str(&in, 1, "s");
    w_str(&in, 2, "add");
    w_shape_f32(&in, 3, 2);
    w_int(&in, 35, 3);
    w_varint(&ids, 2);
    w_varint(&ids, 1);
    w_bytes(&in, 36, ids.b, ids.n);
    w_int(&in, 1000, 5);                          /* unknown varint field */
    w_tag(&in, 1001, 3);                          /* unknown group holding a field */
    w_int(&in, 1, 7);
    w_tag(&in, 1001, 4);
    w_msg(&extra, 2, &in);
    w_module(&m, &extra);
    w_str(&m, 1, "renamed");                      /* name again: the last one wins */
    REQUIRE_OK(ctx, pbt_parse(ctx, &m, &mod));
    CHECK_EQ_STR(mod->name, "renamed");
    const hlo_instr *s = mod->entry->instrs[2];
    CHECK(s->op == HLO_ADD && s->nops == 2 && !strcmp(s->ops[0]->name, "n") && !strcmp(s->ops[1]->name, "p"));
    const char *wn = pbt_w(ctx);
    CHECK_MSG(contains(wn, "computations[0].instructions[2]: warning: unknown field 1000 (varint) of "
                           "xla.HloInstructionProto skipped"), "%s", wn);
    CHECK_MSG(contains(wn, "unknown field 1001 (group start)"), "%s", wn);
    CHECK_MSG(contains(wn, "t.pb: byte "), "%s", wn);
    /* instructions report line 1, column = byte offset + 1 */
    CHECK_EQ_INT(s->line, 1);
    CHECK(s->col > 1 && (size_t)s->col < m.n);
    tpu_module_free(mod);
    tpu_ctx_free(ctx);
}

/* Float literal values come through bit for bit: zeros of both signs, subnormals, extremes, infinities. */
TEST(proto_bin_float_bits)
{
    static const uint32_t f32[] = {0x00000000, 0x80000000, 0x00000001, 0x807fffff, 0x7f7fffff, 0xff800000,
                                   0x3f800000, 0xbdcccccd, 0x00800000, 0x7fc00000};
    static const uint64_t f64[] = {0x0000000000000001ull, 0x8000000000000000ull, 0x7fefffffffffffffull,
                                   0x3fb999999999999aull, 0xfff0000000000000ull, 0x000fffffffffffffull};
    tpu_ctx *ctx = tpu_ctx_new();
    for (int dbl = 0; dbl < 2; dbl++) {
        int n = dbl ? 6 : 10;
        pbw shape = {{0}, 0}, lay = {{0}, 0}, lit = {{0}, 0}, in = {{0}, 0}, c = {{0}, 0}, m = {{0}, 0};
        w_int(&shape, 2, dbl ? 12 : 11);   /* F64 / F32 */
        w_int(&shape, 3, (uint64_t)n);
        w_int(&lay, 1, 0);
        w_msg(&shape, 5, &lay);
        w_msg(&lit, 1, &shape);
        uint8_t raw[80];
        for (int i = 0; i < n; i++)
            for (int k = 0; k < (dbl ? 8 : 4); k++)
                raw[i * (dbl ? 8 : 4) + k] = (uint8_t)((dbl ? f64[i] : f32[i]) >> (8 * k));
        w_bytes(&lit, dbl ? 9 : 8, raw, (size_t)n * (dbl ? 8 : 4));   /* packed f64s / f32s */
        w_str(&in, 1, "c");
        w_str(&in, 2, "constant");
        w_msg(&in, 3, &shape);
        w_msg(&in, 8, &lit);
        w_int(&in, 35, 1);
        w_str(&c, 1, "e");
        w_msg(&c, 2, &in);
        w_int(&c, 5, 1);
        w_int(&c, 6, 1);
        w_str(&m, 1, "m");
        w_msg(&m, 3, &c);
        tpu_module *mod = NULL;
        REQUIRE_OK(ctx, pbt_parse(ctx, &m, &mod));
        const hlo_literal *l = mod->entry->root->literal;
        REQUIRE(l && l->nbytes == (size_t)n * (dbl ? 8 : 4));
        CHECK_MSG(!memcmp(l->data, raw, l->nbytes), "%s literal bits differ", dbl ? "f64" : "f32");
        tpu_module_free(mod);
    }
    tpu_ctx_free(ctx);
}

/* One malformed input: the status is PARSE and the message holds `want`. */
static void pbt_bad(tpu_ctx *ctx, const void *bytes, size_t n, const char *want)
{
    tpu_module *m = NULL;
    tpu_status st = tpu_module_parse_proto(ctx, bytes, n, "t.pb", &m);
    CHECK_MSG(st == TPU_ERR_PARSE && !m, "wanted a parse error with \"%s\", got %s", want, tpu_status_name(st));
    CHECK_MSG(contains(tpu_errmsg(ctx), want), "wanted \"%s\", got \"%s\"", want, tpu_errmsg(ctx));
    tpu_module_free(m);
}

TEST(proto_bin_malformed_bytes)
{
    tpu_ctx *ctx = tpu_ctx_new();
    pbw w = {{0}, 0}, x = {{0}, 0};
    /* a length past the end, at the top */
    w_str(&w, 1, "m");
    w_tag(&w, 3, 2);
    w_varint(&w, 4000000);
    w_raw(&w, "xy", 2);
    pbt_bad(ctx, w.b, w.n, "t.pb: byte 3: computations[0]: length 4000000 runs past the end of the message (2 bytes left)");
    /* ... and deep inside: the shape of the third instruction of the second computation */
    pbw c0 = {{0}, 0}, c1 = {{0}, 0}, in = {{0}, 0};
    w_str(&c0, 1, "a");
    w_instr(&c0, "q", "parameter", 1, 0);
    w_int(&c0, 5, 1);
    w_str(&c1, 1, "e");
    w_instr(&c1, "p", "parameter", 1, 0);
    w_instr(&c1, "n", "negate", 2, 1);
    w_str(&in, 1, "bad");
    w_tag(&in, 3, 2);
    w_varint(&in, 200);
    w_raw(&in, "\x10\x0b", 2);
    w_msg(&c1, 2, &in);
    w.n = 0;
    w_msg(&w, 3, &c0);
    w_msg(&w, 3, &c1);
    pbt_bad(ctx, w.b, w.n, "computations[1].instructions[2].shape: length 200 runs past the end of the message");
    /* wrong wire type for a known field */
    in.n = 0;
    w_str(&in, 1, "p");
    w_int(&in, 3, 5);
    w.n = 0;
    x.n = 0;
    w_msg(&x, 2, &in);
    w_msg(&w, 3, &x);
    pbt_bad(ctx, w.b, w.n, "computations[0].instructions[0].shape: wire type varint, expected length-delimited");
    pbt_bad(ctx, "\x0b", 1, "byte 0: name: wire type group start, expected length-delimited");
    pbt_bad(ctx, "\x0a\x01m\xa6\x06", 5, "byte 3: field 100 has wire type invalid (6), which cannot start a field");
    /* varints: truncated, too long */
    pbt_bad(ctx, "\x28\x80", 2, "t.pb: byte 1: id: truncated varint (value): the message ends after 1 byte of it");
    pbt_bad(ctx, "\x0a\x01m\x80", 4, "byte 3: truncated varint (tag)");
    pbt_bad(ctx, "\x28\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f", 11, "byte 1: id: varint (value) overflows 64 bits");
    pbt_bad(ctx, "\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11,
            "byte 0: name: length 18446744073709551615 runs past the end of the message (0 bytes left)");
    /* field number 0, unclosed group, a stray group end */
    pbt_bad(ctx, "\x00", 1, "byte 0: field number 0 is out of range");
    pbt_bad(ctx, "\xa3\x06\x08\x01", 4, "byte 0: group 100 is not closed");
    pbt_bad(ctx, "\xa4\x06", 2, "byte 0: field 100 has wire type group end, which cannot start a field");
    /* a packed 32-bit field whose length is no multiple of 4; a truncated 64-bit value */
    pbw lit = {{0}, 0};
    w_bytes(&lit, 8, "abc", 3);
    in.n = 0;
    w_msg(&in, 8, &lit);
    x.n = 0;
    w_msg(&x, 2, &in);
    w.n = 0;
    w_msg(&w, 3, &x);
    pbt_bad(ctx, w.b, w.n, "computations[0].instructions[0].literal.f32s: packed length 3 is not a multiple of the "
                           "4-byte value");
    pbw st = {{0}, 0};
    w_tag(&st, 2, 1);
    w_raw(&st, "\1\2\3", 3);
    pbt_bad(ctx, st.b, st.n, "byte 0: entry_computation_name: wire type 64-bit, expected length-delimited");
    /* nested too deep: tuple_shapes inside tuple_shapes */
    pbw sh = {{0}, 0};
    w_int(&sh, 2, 11);
    for (int i = 0; i < 120; i++) {
        pbw o = {{0}, 0};
        w_int(&o, 2, 13);   /* TUPLE */
        w_msg(&o, 4, &sh);
        sh = o;
    }
    in.n = 0;
    w_str(&in, 1, "p");
    w_msg(&in, 3, &sh);
    x.n = 0;
    w_msg(&x, 2, &in);
    w.n = 0;
    w_msg(&w, 3, &x);
    pbt_bad(ctx, w.b, w.n, "messages nested more than 100 deep");
    /* errors of the builder name the field path too */
    pbw m;
    x.n = 0;
    w_instr(&x, "bad", "negate", 3, 7);
    w_module(&m, &x);
    pbt_bad(ctx, m.b, m.n, "computations[0].instructions[2].operand_ids[0]: instruction 'bad': operand id 7 is not");
    in.n = 0;
    w_str(&in, 1, "z");
    w_str(&in, 2, "parameter");
    w_int(&in, 35, 4);
    w_int(&in, 9, 1);
    pbw s99 = {{0}, 0};
    w_int(&s99, 2, 99);
    w_msg(&in, 3, &s99);
    x.n = 0;
    w_msg(&x, 2, &in);
    w_module(&m, &x);
    pbt_bad(ctx, m.b, m.n, "computations[0].instructions[2].shape.element_type: element_type 99 is not a PrimitiveType");
    /* replica groups over mesh axes: refused rather than read as one group of every device */
    in.n = 0;
    w_str(&in, 1, "ar");
    w_str(&in, 2, "all-reduce");
    w_shape_f32(&in, 3, 2);
    w_int(&in, 35, 3);
    w_int(&in, 36, 2);
    w_bytes(&in, 93, "", 0);
    x.n = 0;
    w_msg(&x, 2, &in);
    w_module(&m, &x);
    pbt_bad(ctx, m.b, m.n, "computations[0].instructions[2].mesh_axes_replica_group_list: replica groups over mesh "
                           "axes are not supported");
    /* HLO text handed to the binary entry point */
    const char *txt = "HloModule m\nENTRY e {\n  ROOT p = f32[] parameter(0)\n}\n";
    pbt_bad(ctx, txt, strlen(txt), "t.pb: byte ");
    pbt_bad(ctx, "", 0, "t.pb: byte 0: no computations in the module");
    tpu_ctx_free(ctx);
}

/* Every truncation and many corruptions of real protos end in OK or a clean error (ASan build: no bad access). */
TEST(proto_bin_truncated_and_corrupted)
{
    const char *files[] = {GOLD "mlp.pb", GOLD "collectives.pb", GOLD "dtypes_tiles.pb", GOLD "dump_snapshot.pb"};
    tpu_ctx *ctx = tpu_ctx_new();
    long parses = 0, errors = 0;
    for (int f = 0; f < 4; f++) {
        size_t len = 0;
        uint8_t *b = pbt_read(files[f], &len);
        REQUIRE(b && len > 100);
        uint8_t *c = malloc(len);
        REQUIRE(c);
        for (size_t cut = 0; cut <= len; cut++) {   /* every prefix */
            memcpy(c, b, cut);
            tpu_module *m = NULL;
            tpu_status st = tpu_module_parse_proto(ctx, c, cut, "cut.pb", &m);
            CHECK_MSG(st == TPU_OK || st == TPU_ERR_PARSE || st == TPU_ERR_SHAPE, "%s cut at %zu: %s", files[f], cut,
                      tpu_errmsg(ctx));
            if (st == TPU_ERR_PARSE) CHECK_MSG(contains(tpu_errmsg(ctx), "cut.pb: "), "%s", tpu_errmsg(ctx));
            errors += st != TPU_OK;
            parses++;
            tpu_module_free(m);
        }
        static const uint8_t vals[] = {0x00, 0x01, 0x7f, 0x80, 0xff};
        for (size_t i = 0; i < len; i++)   /* every byte set to a few telling values */
            for (int k = 0; k < 5; k++) {
                memcpy(c, b, len);
                c[i] = vals[k];
                tpu_module *m = NULL;
                tpu_status st = tpu_module_parse_proto(ctx, c, len, "bad.pb", &m);
                CHECK_MSG(st == TPU_OK || st == TPU_ERR_PARSE || st == TPU_ERR_SHAPE, "%s byte %zu = %d: %s: %s",
                          files[f], i, vals[k], tpu_status_name(st), tpu_errmsg(ctx));
                if (m) {   /* what reads must print and verify without trouble */
                    char *s = NULL;
                    CHECK_OK(ctx, tpu_module_to_string(ctx, m, &s));
                    tpu_free(s);
                    tpu_report *r = NULL;
                    if (tpu_check(ctx, m, NULL, &r) == TPU_OK) CHECK(tpu_report_text(r)[0] != 0);
                    tpu_report_free(r);
                }
                errors += st != TPU_OK;
                parses++;
                tpu_module_free(m);
            }
        free(c);
        free(b);
    }
    CHECK(errors > parses / 4);
    fprintf(stderr, "  %ld damaged protos read, %ld rejected with a message\n", parses, errors);
    tpu_ctx_free(ctx);
}

/* ---- allocation failures: every allocation N fails once; the read reports out of memory, nothing leaks ---- */
static long pbt_alloc_count, pbt_alloc_fail_at;

static void *pbt_malloc(size_t n, void *u)
{
    (void)u;
    return ++pbt_alloc_count == pbt_alloc_fail_at ? NULL : malloc(n);
}

static void *pbt_realloc(void *p, size_t n, void *u)
{
    (void)u;
    return ++pbt_alloc_count == pbt_alloc_fail_at ? NULL : realloc(p, n);
}

static void pbt_free(void *p, void *u)
{
    (void)u;
    free(p);
}

TEST(proto_bin_allocation_failures)
{
    size_t len = 0;
    uint8_t *b = pbt_read(GOLD "dump_snapshot.pb", &len);
    REQUIRE(b);
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_allocator a = {pbt_malloc, pbt_realloc, pbt_free, NULL};
    int ok_seen = 0;
    for (pbt_alloc_fail_at = 1; pbt_alloc_fail_at < 20000 && !ok_seen; pbt_alloc_fail_at++) {
        pbt_alloc_count = 0;
        tpu_set_allocator(&a);
        tpu_module *m = NULL;
        tpu_status st = tpu_module_parse_proto(ctx, b, len, "oom.pb", &m);
        tpu_set_allocator(NULL);
        if (st == TPU_OK) ok_seen = 1;
        else CHECK_MSG(st == TPU_ERR_NOMEM, "failing allocation %ld gave %s: %s", pbt_alloc_fail_at, tpu_status_name(st),
                       tpu_errmsg(ctx));
        tpu_module_free(m);
    }
    CHECK(ok_seen);
    free(b);
    tpu_ctx_free(ctx);
}
