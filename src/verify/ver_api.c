/* ver_api.c — the public loaders: read HLO text or HloModuleProto text, then infer the shapes the text left
 * out, so every module handed out is complete. */
#include "verify.h"

#include <string.h>

/* Parses one module in whichever format the text is, then fills in omitted shapes. */
static tpu_status ver_parse_any(tpu_ctx *ctx, const char *text, size_t len, const char *file, int line_offset,
                                tpu_module **out)
{
    *out = NULL;
    tpu_status st = hlo_is_proto_text(text, len) ? hlo_parse_proto_text(ctx, text, len, file, line_offset, out)
                                                 : hlo_parse(ctx, text, len, file, line_offset, out);
    if (st) return st;
    st = ver_fill_shapes(ctx, *out);
    if (st) {
        hlo_module_free(*out);
        *out = NULL;
    }
    return st;
}

tpu_status tpu_module_parse(tpu_ctx *ctx, const char *text, size_t len, const char *filename, tpu_module **out)
{
    if (!out) return ut_err(ctx, TPU_ERR_INVALID, "tpu_module_parse: out is NULL");
    *out = NULL;
    if (!text) return ut_err(ctx, TPU_ERR_INVALID, "tpu_module_parse: text is NULL");
    return ver_parse_any(ctx, text, len, filename, 0, out);
}

tpu_status tpu_module_load(tpu_ctx *ctx, const char *path, tpu_module **out)
{
    if (!out) return ut_err(ctx, TPU_ERR_INVALID, "tpu_module_load: out is NULL");
    *out = NULL;
    if (!path) return ut_err(ctx, TPU_ERR_INVALID, "tpu_module_load: path is NULL");
    char *text;
    size_t len;
    tpu_status st = ut_read_text(ctx, path, &text, &len);
    if (st) return st;
    st = ver_parse_any(ctx, text, len, path, 0, out);
    ut_free(text);
    return st;
}

/* A separator line is exactly "// -----" (trailing spaces allowed), as MLIR's -split-input-file wants;
 * longer dash lines are ordinary comments. */
static int ver_is_split_line(const char *s, const char *e)
{
    while (s < e && (*s == ' ' || *s == '\t')) s++;
    if (e - s < 8 || strncmp(s, "// -----", 8)) return 0;
    for (s += 8; s < e; s++)
        if (*s != ' ' && *s != '\t' && *s != '\r') return 0;
    return 1;
}

/* Does the chunk hold anything but blank lines and comments ('//' or a '#' directive)? */
static int ver_chunk_blank(const char *q, const char *ce)
{
    while (q < ce) {
        const char *qe = memchr(q, '\n', (size_t)(ce - q));
        if (!qe) qe = ce;
        const char *r = q;
        while (r < qe && (*r == ' ' || *r == '\t' || *r == '\r')) r++;
        if (r < qe && !(qe - r >= 2 && r[0] == '/' && r[1] == '/') && *r != '#') return 0;
        q = qe < ce ? qe + 1 : ce;
    }
    return 1;
}

tpu_status tpu_module_load_split(tpu_ctx *ctx, const char *path, tpu_module ***out, int *count)
{
    if (!out || !count) return ut_err(ctx, TPU_ERR_INVALID, "tpu_module_load_split: out or count is NULL");
    *out = NULL;
    *count = 0;
    if (!path) return ut_err(ctx, TPU_ERR_INVALID, "tpu_module_load_split: path is NULL");
    char *text;
    size_t len;
    tpu_status st = ut_read_text(ctx, path, &text, &len);
    if (st) return st;
    tpu_module **mods = NULL;
    int n = 0, cap = 0;
    const char *chunk = text, *line = text, *end = text + len;
    int line_no = 1, chunk_line = 1;
    for (;;) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        const char *le = nl ? nl : end;
        int split = ver_is_split_line(line, le);
        if (split || !nl) {
            const char *ce = split ? line : end;
            if (!ver_chunk_blank(chunk, ce)) {
                if (n == cap) {
                    cap = cap ? cap * 2 : 8;
                    tpu_module **nm = ut_realloc(mods, (size_t)cap * sizeof *nm);
                    if (!nm) { st = ut_nomem(ctx); break; }
                    mods = nm;
                }
                st = ver_parse_any(ctx, chunk, (size_t)(ce - chunk), path, chunk_line - 1, &mods[n]);
                if (st) break;
                n++;
            }
            chunk = nl ? nl + 1 : end;
            chunk_line = line_no + 1;
        }
        if (!nl) break;
        line = nl + 1;
        line_no++;
    }
    ut_free(text);
    if (st) {
        tpu_modules_free(mods, n);
        return st;
    }
    if (n == 0) {
        ut_free(mods);
        return ut_err(ctx, TPU_ERR_PARSE, "%s: no HLO module in the file", path);
    }
    *out = mods;
    *count = n;
    return TPU_OK;
}
