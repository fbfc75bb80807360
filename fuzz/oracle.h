/* oracle.h — what "hostile input never crashes, hangs or lies" means for one parsed program, checked the same
 * way by the differential fuzz target (fuzz/fuzz_exec.c) and by the regression files (tests/t_hostile.c).
 *
 * The program goes through the verifier (ver_verify_module, uncached), then through run (random inputs, with a
 * step and time limit), the memory planner and the profiler:
 *   - a program that does not verify must be refused by every one of them (run, memory and profile fail);
 *   - a program that verifies may run or fail with an error, but never crashes (the sanitizers and the fuzzer
 *     watch for that), never hangs (the limits), and never fails as an internal error.
 * oracle_check fills `out` and returns NULL, or a sentence saying which rule was broken. */
#ifndef TPU_FUZZ_ORACLE_H
#define TPU_FUZZ_ORACLE_H

#include "hlo/hlo.h"
#include "verify/verify.h"

#include <stdio.h>
#include <string.h>

typedef struct oracle_result {
    int        verifies;          /* ver_verify_module found no error */
    int        ran;               /* run was attempted (verifies and small enough) */
    tpu_status run_st, plan_st, prof_st;
    char       verify_msg[512], run_msg[512], plan_msg[512], prof_msg[512];
} oracle_result;

typedef struct oracle_opts {
    int64_t max_steps;          /* run's step limit */
    double  max_seconds;        /* run's time limit */
    int64_t max_run_elements;   /* run only programs whose arrays all hold at most this many elements (0: any) */
} oracle_opts;

static void oracle_copy(char *dst, size_t n, const char *src)
{
    snprintf(dst, n, "%s", src ? src : "");
}

/* The largest array leaf of any instruction, in elements. */
static int64_t oracle_max_elems(const hlo_shape *s)
{
    if (hlo_shape_is_tuple(s)) {
        int64_t mx = 0;
        for (int i = 0; i < s->ntuple; i++) {
            int64_t e = oracle_max_elems(&s->tuple[i]);
            if (e > mx) mx = e;
        }
        return mx;
    }
    return hlo_shape_is_array(s) ? hlo_shape_count(s) : 0;
}

static int64_t oracle_module_max_elems(const hlo_module *m)
{
    int64_t mx = 0;
    for (int c = 0; c < m->ncomps; c++)
        for (int i = 0; i < m->comps[c]->ninstrs; i++) {
            int64_t e = oracle_max_elems(&m->comps[c]->instrs[i]->shape);
            if (e > mx) mx = e;
        }
    return mx;
}

static const char *oracle_check(tpu_ctx *ctx, const hlo_module *m, const oracle_opts *o, oracle_result *out)
{
    memset(out, 0, sizeof *out);
    ver_report *r = ver_report_new(m->name, NULL);
    if (!r) return NULL;   /* out of memory: nothing to judge */
    out->verifies = ver_verify_module(ctx, m, r) == 0 && !r->oom;
    for (int i = 0; i < r->nproblems; i++)
        if (r->problems[i].sev == VER_ERROR) {
            oracle_copy(out->verify_msg, sizeof out->verify_msg, r->problems[i].msg);
            break;
        }
    tpu_report_free(r);

    /* run: random inputs, limited */
    out->run_st = TPU_ERR_SHAPE;
    if (!out->verifies || !o->max_run_elements || oracle_module_max_elems(m) <= o->max_run_elements) {
        out->ran = out->verifies;
        tpu_tensor **in = NULL, **res = NULL;
        int nin = 0, nres = 0;
        tpu_status st = tpu_random_inputs(ctx, m, 7, &in, &nin);
        if (!st) {
            tpu_run_opts ro = tpu_run_opts_default();
            ro.threads = 1;
            ro.max_steps = o->max_steps;
            ro.max_seconds = o->max_seconds;
            st = tpu_run(ctx, m, &ro, in, nin, &res, &nres);
        }
        out->run_st = st;
        oracle_copy(out->run_msg, sizeof out->run_msg, st ? tpu_errmsg(ctx) : "");
        tpu_tensors_free(res, nres);
        tpu_tensors_free(in, nin);
    }

    /* memory and profile: shapes only */
    tpu_memory_opts mo = {0};
    mo.chip = "v5e";
    tpu_memory *mem = NULL;
    out->plan_st = tpu_memory_plan(ctx, m, &mo, &mem);
    oracle_copy(out->plan_msg, sizeof out->plan_msg, out->plan_st ? tpu_errmsg(ctx) : "");
    if (!out->plan_st) {
        volatile size_t n = strlen(tpu_memory_report(mem));
        (void)n;
    }
    tpu_memory_free(mem);
    tpu_profile_opts po;
    memset(&po, 0, sizeof po);
    po.chip = "v4-8";
    tpu_profile *p = NULL;
    out->prof_st = tpu_profile_program(ctx, m, &po, &p);
    oracle_copy(out->prof_msg, sizeof out->prof_msg, out->prof_st ? tpu_errmsg(ctx) : "");
    if (!out->prof_st) {
        volatile size_t n = strlen(tpu_profile_summary(p, 5)) + strlen(tpu_profile_json(p));
        (void)n;
    }
    tpu_profile_free(p);

    if (!out->verifies) {
        if (out->run_st == TPU_OK) return "a program that does not verify ran";
        if (out->plan_st == TPU_OK) return "a program that does not verify was planned (memory)";
        if (out->prof_st == TPU_OK) return "a program that does not verify was profiled";
        return NULL;
    }
    if (out->run_st == TPU_ERR_INTERNAL) return "a verified program failed to run with an internal error";
    if (out->plan_st == TPU_ERR_INTERNAL) return "a verified program failed to plan with an internal error";
    if (out->prof_st == TPU_ERR_INTERNAL) return "a verified program failed to profile with an internal error";
    return NULL;
}

#endif
