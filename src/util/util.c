/* util.c — allocation hook, context errors and warnings, arena, string buffer, files. */
#define _POSIX_C_SOURCE 200809L
#include "util.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- allocation ---- */

static tpu_allocator ut_alloc_hook;   /* all NULL: use the C library */

void tpu_set_allocator(const tpu_allocator *a)
{
    if (a) ut_alloc_hook = *a;
    else memset(&ut_alloc_hook, 0, sizeof ut_alloc_hook);
}

void *ut_malloc(size_t n)
{
    if (n == 0) n = 1;
    if (ut_alloc_hook.malloc_fn) return ut_alloc_hook.malloc_fn(n, ut_alloc_hook.user);
    return malloc(n);
}

void *ut_calloc(size_t count, size_t size)
{
    if (size && count > SIZE_MAX / size) return NULL;
    void *p = ut_malloc(count * size);
    if (p && count && size) memset(p, 0, count * size);
    return p;
}

void *ut_realloc(void *p, size_t n)
{
    if (n == 0) n = 1;
    if (ut_alloc_hook.realloc_fn) return ut_alloc_hook.realloc_fn(p, n, ut_alloc_hook.user);
    return realloc(p, n);
}

void ut_free(void *p)
{
    if (!p) return;
    if (ut_alloc_hook.free_fn) ut_alloc_hook.free_fn(p, ut_alloc_hook.user);
    else free(p);
}

void tpu_free(void *p) { ut_free(p); }

tpu_status tpu_mkdirs(tpu_ctx *ctx, const char *dir, unsigned mode)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s", dir) >= (int)sizeof tmp) {
        errno = ENAMETOOLONG;
        return ut_err(ctx, TPU_ERR_INVALID, "%s: path too long", dir);
    }
    if (!*tmp) {
        errno = ENOENT;
        return ut_err(ctx, TPU_ERR_INVALID, "no directory name given");
    }
    for (char *p = tmp + 1;; p++) {
        if (*p != '/' && *p) continue;
        char keep = *p;
        *p = 0;
        struct stat sb;
        if (mkdir(tmp, (mode_t)mode) && (errno != EEXIST || stat(tmp, &sb) || !S_ISDIR(sb.st_mode))) {
            if (errno == EEXIST) errno = ENOTDIR;
            int e = errno;
            ut_err(ctx, TPU_ERR_IO, "%s: cannot create directory: %s", tmp, strerror(e));
            errno = e;
            return TPU_ERR_IO;
        }
        *p = keep;
        if (!keep) return TPU_OK;
    }
}

char *ut_strndup(const char *s, size_t n)
{
    char *d = ut_malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

char *ut_strdup(const char *s) { return ut_strndup(s, strlen(s)); }

/* ---- context ---- */

tpu_ctx *tpu_ctx_new(void)
{
    tpu_ctx *ctx = ut_calloc(1, sizeof *ctx);
    if (ctx) ctx->max_warn = 200;
    return ctx;
}

void tpu_ctx_free(tpu_ctx *ctx)
{
    if (!ctx) return;
    ut_free(ctx->err);
    ut_free(ctx->warn);
    ut_free(ctx);
}

void tpu_ctx_set_input_limit(tpu_ctx *ctx, uint64_t bytes)
{
    if (ctx) ctx->max_input = bytes;
}

uint64_t ut_max_input(const tpu_ctx *ctx) { return ctx && ctx->max_input ? ctx->max_input : UT_DEFAULT_MAX_INPUT; }

static void ut_fmt_bytes(char *b, size_t n, uint64_t v)
{
    if (v >= ((uint64_t)1 << 30)) snprintf(b, n, "%.3g GiB", (double)v / (double)((uint64_t)1 << 30));
    else if (v >= ((uint64_t)1 << 20)) snprintf(b, n, "%.3g MiB", (double)v / (double)((uint64_t)1 << 20));
    else snprintf(b, n, "%llu bytes", (unsigned long long)v);
}

tpu_status ut_too_large(tpu_ctx *ctx, const char *what, uint64_t bytes)
{
    char a[32], l[32];
    ut_fmt_bytes(a, sizeof a, bytes);
    ut_fmt_bytes(l, sizeof l, ut_max_input(ctx));
    return ut_err(ctx, TPU_ERR_LIMIT, "%s: %s%s is more than the input limit of %s (raise it with tpusim "
                  "--max-input-size, or tpu_ctx_set_input_limit)", what, bytes == UINT64_MAX ? "more than " : "",
                  bytes == UINT64_MAX ? l : a, l);
}

const char *tpu_errmsg(const tpu_ctx *ctx)
{
    if (!ctx) return "no context (tpu_ctx_new failed: out of memory)";
    return ctx->err ? ctx->err : "";
}

const char *tpu_warnings(const tpu_ctx *ctx) { return ctx && ctx->warn ? ctx->warn : ""; }

void tpu_warnings_clear(tpu_ctx *ctx)
{
    if (!ctx) return;
    ctx->warn_len = 0;
    ctx->nwarn = 0;
    if (ctx->warn) ctx->warn[0] = 0;
}

const char *tpu_status_name(tpu_status st)
{
    switch (st) {
    case TPU_OK: return "ok";
    case TPU_ERR_NOMEM: return "out of memory";
    case TPU_ERR_IO: return "i/o error";
    case TPU_ERR_PARSE: return "parse error";
    case TPU_ERR_INVALID: return "invalid argument";
    case TPU_ERR_SHAPE: return "shape error";
    case TPU_ERR_UNSUPPORTED: return "unsupported";
    case TPU_ERR_UNRUNNABLE: return "not runnable";
    case TPU_ERR_OOM: return "out of device memory";
    case TPU_ERR_INTERNAL: return "internal error";
    case TPU_ERR_LIMIT: return "limit reached";
    }
    return "unknown status";
}

/* Writes into ctx->err, growing it; keeps the old message if allocation fails. */
static void ut_set_msg(tpu_ctx *ctx, const char *msg, size_t n)
{
    if (n + 1 > ctx->err_cap) {
        char *e = ut_realloc(ctx->err, n + 1);
        if (!e) return;
        ctx->err = e;
        ctx->err_cap = n + 1;
    }
    memcpy(ctx->err, msg, n);
    ctx->err[n] = 0;
}

tpu_status ut_verr(tpu_ctx *ctx, tpu_status st, const char *fmt, va_list ap)
{
    if (!ctx) return st;
    char small[512];
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    if (n < 0) n = 0;
    if ((size_t)n < sizeof small) {
        ut_set_msg(ctx, small, (size_t)n);
    } else {
        char *big = ut_malloc((size_t)n + 1);
        if (big) {
            vsnprintf(big, (size_t)n + 1, fmt, ap2);
            ut_set_msg(ctx, big, (size_t)n);
            ut_free(big);
        } else {
            ut_set_msg(ctx, small, sizeof small - 1);
        }
    }
    va_end(ap2);
    return st;
}

tpu_status ut_err(tpu_ctx *ctx, tpu_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ut_verr(ctx, st, fmt, ap);
    va_end(ap);
    return st;
}

tpu_status ut_nomem(tpu_ctx *ctx)
{
    if (ctx) ut_set_msg(ctx, "out of memory", 13);
    return TPU_ERR_NOMEM;
}

void ut_err_prefix(tpu_ctx *ctx, const char *fmt, ...)
{
    if (!ctx) return;
    ut_buf b;
    ut_buf_init(&b);
    va_list ap;
    va_start(ap, fmt);
    ut_buf_vprintf(&b, fmt, ap);
    va_end(ap);
    ut_buf_puts(&b, ": ");
    ut_buf_puts(&b, ctx->err ? ctx->err : "");
    if (!b.failed) ut_set_msg(ctx, b.data, b.len);
    ut_buf_free(&b);
}

void ut_warn(tpu_ctx *ctx, const char *fmt, ...)
{
    if (!ctx) return;
    ctx->nwarn++;
    if (ctx->nwarn > ctx->max_warn) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof line) n = sizeof line - 1;
    size_t need = ctx->warn_len + (size_t)n + 2;
    if (need > ctx->warn_cap) {
        size_t cap = ctx->warn_cap ? ctx->warn_cap * 2 : 1024;
        while (cap < need) cap *= 2;
        char *w = ut_realloc(ctx->warn, cap);
        if (!w) return;
        ctx->warn = w;
        ctx->warn_cap = cap;
    }
    memcpy(ctx->warn + ctx->warn_len, line, (size_t)n);
    ctx->warn_len += (size_t)n;
    ctx->warn[ctx->warn_len++] = '\n';
    ctx->warn[ctx->warn_len] = 0;
}

/* ---- arena ---- */

struct ut_arena_block {
    ut_arena_block *next;
    size_t          cap;
    _Alignas(16) unsigned char data[];
};

void ut_arena_init(ut_arena *a) { memset(a, 0, sizeof *a); }

void ut_arena_free(ut_arena *a)
{
    ut_arena_block *b = a->head;
    while (b) {
        ut_arena_block *n = b->next;
        ut_free(b);
        b = n;
    }
    memset(a, 0, sizeof *a);
}

void *ut_arena_alloc(ut_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    if (!a->head || a->used + n > a->cap) {
        size_t cap = 64 * 1024;
        if (n > cap / 4) cap = n;   /* big requests get a block of their own */
        ut_arena_block *b = ut_malloc(sizeof *b + cap);
        if (!b) return NULL;
        b->cap = cap;
        if (a->head && n == cap && a->used < a->cap) {
            /* keep filling the current head: link the big block behind it */
            b->next = a->head->next;
            a->head->next = b;
            memset(b->data, 0, n);
            a->total += n;
            return b->data;
        }
        b->next = a->head;
        a->head = b;
        a->used = 0;
        a->cap = cap;
    }
    void *p = a->head->data + a->used;
    a->used += n;
    a->total += n;
    memset(p, 0, n);
    return p;
}

char *ut_arena_strndup(ut_arena *a, const char *s, size_t n)
{
    char *d = ut_arena_alloc(a, n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

char *ut_arena_strdup(ut_arena *a, const char *s) { return ut_arena_strndup(a, s, strlen(s)); }

void *ut_arena_memdup(ut_arena *a, const void *p, size_t n)
{
    void *d = ut_arena_alloc(a, n);
    if (d && n) memcpy(d, p, n);
    return d;
}

void *ut_grow(void *v, size_t size, int n, int *cap, int first)
{
    assert(n >= 0 && n <= *cap && first > 0);
    if (n < *cap) return v;
    int64_t slots = *cap ? 2 * (int64_t)*cap : first;
    if (slots > INT_MAX || (uint64_t)slots > SIZE_MAX / (size ? size : 1)) return NULL;
    void *p = ut_realloc(v, (size_t)slots * size);
    if (p) *cap = (int)slots;
    return p;
}

/* ---- string buffer ---- */

void ut_buf_init(ut_buf *b) { memset(b, 0, sizeof *b); }

void ut_buf_free(ut_buf *b)
{
    ut_free(b->data);
    memset(b, 0, sizeof *b);
}

static bool ut_buf_reserve(ut_buf *b, size_t extra)
{
    if (b->failed) return false;
    if (b->len + extra + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap * 2 : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *d = ut_realloc(b->data, cap);
    if (!d) {
        b->failed = true;
        return false;
    }
    b->data = d;
    b->cap = cap;
    return true;
}

void ut_buf_put(ut_buf *b, const char *s, size_t n)
{
    if (!ut_buf_reserve(b, n)) return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = 0;
}

void ut_buf_putc(ut_buf *b, char c) { ut_buf_put(b, &c, 1); }
void ut_buf_puts(ut_buf *b, const char *s) { ut_buf_put(b, s, strlen(s)); }

void ut_buf_vprintf(ut_buf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    if (n < 0) {
        va_end(ap2);
        return;
    }
    if ((size_t)n < sizeof small) {
        ut_buf_put(b, small, (size_t)n);
    } else if (ut_buf_reserve(b, (size_t)n)) {
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap2);
        b->len += (size_t)n;
    }
    va_end(ap2);
}

void ut_buf_printf(ut_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ut_buf_vprintf(b, fmt, ap);
    va_end(ap);
}

char *ut_buf_take(ut_buf *b)
{
    if (b->failed) {
        ut_buf_free(b);
        return NULL;
    }
    if (!b->data && !ut_buf_reserve(b, 0)) return NULL;
    char *d = b->data;
    d[b->len] = 0;
    memset(b, 0, sizeof *b);
    return d;
}

void ut_buf_json_str(ut_buf *b, const char *s)
{
    if (!s) {
        ut_buf_puts(b, "null");
        return;
    }
    ut_buf_putc(b, '"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') ut_buf_printf(b, "\\%c", c);
        else if (c == '\n') ut_buf_puts(b, "\\n");
        else if (c == '\t') ut_buf_puts(b, "\\t");
        else if (c < 0x20) ut_buf_printf(b, "\\u%04x", c);
        else ut_buf_putc(b, (char)c);
    }
    ut_buf_putc(b, '"');
}

void ut_buf_html_esc(ut_buf *b, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '<': ut_buf_puts(b, "&lt;"); break;
        case '>': ut_buf_puts(b, "&gt;"); break;
        case '&': ut_buf_puts(b, "&amp;"); break;
        case '"': ut_buf_puts(b, "&quot;"); break;
        default: ut_buf_putc(b, *s); break;
        }
    }
}

/* ---- files ---- */

/* Closes an input file; standard input stays open. */
static void ut_close_in(FILE *f)
{
    if (f != stdin) fclose(f);
}

static tpu_status ut_read_any(tpu_ctx *ctx, const char *path, char **data, size_t *len, int text,
                              int (*binary)(const char *head, size_t n))
{
    *data = NULL;
    *len = 0;
    /* "-" is standard input, as everywhere on the command line */
    int is_stdin = !strcmp(path, "-");
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    if (!f) return ut_err(ctx, TPU_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (is_stdin) path = "<stdin>";
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0) {
        if (S_ISDIR(sb.st_mode)) {
            ut_close_in(f);
            return ut_err(ctx, TPU_ERR_IO, "%s: is a directory, not a file", path);
        }
        if (S_ISREG(sb.st_mode) && (uint64_t)sb.st_size > ut_max_input(ctx)) {
            ut_close_in(f);
            return ut_too_large(ctx, path, (uint64_t)sb.st_size);
        }
    }
    uint64_t limit = ut_max_input(ctx);
    size_t cap = 1 << 16, n = 0;
    char *buf = ut_malloc(cap);
    if (!buf) {
        ut_close_in(f);
        return ut_err(ctx, TPU_ERR_NOMEM, "%s: out of memory", path);
    }
    for (;;) {
        if (n + 1 >= cap) {
            char *nb = ut_realloc(buf, cap * 2);
            if (!nb) {
                ut_free(buf);
                ut_close_in(f);
                return ut_err(ctx, TPU_ERR_NOMEM, "%s: out of memory after reading %zu bytes", path, n);
            }
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        if (text && binary && n == 0 && binary(buf, r)) text = 0;
        const char *nul = text && r ? memchr(buf + n, 0, r) : NULL;
        if (nul) {
            size_t at = (size_t)(nul - buf);
            ut_free(buf);
            ut_close_in(f);
            return ut_err(ctx, TPU_ERR_PARSE, "%s: not a text file (a NUL byte at offset %zu)", path, at);
        }
        n += r;
        if (r == 0) break;
        if ((uint64_t)n > limit) {   /* a pipe or device that never ends */
            ut_free(buf);
            ut_close_in(f);
            return ut_too_large(ctx, path, UINT64_MAX);
        }
    }
    int bad = ferror(f), err = errno;
    ut_close_in(f);
    if (bad) {
        ut_free(buf);
        return ut_err(ctx, TPU_ERR_IO, "%s: cannot read: %s", path, strerror(err));
    }
    buf[n] = 0;
    *data = buf;
    *len = n;
    return TPU_OK;
}

tpu_status ut_read_file(tpu_ctx *ctx, const char *path, char **data, size_t *len)
{
    return ut_read_any(ctx, path, data, len, 0, NULL);
}

tpu_status ut_read_text(tpu_ctx *ctx, const char *path, char **data, size_t *len)
{
    return ut_read_any(ctx, path, data, len, 1, NULL);
}

tpu_status ut_read_text_or_binary(tpu_ctx *ctx, const char *path, int (*binary)(const char *head, size_t n), char **data,
                                  size_t *len)
{
    return ut_read_any(ctx, path, data, len, 1, binary);
}

static void ut_out_free(ut_out *o)
{
    ut_free(o->path);
    free(o->dest);   /* from realpath, or ut_strdup'ed below: both malloc */
    ut_free(o->tmp);
    memset(o, 0, sizeof *o);
}

tpu_status ut_out_open(tpu_ctx *ctx, const char *path, ut_out *o)
{
    memset(o, 0, sizeof *o);
    o->ctx = ctx;
    struct stat st;
    if (!path || !*path) return ut_err(ctx, TPU_ERR_INVALID, "no output file name given");
    if (!(o->path = ut_strdup(path))) return ut_nomem(ctx);
    if (!strcmp(path, "-")) {   /* standard output, written through (and left open) */
        o->f = stdout;
        return TPU_OK;
    }
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        const char *what = S_ISDIR(st.st_mode) ? "a directory" : S_ISBLK(st.st_mode) ? "a block device" : "a socket";
        if (S_ISDIR(st.st_mode) || S_ISBLK(st.st_mode) || S_ISSOCK(st.st_mode)) {
            ut_out_free(o);
            return ut_err(ctx, TPU_ERR_IO, "%s: is %s, not a file to write", path, what);
        }
        /* a character device or FIFO: written through, never replaced */
        if (!(o->f = fopen(path, "wb"))) {
            tpu_status e = ut_err(ctx, TPU_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
            ut_out_free(o);
            return e;
        }
        return TPU_OK;
    }
    /* the file the rename replaces: a symlink's target, so the link itself stays */
    struct stat lst;
    int link = lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode);
    char *dest = link ? realpath(path, NULL) : strdup(path);
    if (link && !dest) {
        /* a link to nothing yet: fopen creates its target (not atomically, but the link stays a link) */
        if (!(o->f = fopen(path, "wb"))) {
            tpu_status e = ut_err(ctx, TPU_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
            ut_out_free(o);
            return e;
        }
        return TPU_OK;
    }
    size_t n = strlen(dest) + 16;
    o->dest = dest;
    o->tmp = ut_malloc(n);
    if (!o->dest || !o->tmp) {
        ut_out_free(o);
        return ut_nomem(ctx);
    }
    snprintf(o->tmp, n, "%s.tmp.XXXXXX", dest);
    int fd = mkstemp(o->tmp);
    if (fd < 0) {
        tpu_status e = ut_err(ctx, TPU_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
        ut_out_free(o);
        return e;
    }
    /* the mode an ordinary fopen would give: the old file's, or 0666 less the umask */
    mode_t um = umask(0);
    umask(um);
    fchmod(fd, stat(dest, &st) == 0 ? st.st_mode & 07777 : 0666 & ~um);
    if (!(o->f = fdopen(fd, "wb"))) {
        tpu_status e = ut_err(ctx, TPU_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
        close(fd);
        unlink(o->tmp);
        ut_out_free(o);
        return e;
    }
    return TPU_OK;
}

tpu_status ut_out_close(ut_out *o, int ok, int durable)
{
    if (!o->f) {
        tpu_ctx *ctx = o->ctx;
        ut_out_free(o);
        return ut_err(ctx, TPU_ERR_INTERNAL, "output closed twice");
    }
    int err = 0;
    if (ok) {
        if (fflush(o->f) || ferror(o->f)) err = errno ? errno : EIO;
        if (!err && durable && o->tmp && fsync(fileno(o->f))) err = errno;
    }
    if (o->f != stdout && fclose(o->f) && ok && !err) err = errno ? errno : EIO;
    o->f = NULL;
    tpu_ctx *ctx = o->ctx;
    tpu_status st = TPU_OK;
    if (ok && !err && o->tmp && rename(o->tmp, o->dest)) err = errno;
    if (ok && err) st = ut_err(ctx, TPU_ERR_IO, "%s: cannot write: %s", o->path, strerror(err));
    if (o->tmp && (!ok || err)) unlink(o->tmp);
    if (ok && !err && o->tmp && durable) {
        /* the rename itself survives a crash once the directory is synced */
        char *slash = strrchr(o->dest, '/');
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash == o->dest ? 1 : slash - o->dest) : 1, slash ? o->dest : ".");
        int fd = open(dir, O_RDONLY | O_DIRECTORY);
        if (fd >= 0) {
            fsync(fd);
            close(fd);
        }
    }
    ut_out_free(o);
    return ok ? st : TPU_ERR_IO;
}

tpu_status ut_write_file(tpu_ctx *ctx, const char *path, const void *data, size_t len, int durable)
{
    ut_out o;
    tpu_status st = ut_out_open(ctx, path, &o);
    if (st) return st;
    int ok = fwrite(data ? data : "", 1, len, o.f) == len;
    if (!ok) {
        int e = errno;
        ut_out_close(&o, 0, 0);
        return ut_err(ctx, TPU_ERR_IO, "%s: cannot write: %s", path, strerror(e ? e : EIO));
    }
    return ut_out_close(&o, 1, durable);
}

double ut_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

tpu_status tpu_set_error(tpu_ctx *ctx, tpu_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tpu_status r = ut_verr(ctx, st, fmt, ap);
    va_end(ap);
    return r;
}
