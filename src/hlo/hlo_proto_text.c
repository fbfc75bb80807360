/* hlo_proto_text.c — reads an HloModuleProto written in protobuf text format into the module IR.
 *
 * XLA's tools accept a module as `hlo_module { name: "m" computations { instructions { ... } } }` (an HloProto)
 * or as the bare HloModuleProto fields. Reading is two steps: the text becomes a tree of fields (pt_*), then
 * the tree becomes computations and instructions with the same attributes the HLO text parser would make,
 * so the module prints as HLO text and parses back equal. Fields the IR has no place for are skipped with a
 * warning; fields that change what the program computes and that tpusim cannot represent are errors.
 */
#include "hlo_proto.h"
#include "util/tensor.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- the reader's state (lexing the text, then building the module) ---- */
typedef struct pt {
    tpu_ctx    *ctx;
    const char *src, *p, *end, *file;
    int         line_offset;
    int         line;
    const char *line_start;
    int         failed;
    int         binary;        /* the tree came from the wire format: locations are byte offsets */
    int         depth;
    ut_arena    tree;          /* the field tree, freed after building */
    hlo_module *m;
    /* building */
    hlo_comp  **comps;         /* by position in the proto */
    int64_t    *comp_ids;
    int         ncomps;
    char      **warned;        /* field paths already warned about */
    int         nwarned;
} pt;

#define PT_MAX_DEPTH 200

static void pt_verror(pt *P, const pt_node *n, int line, int col, const char *fmt, va_list ap)
{
    if (P->failed) return;
    P->failed = 1;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (!P->binary) {
        ut_err(P->ctx, TPU_ERR_PARSE, "%s:%d:%d: %s", P->file, line + P->line_offset, col, msg);
    } else if (n) {
        char path[256];
        hlo_proto_path(n, path, sizeof path);
        ut_err(P->ctx, TPU_ERR_PARSE, "%s: byte %zu: %s%s%s", P->file, n->off, path, *path ? ": " : "", msg);
    } else {
        ut_err(P->ctx, TPU_ERR_PARSE, "%s: %s", P->file, msg);
    }
}

static int pt_error_lc(pt *P, int line, int col, const char *fmt, ...) UT_PRINTF(4, 5);
static int pt_error_lc(pt *P, int line, int col, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pt_verror(P, NULL, line, col, fmt, ap);
    va_end(ap);
    return 0;
}

/* An error at a field of the tree: its line:col, or in a binary tree its byte offset and path. */
static int pt_nerror(pt *P, const pt_node *n, const char *fmt, ...) UT_PRINTF(3, 4);
static int pt_nerror(pt *P, const pt_node *n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pt_verror(P, n, n ? n->line : P->line, n ? n->col : 1, fmt, ap);
    va_end(ap);
    return 0;
}

#define pt_error(P, ...) pt_error_lc(P, (P)->line, (int)((P)->p - (P)->line_start) + 1, __VA_ARGS__)

void hlo_proto_path(const pt_node *n, char *buf, size_t size)
{
    const pt_node *chain[64];
    int k = 0;
    const pt_node *q = n;
    for (; q && q->parent && k < 64; q = q->parent) chain[k++] = q;
    size_t len = 0;
    buf[0] = 0;
    if (q && q->parent) len = (size_t)snprintf(buf, size, "...");   /* deeper than we show */
    for (int i = k - 1; i >= 0 && len < size; i--) {
        q = chain[i];
        int w = snprintf(buf + len, size - len, "%s%s", len ? "." : "", q->name);
        if (w > 0) len += (size_t)w;
        if (q->rep && len < size) {
            int idx = 0;   /* counted on demand: paths are made only for messages to the user */
            for (const pt_node *s = q->parent->child; s && s != q; s = s->next) idx += !strcmp(s->name, q->name);
            w = snprintf(buf + len, size - len, "[%d]", idx);
            if (w > 0) len += (size_t)w;
        }
    }
}

static int pt_nomem(pt *P)
{
    if (!P->failed) {
        P->failed = 1;
        ut_nomem(P->ctx);
    }
    return 0;
}

static void pt_ws(pt *P)
{
    while (P->p < P->end) {
        char c = *P->p;
        if (c == '\n') {
            P->line++;
            P->line_start = ++P->p;
        } else if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
            P->p++;
        } else if (c == '#' || (c == '/' && P->p + 1 < P->end && P->p[1] == '/')) {
            /* '#' is protobuf's comment; '//' lines are test directives in XLA's files */
            while (P->p < P->end && *P->p != '\n') P->p++;
        } else {
            return;
        }
    }
}

static int pt_ident_char(int c) { return isalnum(c) || c == '_'; }

/* A quoted string with C escapes; adjacent strings are joined. */
static int pt_string(pt *P, pt_node *n)
{
    ut_buf b;
    ut_buf_init(&b);
    while (P->p < P->end && (*P->p == '"' || *P->p == '\'')) {
        char q = *P->p++;
        while (P->p < P->end && *P->p != q) {
            char c = *P->p++;
            if (c == '\n') {
                ut_buf_free(&b);
                return pt_error(P, "unterminated string (a newline inside quotes)");
            }
            if (c == '\\' && P->p < P->end) {
                char e = *P->p++;
                switch (e) {
                case 'n': c = '\n'; break;
                case 't': c = '\t'; break;
                case 'r': c = '\r'; break;
                case 'a': c = '\a'; break;
                case 'b': c = '\b'; break;
                case 'f': c = '\f'; break;
                case 'v': c = '\v'; break;
                case 'x': case 'X': {
                    int v = 0, k = 0;
                    while (k < 2 && P->p < P->end && isxdigit((unsigned char)*P->p)) {
                        int h = *P->p++;
                        v = v * 16 + (isdigit(h) ? h - '0' : tolower(h) - 'a' + 10);
                        k++;
                    }
                    c = (char)v;
                    break;
                }
                default:
                    if (e >= '0' && e <= '7') {
                        int v = e - '0', k = 1;
                        while (k < 3 && P->p < P->end && *P->p >= '0' && *P->p <= '7') {
                            v = v * 8 + (*P->p++ - '0');
                            k++;
                        }
                        c = (char)v;
                    } else {
                        c = e;
                    }
                }
            }
            ut_buf_putc(&b, c);
        }
        if (P->p >= P->end) {
            ut_buf_free(&b);
            return pt_error(P, "unterminated string");
        }
        P->p++;
        pt_ws(P);
    }
    if (b.failed) {
        ut_buf_free(&b);
        return pt_nomem(P);
    }
    char *s = ut_arena_alloc(&P->tree, b.len + 1);
    if (!s) {
        ut_buf_free(&b);
        return pt_nomem(P);
    }
    if (b.len) memcpy(s, b.data, b.len);
    n->val = s;
    n->vlen = b.len;
    n->is_str = 1;
    ut_buf_free(&b);
    return 1;
}

/* A scalar token: number, identifier (enum, true/false) or string. */
static int pt_scalar(pt *P, pt_node *n)
{
    pt_ws(P);
    if (P->p < P->end && (*P->p == '"' || *P->p == '\'')) return pt_string(P, n);
    const char *s = P->p;
    if (P->p < P->end && (*P->p == '-' || *P->p == '+')) P->p++;
    while (P->p < P->end && (pt_ident_char((unsigned char)*P->p) || *P->p == '.' ||
                             ((*P->p == '-' || *P->p == '+') && (P->p[-1] == 'e' || P->p[-1] == 'E'))))
        P->p++;
    if (P->p == s || (P->p == s + 1 && (*s == '-' || *s == '+'))) return pt_error(P, "expected a value");
    char *v = ut_arena_strndup(&P->tree, s, (size_t)(P->p - s));
    if (!v) return pt_nomem(P);
    n->val = v;
    n->vlen = (size_t)(P->p - s);
    return 1;
}

static int pt_body(pt *P, pt_node *parent, char close);

static pt_node *pt_new(pt *P, pt_node *parent, const char *name, size_t nlen, int line, int col)
{
    pt_node *n = ut_arena_alloc(&P->tree, sizeof *n);
    char *nm = ut_arena_strndup(&P->tree, name, nlen);
    if (!n || !nm) {
        pt_nomem(P);
        return NULL;
    }
    n->name = nm;
    n->line = line;
    n->col = col;
    n->parent = parent;
    if (parent->last) parent->last->next = n;
    else parent->child = n;
    parent->last = n;
    return n;
}

/* A value after "name:" or "name": a message { } / < >, a list [ ], or a scalar. */
static int pt_value(pt *P, pt_node *parent, const char *name, size_t nlen, int line, int col, int in_list)
{
    pt_ws(P);
    if (P->p < P->end && (*P->p == '{' || *P->p == '<')) {
        char close = *P->p == '{' ? '}' : '>';
        P->p++;
        pt_node *n = pt_new(P, parent, name, nlen, line, col);
        if (!n) return 0;
        n->is_msg = 1;
        n->val = "";   /* read as a scalar by mistake, a message is an empty string, never NULL */
        if (++P->depth > PT_MAX_DEPTH) return pt_error(P, "messages nested more than %d deep", PT_MAX_DEPTH);
        int ok = pt_body(P, n, close);
        P->depth--;
        return ok;
    }
    if (P->p < P->end && *P->p == '[' && !in_list) {
        P->p++;
        pt_ws(P);
        while (P->p < P->end && *P->p != ']') {
            if (!pt_value(P, parent, name, nlen, line, col, 1)) return 0;
            pt_ws(P);
            if (P->p < P->end && *P->p == ',') {
                P->p++;
                pt_ws(P);
            } else if (P->p < P->end && *P->p != ']') {
                return pt_error(P, "expected ',' or ']' in a list");
            }
        }
        if (P->p >= P->end) return pt_error(P, "unterminated list (missing ']')");
        P->p++;
        return 1;
    }
    pt_node *n = pt_new(P, parent, name, nlen, line, col);
    return n && pt_scalar(P, n);
}

/* fields until `close` ('}' / '>', or 0 for the end of the text) */
static int pt_body(pt *P, pt_node *parent, char close)
{
    for (;;) {
        pt_ws(P);
        if (P->p >= P->end) {
            if (close) return pt_error_lc(P, parent->line, parent->col, "message '%s' is not closed (missing '%c')",
                                          parent->name, close);
            return 1;
        }
        if (*P->p == close && close) {
            P->p++;
            return 1;
        }
        if (*P->p == '}' || *P->p == '>') return pt_error(P, "unexpected '%c'", *P->p);
        int line = P->line, col = (int)(P->p - P->line_start) + 1;
        const char *s = P->p;
        if (*P->p == '[') {
            /* [extension.name] or [type.googleapis.com/...]: kept as a field named by the bracket text */
            while (P->p < P->end && *P->p != ']' && *P->p != '\n') P->p++;
            if (P->p >= P->end || *P->p != ']') return pt_error(P, "unterminated extension name");
            P->p++;
        } else {
            while (P->p < P->end && pt_ident_char((unsigned char)*P->p)) P->p++;
            if (P->p == s) return pt_error(P, "expected a field name, got '%c'", *P->p);
        }
        size_t nlen = (size_t)(P->p - s);
        pt_ws(P);
        int colon = 0;
        if (P->p < P->end && *P->p == ':') {
            P->p++;
            colon = 1;
        }
        pt_ws(P);
        if (!colon && !(P->p < P->end && (*P->p == '{' || *P->p == '<')))
            return pt_error(P, "expected ':' or '{' after field name '%.*s'", (int)nlen, s);
        if (!pt_value(P, parent, s, nlen, line, col, 0)) return 0;
        pt_ws(P);
        if (P->p < P->end && (*P->p == ',' || *P->p == ';')) P->p++;
    }
}

/* ---- tree access ---- */

static int pt_is(const pt_node *n, const char *name) { return !strcmp(n->name, name); }

static const pt_node *pt_get(const pt_node *msg, const char *name)
{
    for (const pt_node *c = msg ? msg->child : NULL; c; c = c->next)
        if (pt_is(c, name)) return c;
    return NULL;
}

static int pt_count(const pt_node *msg, const char *name)
{
    int n = 0;
    for (const pt_node *c = msg ? msg->child : NULL; c; c = c->next) n += pt_is(c, name);
    return n;
}

static int pt_int_of(pt *P, const pt_node *n, int64_t *v)
{
    if (n->is_msg || n->is_str) return pt_nerror(P, n, "field '%s' must be an integer", n->name);
    const char *s = n->val;
    char *e;
    errno = 0;
    if (!strcmp(s, "true")) { *v = 1; return 1; }
    if (!strcmp(s, "false")) { *v = 0; return 1; }
    long long x;
    if (*s == '-') x = strtoll(s, &e, 0);
    else x = (long long)strtoull(s, &e, 0);
    if (e == s || *e || errno == ERANGE) return pt_nerror(P, n, "field '%s': '%s' is not a 64-bit integer", n->name, s);
    *v = x;
    return 1;
}

static int pt_int(pt *P, const pt_node *msg, const char *name, int64_t dflt, int64_t *v)
{
    const pt_node *n = pt_get(msg, name);
    if (!n) {
        *v = dflt;
        return 1;
    }
    return pt_int_of(P, n, v);
}

static int pt_bool(pt *P, const pt_node *msg, const char *name, int *v)
{
    int64_t x;
    if (!pt_int(P, msg, name, 0, &x)) return 0;
    *v = x != 0;
    return 1;
}

static int pt_double_of(pt *P, const pt_node *n, double *v)
{
    if (n->is_msg || n->is_str) return pt_nerror(P, n, "field '%s' must be a number", n->name);
    const char *s = n->val;
    if (!strcmp(s, "inf") || !strcmp(s, "infinity")) { *v = 1.0 / 0.0; return 1; }
    if (!strcmp(s, "-inf") || !strcmp(s, "-infinity")) { *v = -1.0 / 0.0; return 1; }
    if (!strcmp(s, "nan")) { *v = NAN; return 1; }   /* positive, as XLA writes it (0.0 / 0.0 is -nan on x86) */
    char *e;
    *v = strtod(s, &e);
    if (e < s + strlen(s) && (*e == 'f' || *e == 'F') && e[1] == 0) e++;
    if (e == s || *e) return pt_nerror(P, n, "field '%s': '%s' is not a number", n->name, s);
    return 1;
}

static const char *pt_str(const pt_node *msg, const char *name)
{
    const pt_node *n = pt_get(msg, name);
    return n && !n->is_msg ? n->val : NULL;
}

/* All values of a repeated integer field. */
static int pt_ints(pt *P, const pt_node *msg, const char *name, int *n, int64_t **v)
{
    int k = pt_count(msg, name);
    *n = k;
    *v = NULL;
    if (!k) return 1;
    *v = ut_arena_alloc(&P->m->arena, (size_t)k * sizeof(int64_t));
    if (!*v) return pt_nomem(P);
    int i = 0;
    for (const pt_node *c = msg->child; c; c = c->next)
        if (pt_is(c, name) && !pt_int_of(P, c, &(*v)[i++])) return 0;
    return 1;
}

static void pt_warn_field(pt *P, const pt_node *n, const char *where)
{
    char key[200];
    snprintf(key, sizeof key, "%s.%s", where, n->name);
    for (int i = 0; i < P->nwarned; i++)
        if (!strcmp(P->warned[i], key)) return;
    char **w = ut_arena_alloc(&P->tree, (size_t)(P->nwarned + 1) * sizeof(char *));
    char *k = ut_arena_strdup(&P->tree, key);
    if (w && k) {
        if (P->nwarned) memcpy(w, P->warned, (size_t)P->nwarned * sizeof(char *));
        w[P->nwarned++] = k;
        P->warned = w;
    }
    if (P->binary) {
        char path[256];
        hlo_proto_path(n, path, sizeof path);
        ut_warn(P->ctx, "%s: byte %zu: %s: warning: %s field '%s' is not used by tpusim and was skipped", P->file,
                n->off, path, where, n->name);
        return;
    }
    ut_warn(P->ctx, "%s:%d:%d: warning: %s field '%s' is not used by tpusim and was skipped", P->file,
            n->line + P->line_offset, n->col, where, n->name);
}

/* Warns about every field of msg that is not in `known` (a NULL-terminated list). */
static void pt_check_fields(pt *P, const pt_node *msg, const char *where, const char *const *known)
{
    for (const pt_node *c = msg->child; c; c = c->next) {
        int ok = 0;
        for (int i = 0; known[i] && !ok; i++) ok = pt_is(c, known[i]);
        if (!ok) pt_warn_field(P, c, where);
    }
}

/* ---- module-arena helpers ---- */

static char *pt_mstrdup(pt *P, const char *s, size_t n)
{
    char *d = ut_arena_strndup(&P->m->arena, s, n);
    if (!d) pt_nomem(P);
    return d;
}

/* An HLO-text-safe name: [A-Za-z_][A-Za-z0-9_.-]*, other characters become '_'. */
static const char *pt_sanitize(pt *P, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    char *d = ut_arena_alloc(&P->m->arena, n + 2);
    if (!d) {
        pt_nomem(P);
        return NULL;
    }
    size_t k = 0;
    if (!n || !(isalpha((unsigned char)s[0]) || s[0] == '_')) d[k++] = '_';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        d[k++] = isalnum(c) || c == '_' || c == '.' || c == '-' ? (char)c : '_';
        if (k >= 2 && d[k - 2] == '-' && d[k - 1] == '>') d[k - 1] = '_';
    }
    d[k] = 0;
    return d;
}

typedef struct pt_attrs {
    hlo_attr *v;
    int       n, cap;
} pt_attrs;

static hlo_attr *pt_attr(pt *P, pt_attrs *as, hlo_attr_key key, hlo_attr_kind kind, const pt_node *at)
{
    if (as->n == as->cap) {
        int cap = as->cap ? as->cap * 2 : 16;
        hlo_attr *v = ut_arena_alloc(&P->m->arena, (size_t)cap * sizeof *v);
        if (!v) {
            pt_nomem(P);
            return NULL;
        }
        if (as->n) memcpy(v, as->v, (size_t)as->n * sizeof *v);
        as->v = v;
        as->cap = cap;
    }
    hlo_attr *a = &as->v[as->n++];
    memset(a, 0, sizeof *a);
    a->key = (uint16_t)key;
    a->kind = (uint8_t)kind;
    a->name = hlo_attr_key_name(key);
    if (at) {
        a->line = at->line + P->line_offset;
        a->col = at->col;
    }
    return a;
}

static int pt_attr_int(pt *P, pt_attrs *as, hlo_attr_key key, int64_t v, const pt_node *at)
{
    hlo_attr *a = pt_attr(P, as, key, HA_INT, at);
    if (a) a->v.i = v;
    return a != NULL;
}

static int pt_attr_bool(pt *P, pt_attrs *as, hlo_attr_key key, int v, const pt_node *at)
{
    hlo_attr *a = pt_attr(P, as, key, HA_BOOL, at);
    if (a) a->v.b = v;
    return a != NULL;
}

/* An enum-like value the HLO text writes bare: [A-Za-z0-9_.-]+ */
static int pt_ident_ok(const char *s)
{
    if (!*s) return 0;
    for (; *s; s++)
        if (!(isalnum((unsigned char)*s) || *s == '_' || *s == '.' || *s == '-')) return 0;
    return 1;
}

static int pt_attr_text(pt *P, pt_attrs *as, hlo_attr_key key, hlo_attr_kind kind, const char *s, const pt_node *at)
{
    if (kind == HA_IDENT && !pt_ident_ok(s))
        return at ? pt_nerror(P, at, "%s: '%s' is not a valid value", hlo_attr_key_name(key), s)
                  : pt_error(P, "%s: '%s' is not a valid value", hlo_attr_key_name(key), s);
    hlo_attr *a = pt_attr(P, as, key, kind, at);
    if (!a) return 0;
    a->v.s = pt_mstrdup(P, s, strlen(s));
    return a->v.s != NULL;
}

static int pt_attr_ints(pt *P, pt_attrs *as, hlo_attr_key key, const pt_node *msg, const char *field, int always)
{
    int n;
    int64_t *v;
    if (!pt_ints(P, msg, field, &n, &v)) return 0;
    if (!n && !always) return 1;
    hlo_attr *a = pt_attr(P, as, key, HA_INTS, pt_get(msg, field));
    if (!a) return 0;
    a->v.ints.n = n;
    a->v.ints.v = v;
    return 1;
}

/* Lowercase copy (enum spellings the HLO text writes in lowercase). */
static const char *pt_lower(pt *P, const char *s, const char *strip_prefix)
{
    size_t pl = strip_prefix ? strlen(strip_prefix) : 0;
    if (pl && !strncmp(s, strip_prefix, pl)) s += pl;
    char *d = pt_mstrdup(P, s, strlen(s));
    for (char *q = d; q && *q; q++) *q = (char)tolower((unsigned char)*q);
    return d;
}

/* Can v be written bare as a key=value value (one token the HLO text reads back the same)? */
static int pt_token_ok(const char *v)
{
    if (!*v) return 0;
    for (const char *q = v; *q; q++)
        if (isspace((unsigned char)*q) || strchr(",{}[]()\"'=", *q)) return 0;
    return 1;
}

/* Is v exactly one balanced {...} group (strings inside skipped), so it can be printed raw? */
static int pt_json_ok(const char *v)
{
    if (*v != '{') return 0;
    int depth = 0;
    for (const char *q = v; *q; q++) {
        if (*q == '"') {
            for (q++; *q && *q != '"'; q++)
                if (*q == '\\' && q[1]) q++;
            if (!*q) return 0;
            continue;
        }
        if (*q == '{') depth++;
        else if (*q == '}' && --depth == 0) return q[1] == 0;
        else if (*q == '(' || *q == ')' || *q == '[' || *q == ']') return 0;
        else if (depth == 0) return 0;
    }
    return 0;
}

/* ---- shapes ---- */

static int pt_dtype(pt *P, const pt_node *n, uint8_t *out)
{
    const char *s = n->val;
    if (n->is_msg) return pt_nerror(P, n, "element_type must be an enum value");
    if (!strcmp(s, "TUPLE")) { *out = TPU_TUPLE; return 1; }
    if (!strcmp(s, "OPAQUE_TYPE") || !strcmp(s, "OPAQUE")) { *out = TPU_OPAQUE; return 1; }
    if (!strcmp(s, "TOKEN")) { *out = TPU_TOKEN; return 1; }
    if (isdigit((unsigned char)s[0])) {
        /* numeric enum values of xla.PrimitiveType (xla_data.proto) */
        static const uint8_t num[] = {TPU_INVALID, TPU_PRED, TPU_S8, TPU_S16, TPU_S32, TPU_S64, TPU_U8, TPU_U16, TPU_U32,
                                      TPU_U64, TPU_F16, TPU_F32, TPU_F64, TPU_TUPLE, TPU_OPAQUE, TPU_C64, TPU_BF16,
                                      TPU_TOKEN, TPU_C128};
        long v = strtol(s, NULL, 10);
        if (v > 0 && v < (long)sizeof num) {
            *out = num[v];
            return 1;
        }
        if (P->binary) return pt_nerror(P, n, "element_type %s is not a PrimitiveType tpusim knows", s);
        return pt_nerror(P, n, "element_type %s is not a type tpusim knows by number; write its name", s);
    }
    char low[32];
    size_t k = 0;
    for (; s[k] && k < sizeof low - 1; k++) low[k] = (char)tolower((unsigned char)s[k]);
    low[k] = 0;
    tpu_dtype t = tpu_dtype_from_name(low, k);
    if (t == TPU_INVALID || t == TPU_TUPLE) return pt_nerror(P, n, "unknown element_type %s", s);
    *out = (uint8_t)t;
    return 1;
}

static int pt_shape(pt *P, const pt_node *msg, hlo_shape *s);

static int pt_layout(pt *P, const pt_node *lm, hlo_shape *s)
{
    static const char *const known[] = {"minor_to_major", "tiles", "tail_padding_alignment_in_elements",
                                        "element_size_in_bits", "memory_space", "index_primitive_type",
                                        "pointer_primitive_type", "dim_level_types", "dim_unique", "dim_ordered",
                                        "dynamic_shape_metadata_prefix_bytes", "format", NULL};
    pt_check_fields(P, lm, "layout", known);
    int n;
    int64_t *m2m;
    if (!pt_ints(P, lm, "minor_to_major", &n, &m2m)) return 0;
    int64_t tail, ebits, mspace;
    if (!pt_int(P, lm, "tail_padding_alignment_in_elements", 1, &tail) || !pt_int(P, lm, "element_size_in_bits", 0, &ebits) ||
        !pt_int(P, lm, "memory_space", 0, &mspace))
        return 0;
    int ntiles = pt_count(lm, "tiles");
    if (s->rank == 0 && n == 0 && !ntiles && (tail == 1 || tail == 0) && !ebits && !mspace) return 1;   /* scalar */
    if (n != s->rank) {
        if (n == 0 && !ntiles) return 1;   /* an empty layout on an array: none */
        return pt_nerror(P, lm, "layout has %d minor_to_major entries for a shape of rank %d", n, s->rank);
    }
    hlo_layout *l = ut_arena_alloc(&P->m->arena, sizeof *l);
    if (!l) return pt_nomem(P);
    l->rank = n;
    uint32_t seen = 0;
    for (int i = 0; i < n; i++) {
        if (m2m[i] < 0 || m2m[i] >= s->rank || (seen & (1u << m2m[i])))
            return pt_nerror(P, lm, "minor_to_major is not a permutation of the %d dimensions", s->rank);
        seen |= 1u << m2m[i];
        l->m2m[i] = (int8_t)m2m[i];
    }
    if (ntiles > HLO_MAX_TILES) return pt_nerror(P, lm, "more than %d tiles in a layout", HLO_MAX_TILES);
    for (const pt_node *c = lm->child; c; c = c->next) {
        if (!pt_is(c, "tiles")) continue;
        int tn;
        int64_t *td;
        if (!pt_ints(P, c, "dimensions", &tn, &td)) return 0;
        if (tn > HLO_MAX_TILE_RANK) return pt_nerror(P, c, "a tile has more than %d dimensions", HLO_MAX_TILE_RANK);
        hlo_tile *t = &l->tiles[l->ntiles++];
        t->n = tn;
        for (int i = 0; i < tn; i++) t->d[i] = td[i] == INT64_MIN ? HLO_TILE_COMBINE : td[i];
    }
    l->tail_pad = tail == 1 ? 0 : tail;
    l->elem_bits = (int)ebits;
    l->mem_space = mspace;
    for (int k = 0; k < 2; k++) {
        const pt_node *tn = pt_get(lm, k ? "pointer_primitive_type" : "index_primitive_type");
        if (tn && strcmp(tn->val, "PRIMITIVE_TYPE_INVALID")) {
            uint8_t t;
            if (!pt_dtype(P, tn, &t)) return 0;
            if (tpu_dtype_kind((tpu_dtype)t) != 'u' && tpu_dtype_kind((tpu_dtype)t) != 's')
                return pt_nerror(P, tn, "%s must be an integer type", tn->name);
            if (k) l->pointer_type = t;
            else l->index_type = t;
        }
    }
    s->layout = l;
    return 1;
}

static int pt_shape(pt *P, const pt_node *msg, hlo_shape *s)
{
    static const char *const known[] = {"element_type", "dimensions", "tuple_shapes", "layout", "is_dynamic_dimension",
                                        NULL};
    memset(s, 0, sizeof *s);
    if (!msg->is_msg) return pt_nerror(P, msg, "'%s' must be a shape message", msg->name);
    if (++P->depth > PT_MAX_DEPTH) return pt_nerror(P, msg, "shapes nested more than %d deep", PT_MAX_DEPTH);
    pt_check_fields(P, msg, "shape", known);
    const pt_node *et = pt_get(msg, "element_type");
    if (!et) return pt_nerror(P, msg, "shape without element_type");
    if (!pt_dtype(P, et, &s->dtype)) return 0;
    if (s->dtype == TPU_TUPLE) {
        int n = pt_count(msg, "tuple_shapes");
        s->ntuple = n;
        if (n) {
            s->tuple = ut_arena_alloc(&P->m->arena, (size_t)n * sizeof(hlo_shape));
            if (!s->tuple) return pt_nomem(P);
            int i = 0;
            for (const pt_node *c = msg->child; c; c = c->next)
                if (pt_is(c, "tuple_shapes") && !pt_shape(P, c, &s->tuple[i++])) return 0;
        }
        P->depth--;
        return 1;
    }
    int n;
    int64_t *d;
    if (!pt_ints(P, msg, "dimensions", &n, &d)) return 0;
    if (n > TPU_MAX_RANK) return pt_nerror(P, msg, "shapes of rank above %d are not supported", TPU_MAX_RANK);
    if ((s->dtype == TPU_TOKEN || s->dtype == TPU_OPAQUE) && n) return pt_nerror(P, msg, "a %s has no dimensions",
                                                                               tpu_dtype_name((tpu_dtype)s->dtype));
    s->rank = (uint8_t)n;
    int nd = pt_count(msg, "is_dynamic_dimension");
    if (nd && nd != n) return pt_nerror(P, msg, "%d is_dynamic_dimension entries for %d dimensions", nd, n);
    int i = 0;
    for (const pt_node *c = msg->child; c; c = c->next) {
        if (!pt_is(c, "is_dynamic_dimension")) continue;
        int64_t v;
        if (!pt_int_of(P, c, &v)) return 0;
        if (v) s->dyn_mask |= (uint16_t)(1u << i);
        i++;
    }
    for (i = 0; i < n; i++) {
        if (d[i] == INT64_MIN) {   /* kUnboundedSize */
            s->dims[i] = -1;
            s->dyn_mask |= (uint16_t)(1u << i);
        } else if (d[i] < 0) {
            return pt_nerror(P, msg, "negative dimension %lld", (long long)d[i]);
        } else {
            s->dims[i] = d[i];
        }
    }
    const pt_node *lm = pt_get(msg, "layout");
    if (lm && lm->is_msg && !pt_layout(P, lm, s)) return 0;
    P->depth--;
    return 1;
}

/* ---- literals ---- */

static int pt_literal(pt *P, const pt_node *msg, const hlo_shape *s, hlo_literal *lit)
{
    memset(lit, 0, sizeof *lit);
    lit->shape = *s;
    if (hlo_shape_is_tuple(s)) {
        int n = pt_count(msg, "tuple_literals");
        if (n != s->ntuple) return pt_nerror(P, msg, "tuple literal has %d elements for a shape of %d", n, s->ntuple);
        lit->ntuple = n;
        lit->tuple = n ? ut_arena_alloc(&P->m->arena, (size_t)n * sizeof(hlo_literal)) : NULL;
        if (n && !lit->tuple) return pt_nomem(P);
        int i = 0;
        for (const pt_node *c = msg->child; c; c = c->next)
            if (pt_is(c, "tuple_literals") && !pt_literal(P, c, &s->tuple[i], &lit->tuple[i])) return 0;
            else if (pt_is(c, "tuple_literals")) i++;
        return 1;
    }
    if (!hlo_shape_is_array(s)) return 1;
    if (s->dyn_mask) return pt_nerror(P, msg, "a literal of a dynamic shape");
    tpu_dtype t = (tpu_dtype)s->dtype;
    int64_t count = hlo_shape_count(s);
    size_t es = tpu_dtype_size(t);
    if (count > ((int64_t)1 << 40) / (int64_t)(es ? es : 1)) return pt_nerror(P, msg, "literal too large");
    lit->nbytes = (size_t)count * es;
    /* the repeated field or bytes field that holds this type's values (counted before allocating: the shape
     * alone must not make us allocate what the text cannot hold) */
    const char *field;
    int bytes = 0;
    switch (t) {
    case TPU_PRED: field = "preds"; break;
    case TPU_S8: field = "s8s"; bytes = 1; break;
    case TPU_U8: field = "u8s"; bytes = 1; break;
    case TPU_S16: field = "s16s"; bytes = 1; break;
    case TPU_U16: field = "u16s"; bytes = 1; break;
    case TPU_F16: field = "f16s"; bytes = 1; break;
    case TPU_BF16: field = "bf16s"; bytes = 1; break;
    case TPU_S32: field = "s32s"; break;
    case TPU_U32: field = "u32s"; break;
    case TPU_S64: field = "s64s"; break;
    case TPU_U64: field = "u64s"; break;
    case TPU_F32: field = "f32s"; break;
    case TPU_F64: field = "f64s"; break;
    case TPU_C64: field = "c64s"; break;
    case TPU_C128: field = "c128s"; break;
    case TPU_F8E5M2: field = "f8e5m2s"; bytes = 1; break;
    case TPU_F8E4M3FN: field = "f8e4m3fns"; bytes = 1; break;
    case TPU_F8E4M3B11FNUZ: field = "f8e4m3b11fnuzs"; bytes = 1; break;
    case TPU_F8E5M2FNUZ: field = "f8e5m2fnuzs"; bytes = 1; break;
    case TPU_F8E4M3FNUZ: field = "f8e4m3fnuzs"; bytes = 1; break;
    case TPU_F8E4M3: field = "f8e4m3s"; bytes = 1; break;
    case TPU_F8E3M4: field = "f8e3m4s"; bytes = 1; break;
    default:
        return pt_nerror(P, msg, "literals of type %s in proto form are not supported", tpu_dtype_name(t));
    }
    if (bytes) {
        const pt_node *b = pt_get(msg, field);
        size_t have = b ? b->vlen : 0;
        if (count && (!b || have != lit->nbytes))
            return pt_nerror(P, msg, "literal field %s has %zu bytes, the shape needs %zu", field, have, lit->nbytes);
        lit->data = ut_arena_alloc(&P->m->arena, lit->nbytes ? lit->nbytes : 1);
        if (!lit->data) return pt_nomem(P);
        if (have) memcpy(lit->data, b->val, have);   /* little-endian, as the proto stores them */
        return 1;
    }
    int per = t == TPU_C64 || t == TPU_C128 ? 2 : 1;
    int n = pt_count(msg, field);
    if (n != count * per) return pt_nerror(P, msg, "literal has %d values in %s, the shape needs %lld", n, field,
                                           (long long)(count * per));
    lit->data = ut_arena_alloc(&P->m->arena, lit->nbytes ? lit->nbytes : 1);
    if (!lit->data) return pt_nomem(P);
    int64_t i = 0;
    for (const pt_node *c = msg->child; c; c = c->next) {
        if (!pt_is(c, field)) continue;
        if (tpu_dtype_kind(t) == 'f' || tpu_dtype_kind(t) == 'c') {
            double x;
            if (!pt_double_of(P, c, &x)) return 0;
            if (t == TPU_F32 || t == TPU_C64) ((float *)lit->data)[i] = (float)x;
            else ((double *)lit->data)[i] = x;
        } else {
            int64_t x;
            if (!pt_int_of(P, c, &x)) return 0;
            ten_store_i64(t, lit->data, i, t == TPU_PRED ? x != 0 : x);
        }
        i++;
    }
    return 1;
}

/* ---- shardings, in HLO text syntax ---- */

static void pt_sharding_text(pt *P, const pt_node *s, ut_buf *b, int depth)
{
    const char *type = pt_str(s, "type");
    if (!type) type = "REPLICATED";
    if (!strcmp(type, "TUPLE")) {
        ut_buf_putc(b, '{');
        int i = 0;
        for (const pt_node *c = s->child; c; c = c->next)
            if (pt_is(c, "tuple_shardings") && depth < PT_MAX_DEPTH) {
                if (i) ut_buf_puts(b, ", ");
                if (i && i % 5 == 0) ut_buf_printf(b, "/*index=%d*/", i);
                pt_sharding_text(P, c, b, depth + 1);
                i++;
            }
        ut_buf_putc(b, '}');
        return;
    }
    if (!strcmp(type, "MAXIMAL")) {
        int64_t dev = 0;
        const pt_node *d = pt_get(s, "tile_assignment_devices");
        if (d) pt_int_of(P, d, &dev);
        ut_buf_printf(b, "{maximal device=%lld", (long long)dev);
    } else if (!strcmp(type, "OTHER")) {
        int nd, ndev, nr, np;
        int64_t *dims, *devs, *rs, *perm;
        if (!pt_ints(P, s, "tile_assignment_dimensions", &nd, &dims) || !pt_ints(P, s, "tile_assignment_devices", &ndev, &devs) ||
            !pt_ints(P, s, "iota_reshape_dims", &nr, &rs) || !pt_ints(P, s, "iota_transpose_perm", &np, &perm))
            return;
        ut_buf_puts(b, "{devices=[");
        for (int i = 0; i < nd; i++) ut_buf_printf(b, "%s%lld", i ? "," : "", (long long)dims[i]);
        ut_buf_putc(b, ']');
        if (nr) {
            ut_buf_puts(b, "<=[");
            for (int i = 0; i < nr; i++) ut_buf_printf(b, "%s%lld", i ? "," : "", (long long)rs[i]);
            ut_buf_putc(b, ']');
            if (np > 1) {
                ut_buf_puts(b, "T(");
                for (int i = 0; i < np; i++) ut_buf_printf(b, "%s%lld", i ? "," : "", (long long)perm[i]);
                ut_buf_putc(b, ')');
            }
        } else {
            for (int i = 0; i < ndev; i++) ut_buf_printf(b, "%s%lld", i ? "," : "", (long long)devs[i]);
        }
        int rep = 0;
        pt_bool(P, s, "replicate_on_last_tile_dim", &rep);
        if (rep) ut_buf_puts(b, " last_tile_dim_replicate");
        int nl = pt_count(s, "last_tile_dims");
        if (nl) {
            ut_buf_puts(b, " last_tile_dims={");
            int i = 0;
            for (const pt_node *c = s->child; c; c = c->next)
                if (pt_is(c, "last_tile_dims")) {
                    const char *t = c->val;
                    ut_buf_printf(b, "%s", i++ ? ", " : "");
                    for (; *t; t++) ut_buf_putc(b, (char)tolower((unsigned char)*t));
                }
            ut_buf_putc(b, '}');
        }
    } else {
        ut_buf_putc(b, '{');
        for (const char *t = type; *t; t++) ut_buf_putc(b, (char)tolower((unsigned char)*t));
    }
    ut_buf_putc(b, '}');
}

static const char *pt_sharding(pt *P, const pt_node *s)
{
    static const char *const known[] = {"type", "tile_shape", "tile_assignment_dimensions", "tile_assignment_devices",
                                        "tuple_shardings", "replicate_on_last_tile_dim", "metadata", "last_tile_dims",
                                        "iota_reshape_dims", "iota_transpose_perm", "is_shard_group", "shard_group_id",
                                        "shard_group_type", NULL};
    pt_check_fields(P, s, "sharding", known);
    ut_buf b;
    ut_buf_init(&b);
    pt_sharding_text(P, s, &b, 0);
    const char *r = b.failed ? NULL : pt_mstrdup(P, b.data ? b.data : "{}", b.len);
    if (b.failed) pt_nomem(P);
    ut_buf_free(&b);
    return r;
}

/* ---- instructions ---- */

typedef struct pt_idmap {
    int64_t   *ids;
    hlo_instr **v;
    int        n;
} pt_idmap;

static hlo_instr *pt_find(const pt_idmap *map, int64_t id)
{
    for (int i = map->n - 1; i >= 0; i--)
        if (map->ids[i] == id) return map->v[i];
    return NULL;
}

static hlo_comp *pt_find_comp(pt *P, int64_t id)
{
    for (int i = 0; i < P->ncomps; i++)
        if (P->comp_ids[i] == id && P->comps[i]) return P->comps[i];
    return NULL;
}

static int pt_kv_cmp(const void *a, const void *b)
{
    return strcmp(((const hlo_kv *)a)->key, ((const hlo_kv *)b)->key);
}

/* frontend_attributes: a map, which XLA prints sorted by key */
static int pt_kv_attr(pt *P, pt_attrs *as, hlo_attr_key key, const pt_node *fa)
{
    int n = 0;
    for (const pt_node *c = fa->child; c; c = c->next) n += pt_is(c, "map");
    if (!n) return 1;
    hlo_attr *a = pt_attr(P, as, key, HA_KV, fa);
    if (!a) return 0;
    a->v.kv.sep = ',';
    a->v.kv.n = n;
    a->v.kv.v = ut_arena_alloc(&P->m->arena, (size_t)n * sizeof(hlo_kv));
    if (!a->v.kv.v) return pt_nomem(P);
    int i = 0;
    for (const pt_node *c = fa->child; c; c = c->next) {
        if (!pt_is(c, "map")) continue;
        const char *k = pt_str(c, "key"), *v = pt_str(c, "value");
        hlo_kv *kv = &a->v.kv.v[i++];
        kv->key = pt_sanitize(P, k ? k : "");
        if (v && pt_json_ok(v)) {
            kv->val = pt_mstrdup(P, v, strlen(v));   /* a JSON dict prints raw */
        } else {
            kv->val = pt_mstrdup(P, v ? v : "", v ? strlen(v) : 0);
            kv->is_str = 1;
        }
        if (!kv->key || !kv->val) return 0;
    }
    qsort(a->v.kv.v, (size_t)n, sizeof(hlo_kv), pt_kv_cmp);
    return 1;
}

static int pt_metadata(pt *P, pt_attrs *as, const pt_node *md)
{
    static const char *const sfields[] = {"op_type", "op_name", "source_file"};
    static const char *const ifields[] = {"source_line", "source_end_line", "source_column", "source_end_column"};
    static const char *const known[] = {"op_type", "op_name", "source_file", "source_line", "source_end_line",
                                        "source_column", "source_end_column", "profile_type", "deduplicated_name",
                                        "stack_frame_id", "scheduling_name", "preserve_layout", NULL};
    pt_check_fields(P, md, "metadata", known);
    hlo_kv kv[16];
    int n = 0;
    for (int i = 0; i < 3; i++) {
        const char *v = pt_str(md, sfields[i]);
        if (v && *v) kv[n++] = (hlo_kv){sfields[i], v, 1};
    }
    for (int i = 0; i < 4; i++) {
        const char *v = pt_str(md, ifields[i]);
        if (v && strcmp(v, "0")) kv[n++] = (hlo_kv){ifields[i], v, !pt_token_ok(v)};
    }
    const char *dn = pt_str(md, "deduplicated_name");
    if (dn && *dn) kv[n++] = (hlo_kv){"deduplicated_name", dn, 1};
    const char *sn = pt_str(md, "scheduling_name");
    if (sn && *sn) kv[n++] = (hlo_kv){"scheduling_name", sn, 1};
    const char *sf = pt_str(md, "stack_frame_id");
    if (sf && strcmp(sf, "0")) kv[n++] = (hlo_kv){"stack_frame_id", sf, !pt_token_ok(sf)};
    if (!n) return 1;
    hlo_attr *a = pt_attr(P, as, HK_METADATA, HA_KV, md);
    if (!a) return 0;
    a->v.kv.sep = ' ';
    a->v.kv.n = n;
    a->v.kv.v = ut_arena_alloc(&P->m->arena, (size_t)n * sizeof(hlo_kv));
    if (!a->v.kv.v) return pt_nomem(P);
    for (int i = 0; i < n; i++) {
        a->v.kv.v[i].key = kv[i].key;
        a->v.kv.v[i].is_str = kv[i].is_str;
        a->v.kv.v[i].val = pt_mstrdup(P, kv[i].val, strlen(kv[i].val));
        if (!a->v.kv.v[i].val) return 0;
    }
    return 1;
}

static int pt_window(pt *P, pt_attrs *as, const pt_node *wm)
{
    int n = pt_count(wm, "dimensions");
    if (!n) return 1;
    if (n > TPU_MAX_RANK) return pt_nerror(P, wm, "window of rank above %d", TPU_MAX_RANK);
    hlo_attr *a = pt_attr(P, as, HK_WINDOW, HA_WINDOW, wm);
    if (!a) return 0;
    hlo_window *w = a->v.window = ut_arena_alloc(&P->m->arena, sizeof *w);
    if (!w) return pt_nomem(P);
    w->rank = n;
    int i = 0;
    for (const pt_node *c = wm->child; c; c = c->next) {
        if (!pt_is(c, "dimensions")) continue;
        hlo_window_dim *d = &w->d[i++];
        int64_t rev;
        if (!pt_int(P, c, "size", 0, &d->size) || !pt_int(P, c, "stride", 1, &d->stride) ||
            !pt_int(P, c, "padding_low", 0, &d->pad_lo) || !pt_int(P, c, "padding_high", 0, &d->pad_hi) ||
            !pt_int(P, c, "base_dilation", 1, &d->lhs_dilate) || !pt_int(P, c, "window_dilation", 1, &d->rhs_dilate) ||
            !pt_int(P, c, "window_reversal", 0, &rev))
            return 0;
        /* proto3: an unset stride or dilation reads as 0 and means 1 */
        if (!d->stride) d->stride = 1;
        if (!d->lhs_dilate) d->lhs_dilate = 1;
        if (!d->rhs_dilate) d->rhs_dilate = 1;
        d->reversal = rev != 0;
    }
    w->has_size = 1;
    return 1;
}

static int pt_dim_labels(pt *P, pt_attrs *as, const pt_node *cd)
{
    int ns, nk, no;
    int64_t *is, *ks, *os;
    int64_t ib, iff, ki, ko, ob, of;
    if (!pt_ints(P, cd, "input_spatial_dimensions", &ns, &is) || !pt_ints(P, cd, "kernel_spatial_dimensions", &nk, &ks) ||
        !pt_ints(P, cd, "output_spatial_dimensions", &no, &os) || !pt_int(P, cd, "input_batch_dimension", 0, &ib) ||
        !pt_int(P, cd, "input_feature_dimension", 0, &iff) || !pt_int(P, cd, "kernel_input_feature_dimension", 0, &ki) ||
        !pt_int(P, cd, "kernel_output_feature_dimension", 0, &ko) || !pt_int(P, cd, "output_batch_dimension", 0, &ob) ||
        !pt_int(P, cd, "output_feature_dimension", 0, &of))
        return 0;
    if (ns != nk || ns != no || ns + 2 > TPU_MAX_RANK || ns > 10)
        return pt_nerror(P, cd, "convolution_dimension_numbers: spatial dimension counts differ or are too many");
    hlo_attr *a = pt_attr(P, as, HK_DIM_LABELS, HA_DIMLABELS, cd);
    if (!a) return 0;
    hlo_dimlabels *dl = a->v.dimlabels = ut_arena_alloc(&P->m->arena, sizeof *dl);
    char *text = ut_arena_alloc(&P->m->arena, 3 * (TPU_MAX_RANK + 1) + 4);
    if (!dl || !text) return pt_nomem(P);
    int r = ns + 2, k = 0;
    const int64_t *sp[3] = {is, ks, os};
    const int64_t bd[3] = {ib, ki, ob}, fd[3] = {iff, ko, of};
    for (int part = 0; part < 3; part++) {
        char lab[TPU_MAX_RANK];
        memset(lab, '?', sizeof lab);
        if (bd[part] < 0 || bd[part] >= r || fd[part] < 0 || fd[part] >= r || bd[part] == fd[part])
            return pt_nerror(P, cd, "convolution_dimension_numbers: a batch/feature dimension is out of range or repeated");
        lab[bd[part]] = part == 1 ? 'i' : 'b';
        lab[fd[part]] = part == 1 ? 'o' : 'f';
        for (int i = 0; i < ns; i++) {
            if (sp[part][i] < 0 || sp[part][i] >= r || lab[sp[part][i]] != '?')
                return pt_nerror(P, cd, "convolution_dimension_numbers: spatial dimensions overlap or are out of range");
            lab[sp[part][i]] = (char)('0' + i);
        }
        if (part == 1) text[k++] = '_';
        if (part == 2) {
            text[k++] = '-';
            text[k++] = '>';
        }
        for (int i = 0; i < r; i++) text[k++] = lab[i];
    }
    text[k] = 0;
    dl->text = text;
    dl->nspatial = ns;
    dl->in_batch = (int)ib;
    dl->in_feature = (int)iff;
    dl->k_in = (int)ki;
    dl->k_out = (int)ko;
    dl->out_batch = (int)ob;
    dl->out_feature = (int)of;
    for (int i = 0; i < TPU_MAX_RANK; i++) dl->in_spatial[i] = dl->k_spatial[i] = dl->out_spatial[i] = -1;
    for (int i = 0; i < ns; i++) {
        dl->in_spatial[i] = (int)is[i];
        dl->k_spatial[i] = (int)ks[i];
        dl->out_spatial[i] = (int)os[i];
    }
    return 1;
}

static int pt_precision(pt *P, pt_attrs *as, const pt_node *pc)
{
    int n = pt_count(pc, "operand_precision"), nondefault = 0;
    for (const pt_node *c = pc->child; c; c = c->next)
        if (pt_is(c, "operand_precision") && strcmp(c->val, "DEFAULT")) nondefault = 1;
    if (n && nondefault) {
        hlo_attr *a = pt_attr(P, as, HK_OPERAND_PRECISION, HA_IDENTS, pc);
        if (!a) return 0;
        a->v.idents.n = n;
        a->v.idents.v = ut_arena_alloc(&P->m->arena, (size_t)n * sizeof(char *));
        if (!a->v.idents.v) return pt_nomem(P);
        int i = 0;
        for (const pt_node *c = pc->child; c; c = c->next) {
            if (!pt_is(c, "operand_precision")) continue;
            if (!pt_ident_ok(c->val)) return pt_nerror(P, c, "operand_precision: '%s' is not a precision", c->val);
            if (!(a->v.idents.v[i++] = pt_lower(P, c->val, NULL))) return 0;
        }
    }
    const char *alg = pt_str(pc, "algorithm");
    if (alg && strcmp(alg, "ALG_UNSET")) {
        const char *l = pt_lower(P, alg, "ALG_");
        if (!l || !pt_attr_text(P, as, HK_ALGORITHM, HA_IDENT, l, pt_get(pc, "algorithm"))) return 0;
    }
    return 1;
}

static int pt_rgroups_explicit(pt *P, pt_attrs *as, const pt_node *msg, const pt_node *at)
{
    int n = pt_count(msg, "replica_groups");
    hlo_attr *a = pt_attr(P, as, HK_REPLICA_GROUPS, HA_RGROUPS, at);
    if (!a) return 0;
    hlo_rgroups *g = a->v.rgroups = ut_arena_alloc(&P->m->arena, sizeof *g);
    if (!g) return pt_nomem(P);
    g->ngroups = n;
    g->len = ut_arena_alloc(&P->m->arena, (size_t)(n + 1) * sizeof(int));
    g->ids = ut_arena_alloc(&P->m->arena, (size_t)(n + 1) * sizeof(int64_t *));
    if (!g->len || !g->ids) return pt_nomem(P);
    int i = 0;
    for (const pt_node *c = msg->child; c; c = c->next) {
        if (!pt_is(c, "replica_groups")) continue;
        int k;
        if (!pt_ints(P, c, "replica_ids", &k, &g->ids[i])) return 0;
        g->len[i++] = k;
    }
    return 1;
}

/* replica_groups=[G,S]<=[dims]T(perm): an IotaReplicaGroupListProto (inside collective_device_list in older
 * XLA, the instruction's iota_collective_device_list in newer) */
static int pt_iota_groups(pt *P, pt_attrs *as, const pt_node *iota)
{
    hlo_attr *a = pt_attr(P, as, HK_REPLICA_GROUPS, HA_RGROUPS, iota);
    if (!a) return 0;
    hlo_rgroups *g = a->v.rgroups = ut_arena_alloc(&P->m->arena, sizeof *g);
    if (!g) return pt_nomem(P);
    g->iota = 1;
    int nr, np;
    int64_t *rs, *perm;
    if (!pt_int(P, iota, "num_replica_groups", 0, &g->gdims[0]) || !pt_int(P, iota, "num_devices_per_group", 0, &g->gdims[1]) ||
        !pt_ints(P, iota, "iota_reshape_dims", &nr, &rs) || !pt_ints(P, iota, "iota_transpose_perm", &np, &perm))
        return 0;
    if (nr > TPU_MAX_RANK || np > TPU_MAX_RANK) return pt_nerror(P, iota, "iota replica groups of rank above %d", TPU_MAX_RANK);
    g->nreshape = nr;
    int64_t prod = 1;
    for (int i = 0; i < nr; i++) {
        g->reshape[i] = rs[i];
        if (rs[i] < 0 || (rs[i] && prod > INT64_MAX / rs[i])) return pt_nerror(P, iota, "bad iota_reshape_dims");
        prod *= rs[i];
    }
    if (g->gdims[0] < 0 || g->gdims[1] < 0 || (g->gdims[1] && g->gdims[0] > INT64_MAX / g->gdims[1]) ||
        prod != g->gdims[0] * g->gdims[1])
        return pt_nerror(P, iota, "iota replica groups [%lld,%lld] do not match the iota of %lld devices",
                         (long long)g->gdims[0], (long long)g->gdims[1], (long long)prod);
    if (np > 1) {
        if (np != nr) return pt_nerror(P, iota, "iota_transpose_perm has %d entries for %d reshape dims", np, nr);
        g->nperm = np;
        for (int i = 0; i < np; i++) {
            if (perm[i] < 0 || perm[i] >= TPU_MAX_RANK) return pt_nerror(P, iota, "bad iota_transpose_perm");
            g->perm[i] = (int)perm[i];
        }
    }
    return 1;
}

static int pt_collective_device_list(pt *P, pt_attrs *as, const pt_node *cd)
{
    const pt_node *iota = pt_get(cd, "iota_replica_group_list");
    return iota ? pt_iota_groups(P, as, iota) : pt_rgroups_explicit(P, as, cd, cd);
}

typedef struct pt_part {
    hlo_attr_key key;
    int          first, count;
} pt_part;

/* Computations called by an instruction, in the attribute XLA's text uses for its opcode. */
static int pt_called(pt *P, pt_attrs *as, hlo_instr *in, const pt_node *im, hlo_comp **called, int ncalled)
{
    hlo_op op = (hlo_op)in->op;
    const pt_node *at = pt_get(im, "called_computation_ids");
    pt_part parts[2];
    int np = 0;
    switch (op) {
    case HLO_WHILE:
        /* proto order is body, condition (kBodyComputationIndex = 0) */
        if (ncalled != 2) return pt_nerror(P, im, "while '%s' needs 2 called computations, has %d", in->name, ncalled);
        parts[np++] = (pt_part){HK_CONDITION, 1, 1};
        parts[np++] = (pt_part){HK_BODY, 0, 1};
        break;
    case HLO_SELECT_AND_SCATTER:
        if (ncalled != 2) return pt_nerror(P, im, "select-and-scatter '%s' needs 2 called computations", in->name);
        parts[np++] = (pt_part){HK_SELECT, 0, 1};
        parts[np++] = (pt_part){HK_SCATTER, 1, 1};
        break;
    case HLO_CONDITIONAL:
        if (in->nops && in->ops[0]->shape.dtype == TPU_PRED && ncalled == 2) {
            parts[np++] = (pt_part){HK_TRUE_COMPUTATION, 0, 1};
            parts[np++] = (pt_part){HK_FALSE_COMPUTATION, 1, 1};
        } else {
            parts[np++] = (pt_part){HK_BRANCH_COMPUTATIONS, 0, ncalled};
        }
        break;
    case HLO_CUSTOM_CALL:
        parts[np++] = (pt_part){HK_CALLED_COMPUTATIONS, 0, ncalled};
        break;
    case HLO_FUSION: case HLO_ASYNC_START: case HLO_ASYNC_UPDATE: case HLO_ASYNC_DONE:
        if (op != HLO_FUSION && op != HLO_ASYNC_START) return 1;   /* the start carries it */
        parts[np++] = (pt_part){HK_CALLS, 0, ncalled};
        break;
    default:
        if (ncalled != 1) return pt_nerror(P, im, "%s '%s' calls %d computations, expected 1", hlo_op_name(op), in->name, ncalled);
        parts[np++] = (pt_part){HK_TO_APPLY, 0, 1};
        break;
    }
    for (int i = 0; i < np; i++) {
        hlo_attr_kind kind = hlo_attr_key_kind(parts[i].key);
        hlo_attr *a = pt_attr(P, as, parts[i].key, kind, at);
        if (!a) return 0;
        int n = parts[i].count;
        a->v.comps.n = n;
        a->v.comps.names = ut_arena_alloc(&P->m->arena, (size_t)(n + 1) * sizeof(char *));
        a->v.comps.v = ut_arena_alloc(&P->m->arena, (size_t)(n + 1) * sizeof(hlo_comp *));
        if (!a->v.comps.names || !a->v.comps.v) return pt_nomem(P);
        for (int k = 0; k < n; k++) {
            a->v.comps.v[k] = called[parts[i].first + k];
            a->v.comps.names[k] = a->v.comps.v[k]->name;
        }
    }
    return 1;
}

/* Appends `, <attr>` text for custom-call literal=: the shape with layout, a space, the value. */
static const char *pt_literal_text(pt *P, const hlo_literal *lit)
{
    ut_buf b;
    ut_buf_init(&b);
    hlo_shape_print(&b, &lit->shape, 1);
    ut_buf_putc(&b, ' ');
    hlo_print_literal(&b, lit);
    const char *r = b.failed ? NULL : pt_mstrdup(P, b.data, b.len);
    if (b.failed) pt_nomem(P);
    ut_buf_free(&b);
    return r;
}

/* Comparison::DefaultComparisonType */
static const char *pt_default_compare_type(tpu_dtype t)
{
    char k = tpu_dtype_kind(t);
    return k == 'f' || k == 'c' ? "FLOAT" : k == 's' ? "SIGNED" : "UNSIGNED";
}

/* s as a quoted string escaped the way XLA prints it (absl::CEscape: octal for other bytes). */
static const char *pt_cescape(pt *P, const char *s)
{
    ut_buf b;
    ut_buf_init(&b);
    ut_buf_putc(&b, '"');
    for (const char *q = s; *q; q++) {
        unsigned char ch = (unsigned char)*q;
        switch (ch) {
        case '\n': ut_buf_puts(&b, "\\n"); break;
        case '\r': ut_buf_puts(&b, "\\r"); break;
        case '\t': ut_buf_puts(&b, "\\t"); break;
        case '"': case '\'': case '\\': ut_buf_printf(&b, "\\%c", ch); break;
        default:
            if (ch < 0x20 || ch >= 0x7f) ut_buf_printf(&b, "\\%03o", ch);
            else ut_buf_putc(&b, (char)ch);
        }
    }
    ut_buf_putc(&b, '"');
    const char *r = b.failed ? NULL : pt_mstrdup(P, b.data, b.len);
    if (b.failed) pt_nomem(P);
    ut_buf_free(&b);
    return r;
}

static const char *const pt_instr_known[] = {
    "name", "opcode", "shape", "metadata", "literal", "parameter_number", "fusion_kind", "tuple_index", "dimensions",
    "window", "convolution_dimension_numbers", "feature_group_count", "batch_group_count", "slice_dimensions",
    "exponent_bits", "mantissa_bits", "dynamic_slice_sizes", "padding_config", "outfeed_config", "distribution",
    "epsilon", "feature_index", "channel_id", "infeed_config", "custom_call_target", "outfeed_shape",
    "dot_dimension_numbers", "ragged_dot_dimension_numbers", "fft_type", "fft_length", "comparison_direction",
    "gather_dimension_numbers", "gather_slice_sizes", "id", "operand_ids", "control_predecessor_ids",
    "called_computation_ids", "sharding", "backend_config", "replica_groups", "use_global_device_ids",
    "is_host_transfer", "is_stable", "scatter_dimension_numbers", "precision_config", "source_target_pairs",
    "domain_entry_sharding", "domain_exit_sharding", "constrain_layout", "operand_shapes_with_layout",
    "triangular_solve_options", "cholesky_options", "parameter_replication", "custom_call_has_side_effect",
    "output_operand_aliasing", "custom_call_schedule", "delta", "indices_are_sorted", "frontend_attributes",
    "unique_indices", "rng_algorithm", "comparison_type", "cross_program_prefetch_index", "padding_type",
    "custom_call_api_version", "async_execution_thread", "k", "largest", "statistics_viz", "collective_device_list",
    "is_composite", "is_cross_program_prefetch", "all_reduce_id", "iota_collective_device_list", "async_group_id",
    "async_wrapped_computation", "async_update_computation", "sparsity_config", "mesh_axes_replica_group_list", NULL};

/* The attributes of batch_norm_training, batch_norm_inference, batch_norm_grad. */
static int pt_attrs_batch_norm(pt *P, const pt_node *im, hlo_instr *in, pt_attrs *as)
{
    const pt_node *n;
    int64_t iv;
    double eps = 0;
    if ((n = pt_get(im, "epsilon")) && !pt_double_of(P, n, &eps)) return 0;
    hlo_attr *a = pt_attr(P, as, HK_EPSILON, HA_FLOAT, n);
    if (!a) return 0;
    a->v.f = (double)(float)eps;
    if (!pt_int(P, im, "feature_index", 0, &iv) || !pt_attr_int(P, as, HK_FEATURE_INDEX, iv, im)) return 0;
    return 1;
}

/* The attributes of compare. */
static int pt_attrs_compare(pt *P, const pt_node *im, hlo_instr *in, pt_attrs *as)
{
    int nops = in->nops;
    const char *d = pt_str(im, "comparison_direction");
    if (!d) return pt_nerror(P, im, "compare '%s' without comparison_direction", in->name);
    if (!pt_attr_text(P, as, HK_DIRECTION, HA_IDENT, d, pt_get(im, "comparison_direction"))) return 0;
    /* XLA prints type= only when it is not the default for the operands' element type */
    const char *t = pt_str(im, "comparison_type");
    if (t && *t && !(nops && !strcmp(t, pt_default_compare_type((tpu_dtype)in->ops[0]->shape.dtype))) &&
        !pt_attr_text(P, as, HK_TYPE, HA_IDENT, t, pt_get(im, "comparison_type")))
        return 0;
    return 1;
}

/* The attributes of triangular_solve, cholesky. */
static int pt_attrs_linalg(pt *P, const pt_node *im, hlo_instr *in, pt_attrs *as)
{
    hlo_op o = (hlo_op)in->op;
    int bv;
    const pt_node *opt = pt_get(im, o == HLO_CHOLESKY ? "cholesky_options" : "triangular_solve_options");
    if (!opt) return 1;
    if (o == HLO_TRIANGULAR_SOLVE) {
        if (!pt_bool(P, opt, "left_side", &bv) || (bv && !pt_attr_bool(P, as, HK_LEFT_SIDE, 1, opt))) return 0;
    }
    if (!pt_bool(P, opt, "lower", &bv) || (bv && !pt_attr_bool(P, as, HK_LOWER, 1, opt))) return 0;
    if (o == HLO_TRIANGULAR_SOLVE) {
        if (!pt_bool(P, opt, "unit_diagonal", &bv) || (bv && !pt_attr_bool(P, as, HK_UNIT_DIAGONAL, 1, opt))) return 0;
        const char *t = pt_str(opt, "transpose_a");
        if (t && strcmp(t, "TRANSPOSE_INVALID") && !pt_attr_text(P, as, HK_TRANSPOSE_A, HA_IDENT, t, opt)) return 0;
    }
    return 1;
}

/* The attributes of all_gather, all_gather_start, all_reduce, all_reduce_start, reduce_scatter, all_to_all, ragged_all_to_all, collective_broadcast. */
static int pt_attrs_collective(pt *P, const pt_node *im, hlo_instr *in, pt_attrs *as)
{
    hlo_op o = (hlo_op)in->op;
    const pt_node *n;
    int64_t iv;
    int bv;
    if (!pt_int(P, im, "channel_id", 0, &iv) || (iv && !pt_attr_int(P, as, HK_CHANNEL_ID, iv, im))) return 0;
    if ((n = pt_get(im, "mesh_axes_replica_group_list")))   /* dropping it would make one group of all */
        return pt_nerror(P, n, "replica groups over mesh axes are not supported in protos; export the groups as "
                         "replica_groups or an iota list");
    const pt_node *cdl = pt_get(im, "collective_device_list"), *iota = pt_get(im, "iota_collective_device_list");
    if (iota ? !pt_iota_groups(P, as, iota)
             : cdl ? !pt_collective_device_list(P, as, cdl) : !pt_rgroups_explicit(P, as, im, im))
        return 0;
    if (!pt_bool(P, im, "constrain_layout", &bv) || (bv && !pt_attr_bool(P, as, HK_CONSTRAIN_LAYOUT, 1, im))) return 0;
    /* XLA prints dimensions before use_global_device_ids, but after it on reduce-scatter */
    if ((o == HLO_ALL_GATHER || o == HLO_ALL_GATHER_START || o == HLO_ALL_TO_ALL) &&
        !pt_attr_ints(P, as, HK_DIMENSIONS, im, "dimensions", 0))
        return 0;
    if (o != HLO_ALL_TO_ALL && o != HLO_RAGGED_ALL_TO_ALL && o != HLO_COLLECTIVE_BROADCAST &&
        (!pt_bool(P, im, "use_global_device_ids", &bv) || (bv && !pt_attr_bool(P, as, HK_USE_GLOBAL_DEVICE_IDS, 1, im))))
        return 0;
    if (o == HLO_REDUCE_SCATTER && !pt_attr_ints(P, as, HK_DIMENSIONS, im, "dimensions", 0)) return 0;
    return 1;
}

/* The attributes of collective_permute, collective_permute_start. */
static int pt_attrs_collective_permute(pt *P, const pt_node *im, hlo_instr *in, pt_attrs *as)
{
    int64_t iv;
    if (!pt_int(P, im, "channel_id", 0, &iv) || (iv && !pt_attr_int(P, as, HK_CHANNEL_ID, iv, im))) return 0;
    int np = pt_count(im, "source_target_pairs");
    hlo_attr *a = pt_attr(P, as, HK_SOURCE_TARGET_PAIRS, HA_INTSS, im);
    if (!a) return 0;
    a->v.intss.n = np;
    a->v.intss.len = ut_arena_alloc(&P->m->arena, (size_t)(np + 1) * sizeof(int));
    a->v.intss.v = ut_arena_alloc(&P->m->arena, (size_t)(np + 1) * sizeof(int64_t *));
    if (!a->v.intss.len || !a->v.intss.v) return pt_nomem(P);
    int i = 0;
    for (const pt_node *c2 = im->child; c2; c2 = c2->next) {
        if (!pt_is(c2, "source_target_pairs")) continue;
        int64_t *pr = ut_arena_alloc(&P->m->arena, 2 * sizeof(int64_t));
        if (!pr) return pt_nomem(P);
        if (!pt_int(P, c2, "source", 0, &pr[0]) || !pt_int(P, c2, "target", 0, &pr[1])) return 0;
        a->v.intss.len[i] = 2;
        a->v.intss.v[i++] = pr;
    }
    return 1;
}

/* The attributes of slice. */
static int pt_attrs_slice(pt *P, const pt_node *im, hlo_instr *in, pt_attrs *as)
{
    int ns = pt_count(im, "slice_dimensions");
    if (ns > TPU_MAX_RANK) return pt_nerror(P, im, "slice of rank above %d", TPU_MAX_RANK);
    hlo_attr *a = pt_attr(P, as, HK_SLICE, HA_SLICE, im);
    if (!a || !(a->v.slice = ut_arena_alloc(&P->m->arena, sizeof(hlo_slice)))) return pt_nomem(P);
    hlo_slice *s = a->v.slice;
    for (const pt_node *c2 = im->child; c2; c2 = c2->next) {
        if (!pt_is(c2, "slice_dimensions")) continue;
        int i = s->rank++;
        if (!pt_int(P, c2, "start", 0, &s->start[i]) || !pt_int(P, c2, "limit", 0, &s->limit[i]) ||
            !pt_int(P, c2, "stride", 1, &s->stride[i]))
            return 0;
        if (!s->stride[i]) s->stride[i] = 1;
        s->has_stride[i] = 1;
    }
    return 1;
}

/* The attributes of infeed. */
static int pt_attrs_infeed(pt *P, const pt_node *im, hlo_instr *in, pt_attrs *as)
{
    const char *cfg = pt_str(im, "infeed_config");
    if (cfg && *cfg) {
        hlo_attr *a = pt_attr(P, as, HK_INFEED_CONFIG, HA_STR, im);
        if (!a || !(a->v.s = pt_mstrdup(P, cfg, strlen(cfg)))) return 0;
    }
    return 1;
}

/* The attributes of outfeed. */
static int pt_attrs_outfeed(pt *P, const pt_node *im, hlo_instr *in, pt_attrs *as)
{
    int nops = in->nops;
    const pt_node *n;
    hlo_attr *a = pt_attr(P, as, HK_OUTFEED_SHAPE, HA_SHAPE, im);
    if (!a || !(a->v.shape = ut_arena_alloc(&P->m->arena, sizeof(hlo_shape)))) return pt_nomem(P);
    if ((n = pt_get(im, "outfeed_shape"))) {
        if (!pt_shape(P, n, a->v.shape)) return 0;
    } else if (nops) {
        *a->v.shape = in->ops[0]->shape;
    }
    const char *cfg = pt_str(im, "outfeed_config");
    if (cfg && *cfg) {
        hlo_attr *b = pt_attr(P, as, HK_OUTFEED_CONFIG, HA_STR, im);
        if (!b || !(b->v.s = pt_mstrdup(P, cfg, strlen(cfg)))) return 0;
    }
    return 1;
}

/* The attributes of convolution, custom_call. */
static int pt_attrs_conv_custom_call(pt *P, const pt_node *im, hlo_instr *in, pt_attrs *as)
{
    hlo_op o = (hlo_op)in->op;
    const pt_node *n;
    int64_t iv;
    int bv;
    if ((n = pt_get(im, "window")) && !pt_window(P, as, n)) return 0;
    if ((n = pt_get(im, "convolution_dimension_numbers")) && !pt_dim_labels(P, as, n)) return 0;
    if (!pt_int(P, im, "feature_group_count", 1, &iv) || (iv > 1 && !pt_attr_int(P, as, HK_FEATURE_GROUP_COUNT, iv, im))) return 0;
    if (!pt_int(P, im, "batch_group_count", 1, &iv) || (iv > 1 && !pt_attr_int(P, as, HK_BATCH_GROUP_COUNT, iv, im))) return 0;
    if ((n = pt_get(im, "precision_config")) && !pt_precision(P, as, n)) return 0;
    if (o == HLO_CONVOLUTION) {
        /* XLA writes an empty sparsity_config on every convolution; a filled one tpusim cannot honour */
        if ((n = pt_get(im, "sparsity_config")) && n->child) pt_warn_field(P, n, "instruction");
        if (!pt_get(im, "convolution_dimension_numbers"))
            return pt_nerror(P, im, "convolution '%s' without convolution_dimension_numbers", in->name);
        return 1;
    }
    const char *pad = pt_str(im, "padding_type");
    if (pad && strcmp(pad, "PADDING_INVALID") && !pt_attr_text(P, as, HK_PADDING_TYPE, HA_IDENT, pad, im)) return 0;
    const char *tg = pt_str(im, "custom_call_target");
    hlo_attr *a = pt_attr(P, as, HK_CUSTOM_CALL_TARGET, HA_STR, im);
    if (!a || !(a->v.s = pt_mstrdup(P, tg ? tg : "", tg ? strlen(tg) : 0))) return 0;
    int nsh = pt_count(im, "operand_shapes_with_layout");
    if (nsh) {
        hlo_attr *b = pt_attr(P, as, HK_OPERAND_LAYOUT_CONSTRAINTS, HA_SHAPES, im);
        if (!b || !(b->v.shapes.v = ut_arena_alloc(&P->m->arena, (size_t)nsh * sizeof(hlo_shape)))) return pt_nomem(P);
        for (const pt_node *c2 = im->child; c2; c2 = c2->next)
            if (pt_is(c2, "operand_shapes_with_layout") && !pt_shape(P, c2, &b->v.shapes.v[b->v.shapes.n++])) return 0;
    }
    if (!pt_bool(P, im, "custom_call_has_side_effect", &bv) ||
        (bv && !pt_attr_bool(P, as, HK_CUSTOM_CALL_HAS_SIDE_EFFECT, 1, im)))
        return 0;
    if ((n = pt_get(im, "literal"))) {
        hlo_literal lit;
        hlo_shape ls;
        const pt_node *lsn = pt_get(n, "shape");
        if (!lsn) return pt_nerror(P, n, "custom-call literal without a shape");
        if (!pt_shape(P, lsn, &ls) || !pt_literal(P, n, &ls, &lit)) return 0;
        const char *txt = pt_literal_text(P, &lit);
        if (!txt || !pt_attr_text(P, as, HK_LITERAL, HA_RAW, txt, n)) return 0;
    }
    const char *sch = pt_str(im, "custom_call_schedule");
    if (sch && strcmp(sch, "SCHEDULE_NONE") && !pt_attr_text(P, as, HK_SCHEDULE, HA_IDENT, sch, im)) return 0;
    const char *api = pt_str(im, "custom_call_api_version");
    if (api && strcmp(api, "API_VERSION_ORIGINAL") && strcmp(api, "API_VERSION_UNSPECIFIED") &&
        !pt_attr_text(P, as, HK_API_VERSION, HA_IDENT, api, im))
        return 0;
    return 1;
}

/* The attributes of pad. */
static int pt_attrs_pad(pt *P, const pt_node *im, hlo_instr *in, pt_attrs *as)
{
    const pt_node *pc = pt_get(im, "padding_config");
    hlo_attr *a = pt_attr(P, as, HK_PADDING, HA_PADDING, pc);
    if (!a || !(a->v.padding = ut_arena_alloc(&P->m->arena, sizeof(hlo_padding)))) return pt_nomem(P);
    hlo_padding *p = a->v.padding;
    for (const pt_node *c2 = pc ? pc->child : NULL; c2; c2 = c2->next) {
        if (!pt_is(c2, "dimensions")) continue;
        if (p->rank == TPU_MAX_RANK) return pt_nerror(P, c2, "padding of rank above %d", TPU_MAX_RANK);
        int i = p->rank++;
        if (!pt_int(P, c2, "edge_padding_low", 0, &p->lo[i]) || !pt_int(P, c2, "edge_padding_high", 0, &p->hi[i]) ||
            !pt_int(P, c2, "interior_padding", 0, &p->interior[i]))
            return 0;
        p->has_interior[i] = p->interior[i] != 0;
    }
    return 1;
}

/* The attributes of gather, scatter. */
static int pt_attrs_gather_scatter(pt *P, const pt_node *im, hlo_instr *in, pt_attrs *as)
{
    hlo_op o = (hlo_op)in->op;
    int64_t iv;
    int bv;
    const pt_node *g = pt_get(im, o == HLO_GATHER ? "gather_dimension_numbers" : "scatter_dimension_numbers");
    if (!g) return pt_nerror(P, im, "%s '%s' without its dimension numbers", hlo_op_name(o), in->name);
    if (o == HLO_GATHER) {
        if (!pt_attr_ints(P, as, HK_OFFSET_DIMS, g, "offset_dims", 1) ||
            !pt_attr_ints(P, as, HK_COLLAPSED_SLICE_DIMS, g, "collapsed_slice_dims", 1) ||
            !pt_attr_ints(P, as, HK_START_INDEX_MAP, g, "start_index_map", 1) ||
            !pt_attr_ints(P, as, HK_OPERAND_BATCHING_DIMS, g, "operand_batching_dims", 0) ||
            !pt_attr_ints(P, as, HK_START_INDICES_BATCHING_DIMS, g, "start_indices_batching_dims", 0))
            return 0;
    } else {
        if (!pt_attr_ints(P, as, HK_UPDATE_WINDOW_DIMS, g, "update_window_dims", 1) ||
            !pt_attr_ints(P, as, HK_INSERTED_WINDOW_DIMS, g, "inserted_window_dims", 1) ||
            !pt_attr_ints(P, as, HK_SCATTER_DIMS_TO_OPERAND_DIMS, g, "scatter_dims_to_operand_dims", 1) ||
            !pt_attr_ints(P, as, HK_INPUT_BATCHING_DIMS, g, "input_batching_dims", 0) ||
            !pt_attr_ints(P, as, HK_SCATTER_INDICES_BATCHING_DIMS, g, "scatter_indices_batching_dims", 0))
            return 0;
    }
    if (!pt_int(P, g, "index_vector_dim", 0, &iv) || !pt_attr_int(P, as, HK_INDEX_VECTOR_DIM, iv, g)) return 0;
    if (o == HLO_GATHER && !pt_attr_ints(P, as, HK_SLICE_SIZES, im, "gather_slice_sizes", 1)) return 0;
    if (!pt_bool(P, im, "indices_are_sorted", &bv) || (bv && !pt_attr_bool(P, as, HK_INDICES_ARE_SORTED, 1, im))) return 0;
    if (o == HLO_SCATTER && (!pt_bool(P, im, "unique_indices", &bv) || (bv && !pt_attr_bool(P, as, HK_UNIQUE_INDICES, 1, im))))
        return 0;
    return 1;
}

/* The attributes of dot, scaled_dot, ragged_dot. */
static int pt_attrs_dot(pt *P, const pt_node *im, hlo_instr *in, pt_attrs *as)
{
    hlo_op o = (hlo_op)in->op;
    const pt_node *n;
    const pt_node *dd = pt_get(im, o == HLO_RAGGED_DOT ? "ragged_dot_dimension_numbers" : "dot_dimension_numbers");
    const pt_node *dn = o == HLO_RAGGED_DOT && dd ? pt_get(dd, "dot_dimension_numbers") : dd;
    if (!pt_attr_ints(P, as, HK_LHS_BATCH_DIMS, dn, "lhs_batch_dimensions", 0) ||
        !pt_attr_ints(P, as, HK_LHS_CONTRACTING_DIMS, dn, "lhs_contracting_dimensions", 1) ||
        !pt_attr_ints(P, as, HK_RHS_BATCH_DIMS, dn, "rhs_batch_dimensions", 0) ||
        !pt_attr_ints(P, as, HK_RHS_CONTRACTING_DIMS, dn, "rhs_contracting_dimensions", 1))
        return 0;
    if (o == HLO_RAGGED_DOT && (!pt_attr_ints(P, as, HK_LHS_RAGGED_DIMS, dd, "lhs_ragged_dimensions", 0) ||
                                !pt_attr_ints(P, as, HK_RHS_GROUP_DIMS, dd, "rhs_group_dimensions", 0)))
        return 0;
    if ((n = pt_get(im, "precision_config")) && !pt_precision(P, as, n)) return 0;
    return 1;
}

/* The attributes of domain. */
static int pt_attrs_domain(pt *P, const pt_node *im, hlo_instr *in, pt_attrs *as)
{
    const pt_node *en = pt_get(im, "domain_entry_sharding"), *ex = pt_get(im, "domain_exit_sharding");
    const char *es = en ? pt_sharding(P, en) : "{}", *xs = ex ? pt_sharding(P, ex) : "{}";
    if (!es || !xs) return 0;
    char *txt = ut_arena_alloc(&P->m->arena, strlen(es) + strlen(xs) + 40);
    if (!txt) return pt_nomem(P);
    sprintf(txt, "{kind=\"sharding\", entry=%s, exit=%s}", es, xs);
    if (!pt_attr_text(P, as, HK_DOMAIN, HA_RAW, txt, im)) return 0;
    return 1;
}

/* The attributes of async_start. */
static int pt_attrs_async_start(pt *P, const pt_node *im, hlo_instr *in, pt_attrs *as)
{
    const char *t = pt_str(im, "async_execution_thread");
    if (t && strcmp(t, "main")) {
        hlo_attr *a = pt_attr(P, as, HK_ASYNC_EXECUTION_THREAD, HA_STR, im);
        if (!a || !(a->v.s = pt_mstrdup(P, t, strlen(t)))) return 0;
    }
    return 1;
}

/* The per-opcode attributes of an instruction, in the order XLA prints them. */
static int pt_instr_op_attrs(pt *P, const pt_node *im, hlo_instr *in, pt_attrs *as)
{
    hlo_op o = (hlo_op)in->op;
    const pt_node *n;
    int64_t iv;
    int bv;
    switch (o) {
    case HLO_BATCH_NORM_TRAINING: case HLO_BATCH_NORM_INFERENCE: case HLO_BATCH_NORM_GRAD:
        return pt_attrs_batch_norm(P, im, in, as);
    case HLO_FFT: {
        const char *t = pt_str(im, "fft_type");
        if (!pt_attr_text(P, as, HK_FFT_TYPE, HA_IDENT, t ? t : "FFT", im)) return 0;
        if (!pt_attr_ints(P, as, HK_FFT_LENGTH, im, "fft_length", 1)) return 0;
        break;
    }
    case HLO_COMPARE:
        return pt_attrs_compare(P, im, in, as);
    case HLO_REDUCE_WINDOW: case HLO_SELECT_AND_SCATTER:
        if ((n = pt_get(im, "window")) && !pt_window(P, as, n)) return 0;
        break;
    case HLO_TRIANGULAR_SOLVE: case HLO_CHOLESKY:
        return pt_attrs_linalg(P, im, in, as);
    case HLO_SEND: case HLO_SEND_DONE: case HLO_RECV: case HLO_RECV_DONE:
        if (!pt_int(P, im, "channel_id", 0, &iv) || (iv && !pt_attr_int(P, as, HK_CHANNEL_ID, iv, im))) return 0;
        if (!pt_bool(P, im, "is_host_transfer", &bv) || (bv && !pt_attr_bool(P, as, HK_IS_HOST_TRANSFER, 1, im))) return 0;
        break;
    case HLO_ALL_GATHER: case HLO_ALL_GATHER_START: case HLO_ALL_REDUCE: case HLO_ALL_REDUCE_START:
    case HLO_REDUCE_SCATTER: case HLO_ALL_TO_ALL: case HLO_RAGGED_ALL_TO_ALL: case HLO_COLLECTIVE_BROADCAST:
        return pt_attrs_collective(P, im, in, as);
    case HLO_COLLECTIVE_PERMUTE: case HLO_COLLECTIVE_PERMUTE_START:
        return pt_attrs_collective_permute(P, im, in, as);
    case HLO_REVERSE: case HLO_CONCATENATE: case HLO_REDUCE: case HLO_TRANSPOSE: case HLO_BROADCAST: case HLO_MAP:
    case HLO_SORT: case HLO_GET_DIMENSION_SIZE: case HLO_SET_DIMENSION_SIZE: case HLO_SCAN:
        if (!pt_attr_ints(P, as, HK_DIMENSIONS, im, "dimensions", 1)) return 0;
        if (o == HLO_SORT && (!pt_bool(P, im, "is_stable", &bv) || (bv && !pt_attr_bool(P, as, HK_IS_STABLE, 1, im)))) return 0;
        break;
    case HLO_SLICE:
        return pt_attrs_slice(P, im, in, as);
    case HLO_GET_TUPLE_ELEMENT:
        if (!pt_int(P, im, "tuple_index", 0, &iv) || !pt_attr_int(P, as, HK_INDEX, iv, im)) return 0;
        break;
    case HLO_REDUCE_PRECISION:
        if (!pt_int(P, im, "exponent_bits", 0, &iv) || !pt_attr_int(P, as, HK_EXPONENT_BITS, iv, im)) return 0;
        if (!pt_int(P, im, "mantissa_bits", 0, &iv) || !pt_attr_int(P, as, HK_MANTISSA_BITS, iv, im)) return 0;
        break;
    case HLO_INFEED:
        return pt_attrs_infeed(P, im, in, as);
    case HLO_OUTFEED:
        return pt_attrs_outfeed(P, im, in, as);
    case HLO_CONVOLUTION: case HLO_CUSTOM_CALL:
        return pt_attrs_conv_custom_call(P, im, in, as);
    case HLO_FUSION: {
        const char *k = pt_str(im, "fusion_kind");
        if (!pt_attr_text(P, as, HK_KIND, HA_IDENT, k && *k ? k : "kLoop", im)) return 0;
        break;
    }
    case HLO_RNG: {
        const char *d = pt_str(im, "distribution");
        if (!d) return pt_nerror(P, im, "rng '%s' without a distribution", in->name);
        const char *l = pt_lower(P, d, NULL);
        if (!l || !pt_attr_text(P, as, HK_DISTRIBUTION, HA_IDENT, l, im)) return 0;
        break;
    }
    case HLO_RNG_BIT_GENERATOR: {
        const char *alg = pt_str(im, "rng_algorithm");
        const char *l = pt_lower(P, alg ? alg : "RNG_DEFAULT", NULL);
        if (!l || !pt_attr_text(P, as, HK_ALGORITHM, HA_IDENT, l, im)) return 0;
        break;
    }
    case HLO_RNG_GET_AND_UPDATE_STATE:
        if (!pt_int(P, im, "delta", 0, &iv) || !pt_attr_int(P, as, HK_DELTA, iv, im)) return 0;
        break;
    case HLO_PAD:
        return pt_attrs_pad(P, im, in, as);
    case HLO_DYNAMIC_SLICE:
        if (!pt_attr_ints(P, as, HK_DYNAMIC_SLICE_SIZES, im, "dynamic_slice_sizes", 1)) return 0;
        break;
    case HLO_GATHER: case HLO_SCATTER:
        return pt_attrs_gather_scatter(P, im, in, as);
    case HLO_IOTA: {
        int nd;
        int64_t *d;
        if (!pt_ints(P, im, "dimensions", &nd, &d)) return 0;
        if (!pt_attr_int(P, as, HK_IOTA_DIMENSION, nd ? d[0] : 0, im)) return 0;
        break;
    }
    case HLO_DOT: case HLO_SCALED_DOT: case HLO_RAGGED_DOT:
        return pt_attrs_dot(P, im, in, as);
    case HLO_DOMAIN:
        return pt_attrs_domain(P, im, in, as);
    case HLO_COPY_START:
        if ((n = pt_get(im, "cross_program_prefetch_index"))) {
            if (!pt_int_of(P, n, &iv) || !pt_attr_int(P, as, HK_CROSS_PROGRAM_PREFETCH_INDEX, iv, n)) return 0;
        }
        break;
    case HLO_TOPK:
        if (!pt_int(P, im, "k", 0, &iv) || !pt_attr_int(P, as, HK_K, iv, im)) return 0;
        if (!pt_bool(P, im, "largest", &bv) || !pt_attr_bool(P, as, HK_LARGEST, bv, im)) return 0;
        break;
    case HLO_ASYNC_START:
        return pt_attrs_async_start(P, im, in, as);
    default:
        break;
    }
    return 1;
}

/* Opcode, shape and operands (ids of earlier instructions of c, through map). */
static int pt_instr_head(pt *P, hlo_comp *c, const pt_node *im, pt_idmap *map, hlo_instr *in)
{
    const char *op = pt_str(im, "opcode");
    if (!op) return pt_nerror(P, im, "instruction without an opcode");
    hlo_op o = hlo_op_from_name(op, strlen(op));
    if (o == HLO_OP_COUNT) return pt_nerror(P, pt_get(im, "opcode"), "unknown opcode '%s'", op);
    in->op = (uint16_t)o;
    in->parent = c;
    in->line = im->line + P->line_offset;
    in->col = im->col;
    const pt_node *sh = pt_get(im, "shape");
    if (!sh) return pt_nerror(P, im, "instruction without a shape");
    if (!pt_shape(P, sh, &in->shape)) return 0;
    /* operands */
    int nops;
    int64_t *ids;
    if (!pt_ints(P, im, "operand_ids", &nops, &ids)) return 0;
    in->nops = nops;
    if (nops) {
        in->ops = ut_arena_alloc(&P->m->arena, (size_t)nops * sizeof(hlo_instr *));
        in->op_names = ut_arena_alloc(&P->m->arena, (size_t)nops * sizeof(char *));
        in->op_typed = ut_arena_alloc(&P->m->arena, (size_t)nops);
        if (!in->ops || !in->op_names || !in->op_typed) return pt_nomem(P);
        for (int k = 0; k < nops; k++) {
            in->ops[k] = pt_find(map, ids[k]);
            if (!in->ops[k])
                return pt_nerror(P, pt_get(im, "operand_ids"), "instruction '%s': operand id %lld is not an earlier "
                                 "instruction of computation '%s'", in->name, (long long)ids[k], c->name);
            in->op_names[k] = in->ops[k]->name;
            in->op_typed[k] = 1;
        }
    }
    int ar = hlo_op_arity(o);
    if (ar >= 0 && nops != ar)
        return pt_nerror(P, im, "%s '%s' takes %d operand%s, has %d", op, in->name, ar, ar == 1 ? "" : "s", nops);
    return 1;
}

/* A parameter's number, a constant's literal. */
static int pt_instr_value(pt *P, const pt_node *im, hlo_instr *in)
{
    hlo_op o = (hlo_op)in->op;
    if (o == HLO_PARAMETER) {
        if (!pt_int(P, im, "parameter_number", 0, &in->param_no)) return 0;
        if (in->param_no < 0 || in->param_no > INT32_MAX) return pt_nerror(P, im, "bad parameter_number");
    }
    if (o == HLO_CONSTANT) {
        const pt_node *lm = pt_get(im, "literal");
        in->literal = ut_arena_alloc(&P->m->arena, sizeof(hlo_literal));
        if (!in->literal) return pt_nomem(P);
        if (!lm) return pt_nerror(P, im, "constant '%s' without a literal", in->name);
        if (!pt_literal(P, lm, &in->shape, in->literal)) return 0;
    }
    return 1;
}

/* The computations an instruction calls (defined earlier in the module). */
static int pt_instr_called(pt *P, hlo_comp *c, const pt_node *im, hlo_instr *in, pt_attrs *as)
{
    int bv;
    int ncalled;
    int64_t *cids;
    if (!pt_ints(P, im, "called_computation_ids", &ncalled, &cids)) return 0;
    if (ncalled) {
        hlo_comp **called = ut_arena_alloc(&P->m->arena, (size_t)ncalled * sizeof(hlo_comp *));
        if (!called) return pt_nomem(P);
        for (int k = 0; k < ncalled; k++) {
            called[k] = pt_find_comp(P, cids[k]);
            if (!called[k])
                return pt_nerror(P, pt_get(im, "called_computation_ids"), "instruction '%s' calls computation id %lld, "
                                 "which is not defined before computation '%s'", in->name, (long long)cids[k], c->name);
        }
        if (!pt_called(P, as, in, im, called, ncalled)) return 0;
        in->ncalled = ncalled;
        in->called = called;
    }
    if (in->op == HLO_CALL && (!pt_bool(P, im, "is_composite", &bv) || (bv && !pt_attr_bool(P, as, HK_IS_COMPOSITE, 1, im))))
        return 0;
    return 1;
}

/* The attributes every opcode may have: sharding, frontend attributes, control predecessors, statistics,
 * metadata, backend_config. */
static int pt_instr_common(pt *P, const pt_node *im, pt_idmap *map, hlo_instr *in, pt_attrs *as)
{
    const pt_node *n;
    if ((n = pt_get(im, "sharding"))) {
        const char *s = pt_sharding(P, n);
        if (!s || !pt_attr_text(P, as, HK_SHARDING, HA_RAW, s, n)) return 0;
    }
    if ((n = pt_get(im, "frontend_attributes")) && !pt_kv_attr(P, as, HK_FRONTEND_ATTRIBUTES, n)) return 0;
    int nctrl;
    int64_t *ctrl;
    if (!pt_ints(P, im, "control_predecessor_ids", &nctrl, &ctrl)) return 0;
    if (nctrl) {
        hlo_attr *a = pt_attr(P, as, HK_CONTROL_PREDECESSORS, HA_NAMES, pt_get(im, "control_predecessor_ids"));
        in->ctrl = ut_arena_alloc(&P->m->arena, (size_t)nctrl * sizeof(hlo_instr *));
        if (!a || !in->ctrl || !(a->v.idents.v = ut_arena_alloc(&P->m->arena, (size_t)nctrl * sizeof(char *))))
            return pt_nomem(P);
        a->v.idents.n = nctrl;
        in->nctrl = nctrl;
        for (int k = 0; k < nctrl; k++) {
            if (!(in->ctrl[k] = pt_find(map, ctrl[k])))
                return pt_nerror(P, im, "instruction '%s': control predecessor id %lld is not an earlier instruction",
                                 in->name, (long long)ctrl[k]);
            a->v.idents.v[k] = in->ctrl[k]->name;
        }
    }
    if ((n = pt_get(im, "statistics_viz")) && n->is_msg && pt_count(n, "statistics")) {
        int ns = pt_count(n, "statistics");
        hlo_attr *a = pt_attr(P, as, HK_STATISTICS, HA_KV, n);
        if (!a || !(a->v.kv.v = ut_arena_alloc(&P->m->arena, (size_t)(ns + 1) * sizeof(hlo_kv)))) return pt_nomem(P);
        a->v.kv.sep = ',';
        const char *vi = pt_str(n, "stat_index_to_visualize");
        if (!vi) vi = "0";
        a->v.kv.v[a->v.kv.n++] = (hlo_kv){"visualizing_index", pt_mstrdup(P, vi, strlen(vi)), !pt_token_ok(vi)};
        for (const pt_node *c2 = n->child; c2; c2 = c2->next) {
            if (!pt_is(c2, "statistics")) continue;
            const char *sn = pt_str(c2, "stat_name"), *sv = pt_str(c2, "stat_val");
            if (!sv) sv = "0";
            a->v.kv.v[a->v.kv.n++] = (hlo_kv){pt_sanitize(P, sn ? sn : "stat"), pt_mstrdup(P, sv, strlen(sv)), !pt_token_ok(sv)};
        }
    }
    if ((n = pt_get(im, "metadata")) && n->is_msg && !pt_metadata(P, as, n)) return 0;
    const char *bc = pt_str(im, "backend_config");
    if (bc && *bc) {
        /* a JSON dict prints raw, anything else as an escaped string */
        const char *txt = pt_json_ok(bc) ? bc : pt_cescape(P, bc);
        if (!txt) return 0;
        if (!pt_attr_text(P, as, HK_BACKEND_CONFIG, HA_RAW, txt, pt_get(im, "backend_config"))) return 0;
    }
    if (pt_get(im, "output_operand_aliasing") || pt_get(im, "parameter_replication")) {
        /* kept out: they only guide buffer assignment and replication analysis */
        pt_warn_field(P, pt_get(im, "output_operand_aliasing") ? pt_get(im, "output_operand_aliasing")
                                                               : pt_get(im, "parameter_replication"), "instruction");
    }
    return 1;
}

static int pt_instruction(pt *P, hlo_comp *c, const pt_node *im, pt_idmap *map, hlo_instr *in)
{
    pt_check_fields(P, im, "instruction", pt_instr_known);
    pt_attrs as = {0};
    if (!pt_instr_head(P, c, im, map, in) || !pt_instr_value(P, im, in) || !pt_instr_op_attrs(P, im, in, &as) ||
        !pt_instr_called(P, c, im, in, &as) || !pt_instr_common(P, im, map, in, &as))
        return 0;
    in->nattrs = as.n;
    in->attrs = as.v;
    return !P->failed;
}

static const char *const pt_comp_known[] = {"name", "instructions", "program_shape", "id", "root_id",
                                            "is_fusion_computation", "execution_thread", NULL};

static int pt_computation(pt *P, const pt_node *cm, hlo_comp *c)
{
    pt_check_fields(P, cm, "computation", pt_comp_known);
    c->line = cm->line + P->line_offset;
    c->col = cm->col;
    int n = pt_count(cm, "instructions");
    if (!n) return pt_nerror(P, cm, "computation '%s' has no instructions", c->name);
    c->instrs = ut_arena_alloc(&P->m->arena, (size_t)n * sizeof(hlo_instr *));
    pt_idmap map = {ut_arena_alloc(&P->tree, (size_t)n * sizeof(int64_t)), ut_arena_alloc(&P->tree, (size_t)n * sizeof(hlo_instr *)), 0};
    if (!c->instrs || !map.ids || !map.v) return pt_nomem(P);
    /* names unique within the computation */
    int64_t maxp = -1;
    for (const pt_node *im = cm->child; im; im = im->next) {
        if (!pt_is(im, "instructions")) continue;
        hlo_instr *in = ut_arena_alloc(&P->m->arena, sizeof *in);
        if (!in) return pt_nomem(P);
        const char *nm = pt_str(im, "name");
        int64_t id;
        if (!pt_int(P, im, "id", 0, &id)) return 0;   /* proto3 leaves a zero id out */
        char fallback[64];
        if (!nm || !*nm) {
            const char *op = pt_str(im, "opcode");
            snprintf(fallback, sizeof fallback, "%.40s.%lld", op ? op : "instr", (long long)id);
            nm = fallback;
        }
        if (!(in->name = pt_sanitize(P, nm))) return 0;
        for (int k = 0; k < map.n; k++)
            if (!strcmp(map.v[k]->name, in->name))
                return pt_nerror(P, im, "instruction name '%s' appears twice in computation '%s'", in->name, c->name);
        if (pt_find(&map, id)) return pt_nerror(P, im, "instruction id %lld appears twice", (long long)id);
        if (!pt_instruction(P, c, im, &map, in)) return 0;
        in->id = map.n;
        map.ids[map.n] = id;
        map.v[map.n++] = in;
        c->instrs[c->ninstrs++] = in;
        if (in->op == HLO_PARAMETER && in->param_no > maxp) maxp = in->param_no;
    }
    /* root_id 0 is left out too; without it and without an instruction of id 0, the last instruction */
    int64_t root_id;
    if (!pt_int(P, cm, "root_id", 0, &root_id)) return 0;
    c->root = pt_get(cm, "root_id") || pt_find(&map, 0) ? pt_find(&map, root_id) : c->instrs[c->ninstrs - 1];
    if (!c->root) return pt_nerror(P, cm, "computation '%s': root_id %lld is not one of its instructions", c->name,
                                   (long long)root_id);
    c->root->is_root = 1;
    if (maxp >= c->ninstrs) return pt_nerror(P, cm, "computation '%s': parameter_number %lld is too large", c->name, (long long)maxp);
    c->nparams = (int)(maxp + 1);
    if (c->nparams) {
        c->params = ut_arena_alloc(&P->m->arena, (size_t)c->nparams * sizeof(hlo_instr *));
        if (!c->params) return pt_nomem(P);
        for (int i = 0; i < c->ninstrs; i++) {
            hlo_instr *in = c->instrs[i];
            if (in->op != HLO_PARAMETER) continue;
            if (c->params[in->param_no])
                return pt_nerror(P, cm, "computation '%s': parameter_number %lld appears twice", c->name, (long long)in->param_no);
            c->params[in->param_no] = in;
        }
        for (int i = 0; i < c->nparams; i++)
            if (!c->params[i]) return pt_nerror(P, cm, "computation '%s': parameter_number %d is missing", c->name, i);
    }
    const char *th = pt_str(cm, "execution_thread");
    if (th && *th && strcmp(th, "main")) {
        c->attrs = ut_arena_alloc(&P->m->arena, sizeof(hlo_attr));
        if (!c->attrs) return pt_nomem(P);
        c->nattrs = 1;
        c->attrs[0].key = HK_EXECUTION_THREAD;
        c->attrs[0].kind = HA_STR;
        c->attrs[0].name = hlo_attr_key_name(HK_EXECUTION_THREAD);
        if (!(c->attrs[0].v.s = pt_mstrdup(P, th, strlen(th)))) return 0;
    }
    return 1;
}

static int pt_frames(pt *P, const pt_node *fm)
{
    static const char *const known[] = {"file_names", "function_names", "file_locations", "stack_frames", NULL};
    pt_check_fields(P, fm, "stack_frame_index", known);
    hlo_frames *f = ut_arena_alloc(&P->m->arena, sizeof *f);
    if (!f) return pt_nomem(P);
    f->nfiles = pt_count(fm, "file_names");
    f->nfuncs = pt_count(fm, "function_names");
    f->nlocs = pt_count(fm, "file_locations");
    f->nframes = pt_count(fm, "stack_frames");
    if (!f->nfiles && !f->nfuncs && !f->nlocs && !f->nframes) return 1;
    f->files = ut_arena_alloc(&P->m->arena, (size_t)f->nfiles * sizeof(char *) + 1);
    f->funcs = ut_arena_alloc(&P->m->arena, (size_t)f->nfuncs * sizeof(char *) + 1);
    f->locs = ut_arena_alloc(&P->m->arena, (size_t)f->nlocs * sizeof(hlo_file_loc) + 1);
    f->frames = ut_arena_alloc(&P->m->arena, (size_t)f->nframes * sizeof(hlo_frame) + 1);
    if (!f->files || !f->funcs || !f->locs || !f->frames) return pt_nomem(P);
    int a = 0, b = 0, l = 0, s = 0;
    for (const pt_node *c = fm->child; c; c = c->next) {
        if (pt_is(c, "file_names") && !(f->files[a++] = pt_mstrdup(P, c->val, c->vlen))) return 0;
        if (pt_is(c, "function_names") && !(f->funcs[b++] = pt_mstrdup(P, c->val, c->vlen))) return 0;
        if (pt_is(c, "file_locations")) {
            hlo_file_loc *x = &f->locs[l++];
            if (!pt_int(P, c, "file_name_id", 0, &x->file_id) || !pt_int(P, c, "function_name_id", 0, &x->func_id) ||
                !pt_int(P, c, "line", 0, &x->line) || !pt_int(P, c, "end_line", 0, &x->end_line) ||
                !pt_int(P, c, "column", 0, &x->column) || !pt_int(P, c, "end_column", 0, &x->end_column))
                return 0;
        }
        if (pt_is(c, "stack_frames")) {
            hlo_frame *x = &f->frames[s++];
            if (!pt_int(P, c, "file_location_id", 0, &x->loc_id) || !pt_int(P, c, "parent_frame_id", 0, &x->parent_id))
                return 0;
        }
    }
    P->m->frames = f;
    return 1;
}

/* entry_computation_layout from host_program_shape, as XLA sets it when it makes a module from a proto */
static int pt_entry_layout(pt *P, pt_attrs *as, const pt_node *ps)
{
    const pt_node *res = pt_get(ps, "result");
    if (!res) return 1;
    hlo_attr *a = pt_attr(P, as, HK_ENTRY_COMPUTATION_LAYOUT, HA_PROGSHAPE, ps);
    if (!a) return 0;
    int n = pt_count(ps, "parameters");
    a->v.prog.result = ut_arena_alloc(&P->m->arena, sizeof(hlo_shape));
    a->v.prog.params = ut_arena_alloc(&P->m->arena, (size_t)(n + 1) * sizeof(hlo_shape));
    if (!a->v.prog.result || !a->v.prog.params) return pt_nomem(P);
    for (const pt_node *c = ps->child; c; c = c->next)
        if (pt_is(c, "parameters") && !pt_shape(P, c, &a->v.prog.params[a->v.prog.n++])) return 0;
    return pt_shape(P, res, a->v.prog.result);
}

/* Header attributes in the order XLA prints them (HloModule::Print). */
static int pt_module_attrs(pt *P, const pt_node *mm, const pt_node *config, pt_attrs *as)
{
    const pt_node *n;
    if ((n = pt_get(mm, "schedule")) && n->is_msg && !pt_attr_bool(P, as, HK_IS_SCHEDULED, 1, n)) return 0;
    if ((n = pt_get(mm, "input_output_alias")) && pt_count(n, "entries")) {
        int ne = pt_count(n, "entries");
        hlo_attr *a = pt_attr(P, as, HK_INPUT_OUTPUT_ALIAS, HA_ALIAS, n);
        if (!a || !(a->v.alias.v = ut_arena_alloc(&P->m->arena, (size_t)ne * sizeof(hlo_alias_entry)))) return pt_nomem(P);
        for (const pt_node *e = n->child; e; e = e->next) {
            if (!pt_is(e, "entries")) continue;
            hlo_alias_entry *x = &a->v.alias.v[a->v.alias.n++];
            int k1, k2;
            int64_t *o, *pi;
            if (!pt_ints(P, e, "output_shape_index", &k1, &o) || !pt_ints(P, e, "parameter_shape_index", &k2, &pi) ||
                !pt_int(P, e, "parameter_number", 0, &x->param))
                return 0;
            if (k1 > TPU_MAX_RANK || k2 > TPU_MAX_RANK) return pt_nerror(P, e, "alias index too deep");
            x->nout = k1;
            x->nparam_idx = k2;
            for (int i = 0; i < k1; i++) x->out[i] = o[i];
            for (int i = 0; i < k2; i++) x->param_idx[i] = pi[i];
            const char *kind = pt_str(e, "kind");
            x->kind = kind && !strcmp(kind, "MUST_ALIAS") ? 2 : 1;
        }
    }
    if ((n = pt_get(mm, "buffer_donor")) && pt_count(n, "entries")) {
        ut_buf b;
        ut_buf_init(&b);
        ut_buf_puts(&b, "{ ");
        int i = 0;
        for (const pt_node *e = n->child; e; e = e->next) {
            if (!pt_is(e, "entries")) continue;
            int64_t pn;
            int k;
            int64_t *idx;
            if (!pt_int(P, e, "parameter_number", 0, &pn) || !pt_ints(P, e, "parameter_shape_index", &k, &idx)) {
                ut_buf_free(&b);
                return 0;
            }
            ut_buf_printf(&b, "%s(%lld, {", i++ ? ", " : "", (long long)pn);
            for (int j = 0; j < k; j++) ut_buf_printf(&b, "%s%lld", j ? "," : "", (long long)idx[j]);
            ut_buf_puts(&b, "})");
        }
        ut_buf_puts(&b, " }");
        int ok = !b.failed && pt_attr_text(P, as, HK_BUFFER_DONOR, HA_RAW, b.data, n);
        ut_buf_free(&b);
        if (!ok) return P->failed ? 0 : pt_nomem(P);
    }
    if ((n = pt_get(mm, "host_program_shape")) && n->is_msg && !pt_entry_layout(P, as, n)) return 0;
    if (config) {
        int64_t v;
        if (!pt_int(P, config, "replica_count", 1, &v)) return 0;
        if (v != 1 && !pt_attr_int(P, as, HK_REPLICA_COUNT, v, config)) return 0;
        if (!pt_int(P, config, "num_partitions", 1, &v)) return 0;
        if (v != 1 && !pt_attr_int(P, as, HK_NUM_PARTITIONS, v, config)) return 0;
    }
    if ((n = pt_get(mm, "frontend_attributes")) && !pt_kv_attr(P, as, HK_FRONTEND_ATTRIBUTES, n)) return 0;
    if ((n = pt_get(mm, "spmd_output_sharding"))) {
        const char *s = pt_sharding(P, n);
        if (!s || !pt_attr_text(P, as, HK_SPMD_OUTPUT_SHARDING, HA_RAW, s, n)) return 0;
    }
    if (pt_count(mm, "spmd_parameters_shardings")) {
        ut_buf b;
        ut_buf_init(&b);
        ut_buf_putc(&b, '{');
        int i = 0;
        for (const pt_node *e = mm->child; e; e = e->next) {
            if (!pt_is(e, "spmd_parameters_shardings")) continue;
            const char *s = pt_sharding(P, e);
            if (!s) {
                ut_buf_free(&b);
                return 0;
            }
            ut_buf_printf(&b, "%s%s", i++ ? ", " : "", s);
        }
        ut_buf_putc(&b, '}');
        int ok = !b.failed && pt_attr_text(P, as, HK_SPMD_PARAMETERS_SHARDINGS, HA_RAW, b.data, mm);
        ut_buf_free(&b);
        if (!ok) return P->failed ? 0 : pt_nomem(P);
    }
    return 1;
}

static const char *const pt_module_known[] = {
    "name", "entry_computation_name", "entry_computation_id", "computations", "host_program_shape", "id", "schedule",
    "input_output_alias", "buffer_donor", "frontend_attributes", "spmd_output_sharding", "spmd_parameters_shardings",
    "stack_frame_index", NULL};

static int pt_module(pt *P, const pt_node *root)
{
    /* unwrap HloProto { hlo_module {...} }, HloSnapshot { hlo { hlo_module {...} } } and
     * HloModuleProtoWithConfig { hlo_module {...} config {...} } */
    const pt_node *mm = root, *config = NULL;
    for (int k = 0; k < 3; k++) {
        const pt_node *w = pt_get(mm, "hlo_module");
        if (!w) w = pt_get(mm, "hlo");
        if (!w || !w->is_msg || pt_get(mm, "computations")) break;
        if (!config) config = pt_get(mm, "config");
        mm = w;
    }
    if (mm != root) {
        for (const pt_node *c = root->child; c; c = c->next)
            if (!pt_is(c, "hlo_module") && !pt_is(c, "hlo") && !pt_is(c, "config")) pt_warn_field(P, c, "wrapper");
    }
    pt_check_fields(P, mm, "module", pt_module_known);
    const char *name = pt_str(mm, "name");
    if (!(P->m->name = pt_sanitize(P, name && *name ? name : "module"))) return 0;
    P->m->has_header = 1;
    int n = pt_count(mm, "computations");
    if (!n) return pt_nerror(P, mm, "no computations in the module");
    P->comps = ut_arena_alloc(&P->m->arena, (size_t)n * sizeof(hlo_comp *));
    P->comp_ids = ut_arena_alloc(&P->tree, (size_t)n * sizeof(int64_t));
    if (!P->comps || !P->comp_ids) return pt_nomem(P);
    for (const pt_node *cm = mm->child; cm; cm = cm->next) {
        if (!pt_is(cm, "computations")) continue;
        hlo_comp *c = ut_arena_alloc(&P->m->arena, sizeof *c);
        if (!c) return pt_nomem(P);
        const char *cn = pt_str(cm, "name");
        int64_t id;
        if (!pt_int(P, cm, "id", 0, &id)) return 0;
        char fallback[40];
        if (!cn || !*cn) {
            snprintf(fallback, sizeof fallback, "computation.%lld", (long long)id);
            cn = fallback;
        }
        if (!(c->name = pt_sanitize(P, cn))) return 0;
        for (int i = 0; i < P->ncomps; i++) {
            if (!strcmp(P->comps[i]->name, c->name))
                return pt_nerror(P, cm, "computation name '%s' appears twice", c->name);
            if (P->comp_ids[i] == id) return pt_nerror(P, cm, "computation id %lld appears twice", (long long)id);
        }
        c->id = P->ncomps;
        if (!pt_computation(P, cm, c)) return 0;
        P->comp_ids[P->ncomps] = id;
        P->comps[P->ncomps++] = c;
        P->m->ninstrs += c->ninstrs;
    }
    P->m->ncomps = P->ncomps;
    P->m->comps = P->comps;
    /* entry: by id, else by name, else the last computation */
    int64_t eid;
    const char *en = pt_str(mm, "entry_computation_name");
    if (!pt_int(P, mm, "entry_computation_id", INT64_MIN, &eid)) return 0;
    hlo_comp *entry = eid != INT64_MIN ? pt_find_comp(P, eid) : NULL;
    if (!entry && en && *en) {
        const char *sn = pt_sanitize(P, en);
        for (int i = 0; sn && i < P->ncomps; i++)
            if (!strcmp(P->comps[i]->name, sn)) entry = P->comps[i];
        if (!entry) return pt_nerror(P, mm, "entry_computation_name '%s' is not a computation of the module", en);
    }
    if (!entry && eid != INT64_MIN)
        return pt_nerror(P, mm, "entry_computation_id %lld is not a computation of the module", (long long)eid);
    if (!entry) entry = P->comps[P->ncomps - 1];
    entry->is_entry = 1;
    P->m->entry = entry;
    pt_attrs as = {0};
    if (!pt_module_attrs(P, mm, config, &as)) return 0;
    P->m->nattrs = as.n;
    P->m->attrs = as.v;
    const pt_node *fi = pt_get(mm, "stack_frame_index");
    if (fi && fi->is_msg && !pt_frames(P, fi)) return 0;
    return 1;
}

int hlo_is_proto_text(const char *text, size_t len)
{
    const char *p = text, *e = text + len;
    for (;;) {
        while (p < e && isspace((unsigned char)*p)) p++;
        if (p < e && (*p == '#' || (*p == '/' && p + 1 < e && p[1] == '/'))) {
            while (p < e && *p != '\n') p++;
            continue;
        }
        break;
    }
    const char *s = p;
    while (p < e && (isalnum((unsigned char)*p) || *p == '_')) p++;
    if (p == s) return 0;
    size_t n = (size_t)(p - s);
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) p++;
    /* HLO text starts with HloModule, ENTRY or "name {" / "name (" — never "word:" or "hlo_module {" */
    if (p < e && *p == ':') return 1;
    if (p < e && *p == '{' && ((n == 10 && !memcmp(s, "hlo_module", 10)) || (n == 3 && !memcmp(s, "hlo", 3)))) {
        /* a message's first field ("name:", "computations {"), not an HLO computation called hlo_module */
        p++;
        while (p < e && isspace((unsigned char)*p)) p++;
        const char *f = p;
        while (p < e && (isalnum((unsigned char)*p) || *p == '_')) p++;
        if (p == f) return p < e && *p == '}';
        while (p < e && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) p++;
        return p < e && (*p == ':' || *p == '{');
    }
    return 0;
}

tpu_status hlo_proto_build(tpu_ctx *ctx, const pt_node *root, const char *file, int line_offset, int binary,
                           hlo_module **out)
{
    *out = NULL;
    hlo_module *m = ut_calloc(1, sizeof *m);
    if (!m) return ut_nomem(ctx);
    ut_arena_init(&m->arena);
    pt P;
    memset(&P, 0, sizeof P);
    P.ctx = ctx;
    P.m = m;
    P.file = file ? file : "<hlo>";
    P.line_offset = line_offset;
    P.binary = binary;
    P.src = P.p = P.end = P.line_start = "";   /* no text: messages without a field have no position */
    ut_arena_init(&P.tree);   /* scratch: id maps, warned paths */
    m->from_proto = 1;
    m->filename = ut_arena_strdup(&m->arena, P.file);
    int ok = m->filename != NULL && pt_module(&P, root);
    ut_arena_free(&P.tree);
    if (!ok) {
        tpu_status st = P.failed && ctx && ctx->err && !strcmp(ctx->err, "out of memory") ? TPU_ERR_NOMEM : TPU_ERR_PARSE;
        if (!P.failed) st = ut_nomem(ctx);
        hlo_module_free(m);
        return st;
    }
    *out = m;
    return TPU_OK;
}

tpu_status hlo_parse_proto_text(tpu_ctx *ctx, const char *text, size_t len, const char *filename, int line_offset,
                                hlo_module **out)
{
    *out = NULL;
    pt P;
    memset(&P, 0, sizeof P);
    P.ctx = ctx;
    P.file = filename ? filename : "<hlo>";
    P.line_offset = line_offset;
    P.src = P.p = text;
    P.end = text + len;
    P.line = 1;
    P.line_start = text;
    ut_arena_init(&P.tree);
    pt_node root;
    memset(&root, 0, sizeof root);
    root.name = "";
    root.is_msg = 1;
    int ok = 1;
    if (memchr(text, 0, len)) ok = pt_error(&P, "NUL byte in the text");
    if (ok) ok = pt_body(&P, &root, 0);
    tpu_status st;
    if (ok) st = hlo_proto_build(ctx, &root, P.file, line_offset, 0, out);
    else st = ctx && ctx->err && !strcmp(ctx->err, "out of memory") ? TPU_ERR_NOMEM : TPU_ERR_PARSE;
    ut_arena_free(&P.tree);
    return st;
}
