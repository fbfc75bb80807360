/* hlo_api.c — the public tpu_module_* functions over the printer and the IR. The loaders (tpu_module_parse,
 * _load, _load_split) are in verify/ver_api.c: a module is complete only after its omitted shapes are inferred. */
#include "hlo.h"

#include <string.h>

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
