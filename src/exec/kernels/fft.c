/* fft.c — fft with fft_type FFT, IFFT, RFFT, IRFFT over the last 1 to 3 dimensions (fft_length).
 *
 *   FFT   c[..., n1..nk] -> c[..., n1..nk]        X[k] = sum_j x[j] exp(-2 pi i jk / n) over each fft dim
 *   IFFT  c[..., n1..nk] -> c[..., n1..nk]        exp(+...), divided by n1 * ... * nk
 *   RFFT  r[..., n1..nk] -> c[..., n1..nk/2+1]    the FFT of the real input, non-negative last-dim frequencies
 *   IRFFT c[..., n1..nk/2+1] -> r[..., n1..nk]    inverse FFT over the outer fft dims, then the Hermitian
 *                                                  complex-to-real transform along the last (the imaginary
 *                                                  parts of its zero and Nyquist terms are ignored)
 * f32/c64 and f64/c128; complex elements are (re, im) pairs. Everything is computed in f64 and rounded once.
 * Fast path: iterative radix-2 for power-of-two lengths, Bluestein's chirp-z through a power-of-two FFT for
 * other lengths. Reference: the O(n^2) DFT. XLA:CPU (DUCC) computes c64 transforms in f32, so results agree
 * to f32 rounding (relative to the largest output), not bit for bit.
 */
#include "exec/exec.h"
#include "exec/kernels/ref.h"

#include <math.h>
#include <string.h>

typedef enum { FT_FFT, FT_IFFT, FT_RFFT, FT_IRFFT } ft_type;

typedef struct ft_plan {
    ft_type           type;
    int               k;                    /* fft dims */
    int64_t           len[3];               /* fft_length */
    const tpu_tensor *x;
    tpu_tensor       *y;
    int               rank;
    int64_t           full[TPU_MAX_RANK];   /* work shape: the complex transform's full dims */
    int64_t           count;                /* elements of the work shape */
} ft_plan;

/* exp(sign * 2 pi i * m / n) with m reduced mod n, so large products stay accurate */
static void ft_twiddle(int64_t m, int64_t n, int sign, double *re, double *im)
{
    m %= n;
    if (m < 0) m += n;
    double a = 2.0 * M_PI * (double)m / (double)n;
    *re = cos(a);
    *im = sign * sin(a);
}

/* ---- 1-d transforms on an interleaved complex line (2n doubles) ---- */

static void ft_dft_naive(double *v, int64_t n, int sign, double *tmp)
{
    for (int64_t k = 0; k < n; k++) {
        double sr = 0, si = 0;
        for (int64_t j = 0; j < n; j++) {
            double c, s;
            ft_twiddle(j * k % n, n, sign, &c, &s);
            sr += v[2 * j] * c - v[2 * j + 1] * s;
            si += v[2 * j] * s + v[2 * j + 1] * c;
        }
        tmp[2 * k] = sr;
        tmp[2 * k + 1] = si;
    }
    memcpy(v, tmp, (size_t)n * 2 * sizeof *v);
}

/* In-place iterative radix-2 (n a power of two); tw: n/2 twiddles exp(sign 2 pi i k / n). */
static void ft_radix2(double *v, int64_t n, const double *tw)
{
    for (int64_t i = 1, j = 0; i < n; i++) {
        int64_t bit = n >> 1;
        for (; j & bit; bit >>= 1) j ^= bit;
        j ^= bit;
        if (i < j) {
            double t0 = v[2 * i], t1 = v[2 * i + 1];
            v[2 * i] = v[2 * j];
            v[2 * i + 1] = v[2 * j + 1];
            v[2 * j] = t0;
            v[2 * j + 1] = t1;
        }
    }
    for (int64_t len = 2; len <= n; len <<= 1) {
        int64_t half = len >> 1, step = n / len;
        for (int64_t s = 0; s < n; s += len)
            for (int64_t k = 0; k < half; k++) {
                double wr = tw[2 * k * step], wi = tw[2 * k * step + 1];
                double *a = v + 2 * (s + k), *b = v + 2 * (s + k + half);
                double br = b[0] * wr - b[1] * wi, bi = b[0] * wi + b[1] * wr;
                b[0] = a[0] - br;
                b[1] = a[1] - bi;
                a[0] += br;
                a[1] += bi;
            }
    }
}

/* Everything one length needs: radix-2 twiddles, or Bluestein's chirp and its transformed filter. */
typedef struct ft_line {
    int64_t n, m;          /* length; power-of-two work length (m == n for radix-2) */
    int     sign, pow2;
    double *tw;            /* m/2 twiddles of the power-of-two transform (forward sign) */
    double *twi;           /* and of the inverse sign */
    double *chirp;         /* n: exp(sign pi i j^2 / n) */
    double *filt;          /* m: FFT of the conjugate chirp, wrapped */
    double *work;          /* m */
} ft_line;

static int ft_is_pow2(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

static void ft_line_free(ft_line *l)
{
    ut_free(l->tw);
    ut_free(l->twi);
    ut_free(l->chirp);
    ut_free(l->filt);
    ut_free(l->work);
    memset(l, 0, sizeof *l);
}

static int ft_line_init(ft_line *l, int64_t n, int sign)
{
    memset(l, 0, sizeof *l);
    l->n = n;
    l->sign = sign;
    l->pow2 = ft_is_pow2(n);
    int64_t m = 1;
    if (l->pow2) m = n;
    else
        while (m < 2 * n - 1) m <<= 1;
    l->m = m;
    l->tw = ut_malloc((size_t)(m / 2 + 1) * 2 * sizeof(double));
    l->twi = ut_malloc((size_t)(m / 2 + 1) * 2 * sizeof(double));
    if (!l->tw || !l->twi) return -1;
    for (int64_t k = 0; k < m / 2; k++) {
        ft_twiddle(k, m, l->pow2 ? sign : -1, &l->tw[2 * k], &l->tw[2 * k + 1]);
        ft_twiddle(k, m, l->pow2 ? -sign : 1, &l->twi[2 * k], &l->twi[2 * k + 1]);
    }
    if (l->pow2) return 0;
    l->chirp = ut_malloc((size_t)n * 2 * sizeof(double));
    l->filt = ut_calloc((size_t)m * 2, sizeof(double));
    l->work = ut_malloc((size_t)m * 2 * sizeof(double));
    if (!l->chirp || !l->filt || !l->work) return -1;
    for (int64_t j = 0; j < n; j++) {
        /* j^2 mod 2n keeps the angle pi j^2 / n exact */
        int64_t q = (int64_t)(((unsigned __int128)j * (unsigned __int128)j) % (unsigned __int128)(2 * n));
        double a = M_PI * (double)q / (double)n;
        l->chirp[2 * j] = cos(a);
        l->chirp[2 * j + 1] = sign * sin(a);
    }
    /* filter b[j] = conj(chirp[|j|]) for j in (-n, n), wrapped into m */
    for (int64_t j = 0; j < n; j++) {
        l->filt[2 * j] = l->chirp[2 * j];
        l->filt[2 * j + 1] = -l->chirp[2 * j + 1];
        if (j) {
            l->filt[2 * (m - j)] = l->chirp[2 * j];
            l->filt[2 * (m - j) + 1] = -l->chirp[2 * j + 1];
        }
    }
    ft_radix2(l->filt, m, l->tw);   /* forward (sign -1) */
    return 0;
}

/* Unnormalised DFT of sign l->sign of v[n]. */
static void ft_line_run(ft_line *l, double *v)
{
    int64_t n = l->n, m = l->m;
    if (l->pow2) {
        ft_radix2(v, n, l->tw);
        return;
    }
    /* X[k] = chirp[k] * sum_j (x[j] chirp[j]) conj(chirp[k - j]) */
    double *w = l->work;
    memset(w, 0, (size_t)m * 2 * sizeof *w);
    for (int64_t j = 0; j < n; j++) {
        double cr = l->chirp[2 * j], ci = l->chirp[2 * j + 1];
        w[2 * j] = v[2 * j] * cr - v[2 * j + 1] * ci;
        w[2 * j + 1] = v[2 * j] * ci + v[2 * j + 1] * cr;
    }
    ft_radix2(w, m, l->tw);
    for (int64_t k = 0; k < m; k++) {
        double ar = w[2 * k], ai = w[2 * k + 1], br = l->filt[2 * k], bi = l->filt[2 * k + 1];
        w[2 * k] = ar * br - ai * bi;
        w[2 * k + 1] = ar * bi + ai * br;
    }
    ft_radix2(w, m, l->twi);   /* inverse, unnormalised */
    for (int64_t k = 0; k < n; k++) {
        double ar = w[2 * k] / (double)m, ai = w[2 * k + 1] / (double)m, cr = l->chirp[2 * k], ci = l->chirp[2 * k + 1];
        v[2 * k] = ar * cr - ai * ci;
        v[2 * k + 1] = ar * ci + ai * cr;
    }
}

/* ---- the plan ---- */

static tpu_status ft_setup(exe_state *S, const hlo_instr *in, exe_value *const *ops, ft_plan *p)
{
    memset(p, 0, sizeof *p);
    if (in->nops != 1 || !ops[0]->t) return exe_fail(S, in, TPU_ERR_SHAPE, "needs one array operand");
    p->x = ops[0]->t;
    const char *ty = hlo_attr_str(in, HK_FFT_TYPE);
    if (!ty) return exe_fail(S, in, TPU_ERR_SHAPE, "fft_type= is missing");
    if (!strcmp(ty, "FFT")) p->type = FT_FFT;
    else if (!strcmp(ty, "IFFT")) p->type = FT_IFFT;
    else if (!strcmp(ty, "RFFT")) p->type = FT_RFFT;
    else if (!strcmp(ty, "IRFFT")) p->type = FT_IRFFT;
    else return exe_fail(S, in, TPU_ERR_SHAPE, "fft_type=%s is not FFT, IFFT, RFFT or IRFFT", ty);
    const int64_t *fl;
    p->k = hlo_attr_ints(in, HK_FFT_LENGTH, &fl);
    p->rank = p->x->rank;
    if (p->k < 1 || p->k > 3 || p->k > p->rank)
        return exe_fail(S, in, TPU_ERR_SHAPE, "fft_length must have 1 to 3 entries, at most the operand rank %d", p->rank);
    tpu_dtype xt = p->x->dtype;
    int real_in = p->type == FT_RFFT, real_out = p->type == FT_IRFFT;
    if (real_in ? (xt != TPU_F32 && xt != TPU_F64) : (xt != TPU_C64 && xt != TPU_C128))
        return exe_fail(S, in, TPU_ERR_SHAPE, "%s operand must be %s, not %s", ty, real_in ? "f32 or f64" : "c64 or c128", tpu_dtype_name(xt));
    int wide = xt == TPU_F64 || xt == TPU_C128;
    tpu_dtype yt = real_out ? (wide ? TPU_F64 : TPU_F32) : (wide ? TPU_C128 : TPU_C64);
    int64_t ydims[TPU_MAX_RANK];
    memcpy(p->full, p->x->dims, sizeof(int64_t) * (size_t)p->rank);
    memcpy(ydims, p->x->dims, sizeof(int64_t) * (size_t)p->rank);
    for (int i = 0; i < p->k; i++) {
        int d = p->rank - p->k + i;
        p->len[i] = fl[i];
        if (fl[i] < 0) return exe_fail(S, in, TPU_ERR_SHAPE, "fft_length entries must be >= 0");
        int last = i == p->k - 1;
        int64_t want = (last && p->type == FT_IRFFT) ? (fl[i] ? fl[i] / 2 + 1 : 0) : fl[i];
        if (p->x->dims[d] != want)
            return exe_fail(S, in, TPU_ERR_SHAPE, "operand dim %d is %lld but fft_length %lld needs %lld", d,
                            (long long)p->x->dims[d], (long long)fl[i], (long long)want);
        p->full[d] = fl[i];
        if (last && p->type == FT_RFFT) ydims[d] = fl[i] ? fl[i] / 2 + 1 : 0;
        if (last && p->type == FT_IRFFT) ydims[d] = fl[i];
    }
    const hlo_shape *s = &in->shape;
    if (!hlo_shape_is_array(s) || s->dtype != yt || s->rank != p->rank || memcmp(s->dims, ydims, sizeof(int64_t) * (size_t)p->rank)) {
        char b[96];
        return exe_fail(S, in, TPU_ERR_SHAPE, "result shape %s is not the %s of the operand (%s)", hlo_shape_str(s, b, sizeof b), ty,
                        tpu_dtype_name(yt));
    }
    p->count = ten_count(p->rank, p->full);
    if (p->count < 0 || p->count > ((int64_t)1 << 40)) return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "transform too large");
    return exe_alloc(S, in, &p->y);
}

static inline double ft_ld(const tpu_tensor *t, int64_t i)
{
    return (t->dtype == TPU_F32 || t->dtype == TPU_C64) ? (double)((const float *)t->data)[i] : ((const double *)t->data)[i];
}

static inline void ft_st(tpu_tensor *t, int64_t i, double v)
{
    if (t->dtype == TPU_F32 || t->dtype == TPU_C64) ((float *)t->data)[i] = (float)v;
    else ((double *)t->data)[i] = v;
}

/* Transforms work (count complex values of the full shape) along fft dim `fd`, sign, every line. */
static int ft_axis(const ft_plan *p, double *work, int fd, int sign, int naive)
{
    int d = p->rank - p->k + fd;
    int64_t n = p->full[d], inner = 1;
    if (n <= 1) return 0;
    for (int i = d + 1; i < p->rank; i++) inner *= p->full[i];
    int64_t outer = p->count / (n * inner);
    ft_line l;
    double *line = ut_malloc((size_t)n * 2 * sizeof *line), *tmp = naive ? ut_malloc((size_t)n * 2 * sizeof *tmp) : NULL;
    int rc = 0;
    if (!line || (naive && !tmp) || (!naive && ft_line_init(&l, n, sign))) rc = -1;
    for (int64_t o = 0; !rc && o < outer; o++)
        for (int64_t q = 0; q < inner; q++) {
            int64_t base = o * n * inner + q;
            for (int64_t j = 0; j < n; j++) {
                line[2 * j] = work[2 * (base + j * inner)];
                line[2 * j + 1] = work[2 * (base + j * inner) + 1];
            }
            if (naive) ft_dft_naive(line, n, sign, tmp);
            else ft_line_run(&l, line);
            for (int64_t j = 0; j < n; j++) {
                work[2 * (base + j * inner)] = line[2 * j];
                work[2 * (base + j * inner) + 1] = line[2 * j + 1];
            }
        }
    if (!naive) ft_line_free(&l);
    ut_free(line);
    ut_free(tmp);
    return rc;
}

static tpu_status ft_run(exe_state *S, const hlo_instr *in, exe_value *const *ops, exe_value **out, int naive)
{
    ft_plan p;
    tpu_status st = ft_setup(S, in, ops, &p);
    if (st) return st;
    double *work = ut_calloc((size_t)(p.count ? p.count : 1) * 2, sizeof *work);
    if (!work) {
        tpu_tensor_free(p.y);
        return ut_nomem(S->ctx);
    }
    const tpu_tensor *x = p.x;
    int64_t nlast = p.full[p.rank - 1], xlast = x->rank ? x->dims[x->rank - 1] : 1;
    /* load: real inputs get zero imaginary parts; IRFFT's half spectrum goes into the first xlast slots */
    for (int64_t r = 0; r < p.count / (nlast ? nlast : 1); r++)
        for (int64_t j = 0; j < xlast; j++) {
            int64_t wi = r * nlast + j, xi = r * xlast + j;
            if (p.type == FT_RFFT) work[2 * wi] = ft_ld(x, xi);
            else {
                work[2 * wi] = ft_ld(x, 2 * xi);
                work[2 * wi + 1] = ft_ld(x, 2 * xi + 1);
            }
        }
    int sign = (p.type == FT_FFT || p.type == FT_RFFT) ? -1 : 1;
    int rc = 0;
    if (p.type != FT_IRFFT) {
        for (int fd = p.k - 1; fd >= 0 && !rc; fd--) rc = ft_axis(&p, work, fd, sign, naive);
    } else {
        for (int fd = p.k - 2; fd >= 0 && !rc; fd--) rc = ft_axis(&p, work, fd, sign, naive);
        /* Hermitian completion of the last dim: X[n - j] = conj(X[j]), then a complex inverse transform */
        int64_t h = nlast / 2 + 1;
        for (int64_t r = 0; r < p.count / (nlast ? nlast : 1); r++) {
            double *v = work + 2 * r * nlast;
            v[1] = 0;
            if (nlast % 2 == 0 && nlast) v[2 * (nlast / 2) + 1] = 0;
            for (int64_t j = h; j < nlast; j++) {
                v[2 * j] = v[2 * (nlast - j)];
                v[2 * j + 1] = -v[2 * (nlast - j) + 1];
            }
        }
        if (!rc) rc = ft_axis(&p, work, p.k - 1, sign, naive);
    }
    if (rc) {
        ut_free(work);
        tpu_tensor_free(p.y);
        return ut_nomem(S->ctx);
    }
    double scale = 1;
    if (p.type == FT_IFFT || p.type == FT_IRFFT)
        for (int i = 0; i < p.k; i++) scale *= (double)p.len[i];
    int64_t ylast = p.y->rank ? p.y->dims[p.y->rank - 1] : 1;
    for (int64_t r = 0; r < p.count / (nlast ? nlast : 1); r++)
        for (int64_t j = 0; j < ylast; j++) {
            int64_t wi = r * nlast + j, yi = r * ylast + j;
            if (p.type == FT_IRFFT) ft_st(p.y, yi, work[2 * wi] / scale);
            else {
                ft_st(p.y, 2 * yi, work[2 * wi] / scale);
                ft_st(p.y, 2 * yi + 1, work[2 * wi + 1] / scale);
            }
        }
    ut_free(work);
    return exe_out_array(S, p.y, out);
}

EXE_KERNEL(exe_k_fft)
{
    if (EXE_FORCE_REF(S)) return exe_k_fft_ref(S, in, ops, out);
    return ft_run(S, in, ops, out, 0);
}

EXE_KERNEL(exe_k_fft_ref) { return ft_run(S, in, ops, out, 1); }
