/* exe_core.c — runtime values, result allocation, error messages, TPU numerics helpers. */
#include "exec.h"
#include "util/fp.h"

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- buffer pool ----
 * Result buffers of a run are recycled: a large buffer freed by the interpreter is kept (up to a byte limit)
 * and handed to the next result of about its size, so big outputs do not pay for fresh zeroed pages from
 * the kernel every time (20-30% of a MobileNet step). One pool per running thread (device threads of the
 * replicated runtime each have their own), active between exe_pool_push and exe_pool_pop. */
#define EXE_POOL_MIN ((size_t)64 << 10)   /* smaller blocks: the small lists below */

typedef struct exe_pool_ent {
    tpu_tensor *t;
    size_t      cap;
} exe_pool_ent;

/* Small results (a loop body's scalars and short vectors, thousands per run) cost three mallocs and three
 * frees each (value, tensor header, data) where the kernel itself takes tens of nanoseconds: freed small
 * tensors wait in per-size lists (one per 64-byte capacity, linked through their data) and freed values in
 * one list (linked through elems), for the next result of the same size. */
#define EXE_SMALL_CLASSES ((int)(EXE_POOL_MIN / 64))
#define EXE_SMALL_PER     64                  /* tensors kept per size */
#define EXE_SMALL_BYTES   ((size_t)16 << 20)  /* at most this much in all the small lists */
#define EXE_VALUES_KEPT   4096

struct exe_pool {
    exe_pool_ent *e;
    int           n, cap_n;
    size_t        bytes, limit;
    tpu_tensor  **small;        /* [EXE_SMALL_CLASSES] list heads (next: the first word of the data), lazily */
    uint8_t      *small_n;      /* [EXE_SMALL_CLASSES] lengths */
    size_t        small_bytes;
    exe_value    *values;       /* freed exe_value structs (next: elems) */
    int           nvalues;
};

static _Thread_local exe_pool *exe_tls_pool;

static size_t exe_pool_limit(void)
{
    const char *e = getenv("TPUSIM_POOL_MB");
    if (e && *e) return (size_t)strtoull(e, NULL, 10) << 20;
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    size_t lim = (size_t)2 << 30;
    if (pages > 0 && psz > 0 && (size_t)pages * (size_t)psz / 8 < lim) lim = (size_t)pages * (size_t)psz / 8;
    return lim;
}

/* Between runs a thread keeps its pool (a training loop runs the same step again and again, like XLA's
 * allocator keeping its arena); the thread-exit destructor frees it. */
static pthread_key_t exe_pool_key;
static pthread_once_t exe_pool_once = PTHREAD_ONCE_INIT;

static void exe_pool_free(exe_pool *p)
{
    if (!p) return;
    for (int i = 0; i < p->n; i++) tpu_tensor_free(p->e[i].t);
    ut_free(p->e);
    for (int c = 0; p->small && c < EXE_SMALL_CLASSES; c++)
        for (tpu_tensor *t = p->small[c], *nx; t; t = nx) {
            nx = *(tpu_tensor **)t->data;
            tpu_tensor_free(t);
        }
    ut_free(p->small);
    ut_free(p->small_n);
    for (exe_value *v = p->values, *nx; v; v = nx) {
        nx = (exe_value *)v->elems;
        ut_free(v);
    }
    ut_free(p);
}

static void exe_pool_destroy(void *p) { exe_pool_free(p); }

/* the main thread's kept pool at exit (thread-exit destructors do not run for it) */
static void exe_pool_atexit(void)
{
    exe_pool *p = pthread_getspecific(exe_pool_key);
    pthread_setspecific(exe_pool_key, NULL);
    exe_pool_free(p);
}

static void exe_pool_key_init(void)
{
    pthread_key_create(&exe_pool_key, exe_pool_destroy);
    atexit(exe_pool_atexit);
}

exe_pool *exe_pool_push(void)
{
    pthread_once(&exe_pool_once, exe_pool_key_init);
    exe_pool *prev = exe_tls_pool, *p = prev ? NULL : pthread_getspecific(exe_pool_key);
    if (p) pthread_setspecific(exe_pool_key, NULL);
    else p = ut_calloc(1, sizeof *p);
    if (p) {
        if (!p->limit) p->limit = exe_pool_limit();   /* once per pool: sysconf asks the kernel each time */
        exe_tls_pool = p;
    }
    return prev;
}

void exe_pool_pop(exe_pool *prev)
{
    exe_pool *p = exe_tls_pool;
    exe_tls_pool = prev;
    if (!p) return;
    if (prev || pthread_getspecific(exe_pool_key) || pthread_setspecific(exe_pool_key, p)) exe_pool_free(p);
}

/* A large fresh buffer comes from the kernel page by page on first touch, one fault per 4 KiB (~2 us each
 * here, more than the zeroing): populating it with one madvise call costs a fraction of that. */
static void exe_prefault(tpu_tensor *t)
{
#if defined(__linux__)
    const uintptr_t pg = 4096;
    if (t->nbytes < ((size_t)1 << 20)) return;
    uintptr_t a = ((uintptr_t)t->data + pg - 1) & ~(pg - 1), b = ((uintptr_t)t->data + t->nbytes) & ~(pg - 1);
    /* 4 MiB and more: the 2 MiB-aligned interior in transparent huge pages (one fault per 2 MiB instead of
     * 512: a 32 MiB result populated in a third of the time, where THP is "madvise"; a no-op where it is off) */
    const uintptr_t hp = (uintptr_t)2 << 20;
    uintptr_t ha = ((uintptr_t)t->data + hp - 1) & ~(hp - 1), hb = ((uintptr_t)t->data + t->nbytes) & ~(hp - 1);
    if (t->nbytes >= ((size_t)4 << 20) && hb > ha) madvise((void *)ha, hb - ha, 14 /* MADV_HUGEPAGE */);
    if (b > a) madvise((void *)a, b - a, 23 /* MADV_POPULATE_WRITE, Linux 5.14; older kernels say EINVAL */);
#else
    (void)t;
#endif
}

static size_t exe_cap(size_t nbytes) { return (nbytes + 63) & ~(size_t)63; }

/* A freed tensor of capacity class cap (its buffer holds at least cap bytes, and 64 when cap is 0: see
 * ten_alloc_impl) into its small list, or freed when the lists are full. */
static void exe_small_put(exe_pool *p, tpu_tensor *t, size_t cap)
{
    int c = (int)(cap / 64);
    if (!p->small) {
        p->small = ut_calloc(EXE_SMALL_CLASSES, sizeof *p->small);
        p->small_n = ut_calloc(EXE_SMALL_CLASSES, 1);
        if (!p->small || !p->small_n) {
            ut_free(p->small);
            ut_free(p->small_n);
            p->small = NULL;
            p->small_n = NULL;
        }
    }
    if (!p->small || !t->data || p->small_n[c] >= EXE_SMALL_PER || p->small_bytes + cap + 64 > EXE_SMALL_BYTES) {
        tpu_tensor_free(t);
        return;
    }
    *(tpu_tensor **)t->data = p->small[c];
    p->small[c] = t;
    p->small_n[c]++;
    p->small_bytes += cap + 64;
}

/* A small listed tensor of capacity class `need`, or NULL. */
static tpu_tensor *exe_small_take(exe_pool *p, size_t need)
{
    int c = (int)(need / 64);
    if (!p->small || !p->small[c]) return NULL;
    tpu_tensor *t = p->small[c];
    p->small[c] = *(tpu_tensor **)t->data;
    p->small_n[c]--;
    p->small_bytes -= need + 64;
    return t;
}

/* exe_value structs, from the calling thread's pool when it has one (zeroed) */
static exe_value *exe_value_new(void)
{
    exe_pool *p = exe_tls_pool;
    if (p && p->values) {
        exe_value *v = p->values;
        p->values = (exe_value *)v->elems;
        p->nvalues--;
        memset(v, 0, offsetof(exe_value, inl));   /* inl and hdr are set before they are used */
        return v;
    }
    return ut_calloc(1, sizeof(exe_value));
}

static void exe_value_del(exe_value *v)
{
    exe_pool *p = exe_tls_pool;
    if (p && p->nvalues < EXE_VALUES_KEPT) {
        v->elems = (exe_value **)p->values;
        p->values = v;
        p->nvalues++;
        return;
    }
    ut_free(v);
}

/* Drops t into pool p (NULL: frees it). */
static void exe_pool_put(exe_pool *p, tpu_tensor *t)
{
    if (!t) return;
    size_t cap = exe_cap(t->nbytes);
    if (p && cap < EXE_POOL_MIN) {
        exe_small_put(p, t, cap);
        return;
    }
    if (!p || cap > p->limit) {
        tpu_tensor_free(t);
        return;
    }
    if (p->n == p->cap_n) {
        exe_pool_ent *ne = ut_grow(p->e, sizeof *ne, p->n, &p->cap_n, 32);
        if (!ne) {
            tpu_tensor_free(t);
            return;
        }
        p->e = ne;
    }
    p->e[p->n].t = t;
    p->e[p->n++].cap = cap;
    p->bytes += cap;
    /* over the limit: the oldest go first */
    int drop = 0;
    while (p->bytes > p->limit && drop < p->n) {
        p->bytes -= p->e[drop].cap;
        tpu_tensor_free(p->e[drop++].t);
    }
    if (drop) {
        memmove(p->e, p->e + drop, (size_t)(p->n - drop) * sizeof *p->e);
        p->n -= drop;
    }
}

void exe_tensor_release(tpu_tensor *t) { exe_pool_put(exe_tls_pool, t); }

/* A result the caller frees (tpu_tensor_free) comes back here: into the freeing thread's pool, the running one
 * or else the one it keeps between runs, so the next run's results of that size take its pages instead of
 * fresh ones the kernel must clear (a training step's new weights, each step); freed when the thread has no
 * pool (it never ran a program). */
static void exe_output_release(tpu_tensor *t)
{
    exe_pool *p = exe_tls_pool;
    if (!p) {
        pthread_once(&exe_pool_once, exe_pool_key_init);
        p = pthread_getspecific(exe_pool_key);
    }
    exe_pool_put(p, t);
}

void exe_output_mark(tpu_tensor *t) { t->release = exe_output_release; }

/* A pooled buffer given its new shape (its capacity already checked) */
static void exe_pool_shape(tpu_tensor *t, tpu_dtype dtype, int rank, const int64_t *dims, int64_t count, size_t es)
{
    t->dtype = dtype;
    t->rank = rank;
    for (int i = 0; i < rank; i++) t->dims[i] = dims[i];
    t->count = count;
    t->nbytes = (size_t)count * es;
}

/* A pooled buffer of at least the size (at most 1/8 larger), reshaped; NULL if none. */
static tpu_tensor *exe_pool_take(tpu_dtype dtype, int rank, const int64_t *dims)
{
    exe_pool *p = exe_tls_pool;
    if (!p || rank > TPU_MAX_RANK) return NULL;
    int64_t count = 1;
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0 || (dims[i] && count > ((int64_t)1 << 62) / dims[i])) return NULL;
        count *= dims[i];
    }
    size_t es = tpu_dtype_size(dtype);
    if (!es || (uint64_t)count > SIZE_MAX / 2 / es) return NULL;
    size_t need = exe_cap((size_t)count * es);
    if (need < EXE_POOL_MIN) {
        tpu_tensor *t = exe_small_take(p, need);
        if (t) exe_pool_shape(t, dtype, rank, dims, count, es);
        return t;
    }
    int best = -1;
    if (!p->n) return NULL;
    for (int i = p->n - 1; i >= 0; i--)
        if (p->e[i].cap >= need && p->e[i].cap - need <= need / 8 && (best < 0 || p->e[i].cap < p->e[best].cap)) best = i;
    if (best < 0) {
        return NULL;
    }
    tpu_tensor *t = p->e[best].t;
    p->bytes -= p->e[best].cap;
    p->e[best] = p->e[--p->n];
    exe_pool_shape(t, dtype, rank, dims, count, es);
    return t;
}

exe_value *exe_value_array(tpu_tensor *t)
{
    exe_value *v = exe_value_new();
    if (!v) {
        tpu_tensor_free(t);
        return NULL;
    }
    v->refs = 1;
    v->t = t;
    return v;
}

exe_value *exe_value_tuple(exe_value **elems, int n)
{
    exe_value *v = exe_value_new();
    /* a small tuple's element array lives in the value (a loop state is rebuilt every iteration) */
    exe_value **e = !v || !n ? NULL : n <= EXE_TUPLE_INLINE ? v->inl : ut_malloc((size_t)n * sizeof *e);
    if (!v || (n && !e)) {
        if (v) exe_value_del(v);
        for (int i = 0; i < n; i++) exe_value_unref(elems[i]);
        return NULL;
    }
    v->refs = 1;
    v->ntuple = n;
    v->elems = e;
    for (int i = 0; i < n; i++) e[i] = elems[i];
    return v;
}

void *exe_scratch_alloc(size_t bytes, tpu_tensor **handle)
{
    int64_t n = (int64_t)(bytes ? bytes : 1);
    tpu_tensor *t = exe_pool_take(TPU_U8, 1, &n);
    if (!t) t = ten_alloc_uninit(TPU_U8, 1, &n);
    *handle = t;
    return t ? t->data : NULL;
}

void exe_scratch_free(tpu_tensor *handle) { exe_tensor_release(handle); }

exe_value *exe_value_ref(exe_value *v)
{
    if (v) v->refs++;
    return v;
}

void exe_value_unref(exe_value *v)
{
    if (!v || --v->refs > 0) return;
    if (v->base) {
        if (v->t != &v->hdr) ut_free(v->t);   /* the header only: the data are base's */
        exe_value_unref(v->base);
    } else if (v->t && !v->borrowed) {
        exe_tensor_release(v->t);
    }
    for (int i = 0; i < v->ntuple; i++) exe_value_unref(v->elems[i]);
    if (v->elems != v->inl) ut_free(v->elems);
    exe_value_del(v);
}

exe_value *exe_value_view(exe_value *base, tpu_dtype dtype, int rank, const int64_t *dims)
{
    return exe_value_view_at(base, 0, dtype, rank, dims);
}

exe_value *exe_value_view_at(exe_value *base, size_t offset, tpu_dtype dtype, int rank, const int64_t *dims)
{
    if (!base->t) return NULL;
    exe_value *v = exe_value_new();
    if (!v) return NULL;
    tpu_tensor *t = &v->hdr;
    *t = *base->t;
    t->dtype = dtype;
    t->rank = rank;
    t->count = 1;
    for (int i = 0; i < rank; i++) {
        t->dims[i] = dims[i];
        t->count *= dims[i];
    }
    t->nbytes = (size_t)t->count * tpu_dtype_size(dtype);
    t->data = (char *)t->data + offset;
    v->refs = 1;
    v->borrowed = 1;
    v->t = t;
    v->base = exe_value_ref(base->base ? base->base : base);
    return v;
}

exe_value *exe_value_clone(const exe_value *v)
{
    if (v->t) {
        tpu_tensor *t = ten_clone(v->t);
        return t ? exe_value_array(t) : NULL;
    }
    exe_value **e = v->ntuple ? ut_malloc((size_t)v->ntuple * sizeof *e) : NULL;
    if (v->ntuple && !e) return NULL;
    for (int i = 0; i < v->ntuple; i++) {
        e[i] = exe_value_clone(v->elems[i]);
        if (!e[i]) {
            for (int k = 0; k < i; k++) exe_value_unref(e[k]);
            ut_free(e);
            return NULL;
        }
    }
    exe_value *r = exe_value_tuple(e, v->ntuple);
    ut_free(e);
    return r;
}

tpu_status exe_fail(exe_state *S, const hlo_instr *in, tpu_status st, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ut_err(S->ctx, st, "%s:%d:%d: %s '%s': %s", S->m && S->m->filename ? S->m->filename : "<hlo>", in->line,
                  in->col, hlo_op_name((hlo_op)in->op), in->name, msg);
}

tpu_status exe_alloc_shape(exe_state *S, const hlo_shape *s, tpu_tensor **t)
{
    if (!hlo_shape_is_array(s))
        return ut_err(S->ctx, TPU_ERR_INTERNAL, "exe_alloc_shape: not an array shape");
    if (s->dyn_mask)
        return ut_err(S->ctx, TPU_ERR_UNSUPPORTED, "dynamic shapes cannot be executed (the TPU needs static shapes)");
    *t = exe_pool_take((tpu_dtype)s->dtype, s->rank, s->dims);
    if (!*t) {
        *t = ten_alloc_uninit((tpu_dtype)s->dtype, s->rank, s->dims);
        if (*t) exe_prefault(*t);
    }
    if (!*t) {
        char b[128];
        return ut_err(S->ctx, TPU_ERR_NOMEM, "out of memory allocating %s (%.3g GB; this machine has %.3g GB)",
                      hlo_shape_str(s, b, sizeof b),
                      (double)hlo_shape_count(s) * (double)tpu_dtype_size((tpu_dtype)s->dtype) / 1e9,
                      (double)ten_max_bytes() / 1e9);
    }
    return TPU_OK;
}

tpu_status exe_alloc(exe_state *S, const hlo_instr *in, tpu_tensor **t)
{
    if (!hlo_shape_is_array(&in->shape)) return exe_fail(S, in, TPU_ERR_INTERNAL, "result is not an array");
    tpu_status st = exe_alloc_shape(S, &in->shape, t);
    if (st) ut_err_prefix(S->ctx, "%s:%d:%d: %s", S->m->filename, in->line, in->col, in->name);
    return st;
}

tpu_status exe_out_array(exe_state *S, tpu_tensor *t, exe_value **out)
{
    *out = exe_value_array(t);
    return *out ? TPU_OK : ut_nomem(S->ctx);
}

void exe_strides(const tpu_tensor *t, int64_t *strides)
{
    int64_t s = 1;
    for (int i = t->rank - 1; i >= 0; i--) {
        strides[i] = s;
        s *= t->dims[i];
    }
}

/* ---- numerics ---- */

static int exe_precision_passes(const char *p)
{
    if (!strcmp(p, "high") || !strcmp(p, "HIGH")) return 3;
    if (!strcmp(p, "highest") || !strcmp(p, "HIGHEST")) return 0;
    return 1;   /* default */
}

int exe_mxu_passes(const exe_state *S, const hlo_instr *in)
{
    if (S->numerics == TPU_NUMERICS_EXACT) return 0;
    /* only f32 operands get rounded: bf16 operands are already MXU inputs, f64/ints are computed exactly */
    int any_f32 = 0;
    for (int i = 0; i < in->nops && i < 2; i++)
        if (in->ops[i]->shape.dtype == TPU_F32) any_f32 = 1;
    if (!any_f32) return 0;
    const char *alg = hlo_attr_str(in, HK_ALGORITHM);
    if (alg) {
        if (!strcmp(alg, "dot_bf16_bf16_f32") || !strcmp(alg, "dot_bf16_bf16_bf16")) return 1;
        if (!strcmp(alg, "dot_bf16_bf16_f32_x3")) return 3;
        return 0;   /* x6, x9, f32, tf32, f16, f8 algorithms: f32-accurate on the TPU */
    }
    const hlo_attr *a = hlo_attr_find(in, HK_OPERAND_PRECISION);
    if (!a || a->kind != HA_IDENTS || a->v.idents.n == 0) return 1;
    /* the more precise of the two operand precisions decides the pass count */
    int passes = 1;
    for (int i = 0; i < a->v.idents.n; i++) {
        int p = exe_precision_passes(a->v.idents.v[i]);
        if (p == 0) return 0;
        if (p > passes) passes = p;
    }
    return passes;
}

void exe_store_float(const exe_state *S, tpu_dtype t, void *base, int64_t i, double v)
{
    switch (t) {
    case TPU_F32: ((float *)base)[i] = (float)v; break;
    case TPU_F64: ((double *)base)[i] = v; break;
    case TPU_BF16:
        /* results are computed in f32 with subnormals flushed (TPU, and XLA:CPU's FTZ), then rounded */
        ((uint16_t *)base)[i] = fp_f32_to_bf16_ftz((float)v);
        break;
    case TPU_F16: ((uint16_t *)base)[i] = fp_f32_to_f16((float)v); break;
    default: ten_store_f64(t, base, i, v); break;
    }
}
