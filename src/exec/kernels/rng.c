/* rng.c — rng-bit-generator (bit-exact with XLA:CPU) and rng (uniform / normal, deterministic).
 *
 * rng-bit-generator(state u64[n]), algorithm -> (new state, bits). What XLA:CPU computes (its
 * RngBitGeneratorExpander over xla/hlo/builder/lib/prng.cc), with key = state[0]:
 *   rng_three_fry: counter c = state[1]; Threefry-2x32 (20 rounds) under key (low word, high word) of the
 *     64-bit input c + j split into (low, high). 64-bit outputs: element j = (x0 | x1 << 32) of input c + j,
 *     new counter c + count. 32-bit and narrower outputs: the shape is split in two along its first even dim
 *     (or its first largest dim when none is even; a scalar counts as [1]): element h of that half shape
 *     (row-major) takes input c + h, and its two output words go to split-dim positions 2k and 2k+1 (the odd
 *     tail dropped); new counter c + half count. Narrow types keep the low bits of each word.
 *   rng_philox: a 128-bit counter, (low, high) = (state[1], state[2]) when n >= 3, else (state[1], state[0]);
 *     Philox-4x32-10 of counter + i for i < ceil(words / 4), the four words of block i interleaved (word
 *     4i + k = output k). 64-bit outputs pair the words (w0 | w1 << 32, w2 | w3 << 32) and take ceil(n/2)
 *     blocks; narrow outputs keep the low bits of each word. The new state is key, counter + blocks (only the
 *     low 64 bits when n == 2).
 *   rng_default: XLA:CPU expands it as rng_philox.
 * The result keeps the element bits as they are for any type of that width (u32, s32, f32...).
 *
 * rng(a, b), distribution=rng_uniform | rng_normal: XLA leaves the bits to the implementation. tpusim makes
 * them deterministic and independent of threads: the i-th rng instruction executed in a run (S->rng_calls,
 * so every iteration of a loop differs, and running the program again repeats them) gets the seed
 * splitmix64(fnv1a(instruction name) ^ i * 0x9E3779B97F4A7C15), and element j takes the Philox-4x32-10 block
 * j / 4 (two blocks per element for 64-bit types) under that seed.
 *   uniform floats: the top mantissa-width bits m of the word give u = m * 2^-mantissa in [0, 1), result
 *     a + u * (b - a) computed in f64 then rounded (a result that rounds up to b is moved one ulp down);
 *   uniform integers: a + bits mod (b - a) (b <= a gives a);
 *   normal: Box-Muller on two uniforms from one block, z = sqrt(-2 ln max(u1, 1e-7)) * cos(2 pi u2), result
 *     mu + sigma * z.
 */
#include "exec/exec.h"
#include "exec/exe_ops.h"
#include "exec/kernels/ref.h"

#include <math.h>
#include <string.h>

/* OpenMP threads for this run (tpu_run_opts.threads; 0 means all cores) */

/* ---- the generators ---- */

static inline uint32_t rng_rotl(uint32_t v, int d) { return (v << d) | (v >> (32 - d)); }

void exe_threefry2x32(const uint32_t key[2], const uint32_t in[2], uint32_t out[2])
{
    static const int rot[8] = {13, 15, 26, 6, 17, 29, 16, 24};
    uint32_t ks[3] = {key[0], key[1], 0x1BD11BDAu ^ key[0] ^ key[1]};
    uint32_t x0 = in[0] + ks[0], x1 = in[1] + ks[1];
    for (int blk = 0; blk < 5; blk++) {
        const int *r = rot + (blk & 1) * 4;
        for (int k = 0; k < 4; k++) {
            x0 += x1;
            x1 = rng_rotl(x1, r[k]) ^ x0;
        }
        /* key injection after every 4 rounds */
        x0 += ks[(blk + 1) % 3];
        x1 += ks[(blk + 2) % 3] + (uint32_t)(blk + 1);
    }
    out[0] = x0;
    out[1] = x1;
}

void exe_philox4x32(const uint32_t key[2], const uint32_t ctr[4], uint32_t out[4])
{
    uint32_t k0 = key[0], k1 = key[1], x0 = ctr[0], x1 = ctr[1], x2 = ctr[2], x3 = ctr[3];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)x0 * 0xD2511F53u, p1 = (uint64_t)x2 * 0xCD9E8D57u;
        uint32_t y0 = (uint32_t)(p1 >> 32) ^ x1 ^ k0, y1 = (uint32_t)p1;
        uint32_t y2 = (uint32_t)(p0 >> 32) ^ x3 ^ k1, y3 = (uint32_t)p0;
        x0 = y0;
        x1 = y1;
        x2 = y2;
        x3 = y3;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = x0;
    out[1] = x1;
    out[2] = x2;
    out[3] = x3;
}

/* Philox block i of the 128-bit counter (lo, hi). */
static void rng_philox_block(const uint32_t key[2], uint64_t lo, uint64_t hi, uint64_t i, uint32_t out[4])
{
    uint64_t l = lo + i;
    if (l < lo) hi++;
    uint32_t c[4] = {(uint32_t)l, (uint32_t)(l >> 32), (uint32_t)hi, (uint32_t)(hi >> 32)};
    exe_philox4x32(key, c, out);
}

/* Stores `bits` (the low tpu_dtype_bits of it) as element i of a tensor of width `w` bits. */
static inline void rng_put(void *base, int64_t i, int w, uint64_t bits)
{
    switch (w) {
    case 64: ((uint64_t *)base)[i] = bits; break;
    case 32: ((uint32_t *)base)[i] = (uint32_t)bits; break;
    case 16: ((uint16_t *)base)[i] = (uint16_t)bits; break;
    case 8: ((uint8_t *)base)[i] = (uint8_t)bits; break;
    default: ((uint8_t *)base)[i] = (uint8_t)(bits & ((1u << w) - 1)); break;   /* sub-byte, one per byte */
    }
}

/* ---- rng-bit-generator ---- */

typedef enum { RBG_THREEFRY, RBG_PHILOX } rbg_alg;

typedef struct rbg_plan {
    rbg_alg           alg;
    const tpu_tensor *state;
    tpu_tensor       *ns, *bits;
    int               w;      /* bits per element */
} rbg_plan;

static tpu_status rbg_setup(exe_state *S, const hlo_instr *in, exe_value *const *ops, rbg_plan *p)
{
    memset(p, 0, sizeof *p);
    if (in->nops != 1 || !ops[0]->t) return exe_fail(S, in, TPU_ERR_SHAPE, "needs one state operand");
    p->state = ops[0]->t;
    if ((p->state->dtype != TPU_U64 && p->state->dtype != TPU_S64) || p->state->rank != 1 || p->state->dims[0] < 2)
        return exe_fail(S, in, TPU_ERR_SHAPE, "state must be u64[n] with n >= 2");
    const char *alg = hlo_attr_str(in, HK_ALGORITHM);
    if (!alg || !strcmp(alg, "rng_default") || !strcmp(alg, "RNG_DEFAULT") || !strcmp(alg, "rng_philox") ||
        !strcmp(alg, "RNG_PHILOX"))
        p->alg = RBG_PHILOX;   /* XLA:CPU's default */
    else if (!strcmp(alg, "rng_three_fry") || !strcmp(alg, "RNG_THREE_FRY"))
        p->alg = RBG_THREEFRY;
    else
        return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "unknown algorithm=%s", alg);
    const hlo_shape *s = &in->shape;
    if (!hlo_shape_is_tuple(s) || s->ntuple != 2 || !hlo_shape_is_array(&s->tuple[0]) || !hlo_shape_is_array(&s->tuple[1]) ||
        hlo_shape_count(&s->tuple[0]) != p->state->count || s->tuple[0].dtype != p->state->dtype)
        return exe_fail(S, in, TPU_ERR_SHAPE, "result must be (state shape, bits)");
    tpu_dtype bt = (tpu_dtype)s->tuple[1].dtype;
    char k = tpu_dtype_kind(bt);
    p->w = tpu_dtype_bits(bt);
    if (k == 'p' || k == 'c' || k == 'o' || p->w > 64)
        return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "random bits of type %s are not supported", tpu_dtype_name(bt));
    tpu_status st = exe_alloc_shape(S, &s->tuple[0], &p->ns);
    if (st) return st;
    if ((st = exe_alloc_shape(S, &s->tuple[1], &p->bits))) {
        tpu_tensor_free(p->ns);
        return st;
    }
    memcpy(p->ns->data, p->state->data, p->state->nbytes);
    return TPU_OK;
}

static tpu_status rbg_result(exe_state *S, rbg_plan *p, exe_value **out)
{
    exe_value *v[2] = {exe_value_array(p->ns), exe_value_array(p->bits)};
    if (!v[0] || !v[1]) {
        exe_value_unref(v[0]);
        exe_value_unref(v[1]);
        return ut_nomem(S->ctx);
    }
    *out = exe_value_tuple(v, 2);
    return *out ? TPU_OK : ut_nomem(S->ctx);
}

/* The split of a shape for 32-bit ThreeFry: split dim s, half size hs, elements before/after it. */
static void rbg_split(const tpu_tensor *t, int *s, int64_t *hs, int64_t *pre, int64_t *post)
{
    if (t->rank == 0) {
        *s = -1;
        *hs = 1;
        *pre = *post = 1;
        return;
    }
    int sd = -1;
    for (int i = 0; i < t->rank && sd < 0; i++)
        if (t->dims[i] % 2 == 0) sd = i;
    if (sd < 0)
        for (int i = 0; i < t->rank; i++)
            if (sd < 0 || t->dims[i] > t->dims[sd]) sd = i;
    *s = sd;
    *hs = (t->dims[sd] + 1) / 2;
    *pre = *post = 1;
    for (int i = 0; i < sd; i++) *pre *= t->dims[i];
    for (int i = sd + 1; i < t->rank; i++) *post *= t->dims[i];
}

static void rbg_run(rbg_plan *p, int ref, int nth)
{
    const uint64_t *st = (const uint64_t *)p->state->data;
    uint64_t *ns = (uint64_t *)p->ns->data;
    uint32_t key[2] = {(uint32_t)st[0], (uint32_t)(st[0] >> 32)};
    tpu_tensor *b = p->bits;
    int64_t n = b->count;
    if (p->alg == RBG_THREEFRY) {
        uint64_t c = st[1];
        if (p->w == 64) {
            for (int64_t j = 0; j < n; j++) {
                uint64_t x = c + (uint64_t)j;
                uint32_t inw[2] = {(uint32_t)x, (uint32_t)(x >> 32)}, o[2];
                exe_threefry2x32(key, inw, o);
                ((uint64_t *)b->data)[j] = (uint64_t)o[0] | (uint64_t)o[1] << 32;
            }
            ns[1] = c + (uint64_t)n;
            return;
        }
        int s;
        int64_t hs, pre, post;
        rbg_split(b, &s, &hs, &pre, &post);
        int64_t dlen = s < 0 ? 1 : b->dims[s], half = pre * hs * post;
        if (ref) {
            /* every output element from its own coordinates */
            for (int64_t j = 0; j < n; j++) {
                int64_t q = j % post, r = j / post, k = r % dlen, a = r / dlen;
                uint64_t x = c + (uint64_t)((a * hs + k / 2) * post + q);
                uint32_t inw[2] = {(uint32_t)x, (uint32_t)(x >> 32)}, o[2];
                exe_threefry2x32(key, inw, o);
                rng_put(b->data, j, p->w, o[k & 1]);
            }
        } else {
            for (int64_t h = 0; h < half; h++) {
                int64_t q = h % post, r = h / post, kk = r % hs, a = r / hs;
                uint64_t x = c + (uint64_t)h;
                uint32_t inw[2] = {(uint32_t)x, (uint32_t)(x >> 32)}, o[2];
                exe_threefry2x32(key, inw, o);
                for (int e = 0; e < 2; e++) {
                    int64_t k = 2 * kk + e;
                    if (k < dlen) rng_put(b->data, (a * dlen + k) * post + q, p->w, o[e]);
                }
            }
        }
        ns[1] = c + (uint64_t)half;
        return;
    }
    /* philox */
    int64_t nst = p->state->count;
    uint64_t lo = st[1], hi = nst >= 3 ? st[2] : st[0];
    int64_t words = p->w == 64 ? 2 * n : n, blocks = (words + 3) / 4;
    if (ref) {
        for (int64_t j = 0; j < n; j++) {
            uint32_t o[4];
            if (p->w == 64) {
                rng_philox_block(key, lo, hi, (uint64_t)(j / 2), o);
                int e = (int)(j % 2) * 2;
                rng_put(b->data, j, 64, (uint64_t)o[e] | (uint64_t)o[e + 1] << 32);
            } else {
                rng_philox_block(key, lo, hi, (uint64_t)(j / 4), o);
                rng_put(b->data, j, p->w, o[j % 4]);
            }
        }
    } else {
        for (int64_t i = 0; i < blocks; i++) {
            uint32_t o[4];
            rng_philox_block(key, lo, hi, (uint64_t)i, o);
            if (p->w == 64) {
                for (int e = 0; e < 2; e++)
                    if (2 * i + e < n) ((uint64_t *)b->data)[2 * i + e] = (uint64_t)o[2 * e] | (uint64_t)o[2 * e + 1] << 32;
            } else {
                for (int e = 0; e < 4; e++)
                    if (4 * i + e < n) rng_put(b->data, 4 * i + e, p->w, o[e]);
            }
        }
    }
    uint64_t nlo = lo + (uint64_t)blocks, nhi = hi + (nlo < lo);
    ns[1] = nlo;
    if (nst >= 3) ns[2] = nhi;
}

EXE_KERNEL(exe_k_rng_bit_generator)
{
    if (EXE_FORCE_REF(S)) return exe_k_rng_bit_generator_ref(S, in, ops, out);
    rbg_plan p;
    tpu_status st = rbg_setup(S, in, ops, &p);
    if (st) return st;
    rbg_run(&p, 0, 1);
    return rbg_result(S, &p, out);
}

/* Reference: each output element computed on its own from its index. */
EXE_KERNEL(exe_k_rng_bit_generator_ref)
{
    rbg_plan p;
    tpu_status st = rbg_setup(S, in, ops, &p);
    if (st) return st;
    rbg_run(&p, 1, 1);
    return rbg_result(S, &p, out);
}

/* ---- rng ---- */

static uint64_t rng_splitmix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static uint64_t rng_fnv1a(const char *s)
{
    uint64_t h = 0xCBF29CE484222325ull;
    for (; s && *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001B3ull;
    return h;
}

/* Uniform in [0, 1) from a word with `mant` mantissa bits (XLA's bits-to-float construction). */
static double rng_unit32(uint32_t w, int mant) { return ldexp((double)(w >> (32 - mant)), -mant); }
static double rng_unit64(uint64_t w) { return ldexp((double)(w >> 11), -53); }

EXE_KERNEL(exe_k_rng)
{
    if (in->nops != 2 || !ops[0]->t || !ops[1]->t || ops[0]->t->count != 1 || ops[1]->t->count != 1)
        return exe_fail(S, in, TPU_ERR_SHAPE, "needs two scalar operands (a, b) or (mu, sigma)");
    const char *dist = hlo_attr_str(in, HK_DISTRIBUTION);
    int normal;
    if (dist && (!strcmp(dist, "rng_uniform") || !strcmp(dist, "RNG_UNIFORM"))) normal = 0;
    else if (dist && (!strcmp(dist, "rng_normal") || !strcmp(dist, "RNG_NORMAL"))) normal = 1;
    else return exe_fail(S, in, TPU_ERR_SHAPE, "distribution= must be rng_uniform or rng_normal");
    tpu_tensor *t;
    tpu_status st = exe_alloc(S, in, &t);
    if (st) return st;
    tpu_dtype dt = t->dtype;
    char kind = tpu_dtype_kind(dt);
    if (ops[0]->t->dtype != dt || ops[1]->t->dtype != dt || kind == 'c' || kind == 'o' || kind == 'p' ||
        (normal && kind != 'f')) {
        tpu_tensor_free(t);
        return exe_fail(S, in, TPU_ERR_SHAPE, "%s of type %s with operands %s, %s is not supported",
                        normal ? "rng_normal" : "rng_uniform", tpu_dtype_name(dt), tpu_dtype_name(ops[0]->t->dtype),
                        tpu_dtype_name(ops[1]->t->dtype));
    }
    uint64_t seed = rng_splitmix(rng_fnv1a(in->name) ^ (S->rng_calls++ * 0x9E3779B97F4A7C15ull));
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    int64_t n = t->count;
    int wide = tpu_dtype_bits(dt) == 64;
    int mant = dt == TPU_F16 ? 10 : dt == TPU_BF16 ? 7 : 23;
    if (kind == 'f' && dt != TPU_F64 && dt != TPU_F32 && dt != TPU_F16 && dt != TPU_BF16) mant = 10;
    if (kind == 'f') {
        double a = exe_scalar_load(dt, ops[0]->t->data, 0).f, b = exe_scalar_load(dt, ops[1]->t->data, 0).f;
        for (int64_t j = 0; j < n; j++) {
            uint32_t o[4];
            rng_philox_block(key, 0, 0, (uint64_t)(wide || normal ? j : j / 4), o);
            double v;
            if (normal) {
                double u1 = wide ? rng_unit64((uint64_t)o[0] | (uint64_t)o[1] << 32) : rng_unit32(o[0], 23);
                double u2 = wide ? rng_unit64((uint64_t)o[2] | (uint64_t)o[3] << 32) : rng_unit32(o[2], 23);
                if (u1 < 1e-7) u1 = 1e-7;
                v = a + b * (sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
                ten_store_f64(dt, t->data, j, exe_round_float(S, dt, v));
                continue;
            }
            double u = wide ? rng_unit64((uint64_t)o[(j % 2) * 2] | (uint64_t)o[(j % 2) * 2 + 1] << 32) : rng_unit32(o[j % 4], mant);
            v = exe_round_float(S, dt, a + u * (b - a));
            if (v >= b && b > a) v = exe_round_float(S, dt, nextafter(b, a));   /* keep [a, b) after rounding */
            if (v >= b && b > a) v = a;
            ten_store_f64(dt, t->data, j, v);
        }
        return exe_out_array(S, t, out);
    }
    int64_t a = exe_scalar_load(dt, ops[0]->t->data, 0).i, b = exe_scalar_load(dt, ops[1]->t->data, 0).i;
    int is_unsigned = kind == 'u';
    uint64_t range = (uint64_t)b - (uint64_t)a;
    int empty = is_unsigned ? (uint64_t)b <= (uint64_t)a : b <= a;
    if (tpu_dtype_bits(dt) < 64) range &= (1ull << tpu_dtype_bits(dt)) - 1;
    for (int64_t j = 0; j < n; j++) {
        uint32_t o[4];
        rng_philox_block(key, 0, 0, (uint64_t)(wide ? j / 2 : j / 4), o);
        uint64_t bits = wide ? (uint64_t)o[(j % 2) * 2] | (uint64_t)o[(j % 2) * 2 + 1] << 32 : o[j % 4];
        int64_t v = empty || !range ? a : (int64_t)((uint64_t)a + bits % range);
        ten_store_i64(dt, t->data, j, exe_wrap_int(dt, v));
    }
    return exe_out_array(S, t, out);
}
