/* hlo_api.c — the public tpu_module_* functions over the parser and printer. */
#include "hlo.h"

#include <string.h>

tpu_status tpu_module_parse(tpu_ctx *ctx, const char *text, size_t len, const char *filename, tpu_module **out)
{
    if (!out) return ut_err(ctx, TPU_ERR_INVALID, "tpu_module_parse: out is NULL");
    if (!text) return ut_err(ctx, TPU_ERR_INVALID, "tpu_module_parse: text is NULL");
    return hlo_parse(ctx, text, len, filename, 0, out);
}

tpu_status tpu_module_load(tpu_ctx *ctx, const char *path, tpu_module **out)
{
    char *text;
    size_t len;
    *out = NULL;
    tpu_status st = ut_read_file(ctx, path, &text, &len);
    if (st) return st;
    st = hlo_parse(ctx, text, len, path, 0, out);
    ut_free(text);
    return st;
}

/* A separator line is exactly "// -----" (trailing spaces allowed), as MLIR's -split-input-file wants;
 * longer dash lines are ordinary comments. */
static int hlo_is_split_line(const char *s, const char *e)
{
    while (s < e && (*s == ' ' || *s == '\t')) s++;
    if (e - s < 8 || strncmp(s, "// -----", 8)) return 0;
    for (s += 8; s < e; s++)
        if (*s != ' ' && *s != '\t' && *s != '\r') return 0;
    return 1;
}

tpu_status tpu_module_load_split(tpu_ctx *ctx, const char *path, tpu_module ***out, int *count)
{
    *out = NULL;
    *count = 0;
    char *text;
    size_t len;
    tpu_status st = ut_read_file(ctx, path, &text, &len);
    if (st) return st;
    tpu_module **mods = NULL;
    int n = 0, cap = 0;
    const char *chunk = text, *line = text, *end = text + len;
    int line_no = 1, chunk_line = 1;
    for (;;) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        const char *le = nl ? nl : end;
        int split = hlo_is_split_line(line, le);
        if (split || !nl) {
            const char *ce = split ? line : end;
            /* skip chunks holding only whitespace and comments: parse decides (an empty module is an error) */
            int blank = 1;
            for (const char *q = chunk; q < ce && blank;) {
                const char *qe = memchr(q, '\n', (size_t)(ce - q));
                if (!qe) qe = ce;
                const char *r = q;
                while (r < qe && (*r == ' ' || *r == '\t' || *r == '\r')) r++;
                if (r < qe && !(qe - r >= 2 && r[0] == '/' && r[1] == '/')) blank = 0;
                q = qe < ce ? qe + 1 : ce;
            }
            if (!blank) {
                if (n == cap) {
                    cap = cap ? cap * 2 : 8;
                    tpu_module **nm = ut_realloc(mods, (size_t)cap * sizeof *nm);
                    if (!nm) { st = ut_nomem(ctx); break; }
                    mods = nm;
                }
                st = hlo_parse(ctx, chunk, (size_t)(ce - chunk), path, chunk_line - 1, &mods[n]);
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

void tpu_module_free(tpu_module *m) { hlo_module_free(m); }

void tpu_modules_free(tpu_module **ms, int n)
{
    if (!ms) return;
    for (int i = 0; i < n; i++) hlo_module_free(ms[i]);
    ut_free(ms);
}

tpu_status tpu_module_to_string(tpu_ctx *ctx, const tpu_module *m, char **out)
{
    ut_buf b;
    ut_buf_init(&b);
    hlo_print_module(&b, m);
    *out = ut_buf_take(&b);
    return *out ? TPU_OK : ut_nomem(ctx);
}

tpu_status tpu_module_print(tpu_ctx *ctx, const tpu_module *m, FILE *f)
{
    char *s;
    tpu_status st = tpu_module_to_string(ctx, m, &s);
    if (st) return st;
    size_t n = strlen(s);
    int bad = fwrite(s, 1, n, f) != n;
    ut_free(s);
    return bad ? ut_err(ctx, TPU_ERR_IO, "write error while printing the module") : TPU_OK;
}

const char *tpu_module_name(const tpu_module *m) { return m->name; }
int tpu_module_num_params(const tpu_module *m) { return m->entry->nparams; }
int tpu_module_num_instructions(const tpu_module *m) { return (int)m->ninstrs; }

tpu_status tpu_module_param_info(const tpu_module *m, int i, tpu_dtype *dtype, int *rank, int64_t *dims)
{
    if (i < 0 || i >= m->entry->nparams) return TPU_ERR_INVALID;
    const hlo_shape *s = &m->entry->params[i]->shape;
    if (dtype) *dtype = (tpu_dtype)s->dtype;
    if (rank) *rank = s->rank;
    if (dims)
        for (int k = 0; k < s->rank; k++) dims[k] = s->dims[k];
    return TPU_OK;
}
