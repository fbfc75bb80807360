/* pjrt_proto.c — the protobuf messages the PJRT API exchanges as bytes: the CompileOptionsProto a framework
 * compiles with (read), and the DeviceAssignmentProto and OpSharding it asks back (written). Only the fields
 * tpusim acts on are decoded; the rest are skipped by wire type. Field numbers: xla/pjrt/proto/
 * compile_options.proto and xla/xla_data.proto at the XLA commit jax 0.10.2 pins. */
#include "pjrt_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct pj_rd {
    const unsigned char *p, *end;
    int                  bad;
} pj_rd;

static uint64_t pj_varint(pj_rd *r)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end) break;
        unsigned char c = *r->p++;
        v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) return v;
    }
    r->bad = 1;
    return 0;
}

/* Reads one field's key; returns 0 at the end. For length-delimited fields, *sub gets the payload. */
static int pj_field(pj_rd *r, int *num, int *wt, uint64_t *val, pj_rd *sub)
{
    if (r->bad || r->p >= r->end) return 0;
    uint64_t key = pj_varint(r);
    *num = (int)(key >> 3);
    *wt = (int)(key & 7);
    *val = 0;
    switch (*wt) {
    case 0: *val = pj_varint(r); break;
    case 1: if (r->end - r->p < 8) r->bad = 1; else r->p += 8; break;
    case 5: if (r->end - r->p < 4) r->bad = 1; else r->p += 4; break;
    case 2: {
        uint64_t n = pj_varint(r);
        if (r->bad || n > (uint64_t)(r->end - r->p)) {
            r->bad = 1;
            break;
        }
        sub->p = r->p;
        sub->end = r->p + n;
        sub->bad = 0;
        r->p += n;
        break;
    }
    default: r->bad = 1;
    }
    return !r->bad;
}

/* ComputationDevice { repeated int64 replica_device_ids = 1; } (packed or not) */
static int pj_device_ids(pj_rd r, int64_t *ids, int cap)
{
    int n = 0, num, wt;
    uint64_t v;
    pj_rd sub;
    while (pj_field(&r, &num, &wt, &v, &sub)) {
        if (num != 1) continue;
        if (wt == 0) {
            if (n < cap) ids[n] = (int64_t)v;
            n++;
        } else if (wt == 2) {
            while (sub.p < sub.end && !sub.bad) {
                uint64_t x = pj_varint(&sub);
                if (n < cap) ids[n] = (int64_t)x;
                n++;
            }
            if (sub.bad) return -1;
        }
    }
    return r.bad ? -1 : n;
}

static PJRT_Error *pj_bad(const char *what)
{
    return pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "compile options: malformed %s (not a serialized CompileOptionsProto)", what);
}

static PJRT_Error *pj_device_assignment(pj_rd r, pj_compile_opts *o)
{
    int num, wt;
    uint64_t v;
    pj_rd sub;
    int64_t replicas = 0, comps = 0, ncd = 0;
    /* first pass: counts */
    pj_rd r0 = r;
    while (pj_field(&r0, &num, &wt, &v, &sub)) {
        if (num == 1 && wt == 0) replicas = (int64_t)v;
        else if (num == 2 && wt == 0) comps = (int64_t)v;
        else if (num == 3 && wt == 2) ncd++;
    }
    if (r0.bad) return pj_bad("device_assignment");
    if (replicas <= 0 || comps <= 0 || replicas > 65536 || comps > 65536 || replicas * comps > 65536 || ncd != comps)
        return pj_error(PJRT_Error_Code_INVALID_ARGUMENT,
                        "compile options: device_assignment of %lld replicas x %lld computations with %lld device lists",
                        (long long)replicas, (long long)comps, (long long)ncd);
    o->da = calloc((size_t)(replicas * comps), sizeof *o->da);
    int64_t *ids = calloc((size_t)replicas, sizeof *ids);
    if (!o->da || !ids) {
        free(ids);
        return pj_error(PJRT_Error_Code_RESOURCE_EXHAUSTED, "tpusim: out of host memory");
    }
    int c = 0;
    while (pj_field(&r, &num, &wt, &v, &sub)) {
        if (num != 3 || wt != 2) continue;
        int n = pj_device_ids(sub, ids, (int)replicas);
        if (n != replicas) {
            free(ids);
            return pj_error(PJRT_Error_Code_INVALID_ARGUMENT,
                            "compile options: device_assignment computation %d lists %d devices for %lld replicas", c, n,
                            (long long)replicas);
        }
        for (int k = 0; k < n; k++) o->da[(int64_t)k * comps + c] = (int)ids[k];
        c++;
    }
    free(ids);
    o->have_assignment = 1;
    o->da_replicas = (int)replicas;
    o->da_computations = (int)comps;
    return NULL;
}

static PJRT_Error *pj_build_options(pj_rd r, pj_compile_opts *o)
{
    int num, wt;
    uint64_t v;
    pj_rd sub;
    while (pj_field(&r, &num, &wt, &v, &sub)) {
        if (wt == 0 && num == 4) o->num_replicas = (int64_t)v;
        else if (wt == 0 && num == 5) o->num_partitions = (int64_t)v;
        else if (wt == 0 && num == 6) o->use_spmd = v != 0;
        else if (wt == 0 && num == 19) o->use_shardy = v != 0;
        else if (wt == 2 && num == 9) {
            PJRT_Error *e = pj_device_assignment(sub, o);
            if (e) return e;
        }
    }
    return r.bad ? pj_bad("executable_build_options") : NULL;
}

static int pj_str_is(pj_rd r, const char *s)
{
    size_t n = strlen(s);
    return (size_t)(r.end - r.p) == n && !memcmp(r.p, s, n);
}

/* env_option_overrides: map<string, OptionOverrideProto> (entry: key = 1, value = 2 { string_field = 1 }).
 * jax passes jit(..., compiler_options={...}) here. tpusim's own options start with "tpusim_"; the others
 * are the TPU compiler's flags and mean nothing to the simulator. */
static PJRT_Error *pj_option_override(pj_rd entry, pj_compile_opts *o)
{
    int num, wt;
    uint64_t v;
    pj_rd sub, key = {0}, val = {0};
    int have_val = 0;
    while (pj_field(&entry, &num, &wt, &v, &sub)) {
        if (num == 1 && wt == 2) key = sub;
        else if (num == 2 && wt == 2) {
            pj_rd r = sub;
            while (pj_field(&r, &num, &wt, &v, &sub))
                if (num == 1 && wt == 2) val = sub, have_val = 1;
        }
    }
    if (entry.bad) return pj_bad("env_option_overrides");
    if (!pj_str_is(key, "tpusim_numerics")) {
        if ((size_t)(key.end - key.p) >= 7 && !memcmp(key.p, "tpusim_", 7))
            return pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "compiler option '%.*s': tpusim knows tpusim_numerics only",
                            (int)(key.end - key.p), (const char *)key.p);
        return NULL;
    }
    if (have_val && pj_str_is(val, "tpu")) o->numerics = 1;
    else if (have_val && pj_str_is(val, "exact")) o->numerics = 2;
    else return pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "compiler option tpusim_numerics: expected \"tpu\" or \"exact\"");
    return NULL;
}

PJRT_Error *pj_parse_compile_options(const char *buf, size_t len, pj_compile_opts *o)
{
    memset(o, 0, sizeof *o);
    o->num_replicas = o->num_partitions = 1;
    pj_rd r = {(const unsigned char *)buf, (const unsigned char *)buf + len, 0};
    int num, wt;
    uint64_t v;
    pj_rd sub;
    while (buf && pj_field(&r, &num, &wt, &v, &sub)) {
        if (wt == 2 && num == 3) {
            PJRT_Error *e = pj_build_options(sub, o);
            if (e) return e;
        } else if (wt == 2 && num == 7) {
            PJRT_Error *e = pj_option_override(sub, o);
            if (e) return e;
        } else if (wt == 0 && num == 10) {
            o->have_matrix_precision = 1;
            o->matrix_precision = (int)v;
        }
    }
    if (r.bad) return pj_bad("message");
    if (o->num_replicas < 1) o->num_replicas = 1;
    if (o->num_partitions < 1) o->num_partitions = 1;
    return NULL;
}

void pj_compile_opts_free(pj_compile_opts *o)
{
    free(o->da);
    o->da = NULL;
}

/* ---- writing ---- */

typedef struct pj_wr {
    unsigned char *p;
    size_t         n, cap;
    int            bad;
} pj_wr;

static void pj_put(pj_wr *w, const void *src, size_t n)
{
    if (w->bad) return;
    if (w->n + n > w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 64;
        while (cap < w->n + n) cap *= 2;
        unsigned char *p = realloc(w->p, cap);
        if (!p) {
            w->bad = 1;
            return;
        }
        w->p = p;
        w->cap = cap;
    }
    memcpy(w->p + w->n, src, n);
    w->n += n;
}

static void pj_put_varint(pj_wr *w, uint64_t v)
{
    unsigned char b[10];
    int n = 0;
    do {
        b[n] = v & 0x7f;
        v >>= 7;
        if (v) b[n] |= 0x80;
        n++;
    } while (v);
    pj_put(w, b, (size_t)n);
}

static void pj_put_key(pj_wr *w, int num, int wt) { pj_put_varint(w, ((uint64_t)num << 3) | (uint64_t)wt); }

static char *pj_take(pj_wr *w, size_t *len)
{
    if (w->bad) {
        free(w->p);
        return NULL;
    }
    *len = w->n;
    if (!w->p) w->p = calloc(1, 1);   /* an empty message is zero bytes, but a pointer */
    return (char *)w->p;
}

char *pj_device_assignment_proto(int R, int P, const int *ids, size_t *len)
{
    pj_wr w = {0};
    pj_put_key(&w, 1, 0);
    pj_put_varint(&w, (uint64_t)R);
    pj_put_key(&w, 2, 0);
    pj_put_varint(&w, (uint64_t)P);
    for (int c = 0; c < P; c++) {
        pj_wr inner = {0};
        pj_put_key(&inner, 1, 2);   /* packed replica_device_ids */
        pj_wr packed = {0};
        for (int r = 0; r < R; r++) pj_put_varint(&packed, (uint64_t)ids[r * P + c]);
        pj_put_varint(&inner, packed.n);
        pj_put(&inner, packed.p, packed.n);
        free(packed.p);
        pj_put_key(&w, 3, 2);
        pj_put_varint(&w, inner.n);
        pj_put(&w, inner.p, inner.n);
        if (inner.bad || packed.bad) w.bad = 1;
        free(inner.p);
    }
    return pj_take(&w, len);
}

char *pj_replicated_sharding_proto(size_t *len)
{
    pj_wr w = {0};
    pj_put_key(&w, 1, 0);   /* type = REPLICATED (0): written so the message is not empty */
    pj_put_varint(&w, 0);
    return pj_take(&w, len);
}
