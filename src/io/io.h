/* io.h — NumPy .npy/.npz internals shared by npy.c, npz.c and the fuzzer. Names start with io_.
 *
 * .npy dtype mapping (descr strings as numpy writes them; byte order '<', '>', '|' or '=' all accepted):
 *   pred '|b1'   s8/s16/s32/s64 'i1'..'i8'   u8..u64 'u1'..'u8'   f16 'f2'  f32 'f4'  f64 'f8'
 *   c64 'c8'  c128 'c16'
 *   bf16: '<V2' — what numpy + ml_dtypes write for a bfloat16 array (np.load gives a 'V2' array; recover it
 *         with .view(ml_dtypes.bfloat16)). tpusim has no other 2-byte type numpy writes as void, so any
 *         'V2' is read as bf16, and bf16 is saved as '<V2'.
 *   f8e5m2: '<f1' — what ml_dtypes writes for float8_e5m2 (numpy itself cannot load it back); read only.
 *   other 1-byte ml_dtypes types (float8_*, float4_e2m1fn, int4, uint4, int2, uint2): numpy writes a bare
 *         '|V1', which does not say which type it was, so a bare 'V1' is refused unless the caller names the
 *         type (io_npy_opts.void1_as). tpusim saves these as a one-field structured dtype named after the
 *         ml_dtypes type, e.g. [('float8_e4m3fn', '|V1')]: numpy loads it as is, and
 *         a.view(getattr(ml_dtypes, a.dtype.names[0])) gives the typed array. Such one-field descrs are
 *         read back by field name (ml_dtypes names, or tpusim names such as 'f8e4m3fn', 's4'; 'bfloat16'
 *         with '<V2' too).
 *   Sub-byte types (s2, s4, u2, u4, f4e2m1fn) take one byte per element, value in the low bits, as in
 *   ml_dtypes and tpusim; on load the high bits are dropped.
 * Files are saved as version 1.0 (2.0 if the header would not fit), little-endian, C order.
 */
#ifndef TPU_IO_H
#define TPU_IO_H

#include "util/tensor.h"

typedef struct io_npy_opts {
    tpu_dtype void1_as;   /* type of a bare '|V1' descr (a 1-byte type); TPU_INVALID: refuse it */
    /* called with the header's dtype and shape before the data are read or allocated (an .npz member's
     * header is compared with what the caller wants before the member is inflated); nonzero refuses the
     * array: the callback has set the message on ctx */
    tpu_npz_filter filter;
    void          *filter_user;
    const char    *member;   /* the member's name for the filter (an .npz), else NULL */
    int            index;    /* its position in the archive */
} io_npy_opts;

/* Largest header (the dict text) accepted; numpy's own readers refuse anything past 10000 by default. */
#define IO_NPY_MAX_HEADER (1u << 20)

/* The numpy descr tpusim writes for a dtype (e.g. "'<f4'" or "[('int4', '|V1')]", Python syntax), or NULL
 * for a type with no array elements. */
const char *io_npy_descr(tpu_dtype t);

tpu_status io_npy_load_opts(tpu_ctx *ctx, const char *path, const io_npy_opts *o, tpu_tensor **out);
tpu_status io_npy_load_mem_opts(tpu_ctx *ctx, const void *buf, size_t len, const char *what, const io_npy_opts *o,
                                tpu_tensor **out);
/* In-memory .npz reader (the fuzzer's entry point; tpu_npz_load reads the file the same way). filter may be NULL. */
tpu_status io_npz_load_mem(tpu_ctx *ctx, const void *buf, size_t len, const char *what, tpu_npz_filter filter,
                           void *user, tpu_tensor ***tensors, char ***names, int *count);

/* Test hook: write zip64 records for every member and the directory, as a >4 GiB archive needs. */
void io_npz_force_zip64(int on);

/* ---- byte sources: memory, a file, or a zip member (stored or deflated) ---- */

typedef struct io_src {
    tpu_ctx       *ctx;
    const char    *what;       /* names the input in messages: "x.npy" or "x.npz: member 'a.npy'" */
    const uint8_t *mem;        /* memory source: mem[pos..len) */
    size_t         len, pos;
    FILE          *f;          /* file source (when mem is NULL) */
    uint64_t       remain;     /* bytes the file source may still give (UINT64_MAX: to end of file) */
    void          *z;          /* inflate state (z_stream *) or NULL: stored */
    uint8_t       *zin;        /* inflate input buffer for file sources */
    int            zend;       /* inflate reached the end of the stream */
    int            crc_on;
    unsigned long  crc;        /* crc32 of the bytes delivered */
    uint64_t       total;      /* bytes delivered */
    tpu_status     st;         /* first failure (message set on ctx), TPU_OK otherwise */
} io_src;

/* Reads up to n bytes; returns how many. Fewer than n: end of data, or s->st says what failed. */
size_t io_src_read(io_src *s, void *dst, size_t n);

/* Reads one .npy from a source that should hold exactly one array. `size` is the number of bytes the
 * source holds (UINT64_MAX if unknown): with it, sizes are checked before anything large is allocated. */
tpu_status io_npy_read(io_src *s, uint64_t size, const io_npy_opts *o, tpu_tensor **out);

/* Writes the .npy header for t into b (with its padding and newline). */
tpu_status io_npy_header(tpu_ctx *ctx, const tpu_tensor *t, ut_buf *b);
/* Copies elements [first, first+n) of t into dst as they are stored in a .npy file (little-endian,
 * sub-byte values masked, pred as 0/1). */
void io_npy_encode(const tpu_tensor *t, size_t first_byte, size_t nbytes, uint8_t *dst);

#endif
