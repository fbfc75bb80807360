/* memory.c — the memory report of a compiled program: per device arguments, outputs, temporaries, reserved
 * and program peak; padded vs unpadded bytes; utilization and fragmentation; the largest allocations with
 * their op_type/op_name, tiled shape and padding expansion. When the program does not fit, the report has
 * the shape of the TPU compiler's own out-of-memory message (design §5), which users know how to read. */
#include "compile.h"
#include "memory.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* XLA's human-readable byte counts: 1024-based, two decimals, B/K/M/G/T. */
void cmp_fmt_bytes(char *buf, size_t n, int64_t bytes)
{
    const char *units = "KMGTP";
    double v = (double)bytes;
    if (llabs(bytes) < 1024) {
        snprintf(buf, n, "%lldB", (long long)bytes);
        return;
    }
    int u = -1;
    while (fabs(v) >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    snprintf(buf, n, "%.2f%c", v, units[u]);
}

void cmp_print_tiled_shape(ut_buf *b, const chp_chip *chip, const hlo_shape *s)
{
    if (!hlo_shape_is_array(s)) {
        hlo_shape_print(b, s, 1);
        return;
    }
    hlo_shape t = *s;
    t.layout = NULL;
    hlo_shape_print(b, &t, 0);
    int m2m[TPU_MAX_RANK];
    hlo_shape_m2m(s, m2m);
    ut_buf_putc(b, '{');
    for (int i = 0; i < s->rank; i++) ut_buf_printf(b, "%s%d", i ? "," : "", m2m[i]);
    char tiles[64];
    chp_tile_str_m2m(chip, (tpu_dtype)s->dtype, s->rank, s->dims, m2m, tiles, sizeof tiles);
    if (tiles[0]) ut_buf_printf(b, ":%s", tiles);
    ut_buf_putc(b, '}');
}

static int mem_cmp_size(const void *a, const void *b, void *ctx)
{
    const cmp_program *p = ctx;
    int64_t x = p->values[*(const int *)a].padded, y = p->values[*(const int *)b].padded;
    return x < y ? 1 : x > y ? -1 : *(const int *)a - *(const int *)b;
}

/* qsort_r is not portable: a small merge sort with a context pointer */
static void mem_sort(int *v, int n, const cmp_program *p)
{
    if (n < 2) return;
    int h = n / 2;
    mem_sort(v, h, p);
    mem_sort(v + h, n - h, p);
    int *tmp = ut_malloc((size_t)n * sizeof *tmp);
    if (!tmp) return;   /* leaves halves sorted: the report stays valid, only the order may be off */
    int i = 0, j = h, k = 0;
    while (i < h && j < n) tmp[k++] = mem_cmp_size(&v[j], &v[i], (void *)p) < 0 ? v[j++] : v[i++];
    while (i < h) tmp[k++] = v[i++];
    while (j < n) tmp[k++] = v[j++];
    memcpy(v, tmp, (size_t)n * sizeof *v);
    ut_free(tmp);
}

static const char *mem_kind_name(cmp_value_kind k)
{
    switch (k) {
    case CMP_V_TEMP: return "HLO temp";
    case CMP_V_ARG: return "Parameter";
    case CMP_V_OUTPUT: return "Output";
    case CMP_V_CONST: return "Constant";
    case CMP_V_CALLER: return "HLO temp (loop state)";
    }
    return "?";
}

tpu_status cmp_memory_compute(const cmp_program *p, cmp_memory_stats *ms, int top_n)
{
    memset(ms, 0, sizeof *ms);
    const chp_chip *chip = p->chip;
    ms->capacity = chip->hbm_usable_bytes;
    ms->reserved = chip->hbm_reserved_bytes;
    ms->args_padded = p->args_padded;
    ms->args_unpadded = p->args_unpadded;
    ms->outputs_padded = p->outputs_padded;
    ms->outputs_unpadded = p->outputs_unpadded;
    ms->consts_padded = p->consts_padded;
    ms->temp_peak = p->entry->peak;
    ms->temp_live_padded = p->entry->peak_live;
    ms->temp_live_unpadded = p->entry->peak_live_unpadded;
    ms->fragmentation = ms->temp_peak - ms->temp_live_padded;
    /* "program" is everything the compiled program allocates besides its arguments */
    ms->program = ms->temp_peak + ms->consts_padded + p->thread_local;
    ms->used = ms->program + ms->args_padded;
    ms->fits = ms->used <= ms->capacity;
    /* totals of everything allocated at the peak (arguments included) */
    ms->padded_total = ms->temp_live_padded + ms->args_padded + ms->consts_padded;
    ms->unpadded_total = ms->temp_live_unpadded + ms->args_unpadded + ms->consts_padded;
    /* largest allocations: the biggest distinct buffers of the program (temps, outputs, constants) */
    int n = 0;
    int *idx = ut_malloc((size_t)(p->nvalues ? p->nvalues : 1) * sizeof *idx);
    if (!idx) return TPU_ERR_NOMEM;
    for (int v = 0; v < p->nvalues; v++) {
        const cmp_value *val = &p->values[v];
        if (val->alias >= 0 || val->kind == CMP_V_ARG || val->kind == CMP_V_CALLER || val->vmem) continue;
        if (!p->plans[val->comp]) continue;
        idx[n++] = v;
    }
    mem_sort(idx, n, p);
    ms->nlargest = n < top_n ? n : top_n;
    ms->largest = idx;
    return TPU_OK;
}

void cmp_memory_stats_free(cmp_memory_stats *ms)
{
    ut_free(ms->largest);
    ms->largest = NULL;
}

static void mem_alloc_entry(ut_buf *b, const cmp_program *p, const cmp_value *val, int rank)
{
    char sz[32], un[32], ex[32];
    cmp_fmt_bytes(sz, sizeof sz, val->padded);
    cmp_fmt_bytes(un, sizeof un, val->unpadded);
    cmp_fmt_bytes(ex, sizeof ex, val->padded - val->unpadded);
    ut_buf_printf(b, "  %d. Size: %s\n", rank, sz);
    const char *ot = hlo_meta(val->def, "op_type"), *on = hlo_meta(val->def, "op_name");
    if (ot || on) {
        ut_buf_puts(b, "     Operator:");
        if (ot) ut_buf_printf(b, " op_type=\"%s\"", ot);
        if (on) ut_buf_printf(b, " op_name=\"%s\"", on);
        ut_buf_putc(b, '\n');
    }
    const char *sf = hlo_meta(val->def, "source_file"), *sl = hlo_meta(val->def, "source_line");
    if (sf) ut_buf_printf(b, "     Source: %s%s%s\n", sf, sl ? ":" : "", sl ? sl : "");
    ut_buf_puts(b, "     Shape: ");
    cmp_print_tiled_shape(b, p->chip, &val->shape);
    ut_buf_putc(b, '\n');
    ut_buf_printf(b, "     Unpadded size: %s\n", un);
    if (val->padded > val->unpadded && val->unpadded > 0)
        ut_buf_printf(b, "     Extra memory due to padding: %s (%.1fx expansion)\n", ex, (double)val->padded / (double)val->unpadded);
    ut_buf_printf(b, "     Allocation type: %s\n", mem_kind_name(val->kind));
    if (val->copy_of && val->copy_of == val->def)
        ut_buf_printf(b, "     Copy of: %s, from the convolution's layout into the layout that pads least\n", val->def->name);
    else if (val->copy_of)
        ut_buf_printf(b, "     Copy of: parameter %s, in the layout (and type) the convolution reads\n", val->copy_of->name);
    ut_buf_printf(b, "     Instruction: %s = %s(...) [%s:%d:%d]\n", val->def->name, hlo_op_name((hlo_op)val->def->op),
                  p->m->filename ? p->m->filename : "?", val->def->line, val->def->col);
}

void cmp_memory_text(ut_buf *b, const cmp_program *p, const cmp_memory_stats *ms)
{
    char used[32], cap[32], over[32], total[32], res[32], prog[32], args[32], temp[32], unp[32], pad[32], frag[32];
    cmp_fmt_bytes(used, sizeof used, ms->used);
    cmp_fmt_bytes(cap, sizeof cap, ms->capacity);
    cmp_fmt_bytes(over, sizeof over, ms->used - ms->capacity);
    cmp_fmt_bytes(total, sizeof total, ms->used + ms->reserved);
    cmp_fmt_bytes(res, sizeof res, ms->reserved);
    cmp_fmt_bytes(prog, sizeof prog, ms->program);
    cmp_fmt_bytes(args, sizeof args, ms->args_padded);
    cmp_fmt_bytes(temp, sizeof temp, ms->temp_peak);
    cmp_fmt_bytes(unp, sizeof unp, ms->temp_live_unpadded);
    cmp_fmt_bytes(pad, sizeof pad, ms->temp_live_padded);
    cmp_fmt_bytes(frag, sizeof frag, ms->fragmentation);
    double util = ms->temp_live_padded ? 100.0 * (double)ms->temp_live_unpadded / (double)ms->temp_live_padded : 100.0;
    double fragp = ms->temp_peak ? 100.0 * (double)ms->fragmentation / (double)ms->temp_peak : 0.0;
    if (!ms->fits) {
        /* the current compiler's wording (libtpu 0.0.42.1): the error the framework raises, then the compiler's
         * own line (docs/libtpu-reference.md) */
        ut_buf_printf(b, "RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO temporaries (%s) "
                      "exceeds available HBM (%s).\n", used, cap);
        ut_buf_printf(b, "XLA:TPU compile permanent error. Ran out of memory in memory space hbm. Used %s of %s hbm. "
                      "Exceeded hbm capacity by %s.\n", used, cap, over);
    } else {
        ut_buf_printf(b, "Fits in hbm. Used %s of %s hbm (%.1f%%).\n", used, cap,
                      ms->capacity ? 100.0 * (double)ms->used / (double)ms->capacity : 0.0);
    }
    ut_buf_printf(b, "Per device: one %s of %s.\n", chp_device_desc(p->chip), p->chip->name);
    ut_buf_printf(b, "Total hbm usage >= %s:\n", total);
    ut_buf_printf(b, "    reserved %15s\n", res);
    ut_buf_printf(b, "    program  %15s\n", prog);
    ut_buf_printf(b, "    arguments %14s\n", args);
    ut_buf_printf(b, "HLO temp %s (%.1f%% utilization: Unpadded (%s) Padded (%s), %.1f%% fragmentation (%s))\n", temp, util,
                  unp, pad, fragp, frag);
    if (p->entry->vmem_peak > 0) {
        char vm[32];
        cmp_fmt_bytes(vm, sizeof vm, p->entry->vmem_peak);
        ut_buf_printf(b, "VMEM temporaries %s (kept on the core by memory-space assignment, not in hbm)\n", vm);
    }
    if (ms->nlargest) {
        ut_buf_puts(b, "Largest program allocations in hbm:\n");
        for (int i = 0; i < ms->nlargest; i++) mem_alloc_entry(b, p, &p->values[ms->largest[i]], i + 1);
    }
}
