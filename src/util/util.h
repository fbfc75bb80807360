/* util.h — internal helpers shared by every module: allocation through the one hook, the context with its
 * error message and warnings, an arena, a growable string buffer. Names start with ut_. */
#ifndef TPU_UTIL_H
#define TPU_UTIL_H

#include "tpusim.h"
#include <stdarg.h>
#include <stdbool.h>

#if defined(__GNUC__)
#define UT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define UT_PRINTF(a, b)
#endif

#define UT_ARRAY_LEN(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define UT_MIN(a, b) ((a) < (b) ? (a) : (b))
#define UT_MAX(a, b) ((a) > (b) ? (a) : (b))

/* ---- allocation (every allocation in the library goes through these) ---- */
void *ut_malloc(size_t n);
void *ut_calloc(size_t count, size_t size);
void *ut_realloc(void *p, size_t n);
void  ut_free(void *p);
char *ut_strndup(const char *s, size_t n);
char *ut_strdup(const char *s);

/* ---- the context ---- */
struct tpu_ctx {
    char  *err;          /* last error message */
    size_t err_cap;
    char  *warn;         /* warnings, '\n'-separated */
    size_t warn_len, warn_cap;
    int    nwarn;
    int    max_warn;     /* warnings past this count are counted but not stored */
    uint64_t max_input;  /* tpu_ctx_set_input_limit (0: UT_DEFAULT_MAX_INPUT) */
    tpu_converter convert;   /* StableHLO -> HLO (tpu_ctx_set_converter), or NULL */
    void    *convert_user;
};

#define UT_DEFAULT_MAX_INPUT ((uint64_t)4 << 30)
/* The input size limit of ctx (the default for a NULL ctx). */
uint64_t ut_max_input(const tpu_ctx *ctx);
/* "X: N bytes is more than the input limit of L (tpusim --max-input-size)", TPU_ERR_LIMIT */
tpu_status ut_too_large(tpu_ctx *ctx, const char *what, uint64_t bytes);

/* Sets the message and returns st, so callers can write `return ut_err(ctx, TPU_ERR_IO, "...")`. A NULL ctx
 * is allowed (the message is dropped). */
tpu_status ut_err(tpu_ctx *ctx, tpu_status st, const char *fmt, ...) UT_PRINTF(3, 4);
tpu_status ut_verr(tpu_ctx *ctx, tpu_status st, const char *fmt, va_list ap);
/* Prepends "prefix: " to the current message (adds context while an error travels up). */
void ut_err_prefix(tpu_ctx *ctx, const char *fmt, ...) UT_PRINTF(2, 3);
void ut_warn(tpu_ctx *ctx, const char *fmt, ...) UT_PRINTF(2, 3);
tpu_status ut_nomem(tpu_ctx *ctx);

/* ---- arena: many small allocations freed together (the module IR lives in one) ---- */
typedef struct ut_arena_block ut_arena_block;
typedef struct ut_arena {
    ut_arena_block *head;
    size_t          used, cap;   /* of the head block */
    size_t          total;       /* bytes handed out, for statistics */
} ut_arena;

void  ut_arena_init(ut_arena *a);
void  ut_arena_free(ut_arena *a);
void *ut_arena_alloc(ut_arena *a, size_t n);          /* zeroed, 16-byte aligned; NULL on failure */
char *ut_arena_strndup(ut_arena *a, const char *s, size_t n);
char *ut_arena_strdup(ut_arena *a, const char *s);
void *ut_arena_memdup(ut_arena *a, const void *p, size_t n);

/* Room for one more element in the array v (n elements in *cap slots of `size` bytes): when it is full, a
 * block twice as large (`first` slots at the start), *cap updated. Returns the array (v itself while there
 * is room), or NULL on no memory with v and *cap unchanged. */
void *ut_grow(void *v, size_t size, int n, int *cap, int first);

/* ---- growable string buffer; on allocation failure it sets `failed` and drops further output ---- */
typedef struct ut_buf {
    char  *data;
    size_t len, cap;
    bool   failed;
} ut_buf;

void ut_buf_init(ut_buf *b);
void ut_buf_free(ut_buf *b);
void ut_buf_putc(ut_buf *b, char c);
void ut_buf_put(ut_buf *b, const char *s, size_t n);
void ut_buf_puts(ut_buf *b, const char *s);
void ut_buf_printf(ut_buf *b, const char *fmt, ...) UT_PRINTF(2, 3);
void ut_buf_vprintf(ut_buf *b, const char *fmt, va_list ap);
/* Detaches the NUL-terminated string (caller frees with ut_free); NULL if allocation failed. */
char *ut_buf_take(ut_buf *b);
/* s as a JSON string, quoted and escaped (NULL: null). For documents written by hand beside cJSON's. */
void ut_buf_json_str(ut_buf *b, const char *s);
/* s as HTML text or attribute value: < > & " escaped. */
void ut_buf_html_esc(ut_buf *b, const char *s);

/* ---- files ---- */
/* Reads a whole file (NUL-terminated), at most the context's input limit; a directory or a file that cannot be
 * read is an error naming errno's reason. */
tpu_status ut_read_file(tpu_ctx *ctx, const char *path, char **data, size_t *len);
/* The same for text (HLO, JSON, configs): a NUL byte stops the read at once ("not a text file"), so a binary
 * file or /dev/zero fails in the first block, not after gigabytes. */
tpu_status ut_read_text(tpu_ctx *ctx, const char *path, char **data, size_t *len);
/* Text, unless binary(first block, its length) says the file is in a binary format: then it is read as bytes. */
tpu_status ut_read_text_or_binary(tpu_ctx *ctx, const char *path, int (*binary)(const char *head, size_t n), char **data,
                                  size_t *len);

/* Output files. A regular file (or a new one) is written to a temporary beside it and renamed over it only
 * when everything was written, so a full disk or a crash never leaves a truncated file and an old file stays
 * whole; a symlink keeps pointing where it did (its target is replaced). A character device or FIFO
 * (/dev/stdout, /dev/null, a pipe) is written through, deliberately; a directory, block device or socket is
 * refused. Failures name the file and errno's reason ("out.npy: cannot write: No space left on device"). */
typedef struct ut_out {
    tpu_ctx *ctx;
    FILE    *f;
    char    *path;    /* as the caller named it (for messages) */
    char    *dest;    /* the file renamed over (a symlink's target), NULL when writing through */
    char    *tmp;     /* the temporary, NULL when writing through */
} ut_out;

tpu_status ut_out_open(tpu_ctx *ctx, const char *path, ut_out *o);
/* Ends the output: when ok, flushes, (durable: fsyncs the file and its directory) and renames; otherwise,
 * or if that fails, removes the temporary and reports why. Returns TPU_OK only if the file is complete. */
tpu_status ut_out_close(ut_out *o, int ok, int durable);
/* A whole buffer to a file, as above. */
tpu_status ut_write_file(tpu_ctx *ctx, const char *path, const void *data, size_t len, int durable);

/* ---- time ---- */
double ut_now(void);   /* monotonic seconds */

#endif
