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

const char *tpu_module_param_name(const tpu_module *m, int i)
{
    return i >= 0 && i < m->entry->nparams ? m->entry->params[i]->name : NULL;
}

/* ---- the entry's inputs and outputs as flat lists of leaves (tuples depth-first) ---- */

static int hlo_api_leaves(const hlo_shape *s)
{
    if (!hlo_shape_is_tuple(s)) return 1;
    int n = 0;
    for (int i = 0; i < s->ntuple; i++) n += hlo_api_leaves(&s->tuple[i]);
    return n;
}

/* Leaf *k of s (counting down), or NULL when s has fewer leaves; the flat index path goes into idx. */
static const hlo_shape *hlo_api_leaf(const hlo_shape *s, int *k, int64_t *idx, int *nidx)
{
    if (!hlo_shape_is_tuple(s)) return (*k)-- == 0 ? s : NULL;
    for (int i = 0; i < s->ntuple; i++) {
        int depth = *nidx;
        if (depth < TPU_MAX_RANK) idx[(*nidx)++] = i;
        const hlo_shape *r = hlo_api_leaf(&s->tuple[i], k, idx, nidx);
        if (r) return r;
        *nidx = depth;
    }
    return NULL;
}

static tpu_status hlo_api_leaf_info(const hlo_shape *s, tpu_dtype *dtype, int *rank, int64_t *dims)
{
    if (dtype) *dtype = (tpu_dtype)s->dtype;
    if (rank) *rank = hlo_shape_is_array(s) ? s->rank : 0;
    if (dims && hlo_shape_is_array(s))
        for (int k = 0; k < s->rank; k++) dims[k] = s->dims[k];
    return TPU_OK;
}

int tpu_module_num_inputs(const tpu_module *m)
{
    int n = 0;
    for (int i = 0; i < m->entry->nparams; i++) n += hlo_api_leaves(&m->entry->params[i]->shape);
    return n;
}

int tpu_module_num_outputs(const tpu_module *m) { return hlo_api_leaves(&m->entry->root->shape); }

/* Parameter number and tuple index path of flat input i. */
static const hlo_shape *hlo_api_input(const tpu_module *m, int i, int64_t *param, int64_t *idx, int *nidx)
{
    if (i < 0) return NULL;
    int k = i;
    for (int p = 0; p < m->entry->nparams; p++) {
        *nidx = 0;
        const hlo_shape *s = hlo_api_leaf(&m->entry->params[p]->shape, &k, idx, nidx);
        if (s) {
            *param = p;
            return s;
        }
    }
    return NULL;
}

tpu_status tpu_module_input_info(const tpu_module *m, int i, tpu_dtype *dtype, int *rank, int64_t *dims)
{
    int64_t param, idx[TPU_MAX_RANK];
    int nidx;
    const hlo_shape *s = hlo_api_input(m, i, &param, idx, &nidx);
    return s ? hlo_api_leaf_info(s, dtype, rank, dims) : TPU_ERR_INVALID;
}

tpu_status tpu_module_output_info(const tpu_module *m, int i, tpu_dtype *dtype, int *rank, int64_t *dims)
{
    int64_t idx[TPU_MAX_RANK];
    int nidx = 0, k = i;
    const hlo_shape *s = i < 0 ? NULL : hlo_api_leaf(&m->entry->root->shape, &k, idx, &nidx);
    return s ? hlo_api_leaf_info(s, dtype, rank, dims) : TPU_ERR_INVALID;
}

static int hlo_api_same_path(const int64_t *a, int na, const int64_t *b, int nb)
{
    if (na != nb) return 0;
    for (int k = 0; k < na; k++)
        if (a[k] != b[k]) return 0;
    return 1;
}

int tpu_module_output_alias(const tpu_module *m, int i, int *must)
{
    if (must) *must = 0;
    const hlo_attr *a = hlo_module_attr(m, HK_INPUT_OUTPUT_ALIAS);
    int64_t oidx[TPU_MAX_RANK];
    int onidx = 0, k = i;
    if (!a || i < 0 || !hlo_api_leaf(&m->entry->root->shape, &k, oidx, &onidx)) return -1;
    /* a non-tuple result is written {} in the alias config */
    for (int e = 0; e < a->v.alias.n; e++) {
        const hlo_alias_entry *ae = &a->v.alias.v[e];
        if (!hlo_api_same_path(ae->out, ae->nout, oidx, onidx)) continue;
        int n = tpu_module_num_inputs(m);
        for (int j = 0; j < n; j++) {
            int64_t param, idx[TPU_MAX_RANK];
            int nidx;
            if (hlo_api_input(m, j, &param, idx, &nidx) && param == ae->param &&
                hlo_api_same_path(idx, nidx, ae->param_idx, ae->nparam_idx)) {
                if (must) *must = ae->kind == 2;
                return j;
            }
        }
    }
    return -1;
}

/* FNV-1a over the printed module (what the processes of a multi-host run compare); 0 is kept for "not yet". */
uint64_t tpu_module_fingerprint(const tpu_module *m)
{
    if (!m) return 0;
    uint64_t h = __atomic_load_n(&m->fingerprint, __ATOMIC_ACQUIRE);
    if (h) return h;
    ut_buf b;
    ut_buf_init(&b);
    hlo_print_module(&b, m);
    h = 1469598103934665603ULL;
    for (size_t i = 0; i < b.len; i++) {
        h ^= (unsigned char)b.data[i];
        h *= 1099511628211ULL;
    }
    if (b.failed) h ^= (uint64_t)m->ninstrs;   /* no memory to print: a weaker hash of the shape of it */
    ut_buf_free(&b);
    if (!h) h = 1;
    __atomic_store_n(&((tpu_module *)m)->fingerprint, h, __ATOMIC_RELEASE);
    return h;
}
