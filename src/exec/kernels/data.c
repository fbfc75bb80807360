/* data.c — data movement: broadcast, reshape, bitcast, transpose, slice, concatenate, pad, reverse, iota,
 * dynamic-slice, dynamic-update-slice. All of them are one strided N-d copy (exe_nd_copy) with the right
 * strides and offsets, so they work for every dtype. */
#include "exec/exec.h"
#include "exec/exe_ops.h"
#include "exec/exe_par.h"
#include "exec/kernels/ref.h"

#include <string.h>

/* ---- the strided copy ---- */

#define ND_INNER(T)                                                                 \
    do {                                                                            \
        T *d = (T *)dp;                                                             \
        const T *s = (const T *)sp;                                                 \
        for (int64_t j = 0; j < n; j++) d[j * ds] = s[j * ss];                      \
    } while (0)

/* 4-byte elements with one side contiguous and the other at a stride of 2, 3, 4 or 8 (a column of an [n, 2]
 * index array sliced out or concatenated back, x[:, 0] of [n, 8] rows): constant strides, so the loops
 * vectorise. Returns 0 otherwise. */
#if defined(__x86_64__) && (defined(__clang__) || __GNUC__ >= 8)
#include <immintrin.h>
#define ND_AVX512 1
/* the two stride-2 cases in 16-element steps: one two-source permute (the vectoriser's strided form was
 * 1.3 cycles per element here); the interleave stores with a mask, so the other column is never written.
 * Return the elements done (a multiple of 16). */
__attribute__((target("avx512f")))
static int64_t nd_deinterleave2(uint32_t *d, const uint32_t *s, int64_t n)
{
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    int64_t j = 0;
    for (; j + 17 <= n; j += 16) {   /* (a step reads s[2j .. 2j + 31]: never past the last element, s[2n - 2]) */
        __m512i a = _mm512_loadu_si512(s + 2 * j), b = _mm512_loadu_si512(s + 2 * j + 16);
        _mm512_storeu_si512(d + j, _mm512_permutex2var_epi32(a, even, b));
    }
    return j;
}

__attribute__((target("avx512f")))
static int64_t nd_interleave2(uint32_t *d, const uint32_t *s, int64_t n)
{
    const __m512i lo = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512i hi = _mm512_setr_epi32(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512i a = _mm512_loadu_si512(s + j);
        _mm512_mask_storeu_epi32(d + 2 * j, 0x5555, _mm512_permutexvar_epi32(lo, a));
        _mm512_mask_storeu_epi32(d + 2 * j + 16, 0x5555, _mm512_permutexvar_epi32(hi, a));
    }
    return j;
}
#endif

#define ND_GATHER(S) for (int64_t j = 0; j < n; j++) d[j] = s[(S) * j]
#define ND_SCATTER(S) for (int64_t j = 0; j < n; j++) d[(S) * j] = s[j]
EXE_VEC
static int nd_inner4_small(uint32_t *d, int64_t ds, const uint32_t *s, int64_t ss, int64_t n)
{
    if (ds == 1) {
        switch (ss) {
        case 2: ND_GATHER(2); return 1;
        case 3: ND_GATHER(3); return 1;
        case 4: ND_GATHER(4); return 1;
        case 8: ND_GATHER(8); return 1;
        default: return 0;
        }
    }
    if (ss == 1) {
        switch (ds) {
        case 2: ND_SCATTER(2); return 1;
        case 3: ND_SCATTER(3); return 1;
        case 4: ND_SCATTER(4); return 1;
        case 8: ND_SCATTER(8); return 1;
        default: return 0;
        }
    }
    return 0;
}

static void nd_inner(char *dp, int64_t ds, const char *sp, int64_t ss, int64_t n, size_t es)
{
    if (ds == 1 && ss == 1) {
        memcpy(dp, sp, (size_t)n * es);
        return;
    }
#ifdef ND_AVX512
    if (es == 4 && n >= 16 && ((ds == 1 && ss == 2) || (ds == 2 && ss == 1)) && __builtin_cpu_supports("avx512f")) {
        int64_t j = ds == 1 ? nd_deinterleave2((uint32_t *)dp, (const uint32_t *)sp, n)
                            : nd_interleave2((uint32_t *)dp, (const uint32_t *)sp, n);
        dp += j * ds * 4;
        sp += j * ss * 4;
        n -= j;
    }
#endif
    if (es == 4 && n >= 16 && nd_inner4_small((uint32_t *)dp, ds, (const uint32_t *)sp, ss, n)) return;
    switch (es) {
    case 1: ND_INNER(uint8_t); break;
    case 2: ND_INNER(uint16_t); break;
    case 4: ND_INNER(uint32_t); break;
    case 8: ND_INNER(uint64_t); break;
    default:
        for (int64_t j = 0; j < n; j++) memcpy(dp + j * ds * (int64_t)es, sp + j * ss * (int64_t)es, es);
        break;
    }
}

#define ND_TILE 32

typedef struct nd_job {
    void       *dst;
    const void *src;
    size_t      es;
    int         r, tiled;
    int64_t     d[TPU_MAX_RANK], ds[TPU_MAX_RANK], ss[TPU_MAX_RANK];
    int64_t     tr, tc;   /* tiles along the two inner dims */
} nd_job;

/* element offsets (dst, src) of outer index o over dims [0, upto) */
static void nd_offsets(const nd_job *J, int upto, int64_t o, int64_t *doff, int64_t *soff)
{
    int64_t rem = o;
    *doff = *soff = 0;
    for (int i = upto - 1; i >= 0; i--) {
        int64_t idx = rem % J->d[i];
        rem /= J->d[i];
        *doff += idx * J->ds[i];
        *soff += idx * J->ss[i];
    }
}

static void nd_rows(void *ctx, int64_t o0, int64_t o1, int tid)
{
    const nd_job *J = ctx;
    int r = J->r;
    int64_t es = (int64_t)J->es;
    for (int64_t o = o0; o < o1; o++) {
        int64_t doff, soff;
        nd_offsets(J, r - 1, o, &doff, &soff);
        nd_inner((char *)J->dst + doff * es, J->ds[r - 1], (const char *)J->src + soff * es, J->ss[r - 1], J->d[r - 1], J->es);
    }
    (void)tid;
}

/* pieces [c0, c1) of ND_SPAN elements of a one-dimensional copy */
#define ND_SPAN 32768
static void nd_span(void *ctx, int64_t c0, int64_t c1, int tid)
{
    const nd_job *J = ctx;
    int64_t es = (int64_t)J->es, a = c0 * ND_SPAN, b = UT_MIN(c1 * ND_SPAN, J->d[0]);
    nd_inner((char *)J->dst + a * J->ds[0] * es, J->ds[0], (const char *)J->src + a * J->ss[0] * es, J->ss[0], b - a, J->es);
    (void)tid;
}

#define ND_TILE_COPY(T)                                                                     \
    do {                                                                                    \
        T *dp = (T *)J->dst + doff;                                                         \
        const T *sp = (const T *)J->src + soff;                                             \
        for (int64_t a = a0; a < a1; a++)                                                   \
            for (int64_t b = b0; b < b1; b++) dp[a * dsa + b * dsb] = sp[a * ssa + b * ssb]; \
    } while (0)

static void nd_tiles(void *ctx, int64_t t0, int64_t t1, int tid)
{
    const nd_job *J = ctx;
    int r = J->r;
    int64_t dsa = J->ds[r - 2], dsb = J->ds[r - 1], ssa = J->ss[r - 2], ssb = J->ss[r - 1];
    for (int64_t t = t0; t < t1; t++) {
        int64_t o = t / (J->tr * J->tc), tt = t % (J->tr * J->tc);
        int64_t a0 = tt / J->tc * ND_TILE, b0 = tt % J->tc * ND_TILE;
        int64_t a1 = UT_MIN(a0 + ND_TILE, J->d[r - 2]), b1 = UT_MIN(b0 + ND_TILE, J->d[r - 1]);
        int64_t doff, soff;
        nd_offsets(J, r - 2, o, &doff, &soff);
        if (J->es == 4) ND_TILE_COPY(uint32_t);
        else if (J->es == 2) ND_TILE_COPY(uint16_t);
        else ND_TILE_COPY(uint64_t);
    }
    (void)tid;
}

void exe_nd_copy(void *dst, const int64_t *dst_strides, const void *src, const int64_t *src_strides,
                 const int64_t *dims, int rank, size_t esize)
{
    for (int i = 0; i < rank; i++)
        if (dims[i] == 0) return;
    if (rank == 0) {
        memcpy(dst, src, esize);
        return;
    }
    /* merge dimensions that are contiguous in both arrays, so common cases become one long inner loop */
    int64_t d[TPU_MAX_RANK], ds[TPU_MAX_RANK], ss[TPU_MAX_RANK];
    int r = 0;
    for (int i = 0; i < rank; i++) {
        if (dims[i] == 1) continue;
        if (r > 0 && ds[r - 1] == dst_strides[i] * dims[i] && ss[r - 1] == src_strides[i] * dims[i]) {
            d[r - 1] *= dims[i];
            ds[r - 1] = dst_strides[i];
            ss[r - 1] = src_strides[i];
            continue;
        }
        d[r] = dims[i];
        ds[r] = dst_strides[i];
        ss[r] = src_strides[i];
        r++;
    }
    if (r == 0) {
        memcpy(dst, src, esize);
        return;
    }
    nd_job J;
    memset(&J, 0, sizeof J);
    J.dst = dst;
    J.src = src;
    J.es = esize;
    J.r = r;
    memcpy(J.d, d, sizeof d);
    memcpy(J.ds, ds, sizeof ds);
    memcpy(J.ss, ss, sizeof ss);
    /* a transpose of the two innermost dims (unit stride on one side in each): copy 32x32 tiles so that both
     * sides stream through whole cache lines */
    if (r >= 2 && ((ss[r - 1] == 1 && ds[r - 2] == 1) || (ds[r - 1] == 1 && ss[r - 2] == 1)) && d[r - 1] >= 8 &&
        d[r - 2] >= 8 && (esize == 4 || esize == 2 || esize == 8)) {
        J.tiled = 1;
        J.tr = (d[r - 2] + ND_TILE - 1) / ND_TILE;
        J.tc = (d[r - 1] + ND_TILE - 1) / ND_TILE;
        int64_t outer = 1;
        for (int i = 0; i < r - 2; i++) outer *= d[i];
        int64_t nt = outer * J.tr * J.tc;
        int64_t total = outer * d[r - 2] * d[r - 1];
        exe_par_for(total > 65536 ? 0 : 1, nt, UT_MAX((int64_t)1, nt / 64), nd_tiles, &J);
        return;
    }
    if (r == 1 && d[0] >= 2 * ND_SPAN) {   /* one long strided run (a column): pieces for the threads */
        exe_par_for(0, (d[0] + ND_SPAN - 1) / ND_SPAN, 1, nd_span, &J);
        return;
    }
    int64_t outer = 1;
    for (int i = 0; i < r - 1; i++) outer *= d[i];
    int64_t total = outer * d[r - 1];
    int64_t grain = UT_MAX((int64_t)1, UT_MAX(outer / 64, 16384 / UT_MAX(d[r - 1], (int64_t)1)));
    exe_par_for(total > 65536 && outer > 1 ? 0 : 1, outer, grain, nd_rows, &J);
}

static void data_strides(int rank, const int64_t *dims, int64_t *strides)
{
    int64_t s = 1;
    for (int i = rank - 1; i >= 0; i--) {
        strides[i] = s;
        s *= dims[i];
    }
}

int64_t exe_index_value(const tpu_tensor *t, int64_t i) { return ten_load_i64(t->dtype, t->data, i); }

/* ---- kernels ---- */

/* t <- the one element at v, everywhere: memset when its bytes are all alike (zero), else a vector fill */
EXE_VEC
static void data_fill_one(tpu_tensor *t, const void *v)
{
    size_t es = tpu_dtype_size(t->dtype);
    const uint8_t *b = v;
    int same = 1;
    for (size_t i = 1; i < es; i++) same &= b[i] == b[0];
    if (same) {
        memset(t->data, b[0], t->nbytes);
        return;
    }
    switch (es) {
    case 2: {
        uint16_t x, *d = t->data;
        memcpy(&x, v, 2);
        for (int64_t i = 0; i < t->count; i++) d[i] = x;
        return;
    }
    case 4: {
        uint32_t x, *d = t->data;
        memcpy(&x, v, 4);
        for (int64_t i = 0; i < t->count; i++) d[i] = x;
        return;
    }
    case 8: {
        uint64_t x, *d = t->data;
        memcpy(&x, v, 8);
        for (int64_t i = 0; i < t->count; i++) d[i] = x;
        return;
    }
    default:
        for (int64_t i = 0; i < t->count; i++) memcpy((char *)t->data + (size_t)i * es, v, es);
    }
}

/* Broadcasts of whole blocks (the operand's dims in order at the end of the result: a row vector repeated,
 * iota columns; or at the start: each element repeated over the trailing dims, a bias per row): copies and
 * fills instead of the element-wise strided copy. Returns 0 for the other forms (and when the run asks for
 * the reference kernels: the strided copy, which the tests compare with). */
static int data_broadcast_blocks(const exe_state *S, tpu_tensor *t, const void *src, int64_t acount, const int64_t *bd,
                                 int nbd)
{
    int trailing = 1, leading = 1;
    for (int i = 0; i < nbd; i++) {
        trailing &= bd[i] == t->rank - nbd + i;
        leading &= bd[i] == i;
    }
    size_t es = tpu_dtype_size(t->dtype);
    if ((S->ref & EXE_REF_KERNELS) || acount == 0 || t->count == 0 || (es != 1 && es != 2 && es != 4 && es != 8)) return 0;
    int64_t reps = t->count / acount;
    if (trailing) {   /* the operand's block, reps times */
        size_t blk = (size_t)acount * es;
        for (int64_t r = 0; r < reps; r++) memcpy((char *)t->data + (size_t)r * blk, src, blk);
        return 1;
    }
    if (!leading) return 0;
    for (int64_t j = 0; j < acount; j++) {   /* element j, reps times */
        char *d = (char *)t->data + (size_t)(j * reps) * es;
        switch (es) {
        case 1: memset(d, ((const uint8_t *)src)[j], (size_t)reps); break;
        case 2: for (int64_t r = 0; r < reps; r++) ((uint16_t *)d)[r] = ((const uint16_t *)src)[j]; break;
        case 4: for (int64_t r = 0; r < reps; r++) ((uint32_t *)d)[r] = ((const uint32_t *)src)[j]; break;
        default: for (int64_t r = 0; r < reps; r++) ((uint64_t *)d)[r] = ((const uint64_t *)src)[j]; break;
        }
    }
    return 1;
}

EXE_KERNEL(exe_k_broadcast)
{
    const tpu_tensor *a = ops[0]->t;
    const int64_t *bd;
    int nbd = hlo_attr_ints(in, HK_DIMENSIONS, &bd);
    if (nbd != a->rank) return exe_fail(S, in, TPU_ERR_SHAPE, "dimensions={...} has %d entries for an operand of rank %d", nbd, a->rank);
    /* the identity (same shape and type, dimensions={0,1,...}: jax's broadcast_in_dim to the shape it has):
     * the operand's value itself, shared (values are updated in place only when nobody else holds them) */
    int same = !EXE_FORCE_REF(S) && a->dtype == (tpu_dtype)in->shape.dtype && a->rank == in->shape.rank;
    for (int i = 0; same && i < nbd; i++) same = bd[i] == i && a->dims[i] == in->shape.dims[i];
    if (same) {
        *out = exe_value_ref(ops[0]);
        return TPU_OK;
    }
    tpu_tensor *t;
    tpu_status st = exe_alloc(S, in, &t);
    if (st) return st;
    int64_t as[TPU_MAX_RANK], ts[TPU_MAX_RANK], ss[TPU_MAX_RANK] = {0};
    data_strides(a->rank, a->dims, as);
    data_strides(t->rank, t->dims, ts);
    for (int i = 0; i < nbd; i++) {
        if (bd[i] < 0 || bd[i] >= t->rank || a->dims[i] != t->dims[bd[i]]) {
            tpu_tensor_free(t);
            return exe_fail(S, in, TPU_ERR_SHAPE, "operand dimension %d does not match result dimension %lld", i, (long long)bd[i]);
        }
        ss[bd[i]] = as[i];
    }
    /* the TPU compiler's optimized programs broadcast bf16 into f32 (and back): the operand is converted
     * first (it is the small side), then broadcast */
    const void *src = a->data;
    void *conv = NULL;
    if (a->dtype != t->dtype) {
        if (!(conv = ut_malloc((size_t)(a->count ? a->count : 1) * tpu_dtype_size(t->dtype)))) {
            tpu_tensor_free(t);
            return ut_nomem(S->ctx);
        }
        for (int64_t i = 0; i < a->count; i++)
            exe_scalar_store(S, t->dtype, conv, i, exe_scalar_convert(S, a->dtype, t->dtype, exe_scalar_load(a->dtype, a->data, i)));
        src = conv;
    }
    if (a->count == 1) data_fill_one(t, src);   /* a scalar everywhere (zeros for gradients): a fill */
    else if (!data_broadcast_blocks(S, t, src, a->count, bd, nbd))
        exe_nd_copy(t->data, ts, src, ss, t->dims, t->rank, tpu_dtype_size(t->dtype));
    ut_free(conv);
    return exe_out_array(S, t, out);
}

EXE_KERNEL(exe_k_reshape)
{
    const tpu_tensor *a = ops[0]->t;
    if (a && a->count == hlo_shape_count(&in->shape) && a->dtype == (tpu_dtype)in->shape.dtype &&
        hlo_shape_is_array(&in->shape) && !in->shape.dyn_mask) {
        /* row-major data do not move: a dying operand is relabelled, a shared one viewed */
        exe_value *own = exe_take_unique(S, 0);
        if (own) {
            own->t->rank = in->shape.rank;
            for (int i = 0; i < in->shape.rank; i++) own->t->dims[i] = in->shape.dims[i];
            *out = own;
            return TPU_OK;
        }
        *out = exe_value_view(ops[0], a->dtype, in->shape.rank, in->shape.dims);
        return *out ? TPU_OK : ut_nomem(S->ctx);
    }
    tpu_tensor *t;
    tpu_status st = exe_alloc(S, in, &t);
    if (st) return st;
    if (t->count != a->count || t->dtype != a->dtype) {
        tpu_tensor_free(t);
        return exe_fail(S, in, TPU_ERR_SHAPE, "reshape changes the element count or type");
    }
    memcpy(t->data, a->data, t->nbytes);
    return exe_out_array(S, t, out);
}

/* Physical order (major to minor) of a shape's dimensions: the reverse of minor_to_major. */
static void data_major_to_minor(const hlo_shape *s, int *order)
{
    int m2m[TPU_MAX_RANK];
    hlo_shape_m2m(s, m2m);
    for (int i = 0; i < s->rank; i++) order[i] = m2m[s->rank - 1 - i];
}

/* bitcast reinterprets the physical buffer: logical input -> its physical order -> same bytes read in the
 * output's physical order -> logical output. With default layouts on both sides it is a reshape. */
EXE_KERNEL(exe_k_bitcast)
{
    const tpu_tensor *a = ops[0]->t;
    if (!a) return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "bitcast of a tuple");
    const hlo_shape *is = &in->ops[0]->shape, *os = &in->shape;
    tpu_tensor *t;
    tpu_status st = exe_alloc(S, in, &t);
    if (st) return st;
    if (t->nbytes != a->nbytes) {
        size_t tb = t->nbytes;   /* read before t is freed (the message used to read it after) */
        tpu_tensor_free(t);
        return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "bitcast changes the byte size as tpusim stores the elements (%zu "
                        "vs %zu bytes; sub-byte types take a byte each here)", a->nbytes, tb);
    }
    int io[TPU_MAX_RANK], oo[TPU_MAX_RANK];
    data_major_to_minor(is, io);
    data_major_to_minor(os, oo);
    int idef = 1, odef = 1;
    for (int i = 0; i < is->rank; i++) idef &= io[i] == i;
    for (int i = 0; i < os->rank; i++) odef &= oo[i] == i;
    size_t es = tpu_dtype_size(t->dtype);
    if (idef && odef) {
        memcpy(t->data, a->data, t->nbytes);
        return exe_out_array(S, t, out);
    }
    void *phys = ut_malloc(a->nbytes ? a->nbytes : 1);
    if (!phys) {
        tpu_tensor_free(t);
        return ut_nomem(S->ctx);
    }
    /* logical input -> physical: phys dims pd[i] = dims[io[i]] */
    int64_t as[TPU_MAX_RANK], pd[TPU_MAX_RANK], ps[TPU_MAX_RANK], src_s[TPU_MAX_RANK];
    data_strides(a->rank, a->dims, as);
    for (int i = 0; i < a->rank; i++) {
        pd[i] = a->dims[io[i]];
        src_s[i] = as[io[i]];
    }
    data_strides(a->rank, pd, ps);
    exe_nd_copy(phys, ps, a->data, src_s, pd, a->rank, es);
    /* physical -> logical output: output dim oo[i] has physical position i */
    int64_t od[TPU_MAX_RANK], ops_s[TPU_MAX_RANK], ts[TPU_MAX_RANK], dst_s[TPU_MAX_RANK];
    for (int i = 0; i < t->rank; i++) od[i] = t->dims[oo[i]];
    data_strides(t->rank, od, ops_s);
    data_strides(t->rank, t->dims, ts);
    for (int i = 0; i < t->rank; i++) dst_s[i] = ts[oo[i]];
    exe_nd_copy(t->data, dst_s, phys, ops_s, od, t->rank, es);
    ut_free(phys);
    return exe_out_array(S, t, out);
}

EXE_KERNEL(exe_k_transpose)
{
    const tpu_tensor *a = ops[0]->t;
    const int64_t *perm;
    int np = hlo_attr_ints(in, HK_DIMENSIONS, &perm);
    if (np != a->rank) return exe_fail(S, in, TPU_ERR_SHAPE, "permutation has %d entries for rank %d", np, a->rank);
    tpu_tensor *t;
    tpu_status st = exe_alloc(S, in, &t);
    if (st) return st;
    int64_t as[TPU_MAX_RANK], ts[TPU_MAX_RANK], ss[TPU_MAX_RANK];
    data_strides(a->rank, a->dims, as);
    data_strides(t->rank, t->dims, ts);
    for (int i = 0; i < np; i++) {
        if (perm[i] < 0 || perm[i] >= a->rank || t->dims[i] != a->dims[perm[i]]) {
            tpu_tensor_free(t);
            return exe_fail(S, in, TPU_ERR_SHAPE, "bad permutation");
        }
        ss[i] = as[perm[i]];
    }
    exe_nd_copy(t->data, ts, a->data, ss, t->dims, t->rank, tpu_dtype_size(t->dtype));
    return exe_out_array(S, t, out);
}

/* A slice of stride 1 whose result is one contiguous block of its operand (size 1 in the dims before some dim k,
 * the whole extent after it: a row, or the first elements of a vector) is a view of the operand's bytes, as
 * for dynamic-slice (data_slice_view). Returns 0 when it does not apply (the copy then checks the bounds). */
static int data_static_slice_view(exe_state *S, const hlo_instr *in, exe_value *const *ops, const hlo_slice *sl,
                                  exe_value **out, tpu_status *st)
{
    const tpu_tensor *a = ops[0]->t;
    const hlo_shape *rs = &in->shape;
    if (EXE_FORCE_REF(S) || !hlo_shape_is_array(rs) || rs->rank != a->rank || rs->dtype != a->dtype || rs->dyn_mask)
        return 0;
    for (int i = 0; i < a->rank; i++)
        if (sl->stride[i] != 1 || sl->start[i] < 0 || sl->limit[i] > a->dims[i] || rs->dims[i] < 1 ||
            sl->limit[i] - sl->start[i] != rs->dims[i])
            return 0;
    int k = 0;
    while (k < rs->rank && rs->dims[k] == 1) k++;
    for (int i = k + 1; i < rs->rank; i++)
        if (rs->dims[i] != a->dims[i]) return 0;
    int64_t as[TPU_MAX_RANK], off = 0;
    data_strides(a->rank, a->dims, as);
    for (int i = 0; i < a->rank; i++) off += sl->start[i] * as[i];
    *out = exe_value_view_at(ops[0], (size_t)off * tpu_dtype_size(a->dtype), a->dtype, rs->rank, rs->dims);
    *st = *out ? TPU_OK : ut_nomem(S->ctx);
    return 1;
}

EXE_KERNEL(exe_k_slice)
{
    const tpu_tensor *a = ops[0]->t;
    const hlo_attr *sa = hlo_attr_find(in, HK_SLICE);
    if (!sa || sa->kind != HA_SLICE || sa->v.slice->rank != a->rank) return exe_fail(S, in, TPU_ERR_SHAPE, "bad slice={...}");
    const hlo_slice *sl = sa->v.slice;
    tpu_status vst;
    if (data_static_slice_view(S, in, ops, sl, out, &vst)) return vst;
    tpu_tensor *t;
    tpu_status st = exe_alloc(S, in, &t);
    if (st) return st;
    int64_t as[TPU_MAX_RANK], ts[TPU_MAX_RANK], ss[TPU_MAX_RANK], off = 0;
    data_strides(a->rank, a->dims, as);
    data_strides(t->rank, t->dims, ts);
    for (int i = 0; i < a->rank; i++) {
        int64_t n = sl->stride[i] > 0 ? (sl->limit[i] - sl->start[i] + sl->stride[i] - 1) / sl->stride[i] : -1;
        if (sl->start[i] < 0 || sl->limit[i] > a->dims[i] || sl->stride[i] < 1 || n != t->dims[i] ||
            (n > 0 && sl->start[i] >= a->dims[i])) {
            tpu_tensor_free(t);
            return exe_fail(S, in, TPU_ERR_SHAPE, "slice [%lld:%lld:%lld] does not fit dimension %d of size %lld",
                            (long long)sl->start[i], (long long)sl->limit[i], (long long)sl->stride[i], i, (long long)a->dims[i]);
        }
        off += sl->start[i] * as[i];
        ss[i] = as[i] * sl->stride[i];
    }
    size_t es = tpu_dtype_size(t->dtype);
    exe_nd_copy(t->data, ts, (const char *)a->data + off * (int64_t)es, ss, t->dims, t->rank, es);
    return exe_out_array(S, t, out);
}

tpu_status exe_concat_dim(exe_state *S, const hlo_instr *in, exe_value *const *ops, int d, exe_value **out)
{
    tpu_tensor *t;
    tpu_status st = exe_alloc(S, in, &t);
    if (st) return st;
    if (d < 0 || d >= t->rank) {
        tpu_tensor_free(t);
        return exe_fail(S, in, TPU_ERR_SHAPE, "dimension %d out of range", d);
    }
    int64_t ts[TPU_MAX_RANK];
    data_strides(t->rank, t->dims, ts);
    size_t es = tpu_dtype_size(t->dtype);
    int64_t pos = 0;
    for (int k = 0; k < in->nops; k++) {
        const tpu_tensor *a = ops[k]->t;
        int64_t as[TPU_MAX_RANK];
        if (a->rank != t->rank || pos + a->dims[d] > t->dims[d]) {
            tpu_tensor_free(t);
            return exe_fail(S, in, TPU_ERR_SHAPE, "operand %d does not fit the result", k);
        }
        data_strides(a->rank, a->dims, as);
        exe_nd_copy((char *)t->data + pos * ts[d] * (int64_t)es, ts, a->data, as, a->dims, a->rank, es);
        pos += a->dims[d];
    }
    return exe_out_array(S, t, out);
}

EXE_KERNEL(exe_k_concatenate)
{
    const int64_t *dim;
    if (hlo_attr_ints(in, HK_DIMENSIONS, &dim) != 1) return exe_fail(S, in, TPU_ERR_SHAPE, "needs dimensions={d}");
    return exe_concat_dim(S, in, ops, (int)dim[0], out);
}

/* Fills t with the scalar value v (any dtype). */
static void data_fill(tpu_tensor *t, const tpu_tensor *v)
{
    size_t es = tpu_dtype_size(t->dtype);
    char *d = t->data;
    if (t->count == 0) return;
    memcpy(d, v->data, es);
    int64_t done = 1;
    while (done < t->count) {
        int64_t n = done < t->count - done ? done : t->count - done;
        memcpy(d + done * (int64_t)es, d, (size_t)n * es);
        done += n;
    }
}

EXE_KERNEL(exe_k_pad)
{
    const tpu_tensor *a = ops[0]->t, *pv = ops[1]->t;
    const hlo_attr *pa = hlo_attr_find(in, HK_PADDING);
    if (!pa || pa->kind != HA_PADDING || pa->v.padding->rank != a->rank) return exe_fail(S, in, TPU_ERR_SHAPE, "bad padding=");
    const hlo_padding *p = pa->v.padding;
    tpu_tensor *t;
    tpu_status st = exe_alloc(S, in, &t);
    if (st) return st;
    data_fill(t, pv);
    int64_t as[TPU_MAX_RANK], ts[TPU_MAX_RANK], cnt[TPU_MAX_RANK], ds[TPU_MAX_RANK], ss[TPU_MAX_RANK];
    data_strides(a->rank, a->dims, as);
    data_strides(t->rank, t->dims, ts);
    int64_t doff = 0, soff = 0;
    for (int i = 0; i < a->rank; i++) {
        int64_t step = p->interior[i] + 1;
        /* operand index j lands at lo + j*step; keep those inside [0, out) */
        int64_t j0 = p->lo[i] >= 0 ? 0 : (-p->lo[i] + step - 1) / step;
        int64_t j1 = a->dims[i];   /* exclusive */
        while (j1 > j0 && p->lo[i] + (j1 - 1) * step >= t->dims[i]) j1--;
        cnt[i] = j1 > j0 ? j1 - j0 : 0;
        doff += (p->lo[i] + j0 * step) * ts[i];
        soff += j0 * as[i];
        ds[i] = ts[i] * step;
        ss[i] = as[i];
    }
    size_t es = tpu_dtype_size(t->dtype);
    exe_nd_copy((char *)t->data + doff * (int64_t)es, ds, (const char *)a->data + soff * (int64_t)es, ss, cnt, a->rank, es);
    return exe_out_array(S, t, out);
}

EXE_KERNEL(exe_k_reverse)
{
    const tpu_tensor *a = ops[0]->t;
    const int64_t *rd;
    int nr = hlo_attr_ints(in, HK_DIMENSIONS, &rd);
    tpu_tensor *t;
    tpu_status st = exe_alloc(S, in, &t);
    if (st) return st;
    int64_t as[TPU_MAX_RANK], ts[TPU_MAX_RANK], off = 0;
    data_strides(a->rank, a->dims, as);
    data_strides(t->rank, t->dims, ts);
    for (int k = 0; k < nr; k++) {
        int d = (int)rd[k];
        if (d < 0 || d >= a->rank) {
            tpu_tensor_free(t);
            return exe_fail(S, in, TPU_ERR_SHAPE, "dimension %d out of range", d);
        }
        if (as[d] > 0) {
            off += (a->dims[d] - 1) * as[d];
            as[d] = -as[d];
        }
    }
    size_t es = tpu_dtype_size(t->dtype);
    exe_nd_copy(t->data, ts, (const char *)a->data + off * (int64_t)es, as, t->dims, t->rank, es);
    return exe_out_array(S, t, out);
}

/* iota: the first dims[d] * inner elements (each value repeated over the dims after d) value by value, then
 * copies of that run for the dims before d. Stores what the reference loop below stores. */
static void data_iota_fast(const exe_state *S, tpu_tensor *t, int64_t d, const int64_t *ts)
{
    int64_t inner = ts[d], D = t->dims[d], blk = D * inner;
    size_t es = tpu_dtype_size(t->dtype);
    char *p = t->data, k = tpu_dtype_kind(t->dtype);
    switch (t->dtype) {
    case TPU_S32: case TPU_U32:
        for (int64_t v = 0; v < D; v++)
            for (int64_t j = 0; j < inner; j++) ((uint32_t *)p)[v * inner + j] = (uint32_t)v;
        break;
    case TPU_S64: case TPU_U64:
        for (int64_t v = 0; v < D; v++)
            for (int64_t j = 0; j < inner; j++) ((uint64_t *)p)[v * inner + j] = (uint64_t)v;
        break;
    case TPU_F32:
        for (int64_t v = 0; v < D; v++)
            for (int64_t j = 0; j < inner; j++) ((float *)p)[v * inner + j] = (float)(double)v;
        break;
    default:
        for (int64_t v = 0; v < D; v++) {
            if (k == 'f' || k == 'c') exe_store_float(S, t->dtype, p, v * inner, (double)v);
            else ten_store_i64(t->dtype, p, v * inner, v);
            for (int64_t j = 1; j < inner; j++) memcpy(p + (size_t)(v * inner + j) * es, p + (size_t)(v * inner) * es, es);
        }
        break;
    }
    for (int64_t o = blk; o < t->count; o += blk) memcpy(p + (size_t)o * es, p, (size_t)blk * es);
}

EXE_KERNEL(exe_k_iota)
{
    int64_t d = hlo_attr_int(in, HK_IOTA_DIMENSION, -1);
    tpu_tensor *t;
    tpu_status st = exe_alloc(S, in, &t);
    if (st) return st;
    if (d < 0 || d >= t->rank) {
        tpu_tensor_free(t);
        return exe_fail(S, in, TPU_ERR_SHAPE, "iota_dimension %lld out of range", (long long)d);
    }
    int64_t ts[TPU_MAX_RANK];
    data_strides(t->rank, t->dims, ts);
    if (!EXE_FORCE_REF(S) && t->count > 0) {
        data_iota_fast(S, t, d, ts);
        return exe_out_array(S, t, out);
    }
    /* reference: every element from its own index */
    char k = tpu_dtype_kind(t->dtype);
    for (int64_t i = 0; i < t->count; i++) {
        int64_t v = (i / ts[d]) % t->dims[d];
        if (k == 'f' || k == 'c') exe_store_float(S, t->dtype, t->data, i, (double)v);
        else ten_store_i64(t->dtype, t->data, i, v);
    }
    return exe_out_array(S, t, out);
}

/* Start indices of dynamic-slice / dynamic-update-slice: `rank` scalar operands from `first`, or one rank-1
 * operand (old form). Clamped so that a block of `sizes` stays inside `dims`. */
static tpu_status data_starts(exe_state *S, const hlo_instr *in, exe_value *const *ops, int first, int rank,
                              const int64_t *dims, const int64_t *sizes, int64_t *start)
{
    int nidx = in->nops - first;
    if (nidx == 1 && rank != 1 && ops[first]->t->rank == 1) {
        if (ops[first]->t->count != rank) return exe_fail(S, in, TPU_ERR_SHAPE, "index vector has the wrong length");
        for (int i = 0; i < rank; i++) start[i] = exe_index_value(ops[first]->t, i);
    } else {
        if (nidx != rank) return exe_fail(S, in, TPU_ERR_SHAPE, "%d start indices for rank %d", nidx, rank);
        for (int i = 0; i < rank; i++) start[i] = exe_index_value(ops[first + i]->t, 0);
    }
    for (int i = 0; i < rank; i++) {
        int64_t hi = dims[i] - sizes[i];
        if (start[i] > hi) start[i] = hi;
        if (start[i] < 0) start[i] = 0;
    }
    return TPU_OK;
}

/* A dynamic-slice whose result is one contiguous block of its operand (size 1 in the dims before some dim k,
 * the whole extent after it: xs[i] of a scanned array) is a view of the operand's bytes, not a copy. Views
 * are read-only here (exe_take_unique never hands them out, and the operand they hold cannot be updated in
 * place while they live). Returns 0 when it does not apply. */
static int data_slice_view(exe_state *S, const hlo_instr *in, exe_value *const *ops, exe_value **out, tpu_status *st)
{
    const tpu_tensor *a = ops[0]->t;
    const hlo_shape *rs = &in->shape;
    if (EXE_FORCE_REF(S) || !a || !hlo_shape_is_array(rs) || rs->rank != a->rank || rs->dtype != a->dtype || rs->dyn_mask)
        return 0;
    int k = 0;
    while (k < rs->rank && rs->dims[k] == 1) k++;
    for (int i = k + 1; i < rs->rank; i++)
        if (rs->dims[i] != a->dims[i]) return 0;
    int64_t start[TPU_MAX_RANK], as[TPU_MAX_RANK], off = 0;
    if ((*st = data_starts(S, in, ops, 1, a->rank, a->dims, rs->dims, start))) return 1;
    data_strides(a->rank, a->dims, as);
    for (int i = 0; i < a->rank; i++) off += start[i] * as[i];
    *out = exe_value_view_at(ops[0], (size_t)off * tpu_dtype_size(a->dtype), a->dtype, rs->rank, rs->dims);
    *st = *out ? TPU_OK : ut_nomem(S->ctx);
    return 1;
}

EXE_KERNEL(exe_k_dynamic_slice)
{
    const tpu_tensor *a = ops[0]->t;
    tpu_status st;
    if (data_slice_view(S, in, ops, out, &st)) return st;
    tpu_tensor *t;
    st = exe_alloc(S, in, &t);
    if (st) return st;
    int64_t start[TPU_MAX_RANK];
    if (t->rank != a->rank) st = exe_fail(S, in, TPU_ERR_SHAPE, "result rank differs from operand rank");
    if (!st) st = data_starts(S, in, ops, 1, a->rank, a->dims, t->dims, start);
    if (st) {
        tpu_tensor_free(t);
        return st;
    }
    int64_t as[TPU_MAX_RANK], ts[TPU_MAX_RANK], off = 0;
    data_strides(a->rank, a->dims, as);
    data_strides(t->rank, t->dims, ts);
    for (int i = 0; i < a->rank; i++) off += start[i] * as[i];
    size_t es = tpu_dtype_size(t->dtype);
    exe_nd_copy(t->data, ts, (const char *)a->data + off * (int64_t)es, as, t->dims, t->rank, es);
    return exe_out_array(S, t, out);
}

EXE_KERNEL(exe_k_dynamic_update_slice)
{
    const tpu_tensor *a = ops[0]->t, *u = ops[1]->t;
    if (u->rank != a->rank) return exe_fail(S, in, TPU_ERR_SHAPE, "update rank differs from operand rank");
    int64_t start[TPU_MAX_RANK];
    tpu_status st = data_starts(S, in, ops, 2, a->rank, a->dims, u->dims, start);
    if (st) return st;
    int64_t as[TPU_MAX_RANK], us[TPU_MAX_RANK], off = 0;
    data_strides(a->rank, a->dims, as);
    data_strides(u->rank, u->dims, us);
    for (int i = 0; i < a->rank; i++) off += start[i] * as[i];
    size_t es = tpu_dtype_size(a->dtype);
    /* the operand's last use and nobody else's buffer: update it in place (a loop's accumulated outputs) */
    exe_value *own = a->dtype == (tpu_dtype)in->shape.dtype ? exe_take_unique(S, 0) : NULL;
    if (own) {
        exe_nd_copy((char *)own->t->data + off * (int64_t)es, as, u->data, us, u->dims, u->rank, es);
        *out = own;
        return TPU_OK;
    }
    tpu_tensor *t;
    st = exe_alloc(S, in, &t);
    if (st) return st;
    memcpy(t->data, a->data, t->nbytes);
    exe_nd_copy((char *)t->data + off * (int64_t)es, as, u->data, us, u->dims, u->rank, es);
    return exe_out_array(S, t, out);
}
