/* pjrt_compile.c — compile: a framework's program becomes a tpusim module for the simulated slice, refused
 * the way the TPU compiler would refuse it (tpusim check's report; the out-of-memory report), and the
 * executable answers what the framework asks of it (outputs, device assignment, shardings, memory and cost
 * analyses). */
#include "pjrt_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static PJRT_Error *pj_nomem(void) { return pj_error(PJRT_Error_Code_RESOURCE_EXHAUSTED, "tpusim: out of host memory"); }

/* ---- the executable ---- */

static void pj_executable_free(PJRT_Executable *e)
{
    if (e->remote) pj_remote_delete_executable(e);
    tpu_module_free(e->m);
    free(e->name);
    free(e->assignment);
    free(e->out_types);
    free(e->out_dims);
    free(e->out_ranks);
    free(e->out_kinds);
    free(e->out_kind_sizes);
    free(e->alias_of);
    for (int i = 0; i < e->nin_shard; i++) free(e->in_shard[i]);
    for (int i = 0; i < e->nout_shard; i++) free(e->out_shard[i]);
    free(e->in_shard);
    free(e->out_shard);
    free(e->in_shard_len);
    free(e->out_shard_len);
    free(e->fingerprint);
    free(e->optimized_hlo);
    free(e->optimized_mlir);
    free(e->da_bytes);
    free(e->options);
    free(e);
}

void pj_executable_unref(PJRT_Executable *e)
{
    if (!e) return;
    PJRT_Client *c = e->client;
    pthread_mutex_lock(&c->mu);
    int last = --e->refs == 0;
    if (last) c->live_executables--;
    pthread_mutex_unlock(&c->mu);
    if (last) pj_executable_free(e);
}

/* FNV-1a over the program text and how it runs: the same program gives the same fingerprint. */
static char *pj_fingerprint(const char *text, int R, int P, tpu_numerics num)
{
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) h = (h ^ *p) * 1099511628211ull;
    h = (h ^ (uint64_t)R) * 1099511628211ull;
    h = (h ^ (uint64_t)P) * 1099511628211ull;
    h = (h ^ (uint64_t)num) * 1099511628211ull;
    char *s = malloc(40);
    if (s) snprintf(s, 40, "tpusim-%016llx", (unsigned long long)h);
    return s;
}

/* Output shapes, memory kinds and aliases, read once from the module. */
static PJRT_Error *pj_describe_outputs(PJRT_Executable *e)
{
    int n = tpu_module_num_outputs(e->m);
    e->noutputs = n;
    e->ninputs = tpu_module_num_inputs(e->m);
    e->out_types = calloc((size_t)n + 1, sizeof *e->out_types);
    e->out_ranks = calloc((size_t)n + 1, sizeof *e->out_ranks);
    e->out_dims = calloc((size_t)n * TPU_MAX_RANK + 1, sizeof *e->out_dims);
    e->out_kinds = calloc((size_t)n + 1, sizeof *e->out_kinds);
    e->out_kind_sizes = calloc((size_t)n + 1, sizeof *e->out_kind_sizes);
    e->alias_of = calloc((size_t)n + 1, sizeof *e->alias_of);
    if (!e->out_types || !e->out_ranks || !e->out_dims || !e->out_kinds || !e->out_kind_sizes || !e->alias_of)
        return pj_nomem();
    int64_t *dims = e->out_dims;
    for (int i = 0; i < n; i++) {
        tpu_dtype t;
        int rank;
        tpu_module_output_info(e->m, i, &t, &rank, dims);
        e->out_types[i] = pj_dtype_to_pjrt(t);
        e->ntoken_outputs += t == TPU_TOKEN;
        e->out_ranks[i] = (size_t)rank;
        dims += rank;
        e->out_kinds[i] = "device";
        e->out_kind_sizes[i] = 6;
        e->alias_of[i] = tpu_module_output_alias(e->m, i, NULL);
    }
    return NULL;
}

/* The devices of (replica, partition), from the compile options or the default assignment. */
static PJRT_Error *pj_assign(PJRT_Client *c, PJRT_Executable *e, const pj_compile_opts *o)
{
    int R = e->nreplicas, P = e->npartitions;
    if ((int64_t)R * P > c->ndev)
        return pj_error(PJRT_Error_Code_INVALID_ARGUMENT,
                        "the program asks for %d replica%s x %d partition%s = %d devices; the simulated %s has %d "
                        "(TPUSIM_SLICE names a larger slice, e.g. v3-32)",
                        R, R == 1 ? "" : "s", P, P == 1 ? "" : "s", R * P, c->slice, c->ndev);
    e->assignment = calloc((size_t)R * P, sizeof *e->assignment);
    char *used = calloc((size_t)c->ndev, 1);
    if (!e->assignment || !used) {
        free(used);
        return pj_nomem();
    }
    PJRT_Error *err = NULL;
    if (o->have_assignment && (o->da_replicas != R || o->da_computations != P))
        err = pj_error(PJRT_Error_Code_INVALID_ARGUMENT,
                       "compile options: the device assignment is %d replicas x %d partitions, the program %d x %d",
                       o->da_replicas, o->da_computations, R, P);
    for (int i = 0; !err && i < R * P; i++) {
        int d = o->have_assignment ? o->da[i] : i;
        if (d < 0 || d >= c->ndev || used[d])
            err = pj_error(PJRT_Error_Code_INVALID_ARGUMENT,
                           "compile options: device %d (replica %d, partition %d) %s", d, i / P, i % P,
                           d < 0 || d >= c->ndev ? "is not a device of the simulated slice" : "is assigned twice");
        else
            used[d] = 1, e->assignment[i] = d;
    }
    free(used);
    if (!err) {
        e->da_bytes = pj_device_assignment_proto(R, P, e->assignment, &e->da_len);
        if (!e->da_bytes) err = pj_nomem();
    }
    return err;
}

/* What the TPU compiler would refuse: tpusim check's report, then the out-of-memory report. */
static PJRT_Error *pj_check_for_tpu(PJRT_Client *c, tpu_ctx *ctx, PJRT_Executable *e)
{
    tpu_report *r = NULL;
    tpu_status st = tpu_check(ctx, e->m, c->slice, &r);
    if (st) return pj_error_tpu(ctx, st, "tpusim: checking the program");
    PJRT_Error *err = NULL;
    if (!tpu_report_compatible(r))
        err = pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "tpusim: %s would not compile for the simulated %s:\n%s",
                       e->name, c->slice, tpu_report_text(r));
    tpu_report_free(r);
    if (err) return err;
    st = tpu_module_runnable(ctx, e->m);
    if (st) return pj_error_tpu(ctx, st, "tpusim cannot run this program");
    tpu_memory_opts mo = {.chip = c->slice, .top = 5};
    tpu_memory *mem = NULL;
    st = tpu_memory_plan(ctx, e->m, &mo, &mem);
    if (st) return pj_error_tpu(ctx, st, "tpusim: planning the program's memory");
    tpu_memory_get_stats(mem, &e->mem);
    if (!tpu_memory_fits(mem))
        err = pj_error(PJRT_Error_Code_RESOURCE_EXHAUSTED, "XLA:TPU compile permanent error. %s", tpu_memory_report(mem));
    tpu_memory_free(mem);
    return err;
}

/* The program's bytes as a module: StableHLO through jaxlib, HloModuleProto or HLO text directly. */
static PJRT_Error *pj_program_module(PJRT_Client *c, tpu_ctx *ctx, const PJRT_Program *prog, PJRT_Executable *e)
{
    const char *fmt = prog->format ? prog->format : "";
    size_t flen = prog->format ? prog->format_size : 0;
    (void)c;
    PJRT_Error *err = NULL;
    tpu_status st;
    if (flen == 4 && !memcmp(fmt, "mlir", 4)) {
        pj_frontend_result fr;
        err = pj_python_frontend(prog->code, prog->code_size, "mlir", e->options, e->options_len, &fr);
        if (err) return err;
        st = tpu_module_parse(ctx, fr.hlo, strlen(fr.hlo), "program", &e->m);
        if (st) err = pj_error_tpu(ctx, st, "tpusim: reading the HLO that jaxlib made of the program");
        e->nin_shard = fr.nin, e->in_shard = fr.in_shard, e->in_shard_len = fr.in_len;
        e->nout_shard = fr.nout, e->out_shard = fr.out_shard, e->out_shard_len = fr.out_len;
        e->optimized_hlo = fr.hlo;
        fr.in_shard = fr.out_shard = NULL, fr.in_len = fr.out_len = NULL, fr.nin = fr.nout = 0, fr.hlo = NULL;
        pj_frontend_result_free(&fr);
        return err;
    }
    if ((flen == 3 && !memcmp(fmt, "hlo", 3)) || (flen == 8 && !memcmp(fmt, "hlo_text", 8))) {
        st = tpu_module_parse(ctx, prog->code, prog->code_size, "program", &e->m);
        return st ? pj_error_tpu(ctx, st, "tpusim: reading the HLO program") : NULL;
    }
    return pj_error(PJRT_Error_Code_INVALID_ARGUMENT,
                    "tpusim: unknown program format '%.*s' (expected \"mlir\": StableHLO bytecode, or \"hlo\": a "
                    "serialized HloModuleProto)", (int)flen, fmt);
}

static PJRT_Error *pj_build(PJRT_Client *c, tpu_ctx *ctx, const PJRT_Program *prog, const pj_compile_opts *o,
                            PJRT_Executable *e)
{
    PJRT_Error *err = pj_program_module(c, ctx, prog, e);
    if (err) return err;
    e->name = strdup(tpu_module_name(e->m) ? tpu_module_name(e->m) : "program");
    if (!e->name) return pj_nomem();
    int64_t mr = tpu_module_replica_count(e->m), mp = tpu_module_num_partitions(e->m);
    e->numerics = o->numerics == 1 ? TPU_NUMERICS_TPU : o->numerics == 2 ? TPU_NUMERICS_EXACT : c->numerics;
    e->nreplicas = (int)o->num_replicas;
    e->npartitions = (int)o->num_partitions;
    if ((mr > 1 && mr != e->nreplicas) || (mp > 1 && mp != e->npartitions))
        return pj_error(PJRT_Error_Code_INVALID_ARGUMENT,
                        "tpusim: %s says replica_count=%lld num_partitions=%lld; the compile options ask for %d x %d",
                        e->name, (long long)mr, (long long)mp, e->nreplicas, e->npartitions);
    if ((err = pj_assign(c, e, o)) || (err = pj_describe_outputs(e))) return err;
    if (!e->optimized_hlo && tpu_module_to_string(ctx, e->m, &e->optimized_hlo)) return pj_nomem();
    /* remote mode: the TPU host checks, plans and keeps the per-device program */
    if ((err = c->remote ? pj_remote_compile(c, e) : pj_check_for_tpu(c, ctx, e))) return err;
    e->fingerprint = pj_fingerprint(e->optimized_hlo, e->nreplicas, e->npartitions, e->numerics);
    return e->fingerprint ? NULL : pj_nomem();
}

static PJRT_Error *pj_loaded_new(PJRT_Client *c, PJRT_Executable *e, PJRT_LoadedExecutable **out)
{
    int n = e->nreplicas * e->npartitions;
    PJRT_LoadedExecutable *le = calloc(1, sizeof *le);
    if (!le) return pj_nomem();
    le->devices = calloc((size_t)n, sizeof *le->devices);
    le->logical = calloc((size_t)n, sizeof *le->logical);
    if (!le->devices || !le->logical) {
        free(le->devices);
        free(le->logical);
        free(le);
        return pj_nomem();
    }
    for (int i = 0; i < n; i++) {
        le->devices[i] = pj_client_device(c, e->assignment[i]);
        le->logical[i].replica = i / e->npartitions;
        le->logical[i].partition = i % e->npartitions;
    }
    le->ndevices = n;
    le->exe = e;
    pj_dist_addressable(c, le);
    *out = le;
    return NULL;
}

PJRT_Error *pj_compile(PJRT_Client *c, const PJRT_Program *prog, const char *opts, size_t opts_len,
                       PJRT_LoadedExecutable **out)
{
    *out = NULL;
    pj_report_found_system(c);
    if (!prog || (!prog->code && prog->code_size))
        return pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "PJRT_Client_Compile: no program");
    pj_compile_opts o;
    PJRT_Error *err = pj_parse_compile_options(opts, opts_len, &o);
    if (err) return err;
    PJRT_Executable *e = calloc(1, sizeof *e);
    tpu_ctx *ctx = tpu_ctx_new();
    if (!e || !ctx) err = pj_nomem();
    if (!err) {
        e->client = c;
        e->refs = 1;
        e->note = -1;
        if (opts_len && !(e->options = malloc(opts_len))) err = pj_nomem();
        else if (opts_len) memcpy(e->options, opts, opts_len), e->options_len = opts_len;
    }
    if (!err) err = pj_build(c, ctx, prog, &o, e);
    if (!err) err = pj_loaded_new(c, e, out);
    pj_compile_opts_free(&o);
    tpu_ctx_free(ctx);
    if (err) {
        if (e) pj_executable_free(e);
        return err;
    }
    pthread_mutex_lock(&c->mu);
    c->compiles++;
    c->live_executables++;
    pthread_mutex_unlock(&c->mu);
    pj_report_executable(c, e);
    return NULL;
}

/* tpusim's timing model on the per-device program (computed once). */
PJRT_Error *pj_executable_cost(PJRT_Executable *e)
{
    if (e->have_cost) return NULL;
    tpu_ctx *ctx = tpu_ctx_new();
    if (!ctx) return pj_nomem();
    tpu_profile_opts po = {.chip = e->client->slice, .steps = 1, .steps_per_exec = 1};
    tpu_profile *p = NULL;
    tpu_status st = tpu_profile_program(ctx, e->m, &po, &p);
    PJRT_Error *err = NULL;
    if (st) err = pj_error_tpu(ctx, st, "tpusim: predicting the program's time");
    else {
        e->cost_flops = tpu_profile_flops(p);
        e->cost_bytes = tpu_profile_hbm_bytes(p);
        e->cost_ici_bytes = tpu_profile_ici_bytes(p);
        e->cost_seconds = tpu_profile_step_time(p);
        e->cost_mxu_util = tpu_profile_mxu_utilization(p);
        e->have_cost = 1;
    }
    tpu_profile_free(p);
    tpu_ctx_free(ctx);
    return err;
}

/* ---- PJRT_Client_Compile and the executable's queries ---- */

PJRT_Error *pjx_PJRT_Client_Compile(PJRT_Client_Compile_Args *a)
{
    PJ_NEED(a, PJRT_Client_Compile_Args, executable);
    return pj_compile(a->client, a->program, a->compile_options, a->compile_options_size, &a->executable);
}

PJRT_Error *pjx_PJRT_Executable_Destroy(PJRT_Executable_Destroy_Args *a)
{
    PJ_NEED(a, PJRT_Executable_Destroy_Args, executable);
    pj_executable_unref(a->executable);
    return NULL;
}

PJRT_Error *pjx_PJRT_Executable_Name(PJRT_Executable_Name_Args *a)
{
    PJ_NEED(a, PJRT_Executable_Name_Args, executable_name_size);
    a->executable_name = a->executable->name;
    a->executable_name_size = strlen(a->executable->name);
    return NULL;
}

PJRT_Error *pjx_PJRT_Executable_NumReplicas(PJRT_Executable_NumReplicas_Args *a)
{
    PJ_NEED(a, PJRT_Executable_NumReplicas_Args, num_replicas);
    a->num_replicas = (size_t)a->executable->nreplicas;
    return NULL;
}

PJRT_Error *pjx_PJRT_Executable_NumPartitions(PJRT_Executable_NumPartitions_Args *a)
{
    PJ_NEED(a, PJRT_Executable_NumPartitions_Args, num_partitions);
    a->num_partitions = (size_t)a->executable->npartitions;
    return NULL;
}

PJRT_Error *pjx_PJRT_Executable_NumOutputs(PJRT_Executable_NumOutputs_Args *a)
{
    PJ_NEED(a, PJRT_Executable_NumOutputs_Args, num_outputs);
    a->num_outputs = (size_t)a->executable->noutputs;
    return NULL;
}

PJRT_Error *pjx_PJRT_Executable_SizeOfGeneratedCodeInBytes(PJRT_Executable_SizeOfGeneratedCodeInBytes_Args *a)
{
    PJ_NEED(a, PJRT_Executable_SizeOfGeneratedCodeInBytes_Args, size_in_bytes);
    a->size_in_bytes = 0;   /* the simulator interprets the program: no generated code */
    return NULL;
}

static PJRT_NamedValue pj_nv_f(const char *name, double v)
{
    return (PJRT_NamedValue){.struct_size = PJRT_NamedValue_STRUCT_SIZE, .name = name, .name_size = strlen(name),
                             .type = PJRT_NamedValue_kFloat, .float_value = (float)v, .value_size = 1};
}

PJRT_Error *pjx_PJRT_Executable_GetCostAnalysis(PJRT_Executable_GetCostAnalysis_Args *a)
{
    PJ_NEED(a, PJRT_Executable_GetCostAnalysis_Args, properties);
    PJRT_Executable *e = a->executable;
    PJRT_Error *err = pj_executable_cost(e);
    if (err) return err;
    /* XLA's own keys where they mean the same, per device and step */
    int n = 0;
    e->cost[n++] = pj_nv_f("flops", e->cost_flops);
    e->cost[n++] = pj_nv_f("bytes accessed", e->cost_bytes);
    e->cost[n++] = pj_nv_f("optimal_seconds", e->cost_seconds);
    e->cost[n++] = pj_nv_f("utilization mxu", e->cost_mxu_util);
    e->cost[n++] = pj_nv_f("bytes accessed ici", e->cost_ici_bytes);
    a->properties = e->cost;
    a->num_properties = (size_t)n;
    return NULL;
}

PJRT_Error *pjx_PJRT_Executable_OutputMemoryKinds(PJRT_Executable_OutputMemoryKinds_Args *a)
{
    PJ_NEED(a, PJRT_Executable_OutputMemoryKinds_Args, memory_kind_sizes);
    a->num_outputs = (size_t)a->executable->noutputs;
    a->memory_kinds = a->executable->out_kinds;
    a->memory_kind_sizes = a->executable->out_kind_sizes;
    return NULL;
}

PJRT_Error *pjx_PJRT_Executable_ParameterMemoryKinds(PJRT_Executable_ParameterMemoryKinds_Args *a)
{
    PJ_NEED(a, PJRT_Executable_ParameterMemoryKinds_Args, memory_kind_sizes);
    PJRT_Executable *e = a->executable;
    if (e->ninputs > e->noutputs)   /* the outputs' "device" arrays are long enough for either list */
        return pj_error(PJRT_Error_Code_UNIMPLEMENTED, "tpusim: parameter memory kinds (all \"device\")");
    a->num_parameters = (size_t)e->ninputs;
    a->memory_kinds = e->out_kinds;
    a->memory_kind_sizes = e->out_kind_sizes;
    return NULL;
}

/* The per-device program (what tpusim runs), as StableHLO ("mlir"): compiled.as_text() in jax. Asked twice:
 * first for the size (code NULL), then with room for it. */
PJRT_Error *pjx_PJRT_Executable_OptimizedProgram(PJRT_Executable_OptimizedProgram_Args *a)
{
    PJ_NEED(a, PJRT_Executable_OptimizedProgram_Args, program);
    PJRT_Executable *e = a->executable;
    PJRT_Program *p = a->program;
    if (!p) return pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "OptimizedProgram: no program to fill");
    /* made outside the client's mutex: Python's GIL is taken inside, and a thread holding the GIL may be
     * waiting for that mutex (lock order: GIL, then the client's mutex, never the reverse) */
    pthread_mutex_lock(&e->client->mu);
    int have = e->optimized_mlir != NULL;
    pthread_mutex_unlock(&e->client->mu);
    if (!have) {
        char *mlir = NULL;
        size_t len = 0;
        PJRT_Error *err = pj_python_optimized_program(e->optimized_hlo, &mlir, &len);
        if (err) return err;
        pthread_mutex_lock(&e->client->mu);
        if (!e->optimized_mlir) e->optimized_mlir = mlir, e->optimized_mlir_len = len, mlir = NULL;
        pthread_mutex_unlock(&e->client->mu);
        free(mlir);
    }
    p->format = "mlir";
    p->format_size = 4;
    if (p->code) {
        if (p->code_size < e->optimized_mlir_len)
            return pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "OptimizedProgram: %zu bytes of room for %zu", p->code_size,
                            e->optimized_mlir_len);
        memcpy(p->code, e->optimized_mlir, e->optimized_mlir_len);
    }
    p->code_size = e->optimized_mlir_len;
    return NULL;
}

PJRT_Error *pjx_PJRT_Executable_Fingerprint(PJRT_Executable_Fingerprint_Args *a)
{
    PJ_NEED(a, PJRT_Executable_Fingerprint_Args, executable_fingerprint_size);
    a->executable_fingerprint = a->executable->fingerprint;
    a->executable_fingerprint_size = strlen(a->executable->fingerprint);
    return NULL;
}

PJRT_Error *pjx_PJRT_Executable_OutputElementTypes(PJRT_Executable_OutputElementTypes_Args *a)
{
    PJ_NEED(a, PJRT_Executable_OutputElementTypes_Args, num_output_types);
    a->output_types = a->executable->out_types;
    a->num_output_types = (size_t)a->executable->noutputs;
    return NULL;
}

PJRT_Error *pjx_PJRT_Executable_OutputDimensions(PJRT_Executable_OutputDimensions_Args *a)
{
    PJ_NEED(a, PJRT_Executable_OutputDimensions_Args, dim_sizes);
    a->num_outputs = (size_t)a->executable->noutputs;
    a->dims = a->executable->out_dims;
    a->dim_sizes = a->executable->out_ranks;
    return NULL;
}

PJRT_Error *pjx_PJRT_Executable_GetCompiledMemoryStats(PJRT_Executable_GetCompiledMemoryStats_Args *a)
{
    PJ_NEED(a, PJRT_Executable_GetCompiledMemoryStats_Args, peak_memory_in_bytes);
    const tpu_memory_stats *m = &a->executable->mem;
    a->generated_code_size_in_bytes = 0;
    a->argument_size_in_bytes = m->argument_bytes;
    a->output_size_in_bytes = m->output_bytes;
    a->alias_size_in_bytes = m->alias_bytes;
    a->temp_size_in_bytes = m->temp_bytes - (m->output_bytes - m->alias_bytes) > 0 ? m->temp_bytes - (m->output_bytes - m->alias_bytes) : 0;
    a->host_generated_code_size_in_bytes = a->host_argument_size_in_bytes = a->host_output_size_in_bytes = 0;
    a->host_alias_size_in_bytes = a->host_temp_size_in_bytes = 0;
    a->peak_memory_in_bytes = m->peak_bytes;
    if (a->struct_size >= PJRT_STRUCT_SIZE(PJRT_Executable_GetCompiledMemoryStats_Args, peak_unpadded_heap_bytes)) {
        a->total_size_in_bytes = m->peak_bytes;
        a->total_allocation_bytes = m->peak_bytes;
        a->indefinite_allocations = 0;
        a->peak_unpadded_heap_bytes = m->unpadded_bytes;
    }
    return NULL;
}

PJRT_Error *pjx_PJRT_Executable_GetCompileOptions(PJRT_Executable_GetCompileOptions_Args *a)
{
    PJ_NEED(a, PJRT_Executable_GetCompileOptions_Args, serialized_compile_options_deleter);
    PJRT_Executable *e = a->executable;
    a->serialized_bytes = e->options ? e->options : "";
    a->serialized_bytes_size = e->options_len;
    a->serialized_compile_options = NULL;
    a->serialized_compile_options_deleter = NULL;
    return e->options ? NULL : pj_error(PJRT_Error_Code_UNIMPLEMENTED, "tpusim: compiled without options");
}

/* ---- loaded executables ---- */

PJRT_Error *pjx_PJRT_LoadedExecutable_Destroy(PJRT_LoadedExecutable_Destroy_Args *a)
{
    PJ_NEED(a, PJRT_LoadedExecutable_Destroy_Args, executable);
    PJRT_LoadedExecutable *le = a->executable;
    if (!le) return NULL;
    pj_executable_unref(le->exe);
    free(le->devices);
    free(le->logical);
    free(le);
    return NULL;
}

PJRT_Error *pjx_PJRT_LoadedExecutable_GetExecutable(PJRT_LoadedExecutable_GetExecutable_Args *a)
{
    PJ_NEED(a, PJRT_LoadedExecutable_GetExecutable_Args, executable);
    PJRT_Executable *e = a->loaded_executable->exe;
    pthread_mutex_lock(&e->client->mu);
    e->refs++;
    pthread_mutex_unlock(&e->client->mu);
    a->executable = e;
    return NULL;
}

PJRT_Error *pjx_PJRT_LoadedExecutable_AddressableDevices(PJRT_LoadedExecutable_AddressableDevices_Args *a)
{
    PJ_NEED(a, PJRT_LoadedExecutable_AddressableDevices_Args, num_addressable_devices);
    a->addressable_devices = a->executable->devices;
    a->num_addressable_devices = (size_t)a->executable->ndevices;
    return NULL;
}

PJRT_Error *pjx_PJRT_LoadedExecutable_AddressableDeviceLogicalIds(PJRT_LoadedExecutable_AddressableDeviceLogicalIds_Args *a)
{
    PJ_NEED(a, PJRT_LoadedExecutable_AddressableDeviceLogicalIds_Args, num_addressable_device_logical_ids);
    a->addressable_device_logical_ids = a->executable->logical;
    a->num_addressable_device_logical_ids = (size_t)a->executable->ndevices;
    return NULL;
}

PJRT_Error *pjx_PJRT_LoadedExecutable_Delete(PJRT_LoadedExecutable_Delete_Args *a)
{
    PJ_NEED(a, PJRT_LoadedExecutable_Delete_Args, executable);
    a->executable->deleted = 1;
    return NULL;
}

PJRT_Error *pjx_PJRT_LoadedExecutable_IsDeleted(PJRT_LoadedExecutable_IsDeleted_Args *a)
{
    PJ_NEED(a, PJRT_LoadedExecutable_IsDeleted_Args, is_deleted);
    a->is_deleted = a->executable->deleted;
    return NULL;
}

PJRT_Error *pjx_PJRT_LoadedExecutable_Fingerprint(PJRT_LoadedExecutable_Fingerprint_Args *a)
{
    PJ_NEED(a, PJRT_LoadedExecutable_Fingerprint_Args, executable_fingerprint_size);
    a->executable_fingerprint = a->executable->exe->fingerprint;
    a->executable_fingerprint_size = strlen(a->executable->exe->fingerprint);
    return NULL;
}

static void pj_no_delete(PJRT_DeviceAssignmentSerialized *da) { (void)da; }

PJRT_Error *pjx_PJRT_LoadedExecutable_GetDeviceAssignment(PJRT_LoadedExecutable_GetDeviceAssignment_Args *a)
{
    PJ_NEED(a, PJRT_LoadedExecutable_GetDeviceAssignment_Args, serialized_device_assignment_deleter);
    PJRT_Executable *e = a->executable->exe;
    a->serialized_bytes = e->da_bytes;
    a->serialized_bytes_size = e->da_len;
    a->serialized_device_assignment = NULL;   /* the bytes live as long as the executable */
    a->serialized_device_assignment_deleter = pj_no_delete;
    return NULL;
}

PJRT_Error *pjx_PJRT_LoadedExecutable_Execute(PJRT_LoadedExecutable_Execute_Args *a)
{
    PJ_NEED(a, PJRT_LoadedExecutable_Execute_Args, execute_device);
    return pj_execute(a);
}

/* ---- the shardings extension ---- */

PJRT_Error *pjx_ParameterShardings(PJRT_Shardings_PJRT_Executable_ParameterShardings_Args *a)
{
    PJ_NEED(a, PJRT_Shardings_PJRT_Executable_ParameterShardings_Args, sharding_sizes);
    PJRT_Executable *e = a->executable;
    a->num_parameters = (size_t)e->nin_shard;
    a->shardings = e->nin_shard ? (const char *const *)e->in_shard : NULL;
    a->sharding_sizes = e->nin_shard ? e->in_shard_len : NULL;
    return NULL;
}

PJRT_Error *pjx_OutputShardings(PJRT_Shardings_PJRT_Executable_OutputShardings_Args *a)
{
    PJ_NEED(a, PJRT_Shardings_PJRT_Executable_OutputShardings_Args, sharding_sizes);
    PJRT_Executable *e = a->executable;
    a->num_outputs = (size_t)e->nout_shard;
    a->shardings = e->nout_shard ? (const char *const *)e->out_shard : NULL;
    a->sharding_sizes = e->nout_shard ? e->out_shard_len : NULL;
    return NULL;
}
