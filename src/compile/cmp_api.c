/* cmp_api.c — the public memory-planning API: verify, apply the precision policy, compile for the chip,
 * and present the memory report as text, JSON, SVG and HTML. */
#include "compile.h"
#include "memory.h"
#include "policy.h"
#include "verify/verify.h"

#include <cJSON.h>
#include <errno.h>
#include <string.h>

struct tpu_memory {
    tpu_ctx         *ctx;
    hlo_module      *owned;     /* the policy-rewritten module, when a policy was applied */
    chp_slice        slice;
    cmp_program     *prog;
    cmp_memory_stats ms;
    char            *text;
    char            *json;
};

/* A slice or generation name, or a chip file (.json): chp_slice_parse knows all three. */
tpu_status cmp_resolve_chip(tpu_ctx *ctx, const char *chip, chp_slice *out)
{
    if (!chip || !*chip) return ut_err(ctx, TPU_ERR_INVALID, "no chip given (e.g. --chip v3-8, v5e, or a chip file .json)");
    return chp_slice_parse(ctx, chip, out);
}

/* Verification before planning: a program whose shapes disagree cannot be planned meaningfully. */
tpu_status cmp_verify_or_fail(tpu_ctx *ctx, const hlo_module *m) { return ver_require(ctx, m); }

tpu_status tpu_module_apply_policy(tpu_ctx *ctx, const tpu_module *m, const char *policy, tpu_module **out)
{
    return cmp_apply_policy(ctx, m, policy, out);
}

void tpu_memory_free(tpu_memory *mem)
{
    if (!mem) return;
    cmp_memory_stats_free(&mem->ms);
    cmp_program_free(mem->prog);
    hlo_module_free(mem->owned);
    ut_free(mem->text);
    ut_free(mem->json);
    ut_free(mem);
}

tpu_memory_opts tpu_memory_opts_default(void)
{
    tpu_memory_opts o;
    memset(&o, 0, sizeof o);
    o.top = 10;
    return o;
}

tpu_status tpu_memory_plan(tpu_ctx *ctx, const tpu_module *m, const tpu_memory_opts *opts, tpu_memory **out)
{
    *out = NULL;
    tpu_memory_opts o = opts ? *opts : tpu_memory_opts_default();
    if (o.top <= 0) o.top = 10;
    tpu_memory *mem = ut_calloc(1, sizeof *mem);
    if (!mem) return ut_nomem(ctx);
    mem->ctx = ctx;
    tpu_status st = cmp_resolve_chip(ctx, o.chip, &mem->slice);
    const hlo_module *use = m;
    if (!st) st = cmp_verify_or_fail(ctx, m);
    if (!st && o.policy && strcmp(o.policy, "float32")) {
        st = cmp_apply_policy(ctx, m, o.policy, &mem->owned);
        if (!st) use = mem->owned;   /* verified by the rewrite */
    }
    if (!st) {
        hlo_module *inl = NULL;
        st = cmp_inline_calls(ctx, use, &inl);
        if (!st) {
            hlo_module_free(mem->owned);
            mem->owned = inl;
            use = inl;
        }
    }
    if (!st) st = cmp_compile(ctx, use, &mem->slice.chip, NULL, &mem->prog);
    if (!st && cmp_memory_compute(mem->prog, &mem->ms, o.top)) st = ut_nomem(ctx);
    if (!st) {
        ut_buf b;
        ut_buf_init(&b);
        cmp_memory_text(&b, mem->prog, &mem->ms);
        mem->text = ut_buf_take(&b);
        if (!mem->text) st = ut_nomem(ctx);
    }
    if (st) {
        tpu_memory_free(mem);
        return st;
    }
    *out = mem;
    return TPU_OK;
}

int tpu_memory_fits(const tpu_memory *mem) { return mem->ms.fits; }
int64_t tpu_memory_peak_bytes(const tpu_memory *mem) { return mem->ms.used; }
int64_t tpu_memory_capacity_bytes(const tpu_memory *mem) { return mem->ms.capacity; }
const char *tpu_memory_report(const tpu_memory *mem) { return mem->text; }

static cJSON *mem_json_value(const cmp_program *p, const cmp_value *v)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    ut_buf b;
    ut_buf_init(&b);
    cmp_print_tiled_shape(&b, p->chip, &v->shape);
    cJSON_AddStringToObject(o, "shape", b.data ? b.data : "");
    ut_buf_free(&b);
    cJSON_AddNumberToObject(o, "padded_bytes", (double)v->padded);
    cJSON_AddNumberToObject(o, "unpadded_bytes", (double)v->unpadded);
    cJSON_AddNumberToObject(o, "expansion", v->unpadded ? (double)v->padded / (double)v->unpadded : 1.0);
    const char *on = hlo_meta(v->def, "op_name"), *ot = hlo_meta(v->def, "op_type");
    if (on) cJSON_AddStringToObject(o, "op_name", on);
    else cJSON_AddNullToObject(o, "op_name");
    if (ot) cJSON_AddStringToObject(o, "op_type", ot);
    cJSON_AddStringToObject(o, "instruction", v->def->name);
    cJSON_AddStringToObject(o, "opcode", hlo_op_name((hlo_op)v->def->op));
    static const char *kinds[] = {"temp", "argument", "output", "constant", "caller"};
    cJSON_AddStringToObject(o, "kind", kinds[v->kind]);
    cJSON_AddNumberToObject(o, "live_start", v->start);
    cJSON_AddNumberToObject(o, "live_end", v->end);
    return o;
}

const char *tpu_memory_json(const tpu_memory *mem)
{
    if (mem->json) return mem->json;
    const cmp_memory_stats *ms = &mem->ms;
    const cmp_program *p = mem->prog;
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "module", p->m->name);
    cJSON_AddStringToObject(o, "chip", mem->slice.chip.name);
    cJSON_AddStringToObject(o, "slice", mem->slice.name);
    cJSON_AddBoolToObject(o, "fits", ms->fits);
    cJSON_AddNumberToObject(o, "peak_bytes", (double)ms->used);
    cJSON_AddNumberToObject(o, "hbm_capacity_bytes", (double)ms->capacity);
    cJSON_AddNumberToObject(o, "reserved_bytes", (double)ms->reserved);
    cJSON_AddNumberToObject(o, "program_bytes", (double)ms->program);
    cJSON_AddNumberToObject(o, "argument_bytes", (double)ms->args_padded);
    cJSON_AddNumberToObject(o, "argument_unpadded_bytes", (double)ms->args_unpadded);
    cJSON_AddNumberToObject(o, "output_bytes", (double)ms->outputs_padded);
    cJSON_AddNumberToObject(o, "temp_bytes", (double)ms->temp_peak);
    /* temporaries the compiler keeps in VMEM on v5e and later (at the entry computation's busiest point) */
    cJSON_AddNumberToObject(o, "vmem_temp_bytes", (double)mem->prog->entry->vmem_peak);
    cJSON_AddNumberToObject(o, "constant_bytes", (double)ms->consts_padded);
    cJSON_AddNumberToObject(o, "padded_bytes", (double)ms->padded_total);
    cJSON_AddNumberToObject(o, "unpadded_bytes", (double)ms->unpadded_total);
    cJSON_AddNumberToObject(o, "fragmentation_bytes", (double)ms->fragmentation);
    cJSON_AddNumberToObject(o, "utilization",
                            ms->temp_live_padded ? (double)ms->temp_live_unpadded / (double)ms->temp_live_padded : 1.0);
    cJSON_AddNumberToObject(o, "ops", (double)p->entry->nops);
    cJSON_AddNumberToObject(o, "instructions", (double)p->m->ninstrs);
    cJSON_AddNumberToObject(o, "peak_op", p->entry->peak_pos);
    cJSON *arr = cJSON_AddArrayToObject(o, "largest");
    for (int i = 0; arr && i < ms->nlargest; i++) cJSON_AddItemToArray(arr, mem_json_value(p, &p->values[ms->largest[i]]));
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    if (!s) return NULL;
    ((tpu_memory *)mem)->json = ut_strdup(s);
    cJSON_free(s);
    return mem->json;
}

static tpu_status mem_write(tpu_ctx *ctx, const char *path, ut_buf *b)
{
    return b->failed ? ut_nomem(ctx) : ut_write_file(ctx, path, b->data, b->len, 0);
}

tpu_status tpu_memory_write_svg(tpu_ctx *ctx, const tpu_memory *mem, const char *path)
{
    ut_buf b;
    ut_buf_init(&b);
    tpu_status st = cmp_memory_svg(ctx, &b, mem->prog, &mem->ms);
    if (!st) st = mem_write(ctx, path, &b);
    ut_buf_free(&b);
    return st;
}

tpu_status tpu_memory_write_html(tpu_ctx *ctx, const tpu_memory *mem, const char *path)
{
    ut_buf b;
    ut_buf_init(&b);
    tpu_status st = cmp_memory_html(ctx, &b, mem->prog, &mem->ms);
    if (!st) st = mem_write(ctx, path, &b);
    ut_buf_free(&b);
    return st;
}

void tpu_memory_get_stats(const tpu_memory *mem, tpu_memory_stats *out)
{
    const cmp_memory_stats *ms = &mem->ms;
    memset(out, 0, sizeof *out);
    out->argument_bytes = ms->args_padded;
    out->output_bytes = ms->outputs_padded;
    /* outputs written into a donated argument's buffer: the argument's bytes are shared */
    for (int v = 0; v < mem->prog->nvalues; v++) {
        const cmp_value *val = &mem->prog->values[v];
        if (val->kind == CMP_V_ARG && val->donated) out->alias_bytes += val->padded;
    }
    out->output_bytes += out->alias_bytes;
    out->temp_bytes = ms->program;
    out->peak_bytes = ms->used;
    out->unpadded_bytes = ms->unpadded_total;
    out->capacity_bytes = ms->capacity;
    out->reserved_bytes = ms->reserved;
}
