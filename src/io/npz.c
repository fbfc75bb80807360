/* npz.c — NumPy .npz archives: a zip file of .npy members, stored (np.savez) or deflated
 * (np.savez_compressed), with zip64 records where numpy's zipfile writes them. Deflate is zlib's.
 *
 * Reading trusts the central directory (numpy writes sizes there; the local headers may hold zip64
 * placeholders or a data descriptor) and checks every offset and size against the archive before use, the
 * CRC-32 of every member, and that a deflated member cannot claim more than deflate could expand to. */
#include "io.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define IO_ZCHUNK (64 * 1024)
#define IO_U32MAX 0xFFFFFFFFu

static uint16_t io_rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t io_rd32(const uint8_t *p) { return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t io_rd64(const uint8_t *p) { return io_rd32(p) | (uint64_t)io_rd32(p + 4) << 32; }

/* zlib allocates through the library's hook too, so allocation-failure tests reach it. */
static voidpf io_zalloc(voidpf opaque, uInt items, uInt size)
{
    (void)opaque;
    return ut_calloc(items, size);
}

static void io_zfree(voidpf opaque, voidpf p)
{
    (void)opaque;
    ut_free(p);
}

/* ---------------------------------------------------------------------------------------------------------
 * Reading
 * ------------------------------------------------------------------------------------------------------- */

typedef struct io_arc {
    tpu_ctx       *ctx;
    const char    *what;   /* the archive's name in messages */
    const uint8_t *mem;    /* in memory, or */
    FILE          *f;      /* a seekable file */
    uint64_t       size;
} io_arc;

static tpu_status io_arc_read(io_arc *a, uint64_t off, void *dst, size_t n, const char *part)
{
    if (off > a->size || n > a->size - off)
        return ut_err(a->ctx, TPU_ERR_PARSE, "%s: %s at offset %llu (%zu bytes) lies outside the %llu-byte archive",
                      a->what, part, (unsigned long long)off, n, (unsigned long long)a->size);
    if (a->mem) {
        memcpy(dst, a->mem + off, n);
        return TPU_OK;
    }
    if (fseeko(a->f, (off_t)off, SEEK_SET) != 0 || fread(dst, 1, n, a->f) != n)
        return ut_err(a->ctx, TPU_ERR_IO, "%s: read error at offset %llu: %s", a->what, (unsigned long long)off,
                      ferror(a->f) ? strerror(errno) : "unexpected end of file");
    return TPU_OK;
}

typedef struct io_zent {
    const uint8_t *name;   /* points into the central directory copy */
    size_t         nlen;
    uint64_t       csize, usize, lho;
    uint32_t       crc;
    int            method, flags;
} io_zent;

/* Where the central directory is and how many entries it has. */
static tpu_status io_zip_find_cd(io_arc *a, uint64_t *cd_off, uint64_t *cd_size, uint64_t *nent)
{
    if (a->size < 22) return ut_err(a->ctx, TPU_ERR_PARSE, "%s: not a zip archive (only %llu bytes)", a->what,
                                    (unsigned long long)a->size);
    size_t tail = (size_t)UT_MIN(a->size, (uint64_t)22 + 65535);
    uint8_t *buf = ut_malloc(tail);
    if (!buf) return ut_err(a->ctx, TPU_ERR_NOMEM, "%s: out of memory", a->what);
    tpu_status st = io_arc_read(a, a->size - tail, buf, tail, "end of archive");
    if (st) {
        ut_free(buf);
        return st;
    }
    /* the end-of-central-directory record: the last signature whose comment reaches no further than the end */
    size_t at = SIZE_MAX;
    for (size_t i = tail - 22 + 1; i-- > 0;)
        if (io_rd32(buf + i) == 0x06054b50u && i + 22 + io_rd16(buf + i + 20) <= tail) {
            at = i;
            break;
        }
    if (at == SIZE_MAX) {
        ut_free(buf);
        return ut_err(a->ctx, TPU_ERR_PARSE, "%s: not a zip archive (no end of central directory record)", a->what);
    }
    const uint8_t *e = buf + at;
    uint64_t eocd = a->size - tail + at;
    int disk = io_rd16(e + 4), cd_disk = io_rd16(e + 6);
    *nent = io_rd16(e + 10);
    *cd_size = io_rd32(e + 12);
    *cd_off = io_rd32(e + 16);
    ut_free(buf);
    uint64_t cd_end_limit = eocd;
    uint8_t loc[20], z64[56];
    if (eocd >= 20 && io_arc_read(a, eocd - 20, loc, 20, "zip64 locator") == TPU_OK && io_rd32(loc) == 0x07064b50u) {
        uint64_t zoff = io_rd64(loc + 8);
        if ((st = io_arc_read(a, zoff, z64, 56, "zip64 end of central directory"))) return st;
        if (io_rd32(z64) != 0x06064b50u)
            return ut_err(a->ctx, TPU_ERR_PARSE, "%s: bad zip64 end of central directory record at offset %llu",
                          a->what, (unsigned long long)zoff);
        disk = (int)io_rd32(z64 + 16), cd_disk = (int)io_rd32(z64 + 20);
        *nent = io_rd64(z64 + 32);
        *cd_size = io_rd64(z64 + 40);
        *cd_off = io_rd64(z64 + 48);
        cd_end_limit = zoff;
    } else if (*nent == 0xFFFF || *cd_size == IO_U32MAX || *cd_off == IO_U32MAX) {
        return ut_err(a->ctx, TPU_ERR_PARSE, "%s: zip64 archive without a zip64 locator", a->what);
    }
    if (disk != 0 || cd_disk != 0)
        return ut_err(a->ctx, TPU_ERR_UNSUPPORTED, "%s: multi-disk zip archives are not supported", a->what);
    if (*cd_off > cd_end_limit || *cd_size > cd_end_limit - *cd_off)
        return ut_err(a->ctx, TPU_ERR_PARSE, "%s: central directory (offset %llu, %llu bytes) lies outside the archive",
                      a->what, (unsigned long long)*cd_off, (unsigned long long)*cd_size);
    if (*nent > *cd_size / 46)
        return ut_err(a->ctx, TPU_ERR_PARSE, "%s: %llu entries cannot fit in a %llu-byte central directory", a->what,
                      (unsigned long long)*nent, (unsigned long long)*cd_size);
    return TPU_OK;
}

/* Parses the central directory entry at cd[*pos]; advances *pos. */
static tpu_status io_zip_entry(io_arc *a, const uint8_t *cd, size_t cd_size, size_t *pos, int idx, io_zent *z)
{
    size_t p = *pos;
    if (cd_size - p < 46 || io_rd32(cd + p) != 0x02014b50u)
        return ut_err(a->ctx, TPU_ERR_PARSE, "%s: central directory entry %d is malformed", a->what, idx);
    const uint8_t *c = cd + p;
    z->flags = io_rd16(c + 8);
    z->method = io_rd16(c + 10);
    z->crc = io_rd32(c + 16);
    z->csize = io_rd32(c + 20);
    z->usize = io_rd32(c + 24);
    size_t nlen = io_rd16(c + 28), elen = io_rd16(c + 30), clen = io_rd16(c + 32);
    uint32_t disk = io_rd16(c + 34);
    z->lho = io_rd32(c + 42);
    if (cd_size - p - 46 < nlen + elen + clen)
        return ut_err(a->ctx, TPU_ERR_PARSE, "%s: central directory entry %d runs past the directory", a->what, idx);
    z->name = c + 46;
    z->nlen = nlen;
    /* zip64 extra field: the 64-bit values of those fields that hold 0xFFFFFFFF, in this order */
    const uint8_t *x = c + 46 + nlen, *xe = x + elen;
    while (xe - x >= 4) {
        uint16_t id = io_rd16(x), sz = io_rd16(x + 2);
        if (sz > xe - x - 4) break;
        if (id == 0x0001) {
            const uint8_t *v = x + 4, *ve = v + sz;
            uint64_t *fields[3] = {&z->usize, &z->csize, &z->lho};
            for (int k = 0; k < 3; k++)
                if (*fields[k] == IO_U32MAX) {
                    if (ve - v < 8)
                        return ut_err(a->ctx, TPU_ERR_PARSE, "%s: entry %d: zip64 extra field too short", a->what, idx);
                    *fields[k] = io_rd64(v);
                    v += 8;
                }
            if (disk == 0xFFFF && ve - v >= 4) disk = io_rd32(v);
        }
        x += 4 + sz;
    }
    if (disk != 0)
        return ut_err(a->ctx, TPU_ERR_UNSUPPORTED, "%s: multi-disk zip archives are not supported", a->what);
    *pos = p + 46 + nlen + elen + clen;
    return TPU_OK;
}

/* Loads one member as a .npy. `what` names it in messages. */
static tpu_status io_zip_member(io_arc *a, const io_zent *z, const char *what, const io_npy_opts *o, tpu_tensor **out)
{
    *out = NULL;
    if (z->flags & 1) return ut_err(a->ctx, TPU_ERR_UNSUPPORTED, "%s: encrypted members are not supported", what);
    if (z->method != 0 && z->method != 8)
        return ut_err(a->ctx, TPU_ERR_UNSUPPORTED, "%s: compression method %d is not supported (only stored and "
                      "deflated)", what, z->method);
    uint8_t lh[30];
    tpu_status st = io_arc_read(a, z->lho, lh, 30, "local header");
    if (st) return st;
    if (io_rd32(lh) != 0x04034b50u)
        return ut_err(a->ctx, TPU_ERR_PARSE, "%s: no local header at offset %llu", what, (unsigned long long)z->lho);
    uint64_t data = z->lho + 30 + io_rd16(lh + 26) + io_rd16(lh + 28);
    if (data > a->size || z->csize > a->size - data)
        return ut_err(a->ctx, TPU_ERR_PARSE, "%s: data (offset %llu, %llu bytes) run past the end of the archive",
                      what, (unsigned long long)data, (unsigned long long)z->csize);
    if (z->method == 0 && z->csize != z->usize)
        return ut_err(a->ctx, TPU_ERR_PARSE, "%s: stored member with different sizes (%llu and %llu)", what,
                      (unsigned long long)z->csize, (unsigned long long)z->usize);
    /* deflate expands at most about 1032:1; a larger claim is a lie (and would allocate for nothing) */
    if (z->method == 8 && z->usize / 1032 > z->csize + 64)
        return ut_err(a->ctx, TPU_ERR_PARSE, "%s: claims %llu bytes from %llu compressed bytes", what,
                      (unsigned long long)z->usize, (unsigned long long)z->csize);
    io_src s;
    memset(&s, 0, sizeof s);
    s.ctx = a->ctx;
    s.what = what;
    s.crc_on = 1;
    s.crc = crc32(0, Z_NULL, 0);
    if (a->mem) {
        s.mem = a->mem + data;
        s.len = (size_t)z->csize;
    } else {
        if (fseeko(a->f, (off_t)data, SEEK_SET) != 0)
            return ut_err(a->ctx, TPU_ERR_IO, "%s: seek error: %s", what, strerror(errno));
        s.f = a->f;
        s.remain = z->csize;
    }
    z_stream zs;
    if (z->method == 8) {
        memset(&zs, 0, sizeof zs);
        zs.zalloc = io_zalloc;
        zs.zfree = io_zfree;
        int r = inflateInit2(&zs, -MAX_WBITS);
        if (r != Z_OK)
            return ut_err(a->ctx, r == Z_MEM_ERROR ? TPU_ERR_NOMEM : TPU_ERR_INTERNAL, "%s: inflateInit failed: %s",
                          what, zs.msg ? zs.msg : zError(r));
        s.z = &zs;
        if (!a->mem && !(s.zin = ut_malloc(IO_ZCHUNK))) {
            inflateEnd(&zs);
            return ut_err(a->ctx, TPU_ERR_NOMEM, "%s: out of memory", what);
        }
    }
    st = io_npy_read(&s, z->usize, o, out);
    if (st == TPU_OK && z->method == 8) {
        uint8_t extra;   /* the deflate stream must end where the member does */
        if (io_src_read(&s, &extra, 1) || (!s.zend && !s.st))
            st = ut_err(a->ctx, TPU_ERR_PARSE, "%s: deflate data do not end at the member's size", what);
        else
            st = s.st;
    }
    if (st == TPU_OK && s.crc != z->crc)
        st = ut_err(a->ctx, TPU_ERR_PARSE, "%s: CRC-32 mismatch (data %08lx, directory %08x): the archive is corrupt",
                    what, s.crc, z->crc);
    if (s.z) inflateEnd(&zs);
    ut_free(s.zin);
    if (st) {
        tpu_tensor_free(*out);
        *out = NULL;
    }
    return st;
}

static int io_cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

/* Members must not share bytes: entries pointing at the same data would let a small archive expand without
 * bound (a "zip bomb"). Each member takes at least its 30-byte local header plus its compressed data. */
static tpu_status io_zip_check_overlap(io_arc *a, const io_zent *zs, size_t n)
{
    if (n < 2) return TPU_OK;
    uint64_t *span = ut_malloc(n * 2 * sizeof *span);
    if (!span) return ut_err(a->ctx, TPU_ERR_NOMEM, "%s: out of memory", a->what);
    for (size_t i = 0; i < n; i++) {
        span[2 * i] = zs[i].lho;
        span[2 * i + 1] = zs[i].lho + 30 + zs[i].csize;   /* both are below the archive size, so no overflow */
    }
    qsort(span, n, 2 * sizeof *span, io_cmp_u64);
    tpu_status st = TPU_OK;
    for (size_t i = 0; i + 1 < n && !st; i++)
        if (span[2 * i + 1] > span[2 * i + 2])
            st = ut_err(a->ctx, TPU_ERR_PARSE, "%s: members at offsets %llu and %llu overlap", a->what,
                        (unsigned long long)span[2 * i], (unsigned long long)span[2 * i + 2]);
    ut_free(span);
    return st;
}

static int io_cmp_name(const void *x, const void *y) { return strcmp(*(char *const *)x, *(char *const *)y); }

/* Two members with one name: numpy's np.load would give one of them and hide the other. */
static tpu_status io_npz_unique_names(io_arc *a, char **ns, int n)
{
    if (n < 2) return TPU_OK;
    char **sorted = ut_malloc((size_t)n * sizeof *sorted);
    if (!sorted) return ut_err(a->ctx, TPU_ERR_NOMEM, "%s: out of memory", a->what);
    memcpy(sorted, ns, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, io_cmp_name);
    tpu_status st = TPU_OK;
    for (int i = 0; i + 1 < n && !st; i++)
        if (!strcmp(sorted[i], sorted[i + 1]))
            st = ut_err(a->ctx, TPU_ERR_PARSE, "%s: two members are named '%.200s': which one is meant is unclear",
                        a->what, sorted[i]);
    ut_free(sorted);
    return st;
}

static tpu_status io_npz_read(io_arc *a, tpu_npz_filter filter, void *user, tpu_tensor ***tensors, char ***names,
                              int *count)
{
    uint64_t cd_off = 0, cd_size = 0, nent = 0;
    tpu_status st = io_zip_find_cd(a, &cd_off, &cd_size, &nent);
    if (st) return st;
    if (nent > 1000000)
        return ut_err(a->ctx, TPU_ERR_UNSUPPORTED, "%s: %llu members is too many", a->what, (unsigned long long)nent);
    uint8_t *cd = ut_malloc((size_t)cd_size);
    io_zent *zs = ut_calloc((size_t)nent + 1, sizeof *zs);
    tpu_tensor **ts = ut_calloc((size_t)nent + 1, sizeof *ts);
    char **ns = ut_calloc((size_t)nent + 1, sizeof *ns);
    int n = 0;
    if (!cd || !zs || !ts || !ns) {
        st = ut_err(a->ctx, TPU_ERR_NOMEM, "%s: out of memory", a->what);
        goto fail;
    }
    if ((st = io_arc_read(a, cd_off, cd, (size_t)cd_size, "central directory"))) goto fail;
    size_t pos = 0;
    for (uint64_t i = 0; i < nent; i++) {
        io_zent *z = &zs[i];
        if ((st = io_zip_entry(a, cd, (size_t)cd_size, &pos, (int)i, z))) goto fail;
        if (memchr(z->name, 0, z->nlen)) {
            st = ut_err(a->ctx, TPU_ERR_PARSE, "%s: member %d has a NUL byte in its name", a->what, (int)i);
            goto fail;
        }
        if (z->lho > a->size || z->csize > a->size - z->lho) {
            st = ut_err(a->ctx, TPU_ERR_PARSE, "%s: member %d (offset %llu, %llu bytes) lies outside the archive",
                        a->what, (int)i, (unsigned long long)z->lho, (unsigned long long)z->csize);
            goto fail;
        }
    }
    if ((st = io_zip_check_overlap(a, zs, (size_t)nent))) goto fail;
    for (uint64_t i = 0; i < nent; i++) {
        const io_zent z = zs[i];
        if (z.nlen && z.name[z.nlen - 1] == '/' && z.usize == 0) continue;   /* a directory entry */
        char what[640];
        snprintf(what, sizeof what, "%s: member '%.*s%s'", a->what, (int)UT_MIN(z.nlen, (size_t)400),
                 (const char *)z.name, z.nlen > 400 ? "..." : "");
        size_t nl = z.nlen;
        if (nl >= 4 && memcmp(z.name + nl - 4, ".npy", 4) == 0) nl -= 4;
        if (!(ns[n] = ut_strndup((const char *)z.name, nl))) {
            st = ut_err(a->ctx, TPU_ERR_NOMEM, "%s: out of memory", a->what);
            goto fail;
        }
        io_npy_opts o = {TPU_INVALID, filter, user, ns[n], n};
        if ((st = io_zip_member(a, &z, what, filter ? &o : NULL, &ts[n]))) {
            ut_free(ns[n]);
            ns[n] = NULL;
            goto fail;
        }
        n++;
    }
    if ((st = io_npz_unique_names(a, ns, n))) goto fail;
    ut_free(cd);
    ut_free(zs);
    *tensors = ts;
    *names = ns;
    *count = n;
    return TPU_OK;
fail:
    ut_free(cd);
    ut_free(zs);
    if (ts) tpu_tensors_free(ts, n);
    if (ns) tpu_names_free(ns, n);
    return st;
}

tpu_status io_npz_load_mem(tpu_ctx *ctx, const void *buf, size_t len, const char *what, tpu_npz_filter filter,
                           void *user, tpu_tensor ***tensors, char ***names, int *count)
{
    *tensors = NULL;
    *names = NULL;
    *count = 0;
    io_arc a = {ctx, what ? what : "<memory>", buf ? buf : (const void *)"", NULL, buf ? len : 0};
    return io_npz_read(&a, filter, user, tensors, names, count);
}

tpu_status tpu_npz_load(tpu_ctx *ctx, const char *path, tpu_tensor ***tensors, char ***names, int *count)
{
    return tpu_npz_load_filtered(ctx, path, NULL, NULL, tensors, names, count);
}

tpu_status tpu_npz_load_filtered(tpu_ctx *ctx, const char *path, tpu_npz_filter filter, void *user,
                                 tpu_tensor ***tensors, char ***names, int *count)
{
    *tensors = NULL;
    *names = NULL;
    *count = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return ut_err(ctx, TPU_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
        fclose(f);
        return ut_err(ctx, TPU_ERR_IO, "%s: is a directory", path);
    }
    off_t end = -1;
    if (fseeko(f, 0, SEEK_END) == 0) end = ftello(f);
    if (end < 0) {
        fclose(f);
        return ut_err(ctx, TPU_ERR_IO, "%s: cannot seek (a .npz must be a regular file): %s", path, strerror(errno));
    }
    io_arc a = {ctx, path, NULL, f, (uint64_t)end};
    tpu_status st = io_npz_read(&a, filter, user, tensors, names, count);
    fclose(f);
    return st;
}

void tpu_names_free(char **names, int count)
{
    if (!names) return;
    for (int i = 0; i < count; i++) ut_free(names[i]);
    ut_free(names);
}

/* ---------------------------------------------------------------------------------------------------------
 * Writing
 * ------------------------------------------------------------------------------------------------------- */

/* Tests set this to write zip64 records for every size and offset, as a >4 GiB archive would have. */
static int io_force_zip64;
void io_npz_force_zip64(int on) { io_force_zip64 = on; }

typedef struct io_wz {
    tpu_ctx    *ctx;
    const char *path;
    FILE       *f;
    int         bad;       /* a write failed */
} io_wz;

static void io_put(io_wz *w, const void *p, size_t n)
{
    if (!w->bad && n && fwrite(p, 1, n, w->f) != n) w->bad = 1;
}

static void io_put16(io_wz *w, unsigned v)
{
    uint8_t b[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    io_put(w, b, 2);
}

static void io_put32(io_wz *w, uint32_t v)
{
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    io_put(w, b, 4);
}

static void io_put64(io_wz *w, uint64_t v)
{
    io_put32(w, (uint32_t)v);
    io_put32(w, (uint32_t)(v >> 32));
}

static uint64_t io_tell(io_wz *w)
{
    off_t o = ftello(w->f);
    if (o < 0) w->bad = 1;
    return o < 0 ? 0 : (uint64_t)o;
}

typedef struct io_wmember {
    char     *name;   /* "<name>.npy" */
    uint64_t  lho, csize, usize;
    uint32_t  crc;
    int       method, utf8;
} io_wmember;

/* Streams bytes into the member: through deflate when z is set, straight to the file otherwise. */
static tpu_status io_member_put(io_wz *w, z_stream *z, uint8_t *zout, const uint8_t *p, size_t n, int finish,
                                uint64_t *csize)
{
    if (!z) {
        io_put(w, p, n);
        *csize += n;
        return TPU_OK;
    }
    z->next_in = (Bytef *)(uintptr_t)p;
    z->avail_in = (uInt)n;
    for (;;) {
        z->next_out = zout;
        z->avail_out = IO_ZCHUNK;
        int r = deflate(z, finish ? Z_FINISH : Z_NO_FLUSH);
        if (r == Z_STREAM_ERROR) return ut_err(w->ctx, TPU_ERR_INTERNAL, "%s: deflate failed", w->path);
        size_t k = IO_ZCHUNK - z->avail_out;
        io_put(w, zout, k);
        *csize += k;
        if (finish ? r == Z_STREAM_END : (z->avail_in == 0 && z->avail_out != 0)) break;
    }
    return TPU_OK;
}

static tpu_status io_write_member(io_wz *w, const tpu_tensor *t, io_wmember *m, int compress, uint8_t *tmp,
                                  uint8_t *zout)
{
    ut_buf hdr;
    ut_buf_init(&hdr);
    tpu_status st = io_npy_header(w->ctx, t, &hdr);
    if (st) {
        ut_buf_free(&hdr);
        ut_err_prefix(w->ctx, "%s: member '%s'", w->path, m->name);
        return st;
    }
    m->usize = hdr.len + t->nbytes;
    m->method = compress ? 8 : 0;
    m->lho = io_tell(w);
    /* sizes that might not fit 32 bits get a zip64 extra field in the local header */
    int z64 = io_force_zip64 || (compress ? m->usize + m->usize / 512 + 65536 : m->usize) >= IO_U32MAX;
    size_t nlen = strlen(m->name);
    io_put32(w, 0x04034b50u);
    io_put16(w, z64 ? 45 : 20);
    io_put16(w, m->utf8 ? 0x800 : 0);
    io_put16(w, (unsigned)m->method);
    io_put16(w, 0);        /* time 00:00:00 */
    io_put16(w, 0x21);     /* date 1980-01-01: fixed, so the same arrays give the same bytes */
    io_put32(w, 0);        /* crc and sizes are filled in below */
    io_put32(w, 0);
    io_put32(w, 0);
    io_put16(w, (unsigned)nlen);
    io_put16(w, z64 ? 20 : 0);
    io_put(w, m->name, nlen);
    if (z64) {
        io_put16(w, 1);
        io_put16(w, 16);
        io_put64(w, 0);
        io_put64(w, 0);
    }
    z_stream zs, *z = NULL;
    if (compress) {
        memset(&zs, 0, sizeof zs);
        zs.zalloc = io_zalloc;
        zs.zfree = io_zfree;
        int r = deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
        if (r != Z_OK) {
            ut_buf_free(&hdr);
            return ut_err(w->ctx, r == Z_MEM_ERROR ? TPU_ERR_NOMEM : TPU_ERR_INTERNAL, "%s: deflateInit failed",
                          w->path);
        }
        z = &zs;
    }
    m->crc = crc32(0, Z_NULL, 0);
    m->crc = crc32(m->crc, (const Bytef *)hdr.data, (uInt)hdr.len);
    m->csize = 0;
    st = io_member_put(w, z, zout, (const uint8_t *)hdr.data, hdr.len, t->nbytes == 0, &m->csize);
    for (size_t off = 0; off < t->nbytes && !st && !w->bad; off += IO_ZCHUNK) {
        size_t k = UT_MIN((size_t)IO_ZCHUNK, t->nbytes - off);
        io_npy_encode(t, off, k, tmp);
        m->crc = crc32(m->crc, tmp, (uInt)k);
        st = io_member_put(w, z, zout, tmp, k, off + k == t->nbytes, &m->csize);
    }
    if (z) deflateEnd(z);
    ut_buf_free(&hdr);
    if (st) return st;
    uint64_t end = io_tell(w);
    if (w->bad) return TPU_OK;   /* reported by the caller */
    if (fseeko(w->f, (off_t)(m->lho + 14), SEEK_SET) != 0) w->bad = 1;
    io_put32(w, m->crc);
    io_put32(w, z64 ? IO_U32MAX : (uint32_t)m->csize);
    io_put32(w, z64 ? IO_U32MAX : (uint32_t)m->usize);
    if (z64) {
        if (fseeko(w->f, (off_t)(m->lho + 30 + nlen + 4), SEEK_SET) != 0) w->bad = 1;
        io_put64(w, m->usize);
        io_put64(w, m->csize);
    }
    if (fseeko(w->f, (off_t)end, SEEK_SET) != 0) w->bad = 1;
    return TPU_OK;
}

static void io_write_cd_entry(io_wz *w, const io_wmember *m)
{
    int big_u = io_force_zip64 || m->usize >= IO_U32MAX, big_c = io_force_zip64 || m->csize >= IO_U32MAX;
    int big_o = io_force_zip64 || m->lho >= IO_U32MAX;
    int z64 = big_u || big_c || big_o;
    size_t nlen = strlen(m->name);
    io_put32(w, 0x02014b50u);
    io_put16(w, (3u << 8) | (z64 ? 45 : 20));   /* made by: Unix */
    io_put16(w, z64 ? 45 : 20);
    io_put16(w, m->utf8 ? 0x800 : 0);
    io_put16(w, (unsigned)m->method);
    io_put16(w, 0);
    io_put16(w, 0x21);
    io_put32(w, m->crc);
    io_put32(w, big_c ? IO_U32MAX : (uint32_t)m->csize);
    io_put32(w, big_u ? IO_U32MAX : (uint32_t)m->usize);
    io_put16(w, (unsigned)nlen);
    io_put16(w, z64 ? (unsigned)(4 + 8 * (big_u + big_c + big_o)) : 0);
    io_put16(w, 0);                       /* comment */
    io_put16(w, 0);                       /* disk */
    io_put16(w, 0);                       /* internal attributes */
    io_put32(w, (uint32_t)0100644 << 16); /* external: a regular file, rw-r--r-- */
    io_put32(w, big_o ? IO_U32MAX : (uint32_t)m->lho);
    io_put(w, m->name, nlen);
    if (z64) {
        io_put16(w, 1);
        io_put16(w, (unsigned)(8 * (big_u + big_c + big_o)));
        if (big_u) io_put64(w, m->usize);
        if (big_c) io_put64(w, m->csize);
        if (big_o) io_put64(w, m->lho);
    }
}

tpu_status tpu_npz_save(tpu_ctx *ctx, const char *path, tpu_tensor *const *tensors, const char *const *names,
                        int count, int compress)
{
    if (count < 0 || (count > 0 && !tensors))
        return ut_err(ctx, TPU_ERR_INVALID, "%s: bad tensor list (count %d)", path, count);
    for (int i = 0; i < count; i++)
        if (!tensors[i]) return ut_err(ctx, TPU_ERR_INVALID, "%s: tensor %d is missing", path, i);
    tpu_status st = TPU_OK;
    io_wmember *ms = ut_calloc((size_t)count + 1, sizeof *ms);
    uint8_t *tmp = ut_malloc(IO_ZCHUNK), *zout = ut_malloc(IO_ZCHUNK);
    io_wz w = {ctx, path, NULL, 0};
    if (!ms || !tmp || !zout) {
        st = ut_err(ctx, TPU_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    for (int i = 0; i < count; i++) {
        char def[32];
        const char *n = names && names[i] ? names[i] : (snprintf(def, sizeof def, "arr_%d", i), def);
        size_t len = strlen(n);
        if (len > 60000) {
            st = ut_err(ctx, TPU_ERR_INVALID, "%s: name of tensor %d is too long", path, i);
            goto done;
        }
        if (!(ms[i].name = ut_malloc(len + 5))) {
            st = ut_err(ctx, TPU_ERR_NOMEM, "%s: out of memory", path);
            goto done;
        }
        memcpy(ms[i].name, n, len);
        memcpy(ms[i].name + len, ".npy", 5);
        for (size_t k = 0; k < len; k++) ms[i].utf8 |= (unsigned char)n[k] >= 0x80;
        for (int j = 0; j < i; j++)
            if (strcmp(ms[j].name, ms[i].name) == 0) {
                st = ut_err(ctx, TPU_ERR_INVALID, "%s: two tensors are named '%s'", path, n);
                goto done;
            }
    }
    ut_out out;
    if ((st = ut_out_open(ctx, path, &out))) goto done;
    w.f = out.f;
    for (int i = 0; i < count && !st && !w.bad; i++)
        st = io_write_member(&w, tensors[i], &ms[i], compress, tmp, zout);
    if (!st && !w.bad) {
        uint64_t cd_off = io_tell(&w);
        for (int i = 0; i < count; i++) io_write_cd_entry(&w, &ms[i]);
        uint64_t cd_size = io_tell(&w) - cd_off;
        int z64 = io_force_zip64 || count >= 0xFFFF || cd_off >= IO_U32MAX || cd_size >= IO_U32MAX;
        if (z64) {
            uint64_t zoff = io_tell(&w);
            io_put32(&w, 0x06064b50u);
            io_put64(&w, 44);
            io_put16(&w, (3u << 8) | 45);
            io_put16(&w, 45);
            io_put32(&w, 0);
            io_put32(&w, 0);
            io_put64(&w, (uint64_t)count);
            io_put64(&w, (uint64_t)count);
            io_put64(&w, cd_size);
            io_put64(&w, cd_off);
            io_put32(&w, 0x07064b50u);
            io_put32(&w, 0);
            io_put64(&w, zoff);
            io_put32(&w, 1);
        }
        io_put32(&w, 0x06054b50u);
        io_put16(&w, 0);
        io_put16(&w, 0);
        io_put16(&w, z64 ? 0xFFFF : (unsigned)count);
        io_put16(&w, z64 ? 0xFFFF : (unsigned)count);
        io_put32(&w, z64 ? IO_U32MAX : (uint32_t)cd_size);
        io_put32(&w, z64 ? IO_U32MAX : (uint32_t)cd_off);
        io_put16(&w, 0);
    }
    if (!st && w.bad) st = ut_err(ctx, TPU_ERR_IO, "%s: cannot write: %s", path, strerror(errno ? errno : EIO));
    if (st) ut_out_close(&out, 0, 0);
    else st = ut_out_close(&out, 1, 0);
done:
    if (ms)
        for (int i = 0; i < count; i++) ut_free(ms[i].name);
    ut_free(ms);
    ut_free(tmp);
    ut_free(zout);
    return st;
}
