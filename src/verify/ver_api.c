/* ver_api.c — the public loaders: read HLO text or an HloModuleProto (protobuf text or binary), then infer
 * the shapes the text left out, so every module handed out is complete. */
#include "verify.h"

#include <stdlib.h>
#include <string.h>

/* Fills in the shapes a freshly parsed module left out; frees it on failure. */
static tpu_status ver_complete(tpu_ctx *ctx, tpu_status st, tpu_module **out)
{
    if (st) return st;
    st = ver_fill_shapes(ctx, *out);
    if (st) {
        hlo_module_free(*out);
        *out = NULL;
    }
    return st;
}

/* A file named *.pb holds a binary proto whatever its first bytes look like (XLA's dumps: *.hlo.pb). */
static int ver_is_pb_name(const char *file)
{
    size_t n = file ? strlen(file) : 0;
    return n > 3 && !strcmp(file + n - 3, ".pb");
}

/* Whether a file's first block is a binary proto: it starts with the tag of field 1, 2 or 3 (bytes 0x0a, 0x12,
 * 0x1a) and looks binary. Anything else is read as text, which stops at the first NUL byte (/dev/zero, a
 * binary file of another kind) instead of reading up to the input limit. */
static int ver_head_is_binary(const char *head, size_t n)
{
    return (n > 0 && (head[0] == 0x0a || head[0] == 0x12 || head[0] == 0x1a) && hlo_is_proto_bin(head, n)) ||
           ver_head_is_stablehlo(head, n);
}

/* Parses one module in whichever format the bytes are: binary proto, proto text or HLO text. */
static tpu_status ver_parse_any(tpu_ctx *ctx, const char *text, size_t len, const char *file, int line_offset,
                                tpu_module **out)
{
    *out = NULL;
    tpu_status st;
    const char *kind;
    size_t off, n;
    if (!(line_offset == 0 && ver_is_pb_name(file)) && ver_stablehlo_payload(text, len, &kind, &off, &n)) {
        /* StableHLO: the HLO jaxlib makes of it; messages name the file and say the lines are the HLO's */
        char *hlo = NULL, name[1024];
        size_t hl = 0;
        st = ver_convert(ctx, text, len, file, &hlo, &hl);
        snprintf(name, sizeof name, "%s (as HLO)", file ? file : "<program>");
        if (!st && ver_stablehlo_payload(hlo, hl, &kind, &off, &n))
            st = ut_err(ctx, TPU_ERR_INTERNAL, "%s: the converter returned StableHLO again", name);
        else if (!st)
            st = ver_parse_any(ctx, hlo, hl, name, 0, out);
        free(hlo);
        return st;
    }
    if (hlo_is_proto_bin(text, len) || (line_offset == 0 && ver_is_pb_name(file)))
        st = hlo_parse_proto_bin(ctx, text, len, file, out);
    else if (hlo_is_proto_text(text, len)) st = hlo_parse_proto_text(ctx, text, len, file, line_offset, out);
    else st = hlo_parse(ctx, text, len, file, line_offset, out);
    return ver_complete(ctx, st, out);
}

tpu_status tpu_module_parse(tpu_ctx *ctx, const char *text, size_t len, const char *filename, tpu_module **out)
{
    if (!out) return ut_err(ctx, TPU_ERR_INVALID, "tpu_module_parse: out is NULL");
    *out = NULL;
    if (!text) return ut_err(ctx, TPU_ERR_INVALID, "tpu_module_parse: text is NULL");
    return ver_parse_any(ctx, text, len, filename, 0, out);
}

tpu_status tpu_module_parse_proto(tpu_ctx *ctx, const void *bytes, size_t len, const char *what, tpu_module **out)
{
    if (!out) return ut_err(ctx, TPU_ERR_INVALID, "tpu_module_parse_proto: out is NULL");
    *out = NULL;
    if (!bytes && len) return ut_err(ctx, TPU_ERR_INVALID, "tpu_module_parse_proto: bytes is NULL");
    return ver_complete(ctx, hlo_parse_proto_bin(ctx, bytes ? bytes : "", len, what, out), out);
}

tpu_status tpu_module_load(tpu_ctx *ctx, const char *path, tpu_module **out)
{
    if (!out) return ut_err(ctx, TPU_ERR_INVALID, "tpu_module_load: out is NULL");
    *out = NULL;
    if (!path) return ut_err(ctx, TPU_ERR_INVALID, "tpu_module_load: path is NULL");
    char *text;
    size_t len;
    tpu_status st = ver_is_pb_name(path) ? ut_read_file(ctx, path, &text, &len)
                                         : ut_read_text_or_binary(ctx, path, ver_head_is_binary, &text, &len);
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
    tpu_status st = ver_is_pb_name(path) ? ut_read_file(ctx, path, &text, &len)
                                         : ut_read_text_or_binary(ctx, path, ver_head_is_binary, &text, &len);
    if (st) return st;
    if (hlo_is_proto_bin(text, len) || ver_is_pb_name(path)) {   /* a binary proto holds one module: no split */
        tpu_module **one = ut_calloc(1, sizeof *one);
        st = one ? ver_parse_any(ctx, text, len, path, 0, one) : ut_nomem(ctx);
        ut_free(text);
        if (st) {
            ut_free(one);
            return st;
        }
        *out = one;
        *count = 1;
        return TPU_OK;
    }
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
                tpu_module **nm = ut_grow(mods, sizeof *nm, n, &cap, 8);
                if (!nm) { st = ut_nomem(ctx); break; }
                mods = nm;
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
