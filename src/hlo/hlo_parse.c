/* hlo_parse.c — recursive-descent parser for XLA's HLO text.
 *
 * Works on characters (HLO's small sub-languages — pad specs 1_2x3_4, dim labels b01f_01io->b01f, slices
 * [0:4:1] — are easier to read directly than through a general tokenizer). Each hp_<rule> function parses
 * one grammar rule, returns 1 on success and 0 after recording an error with file:line:col. Names resolve
 * after a whole computation (operands) or module (called computations) is read, so order in the text does
 * not matter.
 */
#include "hlo.h"
#include "util/fp.h"
#include "util/tensor.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- a string -> pointer hash map for name lookup ---- */
typedef struct hp_map {
    const char **keys;
    void       **vals;
    size_t       cap, n;
} hp_map;

static uint64_t hp_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211ull;
    return h;
}

static void hp_map_free(hp_map *m)
{
    ut_free(m->keys);
    ut_free(m->vals);
    memset(m, 0, sizeof *m);
}

static void *hp_map_get(const hp_map *m, const char *k)
{
    if (!m->cap) return NULL;
    for (size_t i = hp_hash(k) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (!m->keys[i]) return NULL;
        if (!strcmp(m->keys[i], k)) return m->vals[i];
    }
}

/* Returns 0 on allocation failure. Replaces an existing value. */
static int hp_map_put(hp_map *m, const char *k, void *v)
{
    if ((m->n + 1) * 2 > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        const char **keys = ut_calloc(cap, sizeof *keys);
        void **vals = ut_calloc(cap, sizeof *vals);
        if (!keys || !vals) {
            ut_free(keys);
            ut_free(vals);
            return 0;
        }
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->keys[i]) continue;
            size_t j = hp_hash(m->keys[i]) & (cap - 1);
            while (keys[j]) j = (j + 1) & (cap - 1);
            keys[j] = m->keys[i];
            vals[j] = m->vals[i];
        }
        ut_free(m->keys);
        ut_free(m->vals);
        m->keys = keys;
        m->vals = vals;
        m->cap = cap;
    }
    size_t i = hp_hash(k) & (m->cap - 1);
    while (m->keys[i] && strcmp(m->keys[i], k)) i = (i + 1) & (m->cap - 1);
    if (!m->keys[i]) m->n++;
    m->keys[i] = k;
    m->vals[i] = v;
    return 1;
}

/* ---- growable pointer array (malloc'ed while parsing, copied into the arena at the end) ---- */
typedef struct hp_vec {
    void  **v;
    int     n, cap;
} hp_vec;

static int hp_vec_push(hp_vec *a, void *p)
{
    void **v = ut_grow(a->v, sizeof *v, a->n, &a->cap, 16);
    if (!v) return 0;
    a->v = v;
    a->v[a->n++] = p;
    return 1;
}

static void hp_vec_free(hp_vec *a)
{
    ut_free(a->v);
    memset(a, 0, sizeof *a);
}

/* ---- parser state ---- */
typedef struct hp {
    tpu_ctx    *ctx;
    hlo_module *m;
    const char *src, *p, *end;
    const char *file;
    int         line_offset;
    /* position -> line cache: lines are asked for in mostly increasing order */
    const char *lc_pos;
    int         lc_line;
    const char *lc_line_start;
    int         failed;
    int         depth;       /* nesting of shapes, literals, operands, inline bodies (bounded: no stack overflow) */
    hp_map      comps;       /* name -> hlo_comp* */
    hp_vec     *comps_out;   /* computations in the order they are finished (inline bodies before their users) */
    const char *cur_instr;   /* the instruction whose attributes are being read (names inline bodies) */
} hp;

#define HP_MAX_DEPTH 200

static void hp_linecol(hp *P, const char *pos, int *line, int *col)
{
    if (pos < P->src) pos = P->src;
    if (pos > P->end) pos = P->end;
    if (!P->lc_pos || pos < P->lc_pos) {
        P->lc_pos = P->src;
        P->lc_line = 1;
        P->lc_line_start = P->src;
    }
    for (const char *q = P->lc_pos; q < pos; q++) {
        if (*q == '\n') {
            P->lc_line++;
            P->lc_line_start = q + 1;
        }
    }
    P->lc_pos = pos;
    *line = P->lc_line + P->line_offset;
    *col = (int)(pos - P->lc_line_start) + 1;
}

static int hp_verror_lc(hp *P, int line, int col, const char *pos, const char *fmt, va_list ap)
{
    if (P->failed) return 0;   /* keep the first error */
    P->failed = 1;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (!pos) {
        ut_err(P->ctx, TPU_ERR_PARSE, "%s:%d:%d: %s", P->file, line, col, msg);
        return 0;
    }
    /* show what is at the position, up to the end of the line */
    char near[48];
    int k = 0;
    for (const char *q = pos; q < P->end && *q != '\n' && k < (int)sizeof near - 1; q++) near[k++] = *q;
    near[k] = 0;
    if (k)
        ut_err(P->ctx, TPU_ERR_PARSE, "%s:%d:%d: %s (at '%s')", P->file, line, col, msg, near);
    else
        ut_err(P->ctx, TPU_ERR_PARSE, "%s:%d:%d: %s (at end of %s)", P->file, line, col, msg,
               pos >= P->end ? "input" : "line");
    return 0;
}

static int hp_error_at(hp *P, const char *pos, const char *fmt, ...) UT_PRINTF(3, 4);
static int hp_error_at(hp *P, const char *pos, const char *fmt, ...)
{
    int line, col;
    hp_linecol(P, pos, &line, &col);
    va_list ap;
    va_start(ap, fmt);
    hp_verror_lc(P, line, col, pos, fmt, ap);
    va_end(ap);
    return 0;
}

/* An error at a known line:col (of an instruction or attribute recorded earlier). */
static int hp_error_lc(hp *P, int line, int col, const char *fmt, ...) UT_PRINTF(4, 5);
static int hp_error_lc(hp *P, int line, int col, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    hp_verror_lc(P, line, col, NULL, fmt, ap);
    va_end(ap);
    return 0;
}

#define hp_error(P, ...) hp_error_at(P, (P)->p, __VA_ARGS__)

static int hp_nomem(hp *P)
{
    if (!P->failed) {
        P->failed = 1;
        ut_nomem(P->ctx);
    }
    return 0;
}

static void *hp_alloc(hp *P, size_t n)
{
    void *p = ut_arena_alloc(&P->m->arena, n);
    if (!p) hp_nomem(P);
    return p;
}

static char *hp_strndup(hp *P, const char *s, size_t n)
{
    char *d = ut_arena_strndup(&P->m->arena, s, n);
    if (!d) hp_nomem(P);
    return d;
}

/* Skips spaces, newlines, // comments and block comments (XLA prints tuple indices as block comments), and
 * lines starting with '#' (lit test directives such as "# RUN: ..." found in XLA's own test files). */
static void hp_ws(hp *P)
{
    for (;;) {
        while (P->p < P->end && isspace((unsigned char)*P->p)) P->p++;
        if (P->p < P->end && *P->p == '#') {
            const char *q = P->p;
            while (q > P->src && (q[-1] == ' ' || q[-1] == '\t')) q--;
            if (q == P->src || q[-1] == '\n') {
                while (P->p < P->end && *P->p != '\n') P->p++;
                continue;
            }
        }
        if (P->p + 1 < P->end && P->p[0] == '/' && P->p[1] == '/') {
            while (P->p < P->end && *P->p != '\n') P->p++;
            continue;
        }
        if (P->p + 1 < P->end && P->p[0] == '/' && P->p[1] == '*') {
            const char *q = P->p + 2;
            while (q + 1 < P->end && !(q[0] == '*' && q[1] == '/')) q++;
            P->p = q + 1 < P->end ? q + 2 : P->end;
            continue;
        }
        return;
    }
}

/* Like hp_ws but stops at a newline (used where a value may be empty, e.g. a RAW attribute at line end). */
static void hp_ws_inline(hp *P)
{
    while (P->p < P->end && (*P->p == ' ' || *P->p == '\t' || *P->p == '\r')) P->p++;
}

static int hp_peek(hp *P)
{
    hp_ws(P);
    return P->p < P->end ? (unsigned char)*P->p : -1;
}

static int hp_accept(hp *P, char c)
{
    if (hp_peek(P) == c) {
        P->p++;
        return 1;
    }
    return 0;
}

static int hp_expect(hp *P, char c, const char *what)
{
    if (hp_accept(P, c)) return 1;
    return hp_error(P, "expected '%c' %s", c, what);
}

/* Accepts a keyword followed by a non-name character. */
static int hp_accept_word(hp *P, const char *w)
{
    hp_ws(P);
    size_t n = strlen(w);
    if ((size_t)(P->end - P->p) >= n && !memcmp(P->p, w, n) &&
        (P->p + n == P->end || !(isalnum((unsigned char)P->p[n]) || P->p[n] == '_' || P->p[n] == '.' ||
                                 P->p[n] == '-')))
    {
        P->p += n;
        return 1;
    }
    return 0;
}

static int hp_is_name_char(int c) { return isalnum(c) || c == '_' || c == '.' || c == '-' || c == '$'; }

/* name: [%]? [A-Za-z_][A-Za-z0-9_.-]*. Returns the span without '%'. A '-' followed by '>' ends a name
 * (the arrow of a signature). */
static int hp_name_span(hp *P, const char **s, size_t *n)
{
    hp_ws(P);
    const char *q = P->p;
    if (q < P->end && *q == '%') q++;
    if (q >= P->end || !(isalpha((unsigned char)*q) || *q == '_' || *q == '$' ||
                         (isdigit((unsigned char)*q) && q > P->p)))
        return 0;
    const char *b = q;
    while (q < P->end && hp_is_name_char((unsigned char)*q)) {
        if (*q == '-' && q + 1 < P->end && q[1] == '>') break;
        q++;
    }
    *s = b;
    *n = (size_t)(q - b);
    P->p = q;
    return 1;
}

static const char *hp_name(hp *P, const char *what)
{
    const char *s;
    size_t n;
    if (!hp_name_span(P, &s, &n)) {
        hp_error(P, "expected %s", what);
        return NULL;
    }
    return hp_strndup(P, s, n);
}

/* A bare word for enum-like values: [A-Za-z0-9_.-]+ */
static int hp_word_span(hp *P, const char **s, size_t *n)
{
    hp_ws(P);
    const char *q = P->p;
    while (q < P->end && (isalnum((unsigned char)*q) || *q == '_' || *q == '.' || *q == '-')) q++;
    if (q == P->p) return 0;
    *s = P->p;
    *n = (size_t)(q - P->p);
    P->p = q;
    return 1;
}

static int hp_int(hp *P, int64_t *v, const char *what)
{
    hp_ws(P);
    const char *q = P->p;
    int neg = 0;
    if (q < P->end && (*q == '-' || *q == '+')) neg = *q++ == '-';
    if (q >= P->end || !isdigit((unsigned char)*q)) return hp_error(P, "expected an integer %s", what);
    uint64_t x = 0;
    /* decimal only: "0x1" must stay a pad spec (0 x 1), not a hex number */
    for (; q < P->end && isdigit((unsigned char)*q); q++) {
        int d = *q - '0';
        if (x > (UINT64_MAX - (uint64_t)d) / 10) return hp_error(P, "integer out of range %s", what);
        x = x * 10 + (uint64_t)d;
    }
    if (!neg && x > (uint64_t)INT64_MAX) return hp_error(P, "integer out of range %s", what);
    if (neg && x > (uint64_t)INT64_MAX + 1) return hp_error(P, "integer out of range %s", what);
    *v = neg ? (int64_t)(0 - x) : (int64_t)x;
    P->p = q;
    return 1;
}

static int hp_small_int(hp *P, int *v, int lo, int hi, const char *what)
{
    const char *at = (hp_ws(P), P->p);
    int64_t x;
    if (!hp_int(P, &x, what)) return 0;
    if (x < lo || x > hi) return hp_error_at(P, at, "%s %lld out of range [%d, %d]", what, (long long)x, lo, hi);
    *v = (int)x;
    return 1;
}

/* "..." with C-like escapes; the result is unescaped. */
static int hp_string(hp *P, const char **out)
{
    hp_ws(P);
    if (P->p >= P->end || *P->p != '"') return hp_error(P, "expected a string");
    const char *start = P->p++;
    ut_buf b;
    ut_buf_init(&b);
    while (P->p < P->end && *P->p != '"') {
        char c = *P->p++;
        if (c == '\\' && P->p < P->end) {
            char e = *P->p++;
            switch (e) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case '0': c = '\0'; break;
            case 'x': {
                int v = 0, k = 0;
                while (k < 2 && P->p < P->end && isxdigit((unsigned char)*P->p)) {
                    v = v * 16 + (isdigit((unsigned char)*P->p) ? *P->p - '0' : tolower((unsigned char)*P->p) - 'a' + 10);
                    P->p++;
                    k++;
                }
                c = (char)v;
                break;
            }
            default: c = e; break;   /* \" \\ \' and anything else: the character itself */
            }
        }
        ut_buf_putc(&b, c);
    }
    if (P->p >= P->end) {
        ut_buf_free(&b);
        return hp_error_at(P, start, "unterminated string");
    }
    P->p++;
    if (b.failed) {
        ut_buf_free(&b);
        return hp_nomem(P);
    }
    *out = hp_strndup(P, b.data ? b.data : "", b.len);
    ut_buf_free(&b);
    return *out != NULL;
}

/* Skips a balanced value: brackets, braces, parens and strings. Stops at a top-level ',' or '}' / ')' that
 * closes an outer group, or at a newline at depth 0. */
static int hp_skip_balanced(hp *P)
{
    int depth = 0;
    const char *start = P->p;
    char stack[256];
    while (P->p < P->end) {
        char c = *P->p;
        if (c == '"') {
            const char *s;
            if (!hp_string(P, &s)) return 0;
            continue;
        }
        if (depth == 0 && (c == ',' || c == '\n' || c == '}' || c == ')' || c == ']')) break;
        if (c == '{' || c == '(' || c == '[') {
            if (depth == (int)sizeof stack) return hp_error(P, "value nested too deeply");
            stack[depth++] = c == '{' ? '}' : c == '(' ? ')' : ']';
        } else if (c == '}' || c == ')' || c == ']') {
            if (stack[depth - 1] != c) return hp_error(P, "unbalanced '%c'", c);
            depth--;
        }
        P->p++;
    }
    if (depth) return hp_error_at(P, start, "unbalanced brackets in value");
    return 1;
}

static int hp_depth_enter(hp *P, const char *what);

/* Skips one bracketed group starting at P->p ({..}, [..] or (..), nested, strings inside skipped). */
static int hp_skip_group(hp *P)
{
    char stack[256];
    int depth = 0;
    const char *start = P->p;
    while (P->p < P->end) {
        char c = *P->p;
        if (c == '"') {
            const char *s;
            if (!hp_string(P, &s)) return 0;
            continue;
        }
        if (c == '{' || c == '(' || c == '[') {
            if (depth == (int)sizeof stack) return hp_error(P, "value nested too deeply");
            stack[depth++] = c == '{' ? '}' : c == '(' ? ')' : ']';
        } else if (c == '}' || c == ')' || c == ']') {
            if (!depth || stack[depth - 1] != c) return hp_error(P, "unbalanced '%c'", c);
            depth--;
        }
        P->p++;
        if (!depth) return 1;
    }
    return hp_error_at(P, start, "unbalanced brackets in value");
}

/* ---- shapes ---- */
static int hp_shape(hp *P, hlo_shape *s);

static int hp_dtype_name(hp *P, tpu_dtype *t)
{
    hp_ws(P);
    const char *q = P->p;
    while (q < P->end && isalnum((unsigned char)*q)) q++;
    tpu_dtype d = tpu_dtype_from_name(P->p, (size_t)(q - P->p));
    if (d == TPU_INVALID) return hp_error(P, "unknown element type '%.*s'", (int)(q - P->p), P->p);
    *t = d;
    P->p = q;
    return 1;
}

/* Layout items after ':' — T(..)(..), L(n), E(n), S(n), #(type), *(type); others (D, SC, P, M, ...) kept verbatim. */
static int hp_layout_items(hp *P, hlo_layout *l)
{
    ut_buf extra;
    ut_buf_init(&extra);
    int ok = 1;
    while (ok && hp_peek(P) != '}' && P->p < P->end) {
        const char *item = P->p;
        if (*P->p == 'T' && P->p + 1 < P->end && P->p[1] == '(') {
            P->p++;
            while (P->p < P->end && *P->p == '(') {
                if (l->ntiles == HLO_MAX_TILES) { ok = hp_error(P, "too many tiles in layout"); break; }
                hlo_tile *t = &l->tiles[l->ntiles++];
                P->p++;
                while (ok && hp_peek(P) != ')') {
                    if (t->n == HLO_MAX_TILE_RANK) { ok = hp_error(P, "tile has too many dimensions"); break; }
                    if (hp_accept(P, '*')) t->d[t->n++] = HLO_TILE_COMBINE;
                    else if (hp_accept(P, '?')) t->d[t->n++] = HLO_TILE_DYNAMIC;
                    else ok = hp_int(P, &t->d[t->n++], "in a tile");
                    if (ok && !hp_accept(P, ',')) break;
                }
                if (ok) ok = hp_expect(P, ')', "to close a tile");
            }
            continue;
        }
        if ((*P->p == 'L' || *P->p == 'E' || *P->p == 'S') && P->p + 1 < P->end && P->p[1] == '(') {
            char k = *P->p;
            P->p += 2;
            int64_t v;
            ok = hp_int(P, &v, "in a layout") && hp_expect(P, ')', "in a layout");
            if (!ok) break;
            if (k == 'L') l->tail_pad = v;
            else if (k == 'E') l->elem_bits = (int)v;
            else l->mem_space = v;
            continue;
        }
        if ((*P->p == '#' || *P->p == '*') && P->p + 1 < P->end && P->p[1] == '(') {
            char k = *P->p;
            P->p += 2;
            tpu_dtype t;
            ok = hp_dtype_name(P, &t) && hp_expect(P, ')', "in a layout");
            if (!ok) break;
            if (k == '#') l->index_type = (uint8_t)t;
            else l->pointer_type = (uint8_t)t;
            continue;
        }
        /* D(..) dim-level types, SC(..) split configs, P(..) physical shape, M(n): kept verbatim */
        const char *q = P->p;
        while (q < P->end && isalpha((unsigned char)*q)) q++;
        size_t kl = (size_t)(q - P->p);
        int known = (kl == 1 && strchr("DPM", *P->p)) || (kl == 2 && !memcmp(P->p, "SC", 2));
        if (!known || q >= P->end || *q != '(') {
            ok = hp_error(P, "unknown layout item (expected T(..), L(n), E(n), S(n), #(type), *(type), D(..), SC(..), "
                             "P(..) or M(n))");
            break;
        }
        P->p = q + 1;
        if (!hp_skip_balanced(P) || !hp_expect(P, ')', "to close a layout item")) { ok = 0; break; }
        ut_buf_put(&extra, item, (size_t)(P->p - item));
    }
    if (ok && extra.len) {
        if (extra.failed) ok = hp_nomem(P);
        else ok = (l->extra = hp_strndup(P, extra.data, extra.len)) != NULL;
    }
    ut_buf_free(&extra);
    return ok;
}

static int hp_layout(hp *P, hlo_shape *s)
{
    hlo_layout *l = hp_alloc(P, sizeof *l);
    if (!l) return 0;
    if (!hp_expect(P, '{', "to open a layout")) return 0;
    while (hp_peek(P) != '}' && hp_peek(P) != ':') {
        if (l->rank == TPU_MAX_RANK) return hp_error(P, "layout has too many dimensions");
        int d;
        if (!hp_small_int(P, &d, 0, TPU_MAX_RANK - 1, "layout dimension")) return 0;
        l->m2m[l->rank++] = (int8_t)d;
        if (!hp_accept(P, ',')) break;
    }
    if (hp_accept(P, ':') && !hp_layout_items(P, l)) return 0;
    if (!hp_expect(P, '}', "to close a layout")) return 0;
    s->layout = l;
    return 1;
}

/* After an array shape's ']': is '{' a layout (digits, '}' or ':' follow) rather than a computation body? */
static int hp_layout_follows(hp *P)
{
    hp_ws(P);
    if (P->p >= P->end || *P->p != '{') return 0;
    const char *q = P->p + 1;
    while (q < P->end && (*q == ' ' || *q == '\t')) q++;
    return q < P->end && (isdigit((unsigned char)*q) || *q == '}' || *q == ':');
}

static int hp_shape(hp *P, hlo_shape *s)
{
    memset(s, 0, sizeof *s);
    int c = hp_peek(P);
    if (c == '(') {
        if (!hp_depth_enter(P, "tuple shapes")) return 0;
        P->p++;
        s->dtype = TPU_TUPLE;
        hlo_shape tmp[8];
        hlo_shape *elems = tmp;
        int n = 0, cap = 8;
        int ok = 1;
        while (hp_peek(P) != ')') {
            if (n == cap) {
                hlo_shape *ne = hp_alloc(P, (size_t)cap * 2 * sizeof *ne);
                if (!ne) return 0;
                memcpy(ne, elems, (size_t)n * sizeof *ne);
                elems = ne;
                cap *= 2;
            }
            if (!hp_shape(P, &elems[n++])) { ok = 0; break; }
            if (!hp_accept(P, ',')) break;
        }
        P->depth--;
        if (!ok || !hp_expect(P, ')', "to close a tuple shape")) return 0;
        s->ntuple = n;
        if (n) {
            s->tuple = hp_alloc(P, (size_t)n * sizeof *s->tuple);
            if (!s->tuple) return 0;
            memcpy(s->tuple, elems, (size_t)n * sizeof *elems);
        }
        return 1;
    }
    /* b(shape): a buffer */
    if (c == 'b' && P->p + 1 < P->end && P->p[1] == '(') {
        P->p += 2;
        if (!hp_depth_enter(P, "buffer shapes")) return 0;
        int ok = hp_shape(P, s);
        P->depth--;
        if (!ok || !hp_expect(P, ')', "to close b(...)")) return 0;
        s->is_buffer = 1;
        return 1;
    }
    tpu_dtype t;
    const char *type_at = (hp_ws(P), P->p);
    if (!hp_dtype_name(P, &t)) return 0;
    s->dtype = (uint8_t)t;
    if (t == TPU_TUPLE) return hp_error(P, "'tuple' is not an element type");
    if (!hp_expect(P, '[', "after the element type")) return 0;
    while (hp_peek(P) != ']') {
        if (s->rank == TPU_MAX_RANK) return hp_error(P, "shapes of rank above %d are not supported", TPU_MAX_RANK);
        int i = s->rank++;
        if (hp_accept(P, '?')) {
            s->dims[i] = -1;
            s->dyn_mask |= (uint16_t)(1u << i);
        } else {
            if (P->p + 1 < P->end && P->p[0] == '<' && P->p[1] == '=') {
                P->p += 2;
                s->dyn_mask |= (uint16_t)(1u << i);
            }
            const char *at = (hp_ws(P), P->p);
            if (!hp_int(P, &s->dims[i], "as a dimension")) return 0;
            if (s->dims[i] < 0) return hp_error_at(P, at, "negative dimension %lld", (long long)s->dims[i]);
        }
        if (!hp_accept(P, ',')) break;
    }
    if (!hp_expect(P, ']', "to close the dimensions")) return 0;
    if ((t == TPU_TOKEN || t == TPU_OPAQUE) && s->rank)
        return hp_error_at(P, type_at, "%s has no dimensions (write %s[])", tpu_dtype_name(t), tpu_dtype_name(t));
    if (hp_layout_follows(P)) {
        const char *lat = P->p;
        if (!hp_layout(P, s)) return 0;
        if (s->layout->rank != s->rank && !(s->layout->rank == 0 && s->rank == 0))
            return hp_error_at(P, lat, "layout has %d entries for a shape of rank %d", s->layout->rank, s->rank);
        unsigned seen = 0;
        for (int i = 0; i < s->layout->rank; i++) {
            int d = s->layout->m2m[i];
            if (d >= s->rank || (seen & (1u << d)))
                return hp_error_at(P, lat, "layout is not a permutation of the %d dimensions (minor-to-major order)",
                                   s->rank);
            seen |= 1u << d;
        }
    }
    return 1;
}

/* ---- literals ---- */
static int hp_literal(hp *P, const hlo_shape *s, hlo_literal *lit);

/* One scalar value of dtype t into data[idx]. */
static int hp_scalar(hp *P, tpu_dtype t, void *data, int64_t idx)
{
    hp_ws(P);
    const char *at = P->p;
    char kind = tpu_dtype_kind(t);
    if (kind == 'c') {
        /* complex: (re, im) */
        double re, im;
        if (!hp_expect(P, '(', "to open a complex value")) return 0;
        hp_ws(P);
        char *e;
        re = strtod(P->p, &e);
        if (e == P->p) return hp_error(P, "expected a number");
        P->p = e;
        if (!hp_expect(P, ',', "in a complex value")) return 0;
        hp_ws(P);
        im = strtod(P->p, &e);
        if (e == P->p) return hp_error(P, "expected a number");
        P->p = e;
        if (!hp_expect(P, ')', "to close a complex value")) return 0;
        if (t == TPU_C64) {
            ((float *)data)[2 * idx] = (float)re;
            ((float *)data)[2 * idx + 1] = (float)im;
        } else {
            ((double *)data)[2 * idx] = re;
            ((double *)data)[2 * idx + 1] = im;
        }
        return 1;
    }
    if (hp_accept_word(P, "true")) {
        ten_store_i64(t, data, idx, 1);
        return 1;
    }
    if (hp_accept_word(P, "false")) {
        ten_store_i64(t, data, idx, 0);
        return 1;
    }
    if (kind == 'p' || kind == 's' || kind == 'u') {
        if (kind == 'u') {
            hp_ws(P);
            if (P->p < P->end && *P->p == '-') return hp_error(P, "negative value for unsigned type %s", tpu_dtype_name(t));
            char *e;
            errno = 0;
            unsigned long long v = strtoull(P->p, &e, 0);
            if (e == P->p) return hp_error(P, "expected an integer value for %s", tpu_dtype_name(t));
            if (errno == ERANGE) return hp_error(P, "value out of range for %s", tpu_dtype_name(t));
            P->p = e;
            int bits = tpu_dtype_bits(t);
            if (bits < 64 && v >> bits) return hp_error_at(P, at, "value %llu out of range for %s", v, tpu_dtype_name(t));
            ten_store_i64(t, data, idx, (int64_t)v);
            return 1;
        }
        int64_t v;
        if (!hp_int(P, &v, "value")) return 0;
        if (kind == 'p') {
            if (v != 0 && v != 1) return hp_error_at(P, at, "pred value must be 0, 1, true or false");
        } else {
            int bits = tpu_dtype_bits(t);
            if (bits < 64) {
                int64_t lo = -((int64_t)1 << (bits - 1)), hi = ((int64_t)1 << (bits - 1)) - 1;
                if (v < lo || v > hi) return hp_error_at(P, at, "value %lld out of range for %s", (long long)v, tpu_dtype_name(t));
            }
        }
        ten_store_i64(t, data, idx, v);
        return 1;
    }
    /* floats: [-]inf, [-]nan[(0x..)], or a C number */
    int neg = 0;
    const char *q = P->p;
    if (q < P->end && (*q == '-' || *q == '+')) neg = *q++ == '-';
    double v;
    if ((size_t)(P->end - q) >= 3 && !strncmp(q, "inf", 3)) {
        v = neg ? -INFINITY : INFINITY;
        q += 3;
        if ((size_t)(P->end - q) >= 5 && !strncmp(q, "inity", 5)) q += 5;
    } else if ((size_t)(P->end - q) >= 3 && !strncmp(q, "nan", 3)) {
        v = neg ? -NAN : NAN;
        q += 3;
        if (q < P->end && *q == '(') {
            while (q < P->end && *q != ')') q++;
            if (q < P->end) q++;
        }
    } else {
        char *e;
        if (t == TPU_F32) {
            float f = strtof(P->p, &e);
            if (e == P->p) return hp_error(P, "expected a %s value", tpu_dtype_name(t));
            P->p = e;
            ((float *)data)[idx] = f;
            return 1;
        }
        v = strtod(P->p, &e);
        if (e == P->p) return hp_error(P, "expected a %s value", tpu_dtype_name(t));
        q = e;
    }
    P->p = q;
    if (t == TPU_F32) ((float *)data)[idx] = (float)v;
    else ten_store_f64(t, data, idx, v);
    return 1;
}

/* Nested braces for dimension d of the array literal, writing elements in row-major order. */
static int hp_array_values(hp *P, const hlo_shape *s, int d, void *data, int64_t *pos)
{
    if (d == s->rank) return hp_scalar(P, (tpu_dtype)s->dtype, data, (*pos)++);
    const char *open = (hp_ws(P), P->p);
    if (!hp_expect(P, '{', "to open a literal dimension")) return 0;
    if (P->p + 3 <= P->end && !memcmp(P->p, "...", 3))
        return hp_error(P, "'{...}' (elided values) can only stand for a whole constant, not part of one");
    int64_t n = 0;
    while (hp_peek(P) != '}') {
        if (n == s->dims[d])
            return hp_error(P, "literal has more than %lld elements in dimension %d", (long long)s->dims[d], d);
        if (!hp_array_values(P, s, d + 1, data, pos)) return 0;
        n++;
        if (!hp_accept(P, ',')) break;
    }
    if (!hp_expect(P, '}', "to close a literal dimension")) return 0;
    if (n != s->dims[d])
        return hp_error_at(P, open, "literal has %lld elements in dimension %d, shape says %lld", (long long)n, d,
                           (long long)s->dims[d]);
    return 1;
}

static int hp_literal(hp *P, const hlo_shape *s, hlo_literal *lit)
{
    memset(lit, 0, sizeof *lit);
    lit->shape = *s;
    if (hlo_shape_is_tuple(s)) {
        if (!hp_expect(P, '(', "to open a tuple literal")) return 0;
        lit->ntuple = s->ntuple;
        lit->tuple = s->ntuple ? hp_alloc(P, (size_t)s->ntuple * sizeof *lit->tuple) : NULL;
        if (s->ntuple && !lit->tuple) return 0;
        for (int i = 0; i < s->ntuple; i++) {
            if (i && !hp_expect(P, ',', "between tuple literal elements")) return 0;
            if (!hp_literal(P, &s->tuple[i], &lit->tuple[i])) return 0;
        }
        return hp_expect(P, ')', "to close a tuple literal");
    }
    if (!hlo_shape_is_array(s)) {
        /* token[] / opaque[]: nothing or an empty pair of braces */
        if (hp_accept(P, '{')) return hp_expect(P, '}', "after '{' in a token literal");
        return 1;
    }
    if (s->dyn_mask) return hp_error(P, "constant of a dynamic shape");
    /* {...}: elided values */
    hp_ws(P);
    if (P->p + 4 < P->end && !strncmp(P->p, "{...}", 5)) {
        P->p += 5;
        lit->elided = 1;
        return 1;
    }
    int64_t count = hlo_shape_count(s);
    size_t es = tpu_dtype_size((tpu_dtype)s->dtype);
    if (es == 0) return hp_error(P, "constant of element type %s", tpu_dtype_name((tpu_dtype)s->dtype));
    if (count > ((int64_t)1 << 40) / (int64_t)es) return hp_error(P, "constant too large");
    /* every value takes at least one character: a shape the rest of the text cannot fill is an error before
     * anything is allocated for it */
    if (count > P->end - P->p)
        return hp_error(P, "constant of %s has %lld values but only %lld characters of text follow", hlo_shape_str(s, (char[96]){0}, 96),
                        (long long)count, (long long)(P->end - P->p));
    lit->nbytes = (size_t)count * es;
    lit->data = hp_alloc(P, lit->nbytes ? lit->nbytes : 1);
    if (!lit->data) return 0;
    int64_t pos = 0;
    if (s->rank == 0) {
        /* a scalar may be written bare or, rarely, in braces */
        if (hp_accept(P, '{')) {
            if (!hp_scalar(P, (tpu_dtype)s->dtype, lit->data, 0)) return 0;
            return hp_expect(P, '}', "to close a scalar literal");
        }
        return hp_scalar(P, (tpu_dtype)s->dtype, lit->data, 0);
    }
    if (count == 0 && hp_peek(P) == '{') {
        /* empty arrays print as {} (or nested empties); accept any nesting of empty braces */
        return hp_skip_balanced(P);
    }
    return hp_array_values(P, s, 0, lit->data, &pos);
}

/* ---- attribute values ---- */

static int hp_ints(hp *P, int *n, int64_t **v, const char *what)
{
    if (!hp_expect(P, '{', what)) return 0;
    int64_t tmp[256];
    int64_t *buf = tmp;
    int cap = 256, k = 0;
    while (hp_peek(P) != '}') {
        if (k == cap) {
            int64_t *nb = hp_alloc(P, (size_t)cap * 2 * sizeof *nb);
            if (!nb) return 0;
            memcpy(nb, buf, (size_t)k * sizeof *nb);
            buf = nb;
            cap *= 2;
        }
        if (!hp_int(P, &buf[k++], what)) return 0;
        if (!hp_accept(P, ',')) break;
    }
    if (!hp_expect(P, '}', what)) return 0;
    *n = k;
    *v = k ? hp_alloc(P, (size_t)k * sizeof **v) : NULL;
    if (k && !*v) return 0;
    if (k) memcpy(*v, buf, (size_t)k * sizeof **v);
    return 1;
}

static int hp_intss(hp *P, hlo_attr *a)
{
    if (!hp_expect(P, '{', "to open a list of lists")) return 0;
    hp_vec lists = {0}, lens = {0};
    int ok = 1;
    while (ok && hp_peek(P) != '}') {
        int n;
        int64_t *v;
        ok = hp_ints(P, &n, &v, "in a list of lists");
        if (ok && !(hp_vec_push(&lists, v) && hp_vec_push(&lens, (void *)(intptr_t)n))) ok = hp_nomem(P);
        if (!ok || !hp_accept(P, ',')) break;
    }
    if (ok) ok = hp_expect(P, '}', "to close a list of lists");
    if (ok) {
        a->v.intss.n = lists.n;
        a->v.intss.v = lists.n ? hp_alloc(P, (size_t)lists.n * sizeof(int64_t *)) : NULL;
        a->v.intss.len = lists.n ? hp_alloc(P, (size_t)lists.n * sizeof(int)) : NULL;
        if (lists.n && (!a->v.intss.v || !a->v.intss.len)) ok = 0;
        for (int i = 0; ok && i < lists.n; i++) {
            a->v.intss.v[i] = lists.v[i];
            a->v.intss.len[i] = (int)(intptr_t)lens.v[i];
        }
    }
    hp_vec_free(&lists);
    hp_vec_free(&lens);
    return ok;
}

/* {name, name} or a single name (COMPS, NAMES, IDENTS) */
static int hp_name_list(hp *P, int *n, const char ***out, int allow_single, int words)
{
    hp_vec v = {0};
    int ok = 1;
    int braced = hp_accept(P, '{');
    if (!braced && !allow_single) return hp_error(P, "expected '{'");
    while (ok && (!braced || hp_peek(P) != '}')) {
        const char *s;
        size_t len;
        int got = words ? hp_word_span(P, &s, &len) : hp_name_span(P, &s, &len);
        if (!got) { ok = hp_error(P, "expected a name"); break; }
        const char *d = hp_strndup(P, s, len);
        if (!d || !hp_vec_push(&v, (void *)d)) { ok = hp_nomem(P); break; }
        if (!braced || !hp_accept(P, ',')) break;
    }
    if (ok && braced) ok = hp_expect(P, '}', "to close a list");
    if (ok) {
        *n = v.n;
        *out = v.n ? hp_alloc(P, (size_t)v.n * sizeof(char *)) : NULL;
        if (v.n && !*out) ok = 0;
        else if (v.n) memcpy(*out, v.v, (size_t)v.n * sizeof(char *));
    }
    hp_vec_free(&v);
    return ok;
}

/* A list of integers separated by 'x' (window sizes: 3x3). */
static int hp_xlist(hp *P, int64_t *vals, int *n, const char *what)
{
    *n = 0;
    for (;;) {
        if (*n == TPU_MAX_RANK) return hp_error(P, "too many dimensions in %s", what);
        if (!hp_int(P, &vals[(*n)++], what)) return 0;
        if (P->p < P->end && *P->p == 'x' && P->p + 1 < P->end &&
            (isdigit((unsigned char)P->p[1]) || P->p[1] == '-'))
            P->p++;
        else
            return 1;
    }
}

/* lo_hi[_interior] groups separated by 'x' (pad=1_1x0_0, padding=0_0_1x2_2). */
static int hp_pad_list(hp *P, int64_t *lo, int64_t *hi, int64_t *in, uint8_t *has_in, int *n, int allow_interior)
{
    *n = 0;
    hp_ws_inline(P);
    if (P->p >= P->end || !(isdigit((unsigned char)*P->p) || *P->p == '-')) return 1;   /* rank 0: empty */
    for (;;) {
        if (*n == TPU_MAX_RANK) return hp_error(P, "too many dimensions in padding");
        int i = (*n)++;
        if (!hp_int(P, &lo[i], "in padding")) return 0;
        if (P->p >= P->end || *P->p != '_') return hp_error(P, "expected '_' in padding (lo_hi)");
        P->p++;
        /* the parts of a pad spec touch: no spaces or newlines inside it */
#define HP_PAD_DIGIT (P->p < P->end && (isdigit((unsigned char)*P->p) || *P->p == '-'))
        if (!HP_PAD_DIGIT) return hp_error(P, "expected an integer after '_' in padding (lo_hi[_interior])");
        if (!hp_int(P, &hi[i], "in padding")) return 0;
        if (in) in[i] = 0;
        if (P->p < P->end && *P->p == '_') {
            if (!allow_interior) return hp_error(P, "interior padding not allowed here");
            P->p++;
            if (!HP_PAD_DIGIT) return hp_error(P, "expected an integer after '_' in padding (lo_hi[_interior])");
#undef HP_PAD_DIGIT
            if (!hp_int(P, &in[i], "in padding")) return 0;
            if (in[i] < 0) return hp_error(P, "negative interior padding");
            if (has_in) has_in[i] = 1;
        }
        if (P->p < P->end && *P->p == 'x' && P->p + 1 < P->end && (isdigit((unsigned char)P->p[1]) || P->p[1] == '-'))
            P->p++;
        else
            return 1;
    }
}

static int hp_window(hp *P, hlo_window *w)
{
    if (!hp_expect(P, '{', "to open a window")) return 0;
    int rank = -1;
    while (hp_peek(P) != '}') {
        const char *k;
        size_t kn;
        const char *at = P->p;
        if (!hp_word_span(P, &k, &kn)) return hp_error(P, "expected a window field");
        if (!hp_expect(P, '=', "after a window field")) return 0;
        int64_t a[TPU_MAX_RANK], b[TPU_MAX_RANK];
        int n;
#define HP_IS(s) (kn == strlen(s) && !memcmp(k, s, kn))
        if (HP_IS("size") || HP_IS("stride") || HP_IS("lhs_dilate") || HP_IS("rhs_dilate") ||
            HP_IS("rhs_reversal") || HP_IS("window_reversal")) {
            if (!hp_xlist(P, a, &n, "window")) return 0;
            for (int i = 0; i < n; i++) {
                if (HP_IS("size")) w->d[i].size = a[i];
                else if (HP_IS("stride")) w->d[i].stride = a[i];
                else if (HP_IS("lhs_dilate")) w->d[i].lhs_dilate = a[i];
                else if (HP_IS("rhs_dilate")) w->d[i].rhs_dilate = a[i];
                else w->d[i].reversal = a[i] != 0;
            }
            if (HP_IS("size")) w->has_size = 1;
            else if (HP_IS("stride")) w->has_stride = 1;
            else if (HP_IS("lhs_dilate")) w->has_lhs_dilate = 1;
            else if (HP_IS("rhs_dilate")) w->has_rhs_dilate = 1;
            else w->has_reversal = 1;
        } else if (HP_IS("pad")) {
            if (!hp_pad_list(P, a, b, NULL, NULL, &n, 0)) return 0;
            for (int i = 0; i < n; i++) {
                w->d[i].pad_lo = a[i];
                w->d[i].pad_hi = b[i];
            }
            w->has_pad = 1;
        } else {
            return hp_error_at(P, at, "unknown window field '%.*s'", (int)kn, k);
        }
#undef HP_IS
        if (rank >= 0 && n != rank) return hp_error_at(P, at, "window fields have different ranks (%d vs %d)", n, rank);
        rank = n;
        hp_accept(P, ',');
    }
    if (!hp_expect(P, '}', "to close a window")) return 0;
    w->rank = rank < 0 ? 0 : rank;
    for (int i = 0; i < w->rank; i++) {
        if (!w->has_stride) w->d[i].stride = 1;
        if (!w->has_lhs_dilate) w->d[i].lhs_dilate = 1;
        if (!w->has_rhs_dilate) w->d[i].rhs_dilate = 1;
        if (!w->has_size) w->d[i].size = 1;
    }
    return 1;
}

static int hp_slice(hp *P, hlo_slice *s)
{
    if (!hp_expect(P, '{', "to open a slice")) return 0;
    while (hp_peek(P) != '}') {
        if (s->rank == TPU_MAX_RANK) return hp_error(P, "too many dimensions in slice");
        int i = s->rank++;
        if (!hp_expect(P, '[', "to open a slice dimension")) return 0;
        if (!hp_int(P, &s->start[i], "slice start")) return 0;
        if (!hp_expect(P, ':', "in a slice")) return 0;
        if (!hp_int(P, &s->limit[i], "slice limit")) return 0;
        s->stride[i] = 1;
        if (hp_accept(P, ':')) {
            if (!hp_int(P, &s->stride[i], "slice stride")) return 0;
            s->has_stride[i] = 1;
        }
        if (!hp_expect(P, ']', "to close a slice dimension")) return 0;
        if (!hp_accept(P, ',')) break;
    }
    return hp_expect(P, '}', "to close a slice");
}

/* b01f_01io->b01f */
static int hp_dimlabels(hp *P, hlo_dimlabels *dl)
{
    hp_ws(P);
    const char *s = P->p;
    const char *q = s;
    while (q < P->end && (isalnum((unsigned char)*q) || *q == '_' || *q == '?' || (*q == '-' && q + 1 < P->end && q[1] == '>') ||
                          (*q == '>' && q > s && q[-1] == '-')))
        q++;
    const char *u = memchr(s, '_', (size_t)(q - s));
    const char *ar = u ? strstr(u, "->") : NULL;
    if (!u || !ar || ar >= q) return hp_error(P, "expected dim_labels like b01f_01io->b01f");
    const char *parts[3] = {s, u + 1, ar + 2};
    size_t lens[3] = {(size_t)(u - s), (size_t)(ar - u - 1), (size_t)(q - ar - 2)};
    int nsp = -1;
    for (int part = 0; part < 3; part++) {
        int sp = 0;
        int b = -1, f = -1;
        int spatial[TPU_MAX_RANK];
        for (int i = 0; i < TPU_MAX_RANK; i++) spatial[i] = -1;
        if (lens[part] > TPU_MAX_RANK) return hp_error(P, "dim_labels has too many dimensions");
        for (size_t i = 0; i < lens[part]; i++) {
            char c = parts[part][i];
            char bc = part == 1 ? 'i' : 'b', fc = part == 1 ? 'o' : 'f';
            if (c == bc && b < 0) b = (int)i;
            else if (c == fc && f < 0) f = (int)i;
            else if (isdigit((unsigned char)c) && spatial[c - '0'] < 0 && c - '0' < TPU_MAX_RANK) {
                spatial[c - '0'] = (int)i;
                sp++;
            } else
                return hp_error(P, "bad character '%c' in dim_labels", c);
        }
        if (b < 0 || f < 0) return hp_error(P, "dim_labels part %d lacks its %s dimensions", part + 1,
                                            part == 1 ? "i/o" : "b/f");
        for (int i = 0; i < sp; i++)
            if (spatial[i] < 0) return hp_error(P, "dim_labels spatial dimensions must be numbered 0..%d", sp - 1);
        if (nsp >= 0 && sp != nsp) return hp_error(P, "dim_labels parts have different spatial counts");
        nsp = sp;
        if (part == 0) { dl->in_batch = b; dl->in_feature = f; memcpy(dl->in_spatial, spatial, sizeof spatial); }
        if (part == 1) { dl->k_in = b; dl->k_out = f; memcpy(dl->k_spatial, spatial, sizeof spatial); }
        if (part == 2) { dl->out_batch = b; dl->out_feature = f; memcpy(dl->out_spatial, spatial, sizeof spatial); }
    }
    dl->nspatial = nsp;
    dl->text = hp_strndup(P, s, (size_t)(q - s));
    P->p = q;
    return dl->text != NULL;
}

/* ---- replica groups over a named mesh (XLA's MeshAxesReplicaGroupList), kept as explicit groups:
 *   mesh['x'=2,'y'=4] {'y'}                      groups vary 'y' with 'x' fixed: {0,1,2,3},{4,5,6,7}
 *   mesh['a'=4], device_ids=(3,1,0,2) {'a'}      the mesh's devices listed (or an iota: ([2,2]T(1,0)))
 *   {'a':(2)2}                                    a sub-axis: the part of 'a' of size 2 after a major part of 2
 * Devices are laid out row-major over the axes; an axis referenced in parts splits into major-to-minor
 * pieces at the parts' boundaries. */
#define HP_MESH_MAX 16

typedef struct hp_mesh {
    int         naxes;
    const char *names[HP_MESH_MAX];
    size_t      name_len[HP_MESH_MAX];
    int64_t     sizes[HP_MESH_MAX];
    int         nrefs;
    int         ref_axis[HP_MESH_MAX];
    int64_t     ref_pre[HP_MESH_MAX], ref_size[HP_MESH_MAX];
} hp_mesh;

static int hp_quoted_span(hp *P, const char **s, size_t *n)
{
    if (hp_peek(P) != '\'') return hp_error(P, "expected a quoted mesh axis name");
    const char *b = ++P->p;
    while (P->p < P->end && *P->p != '\'' && *P->p != '\n') P->p++;
    if (P->p >= P->end || *P->p != '\'') return hp_error(P, "unterminated mesh axis name");
    *s = b;
    *n = (size_t)(P->p++ - b);
    return 1;
}

/* device_ids=(d0,d1,...) or device_ids=([dims]T(perm)): the mesh's devices in row-major order. */
static int hp_mesh_devices(hp *P, int64_t total, int64_t *dev)
{
    if (!hp_expect(P, '=', "after device_ids") || !hp_expect(P, '(', "to open device_ids")) return 0;
    if (hp_peek(P) == '[') {
        hlo_rgroups io;
        memset(&io, 0, sizeof io);
        P->p++;
        while (hp_peek(P) != ']') {
            if (io.nreshape == TPU_MAX_RANK) return hp_error(P, "too many dimensions in device_ids");
            if (!hp_int(P, &io.reshape[io.nreshape++], "in device_ids")) return 0;
            if (!hp_accept(P, ',')) break;
        }
        if (!hp_expect(P, ']', "in device_ids")) return 0;
        if (P->p < P->end && *P->p == 'T') {
            P->p++;
            if (!hp_expect(P, '(', "after T in device_ids")) return 0;
            while (hp_peek(P) != ')') {
                if (io.nperm == TPU_MAX_RANK) return hp_error(P, "too many dimensions in device_ids");
                if (!hp_small_int(P, &io.perm[io.nperm++], 0, TPU_MAX_RANK - 1, "permutation entry")) return 0;
                if (!hp_accept(P, ',')) break;
            }
            if (!hp_expect(P, ')', "in device_ids") || (io.nperm && io.nperm != io.nreshape))
                return P->failed ? 0 : hp_error(P, "device_ids transpose has the wrong length");
        }
        int64_t prod = 1;
        for (int i = 0; i < io.nreshape; i++)
            if (io.reshape[i] <= 0 || __builtin_mul_overflow(prod, io.reshape[i], &prod)) return hp_error(P, "bad device_ids dimensions");
        if (prod != total) return hp_error(P, "device_ids has %lld devices, the mesh %lld", (long long)prod, (long long)total);
        /* element j of the transposed iota: its index in the transposed shape, mapped back */
        for (int64_t j = 0; j < total; j++) {
            int64_t rem = j, idx[TPU_MAX_RANK], stride[TPU_MAX_RANK], st = 1, id = 0;
            for (int k = io.nreshape - 1; k >= 0; k--) stride[k] = st, st *= io.reshape[k];
            for (int k = io.nreshape - 1; k >= 0; k--) {
                int d = io.nperm ? io.perm[k] : k;
                idx[k] = rem % io.reshape[d];
                rem /= io.reshape[d];
            }
            for (int k = 0; k < io.nreshape; k++) id += idx[k] * stride[io.nperm ? io.perm[k] : k];
            dev[j] = id;
        }
    } else {
        for (int64_t j = 0; j < total; j++) {
            if (!hp_int(P, &dev[j], "in device_ids")) return 0;
            if (j + 1 < total && !hp_expect(P, ',', "in device_ids")) return 0;
        }
    }
    return hp_expect(P, ')', "to close device_ids");
}

/* {'y', 'x':(2)2}: the axes (or sub-axes) a group varies, major first. */
static int hp_mesh_refs(hp *P, hp_mesh *M)
{
    if (!hp_expect(P, '{', "to open the mesh axes of the replica groups")) return 0;
    while (hp_peek(P) != '}') {
        const char *s;
        size_t n;
        if (M->nrefs == HP_MESH_MAX) return hp_error(P, "too many mesh axes in replica groups");
        if (!hp_quoted_span(P, &s, &n)) return 0;
        int a = -1;
        for (int i = 0; i < M->naxes; i++)
            if (M->name_len[i] == n && !memcmp(M->names[i], s, n)) a = i;
        if (a < 0) return hp_error(P, "replica groups name the axis '%.*s', which the mesh does not have", (int)n, s);
        int64_t pre = 1, size = M->sizes[a];
        if (hp_accept(P, ':')) {
            if (!hp_expect(P, '(', "to open a sub-axis") || !hp_int(P, &pre, "sub-axis pre-size") ||
                !hp_expect(P, ')', "to close a sub-axis pre-size") || !hp_int(P, &size, "sub-axis size"))
                return 0;
            int64_t span;
            if (pre <= 0 || size <= 0 || __builtin_mul_overflow(pre, size, &span) || M->sizes[a] % span)
                return hp_error(P, "sub-axis (%lld)%lld does not divide the axis of size %lld", (long long)pre,
                                (long long)size, (long long)M->sizes[a]);
        }
        M->ref_axis[M->nrefs] = a, M->ref_pre[M->nrefs] = pre, M->ref_size[M->nrefs] = size;
        M->nrefs++;
        if (!hp_accept(P, ',')) break;
    }
    return hp_expect(P, '}', "to close the mesh axes of the replica groups");
}

/* The explicit groups of a mesh. Every axis is cut into pieces at its sub-axes' boundaries (a sub-axis
 * (pre)size spans the factors between pre and pre*size counted from the axis's major end). A device's group
 * number comes from the pieces no reference covers (mesh order, major first), its place in the group from
 * the referenced pieces (reference order, major first). */
static int hp_mesh_groups(hp *P, const hp_mesh *M, const int64_t *dev, int64_t total, hlo_rgroups *g)
{
    int64_t pdim[HP_MESH_MAX * 3];
    int pref[HP_MESH_MAX * 3], first[HP_MESH_MAX], np = 0;
    for (int a = 0; a < M->naxes; a++) {
        int64_t b[HP_MESH_MAX * 2 + 2];
        int nb = 0;
        b[nb++] = 1, b[nb++] = M->sizes[a];
        for (int r = 0; r < M->nrefs; r++)
            if (M->ref_axis[r] == a) b[nb++] = M->ref_pre[r], b[nb++] = M->ref_pre[r] * M->ref_size[r];
        for (int i = 1; i < nb; i++)   /* sort and dedupe the boundaries */
            for (int k = i; k > 0 && b[k] < b[k - 1]; k--) { int64_t t = b[k]; b[k] = b[k - 1]; b[k - 1] = t; }
        int u = 1;
        for (int i = 1; i < nb; i++) if (b[i] != b[u - 1]) b[u++] = b[i];
        first[a] = np;
        for (int i = 0; i + 1 < u; i++) {
            if (b[i + 1] % b[i]) return hp_error(P, "sub-axes of '%.*s' do not nest", (int)M->name_len[a], M->names[a]);
            pdim[np] = b[i + 1] / b[i];
            pref[np] = -1;
            for (int r = 0; r < M->nrefs; r++)
                if (M->ref_axis[r] == a && M->ref_pre[r] <= b[i] && b[i + 1] <= M->ref_pre[r] * M->ref_size[r]) {
                    if (pref[np] >= 0) return hp_error(P, "replica groups name a part of '%.*s' twice", (int)M->name_len[a], M->names[a]);
                    pref[np] = r;
                }
            np++;
        }
    }
    int64_t S = 1;
    for (int r = 0; r < M->nrefs; r++) S *= M->ref_size[r];
    int64_t G = total / S;
    g->ngroups = (int)G;
    g->len = hp_alloc(P, (size_t)G * sizeof *g->len);
    g->ids = hp_alloc(P, (size_t)G * sizeof *g->ids);
    if (!g->len || !g->ids) return 0;
    for (int64_t k = 0; k < G; k++) {
        g->len[k] = (int)S;
        if (!(g->ids[k] = hp_alloc(P, (size_t)S * sizeof(int64_t)))) return 0;
    }
    int64_t idx[HP_MESH_MAX * 3];
    for (int64_t j = 0; j < total; j++) {
        int64_t rem = j;
        for (int a = M->naxes - 1; a >= 0; a--) {   /* row-major over the axes */
            int64_t ax = rem % M->sizes[a];
            rem /= M->sizes[a];
            int last = a + 1 < M->naxes ? first[a + 1] : np;
            for (int i = last - 1; i >= first[a]; i--) {   /* the axis's pieces, major first */
                idx[i] = ax % pdim[i];
                ax /= pdim[i];
            }
        }
        int64_t grp = 0, pos = 0;
        for (int i = 0; i < np; i++)
            if (pref[i] < 0) grp = grp * pdim[i] + idx[i];
        for (int r = 0; r < M->nrefs; r++) {
            int64_t sub = 0;
            for (int i = 0; i < np; i++)
                if (pref[i] == r) sub = sub * pdim[i] + idx[i];
            pos = pos * M->ref_size[r] + sub;
        }
        g->ids[grp][pos] = dev[j];
    }
    return 1;
}

static int hp_rgroups_mesh(hp *P, hlo_rgroups *g)
{
    hp_mesh M;
    memset(&M, 0, sizeof M);
    if (!hp_expect(P, '[', "after mesh")) return 0;
    int64_t total = 1;
    while (hp_peek(P) != ']') {
        if (M.naxes == HP_MESH_MAX) return hp_error(P, "too many mesh axes");
        if (!hp_quoted_span(P, &M.names[M.naxes], &M.name_len[M.naxes]) || !hp_expect(P, '=', "after a mesh axis name") ||
            !hp_int(P, &M.sizes[M.naxes], "mesh axis size"))
            return 0;
        if (M.sizes[M.naxes] <= 0 || __builtin_mul_overflow(total, M.sizes[M.naxes], &total) || total > (1 << 20))
            return hp_error(P, "mesh axis sizes must be positive and multiply to at most 2^20 devices");
        M.naxes++;
        if (!hp_accept(P, ',')) break;
    }
    if (!hp_expect(P, ']', "to close the mesh")) return 0;
    int64_t *dev = ut_malloc((size_t)total * sizeof *dev);
    if (!dev) return hp_nomem(P);
    for (int64_t j = 0; j < total; j++) dev[j] = j;
    int ok = 1;
    if (hp_accept(P, ',')) ok = hp_accept_word(P, "device_ids") ? hp_mesh_devices(P, total, dev) : hp_error(P, "expected device_ids");
    ok = ok && hp_mesh_refs(P, &M) && hp_mesh_groups(P, &M, dev, total, g);
    ut_free(dev);
    return ok;
}

static int hp_rgroups(hp *P, hlo_rgroups *g)
{
    int c = hp_peek(P);
    if (c == 'm' && hp_accept_word(P, "mesh")) return hp_rgroups_mesh(P, g);
    if (c == '[') {
        /* [G,S]<=[d0,d1,...]T(p0,p1,...) */
        g->iota = 1;
        P->p++;
        if (!hp_int(P, &g->gdims[0], "replica group count") || !hp_expect(P, ',', "in replica groups") ||
            !hp_int(P, &g->gdims[1], "replica group size") || !hp_expect(P, ']', "in replica groups"))
            return 0;
        hp_ws(P);
        if (!(P->p + 1 < P->end && P->p[0] == '<' && P->p[1] == '=')) return hp_error(P, "expected '<=' in replica groups");
        P->p += 2;
        if (!hp_expect(P, '[', "in replica groups")) return 0;
        while (hp_peek(P) != ']') {
            if (g->nreshape == TPU_MAX_RANK) return hp_error(P, "too many dimensions in replica groups");
            if (!hp_int(P, &g->reshape[g->nreshape++], "in replica groups")) return 0;
            if (!hp_accept(P, ',')) break;
        }
        if (!hp_expect(P, ']', "in replica groups")) return 0;
        if (P->p < P->end && *P->p == 'T') {
            P->p++;
            if (!hp_expect(P, '(', "after T in replica groups")) return 0;
            while (hp_peek(P) != ')') {
                if (g->nperm == TPU_MAX_RANK) return hp_error(P, "too many dimensions in replica groups");
                if (!hp_small_int(P, &g->perm[g->nperm++], 0, TPU_MAX_RANK - 1, "permutation entry")) return 0;
                if (!hp_accept(P, ',')) break;
            }
            if (!hp_expect(P, ')', "in replica groups")) return 0;
            if (g->nperm != g->nreshape) return hp_error(P, "replica group transpose has the wrong length");
        }
        int64_t prod = 1;
        int64_t want;
        for (int i = 0; i < g->nreshape; i++)
            if (g->reshape[i] < 0 || __builtin_mul_overflow(prod, g->reshape[i], &prod))
                return hp_error(P, "replica group iota dimensions are negative or too large");
        if (g->gdims[0] < 0 || g->gdims[1] < 0 || __builtin_mul_overflow(g->gdims[0], g->gdims[1], &want) || prod != want)
            return hp_error(P, "replica groups [%lld,%lld] do not match the iota of %lld devices",
                            (long long)g->gdims[0], (long long)g->gdims[1], (long long)prod);
        return 1;
    }
    hlo_attr tmp;
    memset(&tmp, 0, sizeof tmp);
    if (!hp_intss(P, &tmp)) return 0;
    g->ngroups = tmp.v.intss.n;
    g->len = tmp.v.intss.len;
    g->ids = tmp.v.intss.v;
    return 1;
}

/* {key=value key2=value2} (metadata, space separated) or {k="v", k2="v2"} (comma separated) */
static int hp_kv(hp *P, hlo_attr *a)
{
    if (!hp_expect(P, '{', "to open a key=value list")) return 0;
    hp_vec items = {0};
    int ok = 1;
    a->v.kv.sep = ' ';
    while (ok && hp_peek(P) != '}') {
        const char *k;
        size_t kn;
        if (!hp_word_span(P, &k, &kn)) { ok = hp_error(P, "expected a key"); break; }
        if (!hp_expect(P, '=', "after a key")) { ok = 0; break; }
        hlo_kv *kv = hp_alloc(P, sizeof *kv);
        if (!kv || !(kv->key = hp_strndup(P, k, kn))) { ok = 0; break; }
        if (hp_peek(P) == '"') {
            ok = hp_string(P, &kv->val);
            kv->is_str = 1;
        } else {
            const char *s = P->p;
            /* a token or a balanced group, ending at space, ',' or '}' */
            if (*P->p == '{' || *P->p == '[' || *P->p == '(') {
                ok = hp_skip_group(P);   /* exactly one group: what follows is the next key */
            } else {
                while (P->p < P->end && !isspace((unsigned char)*P->p) && *P->p != ',' && *P->p != '}') P->p++;
            }
            if (ok && P->p == s) ok = hp_error(P, "expected a value");
            if (ok) ok = (kv->val = hp_strndup(P, s, (size_t)(P->p - s))) != NULL;
        }
        if (ok && !hp_vec_push(&items, kv)) ok = hp_nomem(P);
        if (ok && hp_accept(P, ',')) a->v.kv.sep = ',';
    }
    if (ok) ok = hp_expect(P, '}', "to close a key=value list");
    if (ok) {
        a->v.kv.n = items.n;
        a->v.kv.v = items.n ? hp_alloc(P, (size_t)items.n * sizeof(hlo_kv)) : NULL;
        if (items.n && !a->v.kv.v) ok = 0;
        for (int i = 0; ok && i < items.n; i++) a->v.kv.v[i] = *(hlo_kv *)items.v[i];
    }
    hp_vec_free(&items);
    return ok;
}

/* {(shape, shape)->shape} */
static int hp_progshape(hp *P, hlo_attr *a)
{
    if (!hp_expect(P, '{', "to open a program shape") || !hp_expect(P, '(', "to open parameter shapes")) return 0;
    hlo_shape tmp;
    memset(&tmp, 0, sizeof tmp);
    /* parse the parameter list as a tuple body */
    P->p--;
    if (!hp_shape(P, &tmp)) return 0;
    hp_ws(P);
    if (!(P->p + 1 < P->end && P->p[0] == '-' && P->p[1] == '>')) return hp_error(P, "expected '->' in a program shape");
    P->p += 2;
    a->v.prog.result = hp_alloc(P, sizeof(hlo_shape));
    if (!a->v.prog.result || !hp_shape(P, a->v.prog.result)) return 0;
    a->v.prog.n = tmp.ntuple;
    a->v.prog.params = tmp.tuple;
    return hp_expect(P, '}', "to close a program shape");
}

/* input_output_alias={ {0}: (0, {}, may-alias), ... } */
static int hp_alias(hp *P, hlo_attr *a)
{
    if (!hp_expect(P, '{', "to open input_output_alias")) return 0;
    hp_vec items = {0};
    int ok = 1;
    while (ok && hp_peek(P) != '}') {
        hlo_alias_entry *e = hp_alloc(P, sizeof *e);
        int n;
        int64_t *v;
        if (!e) { ok = 0; break; }
        ok = hp_ints(P, &n, &v, "as an output index");
        if (ok && n > TPU_MAX_RANK) ok = hp_error(P, "alias index too deep");
        if (!ok) break;
        e->nout = n;
        if (n) memcpy(e->out, v, (size_t)n * sizeof *v);
        ok = hp_expect(P, ':', "in input_output_alias") && hp_expect(P, '(', "in input_output_alias") &&
             hp_int(P, &e->param, "parameter number") && hp_expect(P, ',', "in input_output_alias") &&
             hp_ints(P, &n, &v, "as a parameter index");
        if (ok && n > TPU_MAX_RANK) ok = hp_error(P, "alias index too deep");
        if (!ok) break;
        e->nparam_idx = n;
        if (n) memcpy(e->param_idx, v, (size_t)n * sizeof *v);
        if (hp_accept(P, ',')) {
            const char *w;
            size_t wn;
            if (!hp_word_span(P, &w, &wn)) { ok = hp_error(P, "expected may-alias or must-alias"); break; }
            if (wn == 9 && !memcmp(w, "may-alias", 9)) e->kind = 1;
            else if (wn == 10 && !memcmp(w, "must-alias", 10)) e->kind = 2;
            else { ok = hp_error(P, "expected may-alias or must-alias"); break; }
        }
        ok = hp_expect(P, ')', "in input_output_alias");
        if (ok && !hp_vec_push(&items, e)) ok = hp_nomem(P);
        if (!ok || !hp_accept(P, ',')) break;
    }
    if (ok) ok = hp_expect(P, '}', "to close input_output_alias");
    if (ok) {
        a->v.alias.n = items.n;
        a->v.alias.v = items.n ? hp_alloc(P, (size_t)items.n * sizeof(hlo_alias_entry)) : NULL;
        if (items.n && !a->v.alias.v) ok = 0;
        for (int i = 0; ok && i < items.n; i++) a->v.alias.v[i] = *(hlo_alias_entry *)items.v[i];
    }
    hp_vec_free(&items);
    return ok;
}

static int hp_comp_list(hp *P, hlo_attr *a, int single);

/* Parses "name=value" into a. The name is already read. */
static int hp_attr_value(hp *P, hlo_attr *a)
{
    hlo_attr_kind kind = (hlo_attr_kind)a->kind;
    switch (kind) {
    case HA_INT: return hp_int(P, &a->v.i, a->name);
    case HA_BOOL:
        if (hp_accept_word(P, "true")) a->v.b = 1;
        else if (hp_accept_word(P, "false")) a->v.b = 0;
        else return hp_error(P, "expected true or false for %s", a->name);
        return 1;
    case HA_FLOAT: {
        hp_ws(P);
        char *e;
        a->v.f = strtod(P->p, &e);
        if (e == P->p) return hp_error(P, "expected a number for %s", a->name);
        P->p = e;
        return 1;
    }
    case HA_STR: return hp_string(P, &a->v.s);
    case HA_IDENT: {
        const char *s;
        size_t n;
        if (!hp_word_span(P, &s, &n)) return hp_error(P, "expected a value for %s", a->name);
        return (a->v.s = hp_strndup(P, s, n)) != NULL;
    }
    case HA_INTS: return hp_ints(P, &a->v.ints.n, &a->v.ints.v, a->name);
    case HA_INTSS: return hp_intss(P, a);
    case HA_IDENTS: return hp_name_list(P, &a->v.idents.n, &a->v.idents.v, 0, 1);
    case HA_NAMES: return hp_name_list(P, &a->v.idents.n, &a->v.idents.v, 0, 0);
    case HA_COMP: case HA_COMPS: return hp_comp_list(P, a, kind == HA_COMP);
    case HA_WINDOW: return (a->v.window = hp_alloc(P, sizeof(hlo_window))) && hp_window(P, a->v.window);
    case HA_SLICE: return (a->v.slice = hp_alloc(P, sizeof(hlo_slice))) && hp_slice(P, a->v.slice);
    case HA_PADDING: {
        hlo_padding *pd = a->v.padding = hp_alloc(P, sizeof(hlo_padding));
        return pd && hp_pad_list(P, pd->lo, pd->hi, pd->interior, pd->has_interior, &pd->rank, 1);
    }
    case HA_DIMLABELS: return (a->v.dimlabels = hp_alloc(P, sizeof(hlo_dimlabels))) && hp_dimlabels(P, a->v.dimlabels);
    case HA_RGROUPS: return (a->v.rgroups = hp_alloc(P, sizeof(hlo_rgroups))) && hp_rgroups(P, a->v.rgroups);
    case HA_KV: return hp_kv(P, a);
    case HA_SHAPE: return (a->v.shape = hp_alloc(P, sizeof(hlo_shape))) && hp_shape(P, a->v.shape);
    case HA_SHAPES: {
        if (!hp_expect(P, '{', "to open a list of shapes")) return 0;
        hp_vec v = {0};
        int ok = 1;
        while (ok && hp_peek(P) != '}') {
            hlo_shape *s = hp_alloc(P, sizeof *s);
            ok = s && hp_shape(P, s);
            if (ok && !hp_vec_push(&v, s)) ok = hp_nomem(P);
            if (!ok || !hp_accept(P, ',')) break;
        }
        if (ok) ok = hp_expect(P, '}', "to close a list of shapes");
        if (ok) {
            a->v.shapes.n = v.n;
            a->v.shapes.v = v.n ? hp_alloc(P, (size_t)v.n * sizeof(hlo_shape)) : NULL;
            for (int i = 0; a->v.shapes.v && i < v.n; i++) a->v.shapes.v[i] = *(hlo_shape *)v.v[i];
            if (v.n && !a->v.shapes.v) ok = 0;
        }
        hp_vec_free(&v);
        return ok;
    }
    case HA_PROGSHAPE: return hp_progshape(P, a);
    case HA_ALIAS: return hp_alias(P, a);
    case HA_RAW: {
        hp_ws_inline(P);
        const char *s = P->p;
        if (!hp_skip_balanced(P)) return 0;
        const char *e = P->p;
        while (e > s && isspace((unsigned char)e[-1])) e--;
        return (a->v.s = hp_strndup(P, s, (size_t)(e - s))) != NULL;
    }
    }
    return hp_error(P, "internal: attribute kind %d", (int)kind);
}

/* ", name=value" lists. For instruction attributes `in` is set; header attributes pass NULL. Stops when no
 * comma follows. */
/* Was an attribute of this name given already? A scan while the list is short, then a hash map (an instruction
 * with 100000 unknown attributes parses in linear time). */
static int hp_attr_seen(hp *P, hp_vec *out, hp_map *names, const char *name, int *oom)
{
    if (out->n < 16) {
        for (int i = 0; i < out->n; i++)
            if (!strcmp(((hlo_attr *)out->v[i])->name, name)) return 1;
        return 0;
    }
    if (!names->cap)
        for (int i = 0; i < out->n; i++)
            if (!hp_map_put(names, ((hlo_attr *)out->v[i])->name, out->v[i])) {
                hp_nomem(P);
                *oom = 1;
                return 0;
            }
    if (hp_map_get(names, name)) return 1;
    if (!hp_map_put(names, name, (void *)name)) {
        hp_nomem(P);
        *oom = 1;
    }
    return 0;
}

static int hp_attrs_list(hp *P, hp_vec *out, hp_map *names)
{
    for (;;) {
        const char *save = P->p;
        if (!hp_accept(P, ',')) return 1;
        hp_ws(P);
        const char *at = P->p;
        const char *k;
        size_t kn;
        if (!hp_word_span(P, &k, &kn)) {
            P->p = save;
            return hp_error(P, "expected an attribute after ','");
        }
        if (!hp_accept(P, '=')) return hp_error(P, "expected '=' after attribute name '%.*s'", (int)kn, k);
        hlo_attr *a = hp_alloc(P, sizeof *a);
        if (!a) return 0;
        a->name = hp_strndup(P, k, kn);
        if (!a->name) return 0;
        hp_linecol(P, at, &a->line, &a->col);
        hlo_attr_key key = hlo_attr_key_from_name(k, kn);
        a->key = (uint16_t)key;
        a->kind = (uint8_t)(key == HK_UNKNOWN ? HA_RAW : hlo_attr_key_kind(key));
        if (key == HK_SLICE_SIZES) {
            /* a list on gather, a list of lists on collective-permute */
            const char *q = (hp_ws(P), P->p);
            if (q < P->end && *q == '{') {
                q++;
                while (q < P->end && isspace((unsigned char)*q)) q++;
                if (q < P->end && *q == '{') a->kind = HA_INTSS;
            }
        }
        if (key == HK_UNKNOWN)
            ut_warn(P->ctx, "%s:%d:%d: warning: unknown attribute '%s' kept verbatim and ignored", P->file, a->line,
                    a->col, a->name);
        /* backend_config="..." is a string; keep both forms as RAW text including the quotes */
        if (!hp_attr_value(P, a)) return 0;
        int oom = 0;
        if (hp_attr_seen(P, out, names, a->name, &oom)) return hp_error_at(P, at, "attribute '%s' given twice", a->name);
        if (oom) return 0;
        if (!hp_vec_push(out, a)) return hp_nomem(P);
    }
}

static int hp_attrs(hp *P, hp_vec *out, int header)
{
    (void)header;
    hp_map names = {0};
    int ok = hp_attrs_list(P, out, &names);
    hp_map_free(&names);
    return ok;
}

static int hp_attrs_finish(hp *P, hp_vec *v, int *n, hlo_attr **out)
{
    *n = v->n;
    *out = NULL;
    if (v->n) {
        *out = hp_alloc(P, (size_t)v->n * sizeof(hlo_attr));
        if (!*out) return 0;
        for (int i = 0; i < v->n; i++) (*out)[i] = *(hlo_attr *)v->v[i];
    }
    return 1;
}

/* ---- instructions ---- */

/* One written operand shape, checked against the operand once names are resolved. */
typedef struct hp_opshape {
    hlo_instr       *in;
    int              k;
    const hlo_shape *shape;
} hp_opshape;

typedef struct hp_comp_build {
    hp_vec instrs;
    hp_map names;
    hp_vec opshapes;   /* hp_opshape* */
} hp_comp_build;

static int hp_depth_enter(hp *P, const char *what)
{
    if (++P->depth > HP_MAX_DEPTH) return hp_error(P, "%s nested more than %d deep", what, HP_MAX_DEPTH);
    return 1;
}

/* base, base.1, base.2, ... whichever is not yet a key of map (a copy in the arena). */
static const char *hp_fresh_name(hp *P, const hp_map *map, const char *base)
{
    if (!hp_map_get(map, base)) return hp_strndup(P, base, strlen(base));
    char buf[512];
    for (int i = 1;; i++) {
        snprintf(buf, sizeof buf, "%.480s.%d", base, i);
        if (!hp_map_get(map, buf)) return hp_strndup(P, buf, strlen(buf));
    }
}

/* Adds an instruction to the computation being built. A nested operand's invented name gives way to a
 * name written in the text. */
static int hp_add_instr(hp *P, hp_comp_build *cb, hlo_instr *in, const char *name_at)
{
    hlo_instr *old = hp_map_get(&cb->names, in->name);
    if (old) {
        if (!old->anon)
            return hp_error_at(P, name_at, "instruction '%s' is defined twice (first at line %d)", in->name, old->line);
        if (!(old->name = hp_fresh_name(P, &cb->names, old->name))) return 0;
        if (!hp_map_put(&cb->names, old->name, old)) return hp_nomem(P);
    }
    if (!hp_map_put(&cb->names, in->name, in) || !hp_vec_push(&cb->instrs, in)) return hp_nomem(P);
    return 1;
}

static int hp_instr_rhs(hp *P, hlo_comp *c, hp_comp_build *cb, hlo_instr *in, int nested);

/* Is the word at s an opcode followed by '(' (a nested instruction rather than an operand name)? */
static int hp_opcode_call_follows(hp *P, const char *s, size_t n)
{
    if (hlo_op_from_name(s, n) == HLO_OP_COUNT) return 0;
    return hp_peek(P) == '(';
}

/* operands: ( operand, ... )   operand ::= [shape] name | [shape] opcode '(' operands ')' */
static int hp_operands(hp *P, hlo_comp *c, hp_comp_build *cb, hlo_instr *in)
{
    hp_vec names = {0}, shapes = {0}, subs = {0};   /* subs: the nested instruction itself, or NULL */
    int ok = 1;
    while (ok && hp_peek(P) != ')') {
        if (P->p >= P->end) { ok = hp_error(P, "expected an operand or ')' (the operand list is not closed)"); break; }
        const char *at = P->p;
        hlo_shape *sh = NULL;
        int nested = 0;
        const char *s;
        size_t n;
        if (*P->p == '(') {
            sh = hp_alloc(P, sizeof *sh);
            ok = sh && hp_shape(P, sh);
        } else {
            int pct = *P->p == '%';
            if (!hp_name_span(P, &s, &n)) { ok = hp_error(P, "expected an operand name"); break; }
            int next = hp_peek(P);
            if (!pct && (next == '[' || (next == '(' && n == 1 && *s == 'b'))) {
                P->p = at;
                sh = hp_alloc(P, sizeof *sh);
                ok = sh && hp_shape(P, sh);
            } else if (!pct && hp_opcode_call_follows(P, s, n)) {
                nested = 1;
            }
        }
        if (!ok) break;
        if (sh && !nested) {
            const char *nat = (hp_ws(P), P->p);
            int pct = nat < P->end && *nat == '%';
            if (!hp_name_span(P, &s, &n)) { ok = hp_error(P, "expected an operand name after its shape"); break; }
            if (!pct && hp_opcode_call_follows(P, s, n)) nested = 1;
        }
        const char *name;
        hlo_instr *sub = NULL;
        if (nested) {
            /* parse it again from the start as an instruction of its own */
            P->p = at;
            sub = hp_alloc(P, sizeof *sub);
            if (!sub || !hp_depth_enter(P, "nested operand instructions")) { ok = 0; break; }
            sub->parent = c;
            sub->anon = 1;
            hp_linecol(P, at, &sub->line, &sub->col);
            ok = hp_instr_rhs(P, c, cb, sub, 1);
            P->depth--;
            if (!ok) break;
            char base[64];
            snprintf(base, sizeof base, "%s.anon", hlo_op_name((hlo_op)sub->op));
            ok = (sub->name = hp_fresh_name(P, &cb->names, base)) != NULL && hp_add_instr(P, cb, sub, at);
            name = sub->name;
            sh = NULL;   /* its own shape, nothing to compare */
        } else {
            name = hp_strndup(P, s, n);
        }
        if (!ok || !name) { ok = 0; break; }
        if (!hp_vec_push(&names, (void *)name) || !hp_vec_push(&shapes, sh) || !hp_vec_push(&subs, sub)) {
            ok = hp_nomem(P);
            break;
        }
        if (!hp_accept(P, ',')) break;
    }
    if (ok) ok = hp_expect(P, ')', "to close the operand list");
    if (ok && names.n) {
        in->nops = names.n;
        in->op_names = hp_alloc(P, (size_t)names.n * sizeof(char *));
        in->op_typed = hp_alloc(P, (size_t)names.n);
        in->ops = hp_alloc(P, (size_t)names.n * sizeof(hlo_instr *));
        if (!in->op_names || !in->op_typed || !in->ops) ok = 0;
        for (int i = 0; ok && i < names.n; i++) {
            in->op_names[i] = names.v[i];
            in->op_typed[i] = shapes.v[i] != NULL;
            /* bound now: a nested instruction's invented name may change if the text defines it later */
            in->ops[i] = subs.v[i];
            if (shapes.v[i]) {
                hp_opshape *os = hp_alloc(P, sizeof *os);
                if (!os) { ok = 0; break; }
                os->in = in;
                os->k = i;
                os->shape = shapes.v[i];
                if (!hp_vec_push(&cb->opshapes, os)) ok = hp_nomem(P);
            }
        }
    }
    hp_vec_free(&names);
    hp_vec_free(&shapes);
    hp_vec_free(&subs);
    return ok;
}

static int hp_register_comp(hp *P, hlo_comp *c, const char *name_at);
static int hp_finish_comp(hp *P, hlo_comp *c, hp_comp_build *cb, const char *body_at);

/* The async shorthand `s = ((f32[10]), f32[20], s32[]) custom-call-start(x), custom_call_target="foo"` is
 * async-start(x), calls=%wrapped, where %wrapped takes the operand shapes (element 0 of the start's shape) as
 * parameters and has one root: the wrapped op with element 1's shape and all the attributes but
 * async_execution_thread, as XLA's parser builds it. The module prints in the explicit form. */
static int hp_async_wrap(hp *P, hlo_instr *in, hlo_op wop, hp_vec *attrs, const char *at)
{
    const hlo_shape *s = &in->shape;
    if (!hlo_shape_is_tuple(s) || s->ntuple < 2 || !hlo_shape_is_tuple(&s->tuple[0]) || s->tuple[0].ntuple != in->nops)
        return hp_error_at(P, at, "%s-start needs a shape ((operand shapes), result, ...) with one operand shape per "
                                  "operand", hlo_op_name(wop));
    hlo_comp *c = hp_alloc(P, sizeof *c);
    if (!c) return 0;
    hp_linecol(P, at, &c->line, &c->col);
    char base[512];
    snprintf(base, sizeof base, "%.400s.async_wrapped", in->name ? in->name : "async");
    if (!(c->name = hp_fresh_name(P, &P->comps, base))) return 0;
    hp_comp_build cb = {0};
    int ok = 1;
    hlo_instr *root = hp_alloc(P, sizeof *root);
    if (!root) return 0;
    root->op = (uint16_t)wop;
    root->shape = s->tuple[1];
    root->parent = c;
    root->line = in->line;
    root->col = in->col;
    root->nops = in->nops;
    if (in->nops) {
        root->ops = hp_alloc(P, (size_t)in->nops * sizeof(hlo_instr *));
        root->op_names = hp_alloc(P, (size_t)in->nops * sizeof(char *));
        root->op_typed = hp_alloc(P, (size_t)in->nops);
        if (!root->ops || !root->op_names || !root->op_typed) return 0;
    }
    for (int i = 0; ok && i < in->nops; i++) {
        hlo_instr *p = hp_alloc(P, sizeof *p);
        char nm[32];
        snprintf(nm, sizeof nm, "async_param.%d", i);
        ok = p && (p->name = hp_strndup(P, nm, strlen(nm))) != NULL;
        if (!ok) break;
        p->op = HLO_PARAMETER;
        p->param_no = i;
        p->shape = s->tuple[0].tuple[i];
        p->parent = c;
        p->line = in->line;
        p->col = in->col;
        root->op_names[i] = p->name;
        ok = hp_add_instr(P, &cb, p, at);
    }
    /* the attributes move to the wrapped op, except the thread, which stays on the start */
    hp_vec keep = {0}, moved = {0};
    for (int i = 0; ok && i < attrs->n; i++) {
        hlo_attr *a = attrs->v[i];
        if (!hp_vec_push(a->key == HK_ASYNC_EXECUTION_THREAD ? &keep : &moved, a)) ok = hp_nomem(P);
    }
    if (ok) ok = hp_attrs_finish(P, &moved, &root->nattrs, &root->attrs);
    if (ok) {
        root->name = "async_op";
        root->is_root = 1;
        ok = hp_add_instr(P, &cb, root, at) && hp_finish_comp(P, c, &cb, at) && hp_register_comp(P, c, at);
    }
    /* the start: its thread plus calls=%wrapped */
    hlo_attr *calls = ok ? hp_alloc(P, sizeof *calls) : NULL;
    if (calls) {
        calls->key = HK_CALLS;
        calls->kind = HA_COMPS;
        calls->name = hlo_attr_key_name(HK_CALLS);
        hp_linecol(P, at, &calls->line, &calls->col);
        calls->v.comps.n = 1;
        calls->v.comps.names = hp_alloc(P, sizeof(char *));
        calls->v.comps.v = hp_alloc(P, sizeof(hlo_comp *));
        ok = calls->v.comps.names && calls->v.comps.v;
        if (ok) calls->v.comps.names[0] = c->name;
        if (ok && !hp_vec_push(&keep, calls)) ok = hp_nomem(P);
    } else {
        ok = 0;
    }
    for (int i = 0; ok && i < keep.n; i++) {
        /* the wrapped computation runs on the start's thread */
        hlo_attr *a = keep.v[i];
        if (a->key != HK_ASYNC_EXECUTION_THREAD || !strcmp(a->v.s, "main")) continue;
        c->attrs = hp_alloc(P, sizeof(hlo_attr));
        if (!(ok = c->attrs != NULL)) break;
        c->nattrs = 1;
        c->attrs[0] = *a;
        c->attrs[0].key = HK_EXECUTION_THREAD;
        c->attrs[0].name = hlo_attr_key_name(HK_EXECUTION_THREAD);
    }
    if (ok) {
        attrs->n = 0;
        for (int i = 0; ok && i < keep.n; i++)
            if (!hp_vec_push(attrs, keep.v[i])) ok = hp_nomem(P);
    }
    hp_vec_free(&keep);
    hp_vec_free(&moved);
    hp_vec_free(&cb.instrs);
    hp_vec_free(&cb.opshapes);
    hp_map_free(&cb.names);
    return ok;
}

/* The part after "name =": [shape] opcode '(' operands ')' [, attributes]. Nested operand instructions have
 * no attributes. */
static int hp_instr_rhs(hp *P, hlo_comp *c, hp_comp_build *cb, hlo_instr *in, int nested)
{
    const char *shape_at = (hp_ws(P), P->p);
    int has_shape = 1;
    if (P->p < P->end && *P->p != '(') {
        const char *s;
        size_t n;
        if (!hp_word_span(P, &s, &n)) return hp_error(P, "expected a shape or an opcode");
        int next = hp_peek(P);
        if (next == '(' && hlo_op_from_name(s, n) != HLO_OP_COUNT) has_shape = 0;
        P->p = shape_at;
    }
    if (has_shape) {
        if (!hp_shape(P, &in->shape)) return 0;
    } else {
        in->shape_omitted = 1;
        in->shape.dtype = TPU_INVALID;
    }
    const char *op_at = (hp_ws(P), P->p);
    const char *os;
    size_t on;
    if (!hp_word_span(P, &os, &on)) return hp_error(P, "expected an opcode");
    hlo_op op = hlo_op_from_name(os, on);
    hlo_op wrapped = HLO_OP_COUNT;   /* async shorthand: custom-call-start wraps a custom-call */
    if (op == HLO_OP_COUNT) {
        static const struct { const char *suffix; hlo_op op; } sugar[] = {
            {"-start", HLO_ASYNC_START}, {"-update", HLO_ASYNC_UPDATE}, {"-done", HLO_ASYNC_DONE}};
        for (int k = 0; k < 3 && op == HLO_OP_COUNT; k++) {
            size_t sl = strlen(sugar[k].suffix);
            if (on > sl && !memcmp(os + on - sl, sugar[k].suffix, sl) &&
                (wrapped = hlo_op_from_name(os, on - sl)) != HLO_OP_COUNT)
                op = sugar[k].op;
        }
        if (op == HLO_OP_COUNT) return hp_error_at(P, op_at, "unknown opcode '%.*s'", (int)on, os);
        if (nested) return hp_error_at(P, op_at, "an async op cannot be a nested operand");
    }
    in->op = (uint16_t)op;
    if (!has_shape && !hlo_op_shape_optional(op))
        return hp_error_at(P, op_at, "%s needs its result shape written before the opcode (XLA infers it only for "
                                     "elementwise, shape-changing and control-flow ops)", hlo_op_name(op));
    if (!hp_expect(P, '(', "after the opcode")) return 0;
    if (op == HLO_CONSTANT) {
        in->literal = hp_alloc(P, sizeof(hlo_literal));
        if (!in->literal || !hp_literal(P, &in->shape, in->literal)) return 0;
        if (!hp_expect(P, ')', "to close the constant")) return 0;
    } else if (op == HLO_PARAMETER) {
        const char *at = (hp_ws(P), P->p);
        if (!hp_int(P, &in->param_no, "as the parameter number")) return 0;
        if (in->param_no < 0 || in->param_no > INT32_MAX)
            return hp_error_at(P, at, "parameter number %lld out of range", (long long)in->param_no);
        if (!hp_expect(P, ')', "to close parameter(...)")) return 0;
    } else {
        if (!hp_operands(P, c, cb, in)) return 0;
        int ar = hlo_op_arity(op);
        if (ar >= 0 && in->nops != ar)
            return hp_error_at(P, op_at, "%s takes %d operand%s, got %d", hlo_op_name(op), ar, ar == 1 ? "" : "s",
                               in->nops);
    }
    if (nested) return 1;
    const char *saved = P->cur_instr;
    P->cur_instr = in->name;
    hp_vec attrs = {0};
    int ok = hp_attrs(P, &attrs, 0);
    if (ok && wrapped != HLO_OP_COUNT && op == HLO_ASYNC_START) ok = hp_async_wrap(P, in, wrapped, &attrs, op_at);
    if (ok) ok = hp_attrs_finish(P, &attrs, &in->nattrs, &in->attrs);
    hp_vec_free(&attrs);
    P->cur_instr = saved;
    return ok;
}

static int hp_instruction(hp *P, hlo_comp *c, hp_comp_build *cb)
{
    hlo_instr *in = hp_alloc(P, sizeof *in);
    if (!in) return 0;
    in->parent = c;
    if (hp_accept_word(P, "ROOT")) in->is_root = 1;
    hp_ws(P);
    hp_linecol(P, P->p, &in->line, &in->col);
    const char *name_at = P->p;
    if (!(in->name = hp_name(P, "an instruction name"))) return 0;
    if (!hp_expect(P, '=', "after the instruction name")) return 0;
    if (!hp_instr_rhs(P, c, cb, in, 0)) return 0;
    return hp_add_instr(P, cb, in, name_at);
}

/* Resolves operand names, orders instructions topologically (stable: text order where possible),
 * finds the root and the parameters. */
static int hp_finish_comp(hp *P, hlo_comp *c, hp_comp_build *cb, const char *body_at)
{
    int n = cb->instrs.n;
    hlo_instr **ins = (hlo_instr **)cb->instrs.v;
    if (n == 0) return hp_error_at(P, body_at, "computation '%s' has no instructions", c->name);
    hlo_instr *root = NULL;
    int64_t maxp = -1;
    for (int i = 0; i < n; i++) {
        hlo_instr *in = ins[i];
        for (int k = 0; k < in->nops; k++) {
            hlo_instr *o = in->ops[k] ? in->ops[k] : hp_map_get(&cb->names, in->op_names[k]);
            if (!o)
                return hp_error_lc(P, in->line, in->col, "instruction '%s' uses '%s', which is not defined in computation '%s'",
                                   in->name, in->op_names[k], c->name);
            in->ops[k] = o;
        }
        const hlo_attr *cp = hlo_attr_find(in, HK_CONTROL_PREDECESSORS);
        if (cp) {
            in->nctrl = cp->v.idents.n;
            in->ctrl = in->nctrl ? hp_alloc(P, (size_t)in->nctrl * sizeof(hlo_instr *)) : NULL;
            if (in->nctrl && !in->ctrl) return 0;
            for (int k = 0; k < in->nctrl; k++) {
                in->ctrl[k] = hp_map_get(&cb->names, cp->v.idents.v[k]);
                if (!in->ctrl[k])
                    return hp_error_lc(P, cp->line, cp->col, "instruction '%s': control predecessor '%s' is not defined",
                                       in->name, cp->v.idents.v[k]);
            }
        }
        if (in->is_root) {
            if (root) return hp_error_lc(P, in->line, in->col, "computation '%s' has two ROOT instructions ('%s' and '%s')",
                                         c->name, root->name, in->name);
            root = in;
        }
        if (in->op == HLO_PARAMETER && in->param_no > maxp) maxp = in->param_no;
    }
    /* operand shapes written in the text must match the operands (layouts and dynamism aside) */
    for (int i = 0; i < cb->opshapes.n; i++) {
        const hp_opshape *os = cb->opshapes.v[i];
        const hlo_instr *o = os->in->ops[os->k];
        if (o->shape.dtype == TPU_INVALID) continue;   /* inferred later */
        if (!hlo_shape_compatible(os->shape, &o->shape)) {
            char a[160], b[160];
            return hp_error_lc(P, os->in->line, os->in->col,
                               "instruction '%s': operand %d is written as %s but '%s' has shape %s", os->in->name,
                               os->k, hlo_shape_str(os->shape, a, sizeof a), o->name, hlo_shape_str(&o->shape, b, sizeof b));
        }
    }
    if (!root) {
        root = ins[n - 1];
        root->is_root = 1;
    }
    c->root = root;
    /* parameters */
    c->nparams = (int)(maxp + 1);
    if (maxp >= n) return hp_error_at(P, body_at, "computation '%s': parameter(%lld) but only %d instructions", c->name,
                                      (long long)maxp, n);
    if (c->nparams) {
        c->params = hp_alloc(P, (size_t)c->nparams * sizeof(hlo_instr *));
        if (!c->params) return 0;
        for (int i = 0; i < n; i++) {
            hlo_instr *in = ins[i];
            if (in->op != HLO_PARAMETER) continue;
            if (c->params[in->param_no])
                return hp_error_lc(P, in->line, in->col, "computation '%s': parameter(%lld) appears twice ('%s' and '%s')",
                                   c->name, (long long)in->param_no, c->params[in->param_no]->name, in->name);
            c->params[in->param_no] = in;
        }
        for (int i = 0; i < c->nparams; i++)
            if (!c->params[i])
                return hp_error_at(P, body_at, "computation '%s': parameter(%d) is missing (numbers must be 0..%d)",
                                   c->name, i, c->nparams - 1);
    }
    /* topological order by iterative DFS; state: 0 new, 1 on stack, 2 done */
    c->instrs = hp_alloc(P, (size_t)n * sizeof(hlo_instr *));
    uint8_t *state = ut_calloc((size_t)n, 1);
    int *stack = ut_malloc((size_t)n * 2 * sizeof(int));
    int ok = c->instrs && state && stack;
    if (!ok) hp_nomem(P);
    for (int i = 0; ok && i < n; i++) ins[i]->id = i;   /* temporary: text index */
    int out = 0;
    for (int i = 0; ok && i < n; i++) {
        if (state[i]) continue;
        int sp = 0;
        stack[sp++] = i;
        stack[sp++] = 0;
        state[i] = 1;
        while (ok && sp) {
            int cur = stack[sp - 2];
            int k = stack[sp - 1];
            hlo_instr *in = ins[cur];
            int deps = in->nops + in->nctrl;
            if (k < deps) {
                stack[sp - 1]++;
                hlo_instr *d = k < in->nops ? in->ops[k] : in->ctrl[k - in->nops];
                int di = d->id;
                if (state[di] == 1) {
                    ok = hp_error_lc(P, d->line, d->col, "computation '%s' has a cycle through instruction '%s'", c->name, d->name);
                    break;
                }
                if (state[di] == 0) {
                    state[di] = 1;
                    stack[sp++] = di;
                    stack[sp++] = 0;
                }
            } else {
                state[cur] = 2;
                c->instrs[out++] = in;
                sp -= 2;
            }
        }
    }
    ut_free(state);
    ut_free(stack);
    if (!ok) return 0;
    c->ninstrs = n;
    for (int i = 0; i < n; i++) c->instrs[i]->id = i;
    return 1;
}

/* '{' instruction* '}' into c, then resolves it. */
static int hp_comp_body(hp *P, hlo_comp *c)
{
    const char *body_at = (hp_ws(P), P->p);
    if (!hp_expect(P, '{', "to open the computation body")) return 0;
    hp_comp_build cb = {0};
    int ok = 1;
    while (ok && hp_peek(P) != '}') {
        if (P->p >= P->end) {
            ok = hp_error_at(P, body_at, "computation '%s' is not closed (missing '}')", c->name);
            break;
        }
        ok = hp_instruction(P, c, &cb);
    }
    if (ok) ok = hp_expect(P, '}', "to close the computation");
    if (ok) ok = hp_finish_comp(P, c, &cb, body_at);
    hp_vec_free(&cb.instrs);
    hp_vec_free(&cb.opshapes);
    hp_map_free(&cb.names);
    return ok;
}

static int hp_register_comp(hp *P, hlo_comp *c, const char *name_at)
{
    hlo_comp *old = hp_map_get(&P->comps, c->name);
    if (old) return hp_error_at(P, name_at, "computation '%s' is defined twice (first at line %d)", c->name, old->line);
    if (!hp_map_put(&P->comps, c->name, c) || !hp_vec_push(P->comps_out, c)) return hp_nomem(P);
    return 1;
}

/* An inline body as an attribute value (to_apply={ ... }): becomes a computation of its own, named after
 * the instruction and attribute, placed before the computation that uses it. */
static int hp_inline_comp(hp *P, const char *attr, const char **name_out)
{
    const char *at = (hp_ws(P), P->p);
    if (!P->comps_out) return hp_error(P, "an inline computation body is only allowed in an instruction's attributes");
    hlo_comp *c = hp_alloc(P, sizeof *c);
    if (!c || !hp_depth_enter(P, "inline computations")) return 0;
    hp_linecol(P, at, &c->line, &c->col);
    char base[512];
    snprintf(base, sizeof base, "%.400s.%.80s", P->cur_instr ? P->cur_instr : "inline", attr);
    int ok = (c->name = hp_fresh_name(P, &P->comps, base)) != NULL;
    const char *saved = P->cur_instr;
    if (ok) ok = hp_comp_body(P, c);
    P->cur_instr = saved;
    P->depth--;
    if (ok) ok = hp_register_comp(P, c, at);
    *name_out = c->name;
    return ok;
}

/* At '{': an inline computation body ("{ [ROOT] name = ...") rather than a list of names? */
static int hp_body_follows(hp *P)
{
    const char *save = P->p;
    int r = 0;
    if (hp_accept(P, '{')) {
        hp_accept_word(P, "ROOT");
        const char *s;
        size_t n;
        r = hp_name_span(P, &s, &n) && hp_peek(P) == '=';
    }
    P->p = save;
    return r;
}

/* to_apply=%c | to_apply={ body } | calls={%a, %b} | branch_computations={%a, { body }} */
static int hp_comp_list(hp *P, hlo_attr *a, int single)
{
    hp_vec v = {0};
    int ok = 1;
    int braced = hp_peek(P) == '{' && !hp_body_follows(P);
    if (braced) P->p++;
    while (ok && (!braced || hp_peek(P) != '}')) {
        const char *name = NULL;
        if (hp_peek(P) == '{') {
            ok = hp_inline_comp(P, a->name, &name);
        } else {
            const char *s;
            size_t n;
            if (!hp_name_span(P, &s, &n)) { ok = hp_error(P, "expected a computation name or an inline body { ... }"); break; }
            ok = (name = hp_strndup(P, s, n)) != NULL;
        }
        if (ok && !hp_vec_push(&v, (void *)name)) ok = hp_nomem(P);
        if (!braced || !ok || !hp_accept(P, ',')) break;
    }
    if (ok && braced) ok = hp_expect(P, '}', "to close the list of computations");
    if (ok && single && v.n != 1) ok = hp_error(P, "%s takes exactly one computation, got %d", a->name, v.n);
    if (ok) {
        a->v.comps.n = v.n;
        a->v.comps.names = v.n ? hp_alloc(P, (size_t)v.n * sizeof(char *)) : NULL;
        a->v.comps.v = v.n ? hp_alloc(P, (size_t)v.n * sizeof(hlo_comp *)) : NULL;
        if (v.n && (!a->v.comps.names || !a->v.comps.v)) ok = 0;
        for (int i = 0; ok && i < v.n; i++) a->v.comps.names[i] = v.v[i];
    }
    hp_vec_free(&v);
    return ok;
}

/* computation: [ENTRY] name [(p: shape, ...) -> shape] [, attrs] { instructions } [, attrs] */
static int hp_computation(hp *P)
{
    hlo_comp *c = hp_alloc(P, sizeof *c);
    if (!c) return 0;
    hp_ws(P);
    hp_linecol(P, P->p, &c->line, &c->col);
    if (hp_accept_word(P, "ENTRY")) c->is_entry = 1;
    const char *name_at = (hp_ws(P), P->p);
    if (!(c->name = hp_name(P, c->is_entry ? "the entry computation's name" :
                                             "a computation name (or 'ENTRY', or 'HloModule' at the start)")))
        return 0;
    if (hp_peek(P) == '(') {
        /* signature: names and shapes are informative; parameters define the real ones */
        P->p++;
        while (hp_peek(P) != ')') {
            if (!hp_name(P, "a parameter name") || !hp_expect(P, ':', "after a parameter name")) return 0;
            hlo_shape s;
            if (!hp_shape(P, &s)) return 0;
            if (!hp_accept(P, ',')) break;
        }
        if (!hp_expect(P, ')', "to close the signature")) return 0;
        hp_ws(P);
        if (!(P->p + 1 < P->end && P->p[0] == '-' && P->p[1] == '>')) return hp_error(P, "expected '->' in the signature");
        P->p += 2;
        if (!hp_shape(P, &c->sig_result)) return 0;
        c->has_sig = 1;
    }
    /* computation attributes (execution_thread=...) come before the body or after its closing brace */
    hp_vec attrs = {0};
    int ok = hp_attrs(P, &attrs, 0);
    if (ok && hp_peek(P) != '{') ok = hp_error(P, "expected '{' to open the body of computation '%s'", c->name);
    if (ok) ok = hp_comp_body(P, c);
    if (ok) ok = hp_attrs(P, &attrs, 0) && hp_attrs_finish(P, &attrs, &c->nattrs, &c->attrs);
    hp_vec_free(&attrs);
    if (!ok) return 0;
    return hp_register_comp(P, c, name_at);
}

static int hp_resolve_calls(hp *P, hlo_comp *c)
{
    for (int i = 0; i < c->ninstrs; i++) {
        hlo_instr *in = c->instrs[i];
        int ncalled = 0;
        for (int a = 0; a < in->nattrs; a++) {
            hlo_attr *at = &in->attrs[a];
            if (at->kind != HA_COMP && at->kind != HA_COMPS) continue;
            for (int k = 0; k < at->v.comps.n; k++) {
                hlo_comp *callee = hp_map_get(&P->comps, at->v.comps.names[k]);
                if (!callee)
                    return hp_error_lc(P, at->line, at->col, "instruction '%s': %s refers to computation '%s', which is not defined",
                                       in->name, at->name, at->v.comps.names[k]);
                if (callee == c)
                    return hp_error_lc(P, at->line, at->col, "instruction '%s' calls its own computation '%s'", in->name, c->name);
                at->v.comps.v[k] = callee;
                ncalled++;
            }
        }
        if (ncalled) {
            in->called = hp_alloc(P, (size_t)ncalled * sizeof(hlo_comp *));
            if (!in->called) return 0;
            for (int a = 0; a < in->nattrs; a++) {
                hlo_attr *at = &in->attrs[a];
                if (at->kind != HA_COMP && at->kind != HA_COMPS) continue;
                for (int k = 0; k < at->v.comps.n; k++) in->called[in->ncalled++] = at->v.comps.v[k];
            }
        }
    }
    return 1;
}

/* Rejects recursion (a computation calling itself through others): XLA's call graph is acyclic. Iterative,
 * so a long chain of calls cannot overflow the stack. */
static int hp_check_acyclic(hp *P, hlo_module *m)
{
    int n = m->ncomps;
    uint8_t *state = ut_calloc((size_t)n, 1);
    /* frames of (computation, instruction, callee of that instruction): each call edge is visited once */
    int *stack = ut_malloc((size_t)n * 3 * sizeof(int) + 1);
    int ok = state && stack;
    if (!ok) hp_nomem(P);
    for (int r = 0; ok && r < n; r++) {
        if (state[r]) continue;
        int sp = 0;
        stack[sp++] = r;
        stack[sp++] = 0;
        stack[sp++] = 0;
        state[r] = 1;
        while (ok && sp) {
            hlo_comp *c = m->comps[stack[sp - 3]];
            int *i = &stack[sp - 2], *k = &stack[sp - 1];
            while (*i < c->ninstrs && *k >= c->instrs[*i]->ncalled) {
                (*i)++;
                *k = 0;
            }
            hlo_comp *next = *i < c->ninstrs ? c->instrs[*i]->called[(*k)++] : NULL;
            if (!next) {
                state[c->id] = 2;
                sp -= 3;
                continue;
            }
            if (state[next->id] == 1) {
                ok = hp_error_lc(P, next->line, next->col, "computation '%s' calls itself (recursion is not allowed in HLO)",
                                 next->name);
            } else if (state[next->id] == 0) {
                state[next->id] = 1;
                stack[sp++] = next->id;
                stack[sp++] = 0;
                stack[sp++] = 0;
            }
        }
    }
    ut_free(state);
    ut_free(stack);
    return ok;
}

/* The stack-frame index after the header:
 *   FileNames 1 "a.py" ...  FunctionNames 1 "f" ...
 *   FileLocations 1 {file_name_id=1 function_name_id=1 line=3 end_line=3 column=1 end_column=9} ...
 *   StackFrames 1 {file_location_id=1 parent_frame_id=1} ...
 * The leading integers are labels and are not checked. parent_frame_id is written one above the proto's value
 * (XLA's printer adds 1, its parser takes 1 off), so the root frame says 1. */
static int hp_frames(hp *P)
{
    static const char *const sections[4] = {"FileNames", "FunctionNames", "FileLocations", "StackFrames"};
    hp_vec v[4] = {{0}};
    int ok = 1, any = 0;
    for (;;) {
        int sec = -1;
        for (int i = 0; i < 4 && sec < 0; i++)
            if (hp_accept_word(P, sections[i])) sec = i;
        if (sec < 0) break;
        any = 1;
        while (ok) {
            hp_ws(P);
            if (P->p >= P->end || !isdigit((unsigned char)*P->p)) break;
            int64_t label;
            if (!(ok = hp_int(P, &label, "as a label"))) break;
            if (sec < 2) {
                const char *s;
                ok = hp_string(P, &s) && (hp_vec_push(&v[sec], (void *)s) || hp_nomem(P));
                continue;
            }
            int64_t *vals = hp_alloc(P, 6 * sizeof(int64_t));
            if (!(ok = vals != NULL && hp_expect(P, '{', "to open a stack-frame entry"))) break;
            while (ok && hp_peek(P) != '}') {
                const char *k;
                size_t kn;
                const char *kat = P->p;
                if (!hp_word_span(P, &k, &kn)) { ok = hp_error(P, "expected a field name"); break; }
                static const char *const lf[6] = {"file_name_id", "function_name_id", "line", "end_line", "column", "end_column"};
                static const char *const ff[2] = {"file_location_id", "parent_frame_id"};
                int idx = -1;
                for (int i = 0; i < (sec == 2 ? 6 : 2); i++) {
                    const char *f = sec == 2 ? lf[i] : ff[i];
                    if (strlen(f) == kn && !memcmp(f, k, kn)) idx = i;
                }
                if (idx < 0) { ok = hp_error_at(P, kat, "unknown field '%.*s' in %s", (int)kn, k, sections[sec]); break; }
                ok = hp_expect(P, '=', "after a field name") && hp_int(P, &vals[idx], "as a field value");
                hp_accept(P, ',');
            }
            if (ok) ok = hp_expect(P, '}', "to close a stack-frame entry");
            if (ok && !hp_vec_push(&v[sec], vals)) ok = hp_nomem(P);
        }
        if (!ok) break;
    }
    if (ok && any && (v[0].n || v[1].n || v[2].n || v[3].n)) {   /* empty sections: no index, as printed */
        hlo_frames *f = hp_alloc(P, sizeof *f);
        ok = f != NULL;
        if (ok) {
            f->nfiles = v[0].n;
            f->nfuncs = v[1].n;
            f->nlocs = v[2].n;
            f->nframes = v[3].n;
            f->files = hp_alloc(P, (size_t)v[0].n * sizeof(char *) + 1);
            f->funcs = hp_alloc(P, (size_t)v[1].n * sizeof(char *) + 1);
            f->locs = hp_alloc(P, (size_t)v[2].n * sizeof(hlo_file_loc) + 1);
            f->frames = hp_alloc(P, (size_t)v[3].n * sizeof(hlo_frame) + 1);
            ok = f->files && f->funcs && f->locs && f->frames;
        }
        for (int i = 0; ok && i < v[0].n; i++) f->files[i] = v[0].v[i];
        for (int i = 0; ok && i < v[1].n; i++) f->funcs[i] = v[1].v[i];
        for (int i = 0; ok && i < v[2].n; i++) {
            const int64_t *x = v[2].v[i];
            f->locs[i] = (hlo_file_loc){x[0], x[1], x[2], x[3], x[4], x[5]};
        }
        for (int i = 0; ok && i < v[3].n; i++) {
            const int64_t *x = v[3].v[i];
            f->frames[i] = (hlo_frame){x[0], x[1] - 1};   /* XLA writes parent_frame_id one above the proto's */
        }
        if (ok) P->m->frames = f;
    }
    for (int i = 0; i < 4; i++) hp_vec_free(&v[i]);
    return ok;
}

static int hp_module(hp *P)
{
    hlo_module *m = P->m;
    hp_ws(P);
    if (hp_accept_word(P, "HloModule")) {
        m->has_header = 1;
        const char *s;
        size_t n;
        if (!hp_name_span(P, &s, &n)) return hp_error(P, "expected the module name after HloModule");
        if (!(m->name = hp_strndup(P, s, n))) return 0;
        hp_vec attrs = {0};
        int ok = hp_attrs(P, &attrs, 1) && hp_attrs_finish(P, &attrs, &m->nattrs, &m->attrs);
        hp_vec_free(&attrs);
        if (!ok || !hp_frames(P)) return 0;
    } else {
        m->name = "module";
    }
    hp_vec comps = {0};
    P->comps_out = &comps;
    int ok = 1;
    while (ok && hp_peek(P) >= 0) {
        if (hp_accept_word(P, "HloModule")) {
            ok = hp_error_at(P, P->p - 9, "a second HloModule in one text (split the file at '// -----' lines)");
            break;
        }
        ok = hp_computation(P);
    }
    P->comps_out = NULL;
    if (ok && comps.n == 0) ok = hp_error(P, "no computations in the module (expected 'HloModule name' followed by computations)");
    if (ok) {
        m->ncomps = comps.n;
        m->comps = hp_alloc(P, (size_t)comps.n * sizeof(hlo_comp *));
        ok = m->comps != NULL;
        for (int i = 0; ok && i < comps.n; i++) {
            m->comps[i] = comps.v[i];
            m->comps[i]->id = i;
            m->ninstrs += m->comps[i]->ninstrs;
            if (m->comps[i]->is_entry) {
                if (m->entry) {
                    ok = hp_error_lc(P, m->comps[i]->line, m->comps[i]->col, "second ENTRY computation '%s' (first: '%s')",
                                     m->comps[i]->name, m->entry->name);
                    break;
                }
                m->entry = m->comps[i];
            }
        }
        if (ok && !m->entry) {
            m->entry = m->comps[comps.n - 1];   /* XLA: the last computation; printed with ENTRY from now on */
            m->entry->is_entry = 1;
        }
    }
    hp_vec_free(&comps);
    for (int i = 0; ok && i < m->ncomps; i++) ok = hp_resolve_calls(P, m->comps[i]);
    if (ok) ok = hp_check_acyclic(P, m);
    return ok;
}

tpu_status hlo_parse(tpu_ctx *ctx, const char *text, size_t len, const char *filename, int line_offset,
                     hlo_module **out)
{
    *out = NULL;
    hlo_module *m = ut_calloc(1, sizeof *m);
    if (!m) return ut_nomem(ctx);
    ut_arena_init(&m->arena);
    hp P;
    memset(&P, 0, sizeof P);
    P.ctx = ctx;
    P.m = m;
    P.file = filename ? filename : "<hlo>";
    P.line_offset = line_offset;
    /* the parser relies on a NUL after the text (strtod) */
    char *copy = ut_arena_strndup(&m->arena, text, len);
    if (!copy) {
        hlo_module_free(m);
        return ut_nomem(ctx);
    }
    P.src = P.p = copy;
    P.end = copy + len;
    if (memchr(copy, 0, len)) {
        P.end = copy + strlen(copy);
        hp_error_at(&P, P.end, "NUL byte in HLO text");
    }
    m->filename = ut_arena_strdup(&m->arena, P.file);
    int ok = !P.failed && m->filename && hp_module(&P);
    hp_map_free(&P.comps);
    if (!ok) {
        tpu_status st = P.failed && ctx && ctx->err && !strcmp(ctx->err, "out of memory") ? TPU_ERR_NOMEM : TPU_ERR_PARSE;
        if (!P.failed) st = ut_nomem(ctx);
        if (st == TPU_ERR_NOMEM) ut_err_prefix(ctx, "%s: parsing %zu bytes of HLO text", P.file, len);
        hlo_module_free(m);
        return st;
    }
    *out = m;
    return TPU_OK;
}

void hlo_module_free(hlo_module *m)
{
    if (!m) return;
    if (m->exec_plans && m->exec_plans_free) m->exec_plans_free(m->exec_plans);
    ut_arena_free(&m->arena);
    ut_free(m);
}
