/* tensor.c — dtypes table and the tensor handle. */
#include "tensor.h"
#include "fp.h"

#include <math.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

static const struct { const char *name; int bits; char kind; } ut_dtypes[] = {
#define X(e, name, bits, kind) {name, bits, kind},
    TPU_DTYPE_LIST(X)
#undef X
};
_Static_assert(sizeof ut_dtypes / sizeof ut_dtypes[0] == TPU_DTYPE_COUNT, "dtype table out of sync");

const char *tpu_dtype_name(tpu_dtype t) { return (unsigned)t < TPU_DTYPE_COUNT ? ut_dtypes[t].name : "invalid"; }
int tpu_dtype_bits(tpu_dtype t) { return (unsigned)t < TPU_DTYPE_COUNT ? ut_dtypes[t].bits : 0; }
char tpu_dtype_kind(tpu_dtype t) { return (unsigned)t < TPU_DTYPE_COUNT ? ut_dtypes[t].kind : 'o'; }

size_t tpu_dtype_size(tpu_dtype t)
{
    int bits = tpu_dtype_bits(t);
    if (bits == 0) return 0;
    return bits < 8 ? 1 : (size_t)bits / 8;
}

tpu_dtype tpu_dtype_from_name(const char *name, size_t len)
{
    for (int i = 1; i < TPU_DTYPE_COUNT; i++) {
        if (i == TPU_TUPLE) continue;   /* "tuple" is not an HLO element type name */
        const char *n = ut_dtypes[i].name;
        if (strlen(n) == len && memcmp(n, name, len) == 0) return (tpu_dtype)i;
    }
    return TPU_INVALID;
}

/* ---- tensors ---- */

int64_t ten_count(int rank, const int64_t *dims)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0) return -1;
        if (dims[i] && n > ((int64_t)1 << 62) / dims[i]) return -1;
        n *= dims[i];
    }
    return n;
}

/* (asked once: sysconf(_SC_PHYS_PAGES) is a sysinfo system call, which cost small ops in loop bodies a
 * quarter of their time when it ran on every allocation) */
uint64_t ten_max_bytes(void)
{
    static _Atomic uint64_t max;
    uint64_t m = atomic_load_explicit(&max, memory_order_relaxed);
    if (m) return m;
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    m = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : (uint64_t)1 << 40;
    atomic_store_explicit(&max, m, memory_order_relaxed);
    return m;
}

/* Buffers of 4 MiB and more: their 2 MiB-aligned interior asked for transparent huge pages before the first
 * touch (where THP is "madvise"; a no-op where it is off or "always"). Random reads across a large operand
 * (gathers, embedding tables) then miss the TLB far less: 200000 point reads from f32[1024,4096] took 0.27 ms
 * instead of 0.63 ms here. */
static void ten_advise_huge(void *p, size_t n)
{
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const uintptr_t hp = (uintptr_t)2 << 20;
    if (n < ((size_t)4 << 20)) return;
    uintptr_t a = ((uintptr_t)p + hp - 1) & ~(hp - 1), b = ((uintptr_t)p + n) & ~(hp - 1);
    if (b > a) madvise((void *)a, b - a, MADV_HUGEPAGE);
#else
    (void)p;
    (void)n;
#endif
}

static tpu_tensor *ten_alloc_impl(tpu_dtype dtype, int rank, const int64_t *dims, int zero)
{
    if (rank < 0 || rank > TPU_MAX_RANK || (unsigned)dtype >= TPU_DTYPE_COUNT) return NULL;
    int64_t n = ten_count(rank, dims);
    if (n < 0) return NULL;
    size_t es = tpu_dtype_size(dtype);
    if (es && (uint64_t)n > SIZE_MAX / 2 / es) return NULL;
    /* a tensor larger than the machine's memory cannot be used: refused before malloc is asked (a sanitizer's
     * or fuzzer's allocator would stop the process on the request itself) */
    if ((uint64_t)n * es > ten_max_bytes()) return NULL;
    tpu_tensor *t = ut_calloc(1, sizeof *t);
    if (!t) return NULL;
    t->dtype = dtype;
    t->rank = rank;
    for (int i = 0; i < rank; i++) t->dims[i] = dims[i];
    t->count = n;
    t->nbytes = (size_t)n * es;
    size_t alloc = (t->nbytes + 63) & ~(size_t)63;
    if (alloc == 0) alloc = 64;
    /* 64-byte alignment for vector kernels; aligned_alloc does not go through the hook, so over-allocate */
    void *raw = ut_malloc(alloc + 64 + sizeof(void *));
    if (!raw) {
        ut_free(t);
        return NULL;
    }
    uintptr_t p = ((uintptr_t)raw + sizeof(void *) + 63) & ~(uintptr_t)63;
    ((void **)p)[-1] = raw;
    t->data = (void *)p;
    ten_advise_huge(t->data, alloc);
    if (zero) memset(t->data, 0, alloc);
    return t;
}

tpu_tensor *ten_alloc(tpu_dtype dtype, int rank, const int64_t *dims) { return ten_alloc_impl(dtype, rank, dims, 1); }
tpu_tensor *ten_alloc_uninit(tpu_dtype dtype, int rank, const int64_t *dims)
{
    return ten_alloc_impl(dtype, rank, dims, 0);
}

tpu_tensor *ten_clone(const tpu_tensor *t)
{
    tpu_tensor *c = ten_alloc_uninit(t->dtype, t->rank, t->dims);
    if (c && t->nbytes) memcpy(c->data, t->data, t->nbytes);
    return c;
}

tpu_status tpu_tensor_new(tpu_ctx *ctx, tpu_dtype dtype, int rank, const int64_t *dims, tpu_tensor **out)
{
    *out = NULL;
    if (rank < 0 || rank > TPU_MAX_RANK)
        return ut_err(ctx, TPU_ERR_INVALID, "tensor rank %d outside 0..%d", rank, TPU_MAX_RANK);
    if ((unsigned)dtype >= TPU_DTYPE_COUNT || tpu_dtype_size(dtype) == 0)
        return ut_err(ctx, TPU_ERR_INVALID, "tensor dtype %d is not an array element type", (int)dtype);
    for (int i = 0; i < rank; i++)
        if (dims[i] < 0) return ut_err(ctx, TPU_ERR_INVALID, "tensor dimension %d is negative", i);
    *out = ten_alloc(dtype, rank, dims);
    return *out ? TPU_OK : ut_err(ctx, TPU_ERR_NOMEM, "out of memory allocating a %s tensor", tpu_dtype_name(dtype));
}

void tpu_tensor_free(tpu_tensor *t)
{
    if (!t) return;
    if (t->release) {
        void (*release)(tpu_tensor *) = t->release;
        t->release = NULL;
        release(t);
        return;
    }
    if (t->data) ut_free(((void **)t->data)[-1]);
    ut_free(t);
}

void tpu_tensors_free(tpu_tensor **ts, int n)
{
    if (!ts) return;
    for (int i = 0; i < n; i++) tpu_tensor_free(ts[i]);
    ut_free(ts);
}

tpu_dtype tpu_tensor_dtype(const tpu_tensor *t) { return t->dtype; }
int tpu_tensor_rank(const tpu_tensor *t) { return t->rank; }
const int64_t *tpu_tensor_dims(const tpu_tensor *t) { return t->dims; }
int64_t tpu_tensor_count(const tpu_tensor *t) { return t->count; }
size_t tpu_tensor_nbytes(const tpu_tensor *t) { return t->nbytes; }
void *tpu_tensor_data(tpu_tensor *t) { return t->data; }
const void *tpu_tensor_cdata(const tpu_tensor *t) { return t->data; }
double tpu_tensor_get_f64(const tpu_tensor *t, int64_t i) { return ten_load_f64(t->dtype, t->data, i); }

void tpu_tensor_shape_str(const tpu_tensor *t, char *buf, size_t size)
{
    ut_buf b;
    ut_buf_init(&b);
    ut_buf_printf(&b, "%s[", tpu_dtype_name(t->dtype));
    for (int i = 0; i < t->rank; i++) ut_buf_printf(&b, "%s%lld", i ? "," : "", (long long)t->dims[i]);
    ut_buf_putc(&b, ']');
    if (size) {
        snprintf(buf, size, "%s", b.data ? b.data : "?");
    }
    ut_buf_free(&b);
}

/* ---- element access ---- */

static int64_t ten_sext(uint64_t v, int bits) { return (int64_t)(v << (64 - bits)) >> (64 - bits); }

double ten_load_f64(tpu_dtype t, const void *base, int64_t i)
{
    switch (t) {
    case TPU_PRED: return ((const uint8_t *)base)[i] != 0;
    case TPU_S2: return (double)ten_sext(((const uint8_t *)base)[i], 2);
    case TPU_S4: return (double)ten_sext(((const uint8_t *)base)[i], 4);
    case TPU_S8: return ((const int8_t *)base)[i];
    case TPU_S16: return ((const int16_t *)base)[i];
    case TPU_S32: return ((const int32_t *)base)[i];
    case TPU_S64: return (double)((const int64_t *)base)[i];
    case TPU_U2: return ((const uint8_t *)base)[i] & 3;
    case TPU_U4: return ((const uint8_t *)base)[i] & 15;
    case TPU_U8: return ((const uint8_t *)base)[i];
    case TPU_U16: return ((const uint16_t *)base)[i];
    case TPU_U32: return ((const uint32_t *)base)[i];
    case TPU_U64: return (double)((const uint64_t *)base)[i];
    case TPU_F16: return fp_f16_to_f32(((const uint16_t *)base)[i]);
    case TPU_BF16: return fp_bf16_to_f32(((const uint16_t *)base)[i]);
    case TPU_F32: return ((const float *)base)[i];
    case TPU_F64: return ((const double *)base)[i];
    case TPU_C64: return ((const float *)base)[2 * i];     /* real part */
    case TPU_C128: return ((const double *)base)[2 * i];
    case TPU_F8E5M2: case TPU_F8E4M3FN: case TPU_F8E4M3B11FNUZ: case TPU_F8E5M2FNUZ: case TPU_F8E4M3FNUZ:
    case TPU_F8E4M3: case TPU_F8E3M4: case TPU_F4E2M1FN: case TPU_F8E8M0FNU:
        return fp_small_to_f64(t, ((const uint8_t *)base)[i]);
    default: return NAN;
    }
}

/* Float to integer the way XLA's convert does it: NaN -> 0, saturate at the type's range, truncate. */
static int64_t ten_f64_to_i64_sat(double v, double lo, double hi)
{
    if (isnan(v)) return 0;
    if (v <= lo) return (int64_t)lo;
    if (v >= hi) return (int64_t)hi;
    return (int64_t)v;
}

static uint64_t ten_f64_to_u64_sat(double v, double hi)
{
    if (isnan(v) || v <= 0) return 0;
    if (v >= hi) return (uint64_t)hi;
    return (uint64_t)v;
}

void ten_store_f64(tpu_dtype t, void *base, int64_t i, double v)
{
    switch (t) {
    case TPU_PRED: ((uint8_t *)base)[i] = v != 0; break;
    case TPU_S2: ((uint8_t *)base)[i] = (uint8_t)(ten_f64_to_i64_sat(v, -2, 1) & 3); break;
    case TPU_S4: ((uint8_t *)base)[i] = (uint8_t)(ten_f64_to_i64_sat(v, -8, 7) & 15); break;
    case TPU_S8: ((int8_t *)base)[i] = (int8_t)ten_f64_to_i64_sat(v, -128, 127); break;
    case TPU_S16: ((int16_t *)base)[i] = (int16_t)ten_f64_to_i64_sat(v, -32768, 32767); break;
    case TPU_S32: ((int32_t *)base)[i] = (int32_t)ten_f64_to_i64_sat(v, -2147483648.0, 2147483647.0); break;
    case TPU_S64:
        if (isnan(v)) ((int64_t *)base)[i] = 0;
        else if (v >= 9223372036854775807.0) ((int64_t *)base)[i] = INT64_MAX;
        else if (v <= -9223372036854775808.0) ((int64_t *)base)[i] = INT64_MIN;
        else ((int64_t *)base)[i] = (int64_t)v;
        break;
    case TPU_U2: ((uint8_t *)base)[i] = (uint8_t)ten_f64_to_u64_sat(v, 3); break;
    case TPU_U4: ((uint8_t *)base)[i] = (uint8_t)ten_f64_to_u64_sat(v, 15); break;
    case TPU_U8: ((uint8_t *)base)[i] = (uint8_t)ten_f64_to_u64_sat(v, 255); break;
    case TPU_U16: ((uint16_t *)base)[i] = (uint16_t)ten_f64_to_u64_sat(v, 65535); break;
    case TPU_U32: ((uint32_t *)base)[i] = (uint32_t)ten_f64_to_u64_sat(v, 4294967295.0); break;
    case TPU_U64:
        if (isnan(v) || v <= 0) ((uint64_t *)base)[i] = 0;
        else if (v >= 18446744073709551615.0) ((uint64_t *)base)[i] = UINT64_MAX;
        else ((uint64_t *)base)[i] = (uint64_t)v;
        break;
    case TPU_F16: ((uint16_t *)base)[i] = fp_f64_to_f16(v); break;
    case TPU_BF16: ((uint16_t *)base)[i] = fp_f64_to_bf16(v); break;
    case TPU_F32: ((float *)base)[i] = (float)v; break;
    case TPU_F64: ((double *)base)[i] = v; break;
    case TPU_C64: ((float *)base)[2 * i] = (float)v; ((float *)base)[2 * i + 1] = 0; break;
    case TPU_C128: ((double *)base)[2 * i] = v; ((double *)base)[2 * i + 1] = 0; break;
    case TPU_F8E5M2: case TPU_F8E4M3FN: case TPU_F8E4M3B11FNUZ: case TPU_F8E5M2FNUZ: case TPU_F8E4M3FNUZ:
    case TPU_F8E4M3: case TPU_F8E3M4: case TPU_F4E2M1FN: case TPU_F8E8M0FNU:
        ((uint8_t *)base)[i] = fp_f64_to_small(t, v);
        break;
    default: break;
    }
}

int64_t ten_load_i64(tpu_dtype t, const void *base, int64_t i)
{
    switch (t) {
    case TPU_PRED: return ((const uint8_t *)base)[i] != 0;
    case TPU_S2: return ten_sext(((const uint8_t *)base)[i], 2);
    case TPU_S4: return ten_sext(((const uint8_t *)base)[i], 4);
    case TPU_S8: return ((const int8_t *)base)[i];
    case TPU_S16: return ((const int16_t *)base)[i];
    case TPU_S32: return ((const int32_t *)base)[i];
    case TPU_S64: return ((const int64_t *)base)[i];
    case TPU_U2: return ((const uint8_t *)base)[i] & 3;
    case TPU_U4: return ((const uint8_t *)base)[i] & 15;
    case TPU_U8: return ((const uint8_t *)base)[i];
    case TPU_U16: return ((const uint16_t *)base)[i];
    case TPU_U32: return ((const uint32_t *)base)[i];
    case TPU_U64: return (int64_t)((const uint64_t *)base)[i];
    default: return ten_f64_to_i64_sat(ten_load_f64(t, base, i), -9223372036854775808.0, 9223372036854775807.0);
    }
}

/* Integer stores wrap (two's complement truncation), as integer arithmetic results do in XLA. */
void ten_store_i64(tpu_dtype t, void *base, int64_t i, int64_t v)
{
    switch (t) {
    case TPU_PRED: ((uint8_t *)base)[i] = v != 0; break;
    case TPU_S2: case TPU_U2: ((uint8_t *)base)[i] = (uint8_t)(v & 3); break;
    case TPU_S4: case TPU_U4: ((uint8_t *)base)[i] = (uint8_t)(v & 15); break;
    case TPU_S8: case TPU_U8: ((uint8_t *)base)[i] = (uint8_t)v; break;
    case TPU_S16: case TPU_U16: ((uint16_t *)base)[i] = (uint16_t)v; break;
    case TPU_S32: case TPU_U32: ((uint32_t *)base)[i] = (uint32_t)v; break;
    case TPU_S64: case TPU_U64: ((uint64_t *)base)[i] = (uint64_t)v; break;
    default: ten_store_f64(t, base, i, (double)v); break;
    }
}
