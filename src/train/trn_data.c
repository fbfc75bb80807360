/* trn_data.c — the datasets `tpusim train` reads (docs/step_dir.md section 6): a directory of .npz shards
 * (read into memory), or .tpuds files in the cached format (memory-mapped: example i of an array is one
 * memcpy from offset + i * example_bytes). Parts (shards, files) are concatenated in byte-wise name order.
 * Also the example order of an epoch (section 6.3). */
#include "train/train.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct trn_part {
    char          *file;
    int64_t        n, first;   /* examples, index of the first in the dataset */
    const uint8_t **base;      /* per dataset array: its data in this part */
    tpu_tensor   **owned;      /* .npz: the loaded arrays */
    int            nowned;
    void          *map;        /* .tpuds: the mapping */
    size_t         maplen;
};

static void trn_part_clear(trn_part *p)
{
    ut_free(p->file);
    ut_free(p->base);
    if (p->owned) tpu_tensors_free(p->owned, p->nowned);
    if (p->map) munmap(p->map, p->maplen);
}

void trn_data_free(trn_dataset *d)
{
    if (!d) return;
    for (int i = 0; d->parts && i < d->nparts; i++) trn_part_clear(&d->parts[i]);
    ut_free(d->parts);
    for (int i = 0; d->arr && i < d->narr; i++) ut_free(d->arr[i].name);
    ut_free(d->arr);
    ut_free(d->path);
    ut_free(d);
}

int trn_data_find(const trn_dataset *d, const char *name)
{
    for (int i = 0; i < d->narr; i++)
        if (!strcmp(d->arr[i].name, name)) return i;
    return -1;
}

static int trn_ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a > b && !strcmp(s + a - b, suf);
}

static int trn_cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The files of a dataset path, in byte-wise name order. */
static tpu_status trn_data_files(tpu_ctx *ctx, const char *path, char ***files, int *n, int *cached)
{
    *files = NULL;
    *n = 0;
    struct stat sb;
    if (stat(path, &sb)) return ut_err(ctx, TPU_ERR_IO, "dataset %s: %s", path, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) {
        if (!trn_ends_with(path, ".tpuds") && !trn_ends_with(path, ".npz"))
            return ut_err(ctx, TPU_ERR_INVALID, "dataset %s: a dataset is a directory of .npz shards, a .tpuds file or a "
                          "directory of .tpuds files", path);
        char **f = ut_calloc(1, sizeof *f);
        if (!f || !(f[0] = ut_strdup(path))) {
            ut_free(f);
            return ut_nomem(ctx);
        }
        *files = f;
        *n = 1;
        *cached = trn_ends_with(path, ".tpuds");
        return TPU_OK;
    }
    DIR *dir = opendir(path);
    if (!dir) return ut_err(ctx, TPU_ERR_IO, "dataset %s: %s", path, strerror(errno));
    char **f = NULL;
    int cnt = 0, cap = 0, npz = 0, tds = 0;
    tpu_status st = TPU_OK;
    struct dirent *e;
    while (!st && (e = readdir(dir))) {
        int isnpz = trn_ends_with(e->d_name, ".npz"), istds = trn_ends_with(e->d_name, ".tpuds");
        if (!isnpz && !istds) continue;
        npz += isnpz;
        tds += istds;
        char **nf = ut_grow(f, sizeof *nf, cnt, &cap, 16);
        if (!nf) { st = ut_nomem(ctx); break; }
        f = nf;
        size_t a = strlen(path), b = strlen(e->d_name);
        char *p = ut_malloc(a + b + 2);
        if (!p) { st = ut_nomem(ctx); break; }
        snprintf(p, a + b + 2, "%s%s%s", path, a && path[a - 1] == '/' ? "" : "/", e->d_name);
        f[cnt++] = p;
    }
    closedir(dir);
    if (!st && npz && tds) st = ut_err(ctx, TPU_ERR_INVALID, "dataset %s mixes .npz shards and .tpuds files", path);
    if (!st && !cnt) st = ut_err(ctx, TPU_ERR_INVALID, "dataset %s holds no .npz shards or .tpuds files", path);
    if (st) {
        for (int i = 0; i < cnt; i++) ut_free(f[i]);
        ut_free(f);
        return st;
    }
    qsort(f, (size_t)cnt, sizeof *f, trn_cmp_str);
    *files = f;
    *n = cnt;
    *cached = tds > 0;
    return TPU_OK;
}

/* Registers the arrays of the first part, or checks a later part's against them. */
static tpu_status trn_data_arrays(tpu_ctx *ctx, trn_dataset *d, const char *file, int idx, int n, char **names,
                                  const tpu_dtype *dt, const int *rank, const int64_t (*dims)[TPU_MAX_RANK])
{
    char a[128], b[128];
    if (idx == 0) {
        d->arr = ut_calloc((size_t)n, sizeof *d->arr);
        if (!d->arr) return ut_nomem(ctx);
        d->narr = n;
        for (int i = 0; i < n; i++) {
            trn_array *x = &d->arr[i];
            if (!(x->name = ut_strdup(names[i]))) return ut_nomem(ctx);
            for (int j = 0; j < i; j++)
                if (!strcmp(d->arr[j].name, names[i])) return ut_err(ctx, TPU_ERR_INVALID, "%s: array '%s' appears twice", file, names[i]);
            x->dtype = dt[i];
            x->rank = rank[i];
            memcpy(x->dims, dims[i], sizeof x->dims);
            int64_t c = ten_count(rank[i], dims[i]);
            if (c < 0) return ut_err(ctx, TPU_ERR_INVALID, "%s: array '%s': example too large", file, names[i]);
            x->ex_bytes = (size_t)c * tpu_dtype_size(dt[i]);
        }
        return TPU_OK;
    }
    if (n != d->narr)
        return ut_err(ctx, TPU_ERR_INVALID, "%s holds %d arrays, but %s holds %d: every part of a dataset holds the same arrays",
                      file, n, d->parts[0].file, d->narr);
    for (int i = 0; i < n; i++) {
        int k = trn_data_find(d, names[i]);
        if (k < 0)
            return ut_err(ctx, TPU_ERR_INVALID, "%s: array '%s' is not in %s: every part of a dataset holds the same arrays",
                          file, names[i], d->parts[0].file);
        const trn_array *x = &d->arr[k];
        int same = x->dtype == dt[i] && x->rank == rank[i];
        for (int q = 0; same && q < x->rank; q++) same = x->dims[q] == dims[i][q];
        if (!same) {
            trn_shape_str(dt[i], rank[i], dims[i], a, sizeof a);
            trn_shape_str(x->dtype, x->rank, x->dims, b, sizeof b);
            return ut_err(ctx, TPU_ERR_INVALID, "%s: array '%s' is %s per example, but %s in %s", file, names[i], a, b,
                          d->parts[0].file);
        }
    }
    return TPU_OK;
}

static tpu_status trn_open_npz(tpu_ctx *ctx, trn_dataset *d, trn_part *p, int idx)
{
    tpu_tensor **t = NULL;
    char **names = NULL;
    int n = 0;
    tpu_status st = tpu_npz_load(ctx, p->file, &t, &names, &n);
    if (st) return st;
    p->owned = t;
    p->nowned = n;
    tpu_dtype dt[64];
    int rank[64];
    int64_t dims[64][TPU_MAX_RANK];
    if (n == 0) st = ut_err(ctx, TPU_ERR_INVALID, "%s: no arrays", p->file);
    if (!st && n > 64) st = ut_err(ctx, TPU_ERR_INVALID, "%s: %d arrays (at most 64)", p->file, n);
    for (int i = 0; !st && i < n; i++) {
        if (t[i]->rank < 1) {
            st = ut_err(ctx, TPU_ERR_INVALID, "%s: array '%s' is a scalar: a dataset array's first dimension is the example", p->file, names[i]);
            break;
        }
        if (tpu_dtype_bits(t[i]->dtype) < 8) {
            st = ut_err(ctx, TPU_ERR_INVALID, "%s: array '%s' is %s: sub-byte types are not supported in datasets", p->file,
                        names[i], tpu_dtype_name(t[i]->dtype));
            break;
        }
        if (t[i]->dims[0] != t[0]->dims[0]) {
            st = ut_err(ctx, TPU_ERR_INVALID, "%s: array '%s' has %lld examples, array '%s' %lld", p->file, names[i],
                        (long long)t[i]->dims[0], names[0], (long long)t[0]->dims[0]);
            break;
        }
        dt[i] = t[i]->dtype;
        rank[i] = t[i]->rank - 1;
        memset(dims[i], 0, sizeof dims[i]);
        for (int q = 1; q < t[i]->rank; q++) dims[i][q - 1] = t[i]->dims[q];
    }
    if (!st) st = trn_data_arrays(ctx, d, p->file, idx, n, names, dt, rank, (const int64_t(*)[TPU_MAX_RANK])dims);
    if (!st) {
        p->n = t[0]->dims[0];
        p->base = ut_calloc((size_t)d->narr, sizeof *p->base);
        if (!p->base) st = ut_nomem(ctx);
        for (int i = 0; !st && i < n; i++) p->base[trn_data_find(d, names[i])] = (const uint8_t *)t[i]->data;
    }
    tpu_names_free(names, n);
    return st;
}

static uint32_t trn_u32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t trn_u64(const uint8_t *p) { return (uint64_t)trn_u32(p) | (uint64_t)trn_u32(p + 4) << 32; }

#define TRN_DS_ALIGN 4096u

static tpu_status trn_open_tpuds(tpu_ctx *ctx, trn_dataset *d, trn_part *p, int idx)
{
    const char *f = p->file;
    int fd = open(f, O_RDONLY);
    if (fd < 0) return ut_err(ctx, TPU_ERR_IO, "%s: cannot open: %s", f, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb)) {
        close(fd);
        return ut_err(ctx, TPU_ERR_IO, "%s: %s", f, strerror(errno));
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (size < 64) {
        close(fd);
        return ut_err(ctx, TPU_ERR_INVALID, "%s: %llu bytes: too short for the 64-byte header of a .tpuds file", f,
                      (unsigned long long)size);
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return ut_err(ctx, TPU_ERR_IO, "%s: cannot map: %s", f, strerror(errno));
    p->map = map;
    p->maplen = (size_t)size;
    const uint8_t *h = map;
    if (memcmp(h, "TPUSIMDS", 8))
        return ut_err(ctx, TPU_ERR_INVALID, "%s: field 'magic': not \"TPUSIMDS\": not a tpusim cached dataset", f);
    uint32_t ver = trn_u32(h + 8), A = trn_u32(h + 12);
    uint64_t n = trn_u64(h + 16), hsize = trn_u64(h + 24), fsize = trn_u64(h + 32);
    if (ver != 1) return ut_err(ctx, TPU_ERR_INVALID, "%s: field 'version' is %u: this reader knows version 1", f, ver);
    if (A < 1 || A > 64) return ut_err(ctx, TPU_ERR_INVALID, "%s: field 'num_arrays' is %u (1..64)", f, A);
    uint64_t want_h = (64 + 128ull * A + TRN_DS_ALIGN - 1) / TRN_DS_ALIGN * TRN_DS_ALIGN;
    if (hsize != want_h)
        return ut_err(ctx, TPU_ERR_INVALID, "%s: field 'header_size' is %llu, %u arrays make %llu", f, (unsigned long long)hsize,
                      A, (unsigned long long)want_h);
    if (fsize != size)
        return ut_err(ctx, TPU_ERR_INVALID, "%s: field 'file_size' is %llu, the file has %llu bytes (truncated?)", f,
                      (unsigned long long)fsize, (unsigned long long)size);
    if (64 + 128ull * A > size) return ut_err(ctx, TPU_ERR_INVALID, "%s: the array table runs past the end of the file", f);
    if (n > (1ull << 40)) return ut_err(ctx, TPU_ERR_INVALID, "%s: field 'num_examples' is %llu: too many", f, (unsigned long long)n);
    char *names[64];
    tpu_dtype dt[64];
    int rank[64];
    int64_t dims[64][TPU_MAX_RANK];
    uint64_t offs[64], nbs[64];
    tpu_status st = TPU_OK;
    int k;
    for (k = 0; k < (int)A && !st; k++) {
        const uint8_t *e = h + 64 + 128 * (size_t)k;
        names[k] = NULL;
        size_t nl = strnlen((const char *)e, 48);
        if (nl == 0 || nl >= 48) {
            st = ut_err(ctx, TPU_ERR_INVALID, "%s: array table entry %d: field 'name' must be 1..47 bytes, NUL-padded", f, k);
            break;
        }
        if (!(names[k] = ut_strndup((const char *)e, nl))) {
            st = ut_nomem(ctx);
            break;
        }
        size_t tl = strnlen((const char *)e + 48, 8);
        tpu_dtype t = tpu_dtype_from_name((const char *)e + 48, tl);
        if (t == TPU_INVALID || tpu_dtype_kind(t) == 'o' || tpu_dtype_bits(t) < 8) {
            st = ut_err(ctx, TPU_ERR_INVALID, "%s: array '%s': field 'dtype' is '%.*s', not an element type datasets hold", f,
                        names[k], (int)tl, (const char *)e + 48);
            k++;
            break;
        }
        dt[k] = t;
        uint32_t r = trn_u32(e + 56);
        if (r > TRN_MAX_EX_RANK) {
            st = ut_err(ctx, TPU_ERR_INVALID, "%s: array '%s': field 'rank' is %u (at most %d)", f, names[k], r, TRN_MAX_EX_RANK);
            k++;
            break;
        }
        rank[k] = (int)r;
        memset(dims[k], 0, sizeof dims[k]);
        uint64_t per = 1;
        int bad = 0;
        for (uint32_t q = 0; q < r; q++) {
            int64_t v = (int64_t)trn_u64(e + 64 + 8 * q);
            if (v < 0 || v > (1ll << 40) || (v && per > (1ull << 40) / (uint64_t)v)) bad = 1;
            else per *= (uint64_t)v;
            dims[k][q] = v;
        }
        if (bad || per > (1ull << 40)) {
            st = ut_err(ctx, TPU_ERR_INVALID, "%s: array '%s': field 'dims' holds an impossible dimension", f, names[k]);
            k++;
            break;
        }
        uint64_t off = trn_u64(e + 112), nb = trn_u64(e + 120);
        uint64_t ex = per * tpu_dtype_size(t);
        uint64_t want = ex && n > UINT64_MAX / ex ? UINT64_MAX : n * ex;
        if (nb != want) {
            char s[128];
            trn_shape_str(t, (int)r, dims[k], s, sizeof s);
            st = ut_err(ctx, TPU_ERR_INVALID, "%s: array '%s': field 'nbytes' is %llu, but %llu examples of %s are %llu bytes", f,
                        names[k], (unsigned long long)nb, (unsigned long long)n, s, (unsigned long long)want);
            k++;
            break;
        }
        if (off % TRN_DS_ALIGN || off < hsize) {
            st = ut_err(ctx, TPU_ERR_INVALID, "%s: array '%s': field 'offset' is %llu: not a multiple of 4096 past the header",
                        f, names[k], (unsigned long long)off);
            k++;
            break;
        }
        if (off > size || nb > size - off) {
            st = ut_err(ctx, TPU_ERR_INVALID, "%s: array '%s': field 'offset' + 'nbytes' = %llu runs past the end of the file "
                        "(%llu bytes)", f, names[k], (unsigned long long)(off + nb), (unsigned long long)size);
            k++;
            break;
        }
        offs[k] = off;
        nbs[k] = nb;
        /* arrays share no bytes: two names for the same examples would be data that lie */
        for (int j = 0; j < k && !st; j++)
            if (nb && nbs[j] && off < offs[j] + nbs[j] && offs[j] < off + nb)
                st = ut_err(ctx, TPU_ERR_INVALID, "%s: arrays '%s' and '%s' overlap (bytes %llu..%llu and %llu..%llu)", f,
                            names[j], names[k], (unsigned long long)offs[j], (unsigned long long)(offs[j] + nbs[j]),
                            (unsigned long long)off, (unsigned long long)(off + nb));
        if (st) {
            k++;
            break;
        }
    }
    if (!st) st = trn_data_arrays(ctx, d, f, idx, (int)A, names, dt, rank, (const int64_t(*)[TPU_MAX_RANK])dims);
    if (!st) {
        p->n = (int64_t)n;
        p->base = ut_calloc((size_t)d->narr, sizeof *p->base);
        if (!p->base) st = ut_nomem(ctx);
        for (int i = 0; !st && i < (int)A; i++) p->base[trn_data_find(d, names[i])] = h + offs[i];
    }
    for (int i = 0; i < k && i < (int)A; i++) ut_free(names[i]);
    return st;
}

tpu_status trn_data_open(tpu_ctx *ctx, const char *path, trn_dataset **out)
{
    *out = NULL;
    char **files = NULL;
    int nf = 0, cached = 0;
    tpu_status st = trn_data_files(ctx, path, &files, &nf, &cached);
    if (st) return st;
    trn_dataset *d = ut_calloc(1, sizeof *d);
    if (!d || !(d->path = ut_strdup(path)) || !(d->parts = ut_calloc((size_t)nf, sizeof *d->parts))) {
        trn_data_free(d);
        for (int i = 0; i < nf; i++) ut_free(files[i]);
        ut_free(files);
        return ut_nomem(ctx);
    }
    d->cached = cached;
    for (int i = 0; i < nf; i++) {
        trn_part *p = &d->parts[i];
        p->file = files[i];
        files[i] = NULL;
        d->nparts = i + 1;
        if (!st) st = cached ? trn_open_tpuds(ctx, d, p, i) : trn_open_npz(ctx, d, p, i);
        if (!st) {
            p->first = d->n;
            d->n += p->n;
        }
    }
    ut_free(files);
    if (st) {
        trn_data_free(d);
        return st;
    }
    *out = d;
    return TPU_OK;
}

tpu_status trn_data_check(tpu_ctx *ctx, const trn_dataset *d, const trn_entry *in, int nin, int64_t min_n, const char *what)
{
    for (int i = 0; i < nin; i++) {
        const trn_entry *e = &in[i];
        if (!e->source) continue;   /* @mask */
        int k = trn_data_find(d, e->source);
        if (k < 0) {
            char names[512];
            size_t len = 0;
            names[0] = 0;
            for (int j = 0; j < d->narr && len + 64 < sizeof names; j++)
                len += (size_t)snprintf(names + len, sizeof names - len, "%s'%s'", j ? ", " : "", d->arr[j].name);
            return ut_err(ctx, TPU_ERR_INVALID, "%s: no array '%s' (the source of %s '%s'); it holds %s", d->path, e->source,
                          what, e->name, names);
        }
        const trn_array *a = &d->arr[k];
        int same = a->dtype == e->dtype && a->rank == e->rank - 1;
        for (int q = 0; same && q < a->rank; q++) same = a->dims[q] == e->dims[q + 1];
        if (!same) {
            char got[128], want[128];
            trn_shape_str(a->dtype, a->rank, a->dims, got, sizeof got);
            trn_shape_str(e->dtype, e->rank - 1, e->dims + 1, want, sizeof want);
            return ut_err(ctx, TPU_ERR_INVALID, "%s: array '%s' is %s per example, %s '%s' wants %s", d->path, e->source, got,
                          what, e->name, want);
        }
    }
    if (d->n < min_n)
        return ut_err(ctx, TPU_ERR_INVALID, "%s: %lld examples make no global batch of %lld", d->path, (long long)d->n,
                      (long long)min_n);
    return TPU_OK;
}

void trn_data_copy(const trn_dataset *d, int a, int64_t i, void *dst)
{
    int lo = 0, hi = d->nparts - 1;
    while (lo < hi) {   /* the last part whose first example is <= i */
        int mid = (lo + hi + 1) / 2;
        if (d->parts[mid].first <= i) lo = mid;
        else hi = mid - 1;
    }
    const trn_part *p = &d->parts[lo];
    size_t eb = d->arr[a].ex_bytes;
    memcpy(dst, p->base[a] + (size_t)(i - p->first) * eb, eb);
}

void trn_epoch_order(int64_t n, uint64_t seed, int64_t epoch, int shuffle, int64_t *order)
{
    for (int64_t i = 0; i < n; i++) order[i] = i;
    if (!shuffle) return;
    uint64_t state = seed * 1000003ull + (uint64_t)epoch;
    for (int64_t i = n - 1; i >= 1; i--) {
        state += 0x9E3779B97F4A7C15ull;
        uint64_t z = state;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        int64_t j = (int64_t)(z % (uint64_t)(i + 1));
        int64_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}
