/* npy.c — NumPy .npy files: the header (a Python dict literal), dtype mapping, byte order, Fortran order,
 * and the byte sources that npz.c shares (memory, file, deflated zip member). Format and dtype choices are
 * described in io.h. */
#include "io.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

static int io_host_le(void)
{
    const uint16_t one = 1;
    uint8_t b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* Whether data with this byte-order character are big-endian. */
static int io_order_big(char c) { return c == '>' || (c == '=' && !io_host_le()); }

/* ---------------------------------------------------------------------------------------------------------
 * Byte sources
 * ------------------------------------------------------------------------------------------------------- */

#define IO_ZCHUNK (64 * 1024)

static size_t io_raw_read(io_src *s, void *dst, size_t n)
{
    if (s->mem) {
        size_t k = UT_MIN(n, s->len - s->pos);
        if (k) memcpy(dst, s->mem + s->pos, k);
        s->pos += k;
        return k;
    }
    if ((uint64_t)n > s->remain) n = (size_t)s->remain;
    if (n == 0) return 0;
    size_t k = fread(dst, 1, n, s->f);
    if (s->remain != UINT64_MAX) s->remain -= k;
    if (k < n && ferror(s->f) && s->st == TPU_OK)
        s->st = ut_err(s->ctx, TPU_ERR_IO, "%s: read error: %s", s->what, strerror(errno));
    return k;
}

static size_t io_inflate_read(io_src *s, uint8_t *dst, size_t n)
{
    z_stream *z = s->z;
    size_t done = 0;
    while (done < n && !s->zend && s->st == TPU_OK) {
        if (z->avail_in == 0) {
            if (s->mem) {
                size_t k = UT_MIN(s->len - s->pos, (size_t)1 << 30);
                z->next_in = (Bytef *)(uintptr_t)(s->mem + s->pos);
                z->avail_in = (uInt)k;
                s->pos += k;
            } else {
                z->next_in = s->zin;
                z->avail_in = (uInt)io_raw_read(s, s->zin, IO_ZCHUNK);
                if (s->st != TPU_OK) break;
            }
        }
        size_t want = UT_MIN(n - done, (size_t)1 << 30);
        z->next_out = dst + done;
        z->avail_out = (uInt)want;
        int had_in = z->avail_in != 0;
        int r = inflate(z, Z_NO_FLUSH);
        done += want - z->avail_out;
        if (r == Z_STREAM_END) {
            s->zend = 1;
        } else if (r == Z_MEM_ERROR) {
            s->st = ut_err(s->ctx, TPU_ERR_NOMEM, "%s: out of memory while inflating", s->what);
        } else if (r == Z_DATA_ERROR || r == Z_NEED_DICT || r == Z_STREAM_ERROR) {
            s->st = ut_err(s->ctx, TPU_ERR_PARSE, "%s: corrupt deflate data (%s)", s->what,
                           z->msg ? z->msg : "zlib error");
        } else if (r == Z_BUF_ERROR || (!had_in && want == z->avail_out)) {
            /* no progress with all input used: the compressed data stop early */
            s->st = ut_err(s->ctx, TPU_ERR_PARSE, "%s: compressed data end before the deflate stream does",
                           s->what);
        }
    }
    return done;
}

size_t io_src_read(io_src *s, void *dst, size_t n)
{
    if (s->st != TPU_OK || n == 0) return 0;
    size_t k = s->z ? io_inflate_read(s, dst, n) : io_raw_read(s, dst, n);
    if (s->crc_on) {
        const uint8_t *p = dst;
        for (size_t off = 0; off < k;) {
            uInt c = (uInt)UT_MIN(k - off, (size_t)1 << 30);
            s->crc = crc32(s->crc, p + off, c);
            off += c;
        }
    }
    s->total += k;
    return k;
}

/* ---------------------------------------------------------------------------------------------------------
 * dtype <-> descr
 * ------------------------------------------------------------------------------------------------------- */

/* One-field structured descrs: ml_dtypes' names for the types numpy stores as void. */
static const struct { const char *name; tpu_dtype t; } io_void_names[] = {
    {"bfloat16", TPU_BF16},
    {"float8_e5m2", TPU_F8E5M2},
    {"float8_e4m3fn", TPU_F8E4M3FN},
    {"float8_e4m3b11fnuz", TPU_F8E4M3B11FNUZ},
    {"float8_e5m2fnuz", TPU_F8E5M2FNUZ},
    {"float8_e4m3fnuz", TPU_F8E4M3FNUZ},
    {"float8_e4m3", TPU_F8E4M3},
    {"float8_e3m4", TPU_F8E3M4},
    {"float4_e2m1fn", TPU_F4E2M1FN},
    {"float8_e8m0fnu", TPU_F8E8M0FNU},
    {"int4", TPU_S4},
    {"uint4", TPU_U4},
    {"int2", TPU_S2},
    {"uint2", TPU_U2},
};

const char *io_npy_descr(tpu_dtype t)
{
    switch (t) {
    case TPU_PRED: return "'|b1'";
    case TPU_S8: return "'|i1'";
    case TPU_S16: return "'<i2'";
    case TPU_S32: return "'<i4'";
    case TPU_S64: return "'<i8'";
    case TPU_U8: return "'|u1'";
    case TPU_U16: return "'<u2'";
    case TPU_U32: return "'<u4'";
    case TPU_U64: return "'<u8'";
    case TPU_F16: return "'<f2'";
    case TPU_BF16: return "'<V2'";
    case TPU_F32: return "'<f4'";
    case TPU_F64: return "'<f8'";
    case TPU_C64: return "'<c8'";
    case TPU_C128: return "'<c16'";
    case TPU_F8E5M2: return "[('float8_e5m2', '|V1')]";
    case TPU_F8E4M3FN: return "[('float8_e4m3fn', '|V1')]";
    case TPU_F8E4M3B11FNUZ: return "[('float8_e4m3b11fnuz', '|V1')]";
    case TPU_F8E5M2FNUZ: return "[('float8_e5m2fnuz', '|V1')]";
    case TPU_F8E4M3FNUZ: return "[('float8_e4m3fnuz', '|V1')]";
    case TPU_F8E4M3: return "[('float8_e4m3', '|V1')]";
    case TPU_F8E3M4: return "[('float8_e3m4', '|V1')]";
    case TPU_F4E2M1FN: return "[('float4_e2m1fn', '|V1')]";
    case TPU_F8E8M0FNU: return "[('float8_e8m0fnu', '|V1')]";
    case TPU_S4: return "[('int4', '|V1')]";
    case TPU_U4: return "[('uint4', '|V1')]";
    case TPU_S2: return "[('int2', '|V1')]";
    case TPU_U2: return "[('uint2', '|V1')]";
    default: return NULL;
    }
}

/* What a plain type string ('<f4', '|V2', ...) holds. *swap: the bytes are in the other byte order. */
static tpu_status io_typestr(io_src *s, const char *ts, const io_npy_opts *o, tpu_dtype *out, int *swap)
{
    const char *p = ts;
    char order = '|';
    if (*p == '<' || *p == '>' || *p == '|' || *p == '=') order = *p++;
    char kind = *p ? *p++ : 0;
    int size = 0;
    const char *digits = p;
    while (*p >= '0' && *p <= '9' && size < 1000) size = size * 10 + (*p++ - '0');
    tpu_dtype t = TPU_INVALID;
    if (*p == 0 && p > digits) {
        switch (kind) {
        case 'b': t = size == 1 ? TPU_PRED : TPU_INVALID; break;
        case 'i': t = size == 1 ? TPU_S8 : size == 2 ? TPU_S16 : size == 4 ? TPU_S32 : size == 8 ? TPU_S64 : 0; break;
        case 'u': t = size == 1 ? TPU_U8 : size == 2 ? TPU_U16 : size == 4 ? TPU_U32 : size == 8 ? TPU_U64 : 0; break;
        case 'f': t = size == 1 ? TPU_F8E5M2 : size == 2 ? TPU_F16 : size == 4 ? TPU_F32 : size == 8 ? TPU_F64 : 0; break;
        case 'c': t = size == 8 ? TPU_C64 : size == 16 ? TPU_C128 : TPU_INVALID; break;
        case 'V':
            if (size == 2) t = TPU_BF16;
            else if (size == 1 && o && o->void1_as != TPU_INVALID && tpu_dtype_size(o->void1_as) == 1 &&
                     tpu_dtype_kind(o->void1_as) != 'o')
                t = o->void1_as;
            else if (size == 1)
                return ut_err(s->ctx, TPU_ERR_UNSUPPORTED,
                              "%s: dtype '%s' is a 1-byte ml_dtypes type (float8_*, float4_e2m1fn, int4, ...) and "
                              "the file does not say which; save it as a one-field structured array named after "
                              "the type (as tpusim does: [('float8_e4m3fn', '|V1')]) or say which type it is",
                              s->what, ts);
            break;
        default: break;
        }
    }
    if (t == TPU_INVALID) return ut_err(s->ctx, TPU_ERR_UNSUPPORTED, "%s: unsupported dtype '%s'", s->what, ts);
    *swap = tpu_dtype_size(t) > 1 && io_order_big(order) == io_host_le();
    *out = t;
    return TPU_OK;
}

/* ---------------------------------------------------------------------------------------------------------
 * Header: {'descr': <str or [(name, str)]>, 'fortran_order': <bool>, 'shape': (<int>, ...), }
 * A small parser for exactly this subset of Python literals.
 * ------------------------------------------------------------------------------------------------------- */

#define IO_STR_MAX 64

typedef struct io_hdr {
    io_src     *s;
    const char *p;
    size_t      n, i;
    /* results */
    char        descr[IO_STR_MAX];    /* the type string */
    char        field[IO_STR_MAX];    /* field name of a one-field structured descr, or "" */
    int         nfields;              /* 0: plain descr */
    int         fortran;
    int         rank;
    int64_t     dims[TPU_MAX_RANK];
} io_hdr;

static tpu_status io_hdr_err(io_hdr *h, const char *fmt, const char *arg)
{
    char msg[160];
    snprintf(msg, sizeof msg, fmt, arg);
    return ut_err(h->s->ctx, TPU_ERR_PARSE, "%s: .npy header, offset %zu: %s", h->s->what, h->i, msg);
}

static void io_hdr_ws(io_hdr *h)
{
    while (h->i < h->n && (h->p[h->i] == ' ' || h->p[h->i] == '\t' || h->p[h->i] == '\n' || h->p[h->i] == '\r'))
        h->i++;
}

/* Skips white space and consumes c if it is next. */
static int io_hdr_eat(io_hdr *h, char c)
{
    io_hdr_ws(h);
    if (h->i < h->n && h->p[h->i] == c) {
        h->i++;
        return 1;
    }
    return 0;
}

static tpu_status io_hdr_expect(io_hdr *h, char c)
{
    if (io_hdr_eat(h, c)) return TPU_OK;
    char what[2] = {c, 0};
    return io_hdr_err(h, "expected '%s'", what);
}

/* A quoted string; keeps at most IO_STR_MAX-1 bytes (longer ones are marked with a trailing '~'). */
static tpu_status io_hdr_string(io_hdr *h, char *out)
{
    io_hdr_ws(h);
    if (h->i >= h->n || (h->p[h->i] != '\'' && h->p[h->i] != '"')) return io_hdr_err(h, "expected a %s", "string");
    char q = h->p[h->i++];
    size_t k = 0;
    int over = 0;
    for (;;) {
        if (h->i >= h->n) return io_hdr_err(h, "%s", "unterminated string");
        char c = h->p[h->i++];
        if (c == q) break;
        if (c == '\\') {
            if (h->i >= h->n) return io_hdr_err(h, "%s", "unterminated string");
            c = h->p[h->i++];
        }
        if (c == 0 || c == '\n') return io_hdr_err(h, "%s", "bad character in string");
        if (k < IO_STR_MAX - 1) out[k++] = c;
        else over = 1;
    }
    out[k] = 0;
    if (over) out[k - 1] = '~';
    return TPU_OK;
}

static tpu_status io_hdr_int(io_hdr *h, int64_t *v)
{
    io_hdr_ws(h);
    size_t start = h->i;
    int64_t x = 0;
    while (h->i < h->n && h->p[h->i] >= '0' && h->p[h->i] <= '9') {
        if (x > ((int64_t)1 << 62) / 10) return io_hdr_err(h, "%s", "dimension too large");
        x = x * 10 + (h->p[h->i++] - '0');
    }
    if (h->i == start) return io_hdr_err(h, "%s", "expected a non-negative integer");
    if (h->i < h->n && (h->p[h->i] == 'L' || h->p[h->i] == 'l')) h->i++;   /* Python 2 long */
    *v = x;
    return TPU_OK;
}

static tpu_status io_hdr_shape(io_hdr *h)
{
    io_hdr_ws(h);
    char close = h->i < h->n && h->p[h->i] == '[' ? ']' : ')';
    tpu_status st = io_hdr_expect(h, close == ']' ? '[' : '(');
    if (st) return st;
    h->rank = 0;
    while (!io_hdr_eat(h, close)) {
        if (h->rank == TPU_MAX_RANK)
            return ut_err(h->s->ctx, TPU_ERR_UNSUPPORTED, "%s: arrays of more than %d dimensions are not supported",
                          h->s->what, TPU_MAX_RANK);
        if ((st = io_hdr_int(h, &h->dims[h->rank++]))) return st;
        if (!io_hdr_eat(h, ',')) {
            if ((st = io_hdr_expect(h, close))) return st;
            break;
        }
    }
    return TPU_OK;
}

static tpu_status io_hdr_bool(io_hdr *h, int *v)
{
    io_hdr_ws(h);
    if (h->n - h->i >= 4 && memcmp(h->p + h->i, "True", 4) == 0) {
        h->i += 4;
        *v = 1;
    } else if (h->n - h->i >= 5 && memcmp(h->p + h->i, "False", 5) == 0) {
        h->i += 5;
        *v = 0;
    } else {
        return io_hdr_err(h, "expected %s", "True or False");
    }
    return TPU_OK;
}

/* descr: a type string, or a list of (name, type[, shape]) tuples (a structured dtype). */
static tpu_status io_hdr_descr(io_hdr *h)
{
    tpu_status st;
    if (!io_hdr_eat(h, '[')) return io_hdr_string(h, h->descr);
    h->nfields = 0;
    while (!io_hdr_eat(h, ']')) {
        char name[IO_STR_MAX], type[IO_STR_MAX];
        if ((st = io_hdr_expect(h, '('))) return st;
        if ((st = io_hdr_string(h, name))) return st;
        if ((st = io_hdr_expect(h, ','))) return st;
        io_hdr_ws(h);
        if (h->i < h->n && (h->p[h->i] == '[' || h->p[h->i] == '('))
            return ut_err(h->s->ctx, TPU_ERR_UNSUPPORTED, "%s: nested structured dtypes are not supported",
                          h->s->what);
        if ((st = io_hdr_string(h, type))) return st;
        if (io_hdr_eat(h, ',')) {   /* a trailing comma, or a third item: the field's shape */
            io_hdr_ws(h);
            if (h->i < h->n && h->p[h->i] != ')')
                return ut_err(h->s->ctx, TPU_ERR_UNSUPPORTED, "%s: structured dtype field '%s' has a shape; "
                              "not supported", h->s->what, name);
        }
        if ((st = io_hdr_expect(h, ')'))) return st;
        if (h->nfields++ == 0) {
            memcpy(h->field, name, sizeof name);
            memcpy(h->descr, type, sizeof type);
        }
        if (!io_hdr_eat(h, ',')) {
            if ((st = io_hdr_expect(h, ']'))) return st;
            break;
        }
        if (h->nfields > 1000) return io_hdr_err(h, "%s", "too many fields");
    }
    if (h->nfields != 1)
        return ut_err(h->s->ctx, TPU_ERR_UNSUPPORTED, "%s: structured dtype with %d fields is not supported",
                      h->s->what, h->nfields);
    return TPU_OK;
}

static tpu_status io_hdr_parse(io_hdr *h)
{
    tpu_status st;
    int seen_descr = 0, seen_fortran = 0, seen_shape = 0;
    if ((st = io_hdr_expect(h, '{'))) return st;
    while (!io_hdr_eat(h, '}')) {
        char key[IO_STR_MAX];
        size_t at = h->i;
        if ((st = io_hdr_string(h, key))) return st;
        if ((st = io_hdr_expect(h, ':'))) return st;
        int *seen;
        if (strcmp(key, "descr") == 0) seen = &seen_descr, st = io_hdr_descr(h);
        else if (strcmp(key, "fortran_order") == 0) seen = &seen_fortran, st = io_hdr_bool(h, &h->fortran);
        else if (strcmp(key, "shape") == 0) seen = &seen_shape, st = io_hdr_shape(h);
        else {
            h->i = at;
            return io_hdr_err(h, "unexpected key '%s'", key);
        }
        if (st) return st;
        if ((*seen)++) {
            h->i = at;
            return io_hdr_err(h, "key '%s' given twice", key);
        }
        if (!io_hdr_eat(h, ',')) {
            if ((st = io_hdr_expect(h, '}'))) return st;
            break;
        }
    }
    io_hdr_ws(h);
    if (h->i != h->n) return io_hdr_err(h, "%s", "unexpected text after the header dict");
    if (!seen_descr || !seen_fortran || !seen_shape)
        return io_hdr_err(h, "missing key '%s'", !seen_descr ? "descr" : !seen_fortran ? "fortran_order" : "shape");
    return TPU_OK;
}

/* The dtype the parsed descr names. */
static tpu_status io_hdr_dtype(io_hdr *h, const io_npy_opts *o, tpu_dtype *t, int *swap)
{
    if (h->nfields == 0) return io_typestr(h->s, h->descr, o, t, swap);
    tpu_dtype ft = TPU_INVALID;
    for (int i = 0; i < UT_ARRAY_LEN(io_void_names); i++)
        if (strcmp(h->field, io_void_names[i].name) == 0) ft = io_void_names[i].t;
    if (ft == TPU_INVALID) {
        ft = tpu_dtype_from_name(h->field, strlen(h->field));
        if (tpu_dtype_kind(ft) == 'o') ft = TPU_INVALID;
    }
    /* the field's own type must be a void (or, for bf16/e5m2 spelled by ml_dtypes, its usual string) of the
     * right size */
    const char *ts = h->descr;
    if (*ts == '<' || *ts == '>' || *ts == '|' || *ts == '=') ts++;
    int ok = ft != TPU_INVALID && ts[0] == 'V' && (size_t)atoi(ts + 1) == tpu_dtype_size(ft) &&
             strspn(ts + 1, "0123456789") == strlen(ts + 1);
    if (!ok) {
        if (ft == TPU_INVALID)
            return ut_err(h->s->ctx, TPU_ERR_UNSUPPORTED, "%s: unsupported structured dtype [('%s', '%s')]",
                          h->s->what, h->field, h->descr);
        return ut_err(h->s->ctx, TPU_ERR_UNSUPPORTED, "%s: field '%s' should be a %zu-byte void ('V%zu'), not '%s'",
                      h->s->what, h->field, tpu_dtype_size(ft), tpu_dtype_size(ft), h->descr);
    }
    *t = ft;
    *swap = tpu_dtype_size(ft) > 1 && io_order_big(h->descr[0]) == io_host_le();
    return TPU_OK;
}

/* ---------------------------------------------------------------------------------------------------------
 * Element fix-ups after reading
 * ------------------------------------------------------------------------------------------------------- */

static void io_swap_bytes(uint8_t *p, size_t nbytes, size_t unit)
{
    for (size_t i = 0; i + unit <= nbytes; i += unit)
        for (size_t a = 0, b = unit - 1; a < b; a++, b--) {
            uint8_t c = p[i + a];
            p[i + a] = p[i + b];
            p[i + b] = c;
        }
}

/* Keeps only the bits a sub-byte type or pred uses. */
static void io_normalize(tpu_dtype t, uint8_t *p, size_t n)
{
    switch (t) {
    case TPU_PRED:
        for (size_t i = 0; i < n; i++) p[i] = p[i] != 0;
        break;
    case TPU_S4: case TPU_U4: case TPU_F4E2M1FN:
        for (size_t i = 0; i < n; i++) p[i] &= 0xF;
        break;
    case TPU_S2: case TPU_U2:
        for (size_t i = 0; i < n; i++) p[i] &= 0x3;
        break;
    default: break;
    }
}

/* Column-major src -> row-major dst. */
static void io_transpose(const tpu_tensor *t, const uint8_t *src, uint8_t *dst)
{
    size_t es = tpu_dtype_size(t->dtype);
    int r = t->rank;
    int64_t idx[TPU_MAX_RANK] = {0}, cstride[TPU_MAX_RANK];
    int64_t acc = 1;
    for (int k = r - 1; k >= 0; k--) {
        cstride[k] = acc;
        acc *= t->dims[k];
    }
    int64_t off = 0;   /* row-major element index of idx */
    for (int64_t i = 0; i < t->count; i++) {
        memcpy(dst + (size_t)off * es, src + (size_t)i * es, es);
        for (int k = 0; k < r; k++) {   /* Fortran order: the first index runs fastest */
            if (++idx[k] < t->dims[k]) {
                off += cstride[k];
                break;
            }
            off -= cstride[k] * (idx[k] - 1);
            idx[k] = 0;
        }
    }
}

/* ---------------------------------------------------------------------------------------------------------
 * Reading
 * ------------------------------------------------------------------------------------------------------- */

static void io_shape_text(const io_hdr *h, char *buf, size_t size)
{
    size_t k = (size_t)snprintf(buf, size, "(");
    for (int i = 0; i < h->rank && k < size; i++)
        k += (size_t)snprintf(buf + k, size - k, "%s%lld", i ? ", " : "", (long long)h->dims[i]);
    if (k < size) snprintf(buf + k, size - k, h->rank == 1 ? ",)" : ")");
}

tpu_status io_npy_read(io_src *s, uint64_t size, const io_npy_opts *o, tpu_tensor **out)
{
    *out = NULL;
    uint8_t pre[12];
    size_t got = io_src_read(s, pre, 8);
    if (s->st) return s->st;
    if (got < 6 || memcmp(pre, "\x93NUMPY", 6) != 0)
        return ut_err(s->ctx, TPU_ERR_PARSE, "%s: not a .npy file (it does not start with \\x93NUMPY)", s->what);
    if (got < 8) return ut_err(s->ctx, TPU_ERR_PARSE, "%s: truncated .npy preamble", s->what);
    int major = pre[6], minor = pre[7];
    if (major < 1 || major > 3 || minor != 0)
        return ut_err(s->ctx, TPU_ERR_UNSUPPORTED, "%s: unsupported .npy format version %d.%d", s->what, major, minor);
    size_t lenbytes = major == 1 ? 2 : 4;
    if (io_src_read(s, pre + 8, lenbytes) != lenbytes)
        return s->st ? s->st : ut_err(s->ctx, TPU_ERR_PARSE, "%s: truncated .npy preamble", s->what);
    uint32_t hlen = pre[8] | (uint32_t)pre[9] << 8;
    if (major > 1) hlen |= (uint32_t)pre[10] << 16 | (uint32_t)pre[11] << 24;
    uint64_t pos = 8 + lenbytes;
    if (hlen > IO_NPY_MAX_HEADER)
        return ut_err(s->ctx, TPU_ERR_PARSE, "%s: .npy header length %u is absurd (limit %u)", s->what, hlen,
                      IO_NPY_MAX_HEADER);
    if (size != UINT64_MAX && pos + hlen > size)
        return ut_err(s->ctx, TPU_ERR_PARSE, "%s: truncated: the .npy header says %u bytes, %llu are present",
                      s->what, hlen, (unsigned long long)(size - pos));
    char *text = ut_malloc((size_t)hlen + 1);
    if (!text) return ut_err(s->ctx, TPU_ERR_NOMEM, "%s: out of memory reading the .npy header", s->what);
    got = io_src_read(s, text, hlen);
    if (got != hlen) {
        ut_free(text);
        return s->st ? s->st : ut_err(s->ctx, TPU_ERR_PARSE, "%s: truncated .npy header", s->what);
    }
    text[hlen] = 0;
    pos += hlen;
    io_hdr h;
    memset(&h, 0, sizeof h);
    h.s = s;
    h.p = text;
    h.n = hlen;
    tpu_status st = io_hdr_parse(&h);
    ut_free(text);
    h.p = NULL;
    if (st) return st;
    tpu_dtype t = TPU_INVALID;
    int swap = 0;
    if ((st = io_hdr_dtype(&h, o, &t, &swap))) return st;

    size_t es = tpu_dtype_size(t);
    int64_t count = ten_count(h.rank, h.dims);
    char shape[160];
    io_shape_text(&h, shape, sizeof shape);
    if (count < 0 || (uint64_t)count > SIZE_MAX / 2 / es)
        return ut_err(s->ctx, TPU_ERR_PARSE, "%s: shape %s is too large", s->what, shape);
    uint64_t need = (uint64_t)count * es;
    if (o && o->filter) {
        char why[400] = "";
        if (o->filter(o->filter_user, o->member ? o->member : "", o->index, t, h.rank, h.dims, why, sizeof why))
            return ut_err(s->ctx, TPU_ERR_INVALID, "%s: %s", s->what, why[0] ? why : "refused by the caller");
    }
    if (need > ut_max_input(s->ctx)) return ut_too_large(s->ctx, s->what, need);
    if (size != UINT64_MAX) {
        uint64_t have = size - pos;
        if (have < need)
            return ut_err(s->ctx, TPU_ERR_PARSE, "%s: truncated: shape %s of '%s' needs %llu bytes of data, %llu are "
                          "present", s->what, shape, h.descr, (unsigned long long)need, (unsigned long long)have);
        if (have > need)
            return ut_err(s->ctx, TPU_ERR_PARSE, "%s: %llu bytes follow the data of shape %s of '%s' (%llu bytes)",
                          s->what, (unsigned long long)(have - need), shape, h.descr, (unsigned long long)need);
    }
    tpu_tensor *ten = ten_alloc_uninit(t, h.rank, h.dims);
    if (!ten) return ut_err(s->ctx, TPU_ERR_NOMEM, "%s: out of memory for a %s array", s->what, shape);
    got = io_src_read(s, ten->data, ten->nbytes);
    if (got != ten->nbytes) {
        tpu_tensor_free(ten);
        if (s->st) return s->st;
        return ut_err(s->ctx, TPU_ERR_PARSE, "%s: truncated: shape %s of '%s' needs %llu bytes of data, %llu are "
                      "present", s->what, shape, h.descr, (unsigned long long)need, (unsigned long long)got);
    }
    if (size == UINT64_MAX) {
        uint8_t extra;
        if (io_src_read(s, &extra, 1) == 1) {
            tpu_tensor_free(ten);
            return ut_err(s->ctx, TPU_ERR_PARSE, "%s: more bytes follow the data of shape %s of '%s'", s->what, shape,
                          h.descr);
        }
        if (s->st) {
            tpu_tensor_free(ten);
            return s->st;
        }
    }
    if (swap) io_swap_bytes(ten->data, ten->nbytes, t == TPU_C64 ? 4 : t == TPU_C128 ? 8 : es);
    io_normalize(t, ten->data, ten->nbytes);
    if (h.fortran && h.rank > 1 && ten->count > 1) {
        tpu_tensor *c = ten_alloc_uninit(t, h.rank, h.dims);
        if (!c) {
            tpu_tensor_free(ten);
            return ut_err(s->ctx, TPU_ERR_NOMEM, "%s: out of memory transposing a Fortran-order array", s->what);
        }
        io_transpose(ten, ten->data, c->data);
        tpu_tensor_free(ten);
        ten = c;
    }
    *out = ten;
    return TPU_OK;
}

tpu_status io_npy_load_mem_opts(tpu_ctx *ctx, const void *buf, size_t len, const char *what, const io_npy_opts *o,
                                tpu_tensor **out)
{
    *out = NULL;
    io_src s;
    memset(&s, 0, sizeof s);
    s.ctx = ctx;
    s.what = what ? what : "<memory>";
    s.mem = buf ? buf : (const void *)"";
    s.len = buf ? len : 0;
    return io_npy_read(&s, s.len, o, out);
}

tpu_status tpu_npy_load_mem(tpu_ctx *ctx, const void *buf, size_t len, const char *what, tpu_tensor **out)
{
    return io_npy_load_mem_opts(ctx, buf, len, what, NULL, out);
}

tpu_status io_npy_load_opts(tpu_ctx *ctx, const char *path, const io_npy_opts *o, tpu_tensor **out)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return ut_err(ctx, TPU_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
        fclose(f);
        return ut_err(ctx, TPU_ERR_IO, "%s: is a directory", path);
    }
    uint64_t size = UINT64_MAX;   /* unknown for pipes */
    if (fseeko(f, 0, SEEK_END) == 0) {
        off_t end = ftello(f);
        if (end >= 0 && fseeko(f, 0, SEEK_SET) == 0) size = (uint64_t)end;
    }
    clearerr(f);
    io_src s;
    memset(&s, 0, sizeof s);
    s.ctx = ctx;
    s.what = path;
    s.f = f;
    s.remain = UINT64_MAX;
    tpu_status st = io_npy_read(&s, size, o, out);
    fclose(f);
    return st;
}

tpu_status tpu_npy_load(tpu_ctx *ctx, const char *path, tpu_tensor **out)
{
    return io_npy_load_opts(ctx, path, NULL, out);
}

/* ---------------------------------------------------------------------------------------------------------
 * Writing
 * ------------------------------------------------------------------------------------------------------- */

tpu_status io_npy_header(tpu_ctx *ctx, const tpu_tensor *t, ut_buf *b)
{
    const char *descr = io_npy_descr(t->dtype);
    if (!descr)
        return ut_err(ctx, TPU_ERR_INVALID, "cannot save a %s tensor as .npy (not an array element type)",
                      tpu_dtype_name(t->dtype));
    ut_buf d;
    ut_buf_init(&d);
    ut_buf_printf(&d, "{'descr': %s, 'fortran_order': False, 'shape': (", descr);
    for (int i = 0; i < t->rank; i++) ut_buf_printf(&d, "%s%lld", i ? ", " : "", (long long)t->dims[i]);
    ut_buf_puts(&d, t->rank == 1 ? ",), }" : "), }");
    if (d.failed) {
        ut_buf_free(&d);
        return ut_nomem(ctx);
    }
    /* pad with spaces so that the data start at a multiple of 64, then a newline (as numpy does) */
    int major = 1;
    size_t pre = 10, hlen = (pre + d.len + 1 + 63) / 64 * 64 - pre;
    if (hlen > 65535) major = 2, pre = 12, hlen = (pre + d.len + 1 + 63) / 64 * 64 - pre;
    char magic[12] = {'\x93', 'N', 'U', 'M', 'P', 'Y', (char)major, 0};
    if (major == 1) {
        magic[8] = (char)(hlen & 0xFF), magic[9] = (char)(hlen >> 8);
    } else {
        for (int i = 0; i < 4; i++) magic[8 + i] = (char)((hlen >> (8 * i)) & 0xFF);
    }
    ut_buf_put(b, magic, pre);
    ut_buf_put(b, d.data, d.len);
    for (size_t i = d.len; i + 1 < hlen; i++) ut_buf_putc(b, ' ');
    ut_buf_putc(b, '\n');
    ut_buf_free(&d);
    return b->failed ? ut_nomem(ctx) : TPU_OK;
}

void io_npy_encode(const tpu_tensor *t, size_t first, size_t n, uint8_t *dst)
{
    const uint8_t *src = (const uint8_t *)t->data + first;
    memcpy(dst, src, n);
    io_normalize(t->dtype, dst, n);
    if (!io_host_le()) {
        size_t es = tpu_dtype_size(t->dtype);
        io_swap_bytes(dst, n, t->dtype == TPU_C64 ? 4 : t->dtype == TPU_C128 ? 8 : es);
    }
}

tpu_status tpu_npy_save(tpu_ctx *ctx, const char *path, const tpu_tensor *t)
{
    if (!t) return ut_err(ctx, TPU_ERR_INVALID, "%s: no tensor to save", path);
    ut_buf hdr;
    ut_buf_init(&hdr);
    tpu_status st = io_npy_header(ctx, t, &hdr);
    if (st) {
        ut_buf_free(&hdr);
        ut_err_prefix(ctx, "%s", path);
        return st;
    }
    size_t chunk = UT_MIN(t->nbytes, (size_t)IO_ZCHUNK);
    uint8_t *tmp = ut_malloc(chunk ? chunk : 1);
    if (!tmp) {
        ut_buf_free(&hdr);
        return ut_err(ctx, TPU_ERR_NOMEM, "%s: out of memory", path);
    }
    ut_out out;
    if ((st = ut_out_open(ctx, path, &out))) goto done;
    int bad = fwrite(hdr.data, 1, hdr.len, out.f) != hdr.len;
    for (size_t off = 0; off < t->nbytes && !bad; off += chunk) {
        size_t k = UT_MIN(chunk, t->nbytes - off);
        io_npy_encode(t, off, k, tmp);
        bad = fwrite(tmp, 1, k, out.f) != k;
    }
    if (bad) {
        st = ut_err(ctx, TPU_ERR_IO, "%s: cannot write: %s", path, strerror(errno ? errno : EIO));
        ut_out_close(&out, 0, 0);
    } else {
        st = ut_out_close(&out, 1, 0);
    }
done:
    ut_free(tmp);
    ut_buf_free(&hdr);
    return st;
}
