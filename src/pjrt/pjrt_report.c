/* pjrt_report.c — what a TPU user sees: one "Found TPU system" line when the client starts, and with
 * TPUSIM_PROFILE_DIR=DIR each executable's predicted profile and memory plan as it is compiled, and at exit
 * a summary (executions, predicted device time, MXU utilization, the advisor's pointers) and a trace of all
 * executions on the predicted device timeline. TPUSIM_QUIET=1 silences the line and the summary. */
#include "pjrt_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int pj_quiet(void)
{
    const char *q = getenv("TPUSIM_QUIET");
    return q && *q && strcmp(q, "0");
}

/* Once per client, at first use (a compile or a buffer): frameworks create every registered backend at
 * start-up, used or not. */
void pj_report_found_system(PJRT_Client *c)
{
    pthread_mutex_lock(&c->mu);
    int done = c->announced;
    c->announced = 1;
    pthread_mutex_unlock(&c->mu);
    if (done || pj_quiet()) return;
    tpu_device_info d0;
    if (tpu_chip_device(c->ctx, c->chip, 0, &d0)) return;
    fprintf(stderr,
            "tpusim: Found TPU system: %s (simulated)%s, %d %s device%s (%d TensorCore%s on %d chip%s, %d host%s), "
            "%.2f GiB HBM per device, %s numerics\n",
            c->slice, pj_remote_where(c), c->ndev, d0.kind, c->ndev == 1 ? "" : "s", tpu_chip_num_cores(c->chip),
            tpu_chip_num_cores(c->chip) == 1 ? "" : "s", tpu_chip_num_chips(c->chip),
            tpu_chip_num_chips(c->chip) == 1 ? "" : "s", tpu_chip_num_hosts(c->chip),
            tpu_chip_num_hosts(c->chip) == 1 ? "" : "s", (double)d0.hbm_bytes / (1024.0 * 1024 * 1024),
            c->numerics == TPU_NUMERICS_TPU ? "TPU" : "exact f32");
}

/* "jit_step" -> "jit_step" with characters unsafe in file names replaced. */
static void pj_file_name(const char *name, int n, char *buf, size_t size)
{
    snprintf(buf, size, "%03d-%s", n, name);
    for (char *p = buf; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '_' || *p == '.'))
            *p = '_';
}

static void pj_write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

void pj_report_executable(PJRT_Client *c, PJRT_Executable *e)
{
    if (!c->profile_dir) return;
    if (tpu_mkdirs(NULL, c->profile_dir, 0777)) {
        fprintf(stderr, "tpusim: TPUSIM_PROFILE_DIR=%s: %s\n", c->profile_dir, strerror(errno));
        return;
    }
    pthread_mutex_lock(&c->mu);
    int idx = c->nnotes;
    if (c->nnotes == c->capnotes) {
        int cap = c->capnotes ? c->capnotes * 2 : 16;
        pj_exe_note *nn = realloc(c->notes, (size_t)cap * sizeof *nn);
        if (!nn) idx = -1;
        else c->notes = nn, c->capnotes = cap;
    }
    if (idx >= 0) {
        memset(&c->notes[idx], 0, sizeof c->notes[idx]);
        snprintf(c->notes[idx].name, sizeof c->notes[idx].name, "%s", e->name);
        c->nnotes++;
    }
    pthread_mutex_unlock(&c->mu);
    if (idx < 0) return;
    e->note = idx;
    char base[160], path[4352];
    pj_file_name(e->name, idx, base, sizeof base);
    tpu_ctx *ctx = tpu_ctx_new();
    if (!ctx) return;
    snprintf(path, sizeof path, "%s/%s.hlo", c->profile_dir, base);
    pj_write_text(path, e->optimized_hlo);
    tpu_profile_opts po = {.chip = c->slice, .steps = 1, .steps_per_exec = 1};
    tpu_profile *p = NULL;
    /* the note's own copy of the program, so its profile outlives the executable (for TensorBoard at exit) */
    tpu_module *own = NULL;
    const tpu_module *m = e->m;
    if (e->optimized_hlo && tpu_module_parse(ctx, e->optimized_hlo, strlen(e->optimized_hlo), e->name, &own) == TPU_OK)
        m = own;
    if (tpu_profile_program(ctx, m, &po, &p) == TPU_OK) {
        snprintf(path, sizeof path, "%s/%s.profile.html", c->profile_dir, base);
        tpu_profile_write_html(ctx, p, path);
        snprintf(path, sizeof path, "%s/%s.trace.json", c->profile_dir, base);
        tpu_profile_write_trace(ctx, p, path);
        snprintf(path, sizeof path, "%s/%s.profile.txt", c->profile_dir, base);
        const char *s = tpu_profile_summary(p, 15);
        const char *adv = tpu_profile_advice(p);
        FILE *f = fopen(path, "w");
        if (f) {
            fprintf(f, "%s\n%s", s ? s : "", adv ? adv : "");
            fclose(f);
        }
        pthread_mutex_lock(&c->mu);
        c->notes[idx].step_s = tpu_profile_step_time(p);
        c->notes[idx].mxu_util = tpu_profile_mxu_utilization(p);
        c->notes[idx].advice = adv ? strdup(adv) : NULL;   /* the advisor's pointers, for the summary */
        pthread_mutex_unlock(&c->mu);
    } else {
        fprintf(stderr, "tpusim: profiling %s: %s\n", e->name, tpu_errmsg(ctx));
    }
    tpu_memory_opts mo = {.chip = c->slice, .top = 10};
    tpu_memory *mem = NULL;
    if (tpu_memory_plan(ctx, e->m, &mo, &mem) == TPU_OK) {
        snprintf(path, sizeof path, "%s/%s.memory.html", c->profile_dir, base);
        tpu_memory_write_html(ctx, mem, path);
    }
    tpu_memory_free(mem);
    if (p && own) {
        pthread_mutex_lock(&c->mu);
        c->notes[idx].ctx = ctx, c->notes[idx].m = own, c->notes[idx].p = p;
        pthread_mutex_unlock(&c->mu);
        return;
    }
    tpu_profile_free(p);
    tpu_module_free(own);
    tpu_ctx_free(ctx);
}

/* Every program that ran, each run on the predicted device timeline, as TensorBoard's profile plugin reads it:
 * DIR/plugins/profile/<time>/<host>.xplane.pb (tensorboard --logdir DIR). */
static void pj_write_tensorboard(PJRT_Client *c, char *written, size_t size)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_xspace *xs = NULL;
    int added = 0;
    written[0] = 0;
    if (!ctx || tpu_xspace_new(ctx, &xs)) {
        tpu_ctx_free(ctx);
        return;
    }
    for (int i = 0; i < c->nnotes; i++)
        if (c->notes[i].p && c->notes[i].runs > 0 && tpu_xspace_add(ctx, xs, c->notes[i].p, c->notes[i].runs) == TPU_OK) added++;
    char *path = NULL;
    if (added && tpu_xspace_write_tensorboard(ctx, xs, c->profile_dir, NULL, &path) == TPU_OK) snprintf(written, size, "%s", path);
    else if (added) fprintf(stderr, "tpusim: TensorBoard profile: %s\n", tpu_errmsg(ctx));
    tpu_free(path);
    tpu_xspace_free(xs);
    tpu_ctx_free(ctx);
}

/* One execution: counted toward its program's runs and the predicted device time. */
void pj_report_execution(PJRT_Client *c, PJRT_Executable *e)
{
    pthread_mutex_lock(&c->mu);
    c->executions++;
    if (e->note >= 0 && e->note < c->nnotes) {
        pj_exe_note *n = &c->notes[e->note];
        n->runs++;
        c->predicted_s += n->step_s;
        c->mxu_weighted_s += n->step_s * n->mxu_util;
    }
    pthread_mutex_unlock(&c->mu);
}

static void pj_fmt_time(char *buf, size_t n, double s)
{
    if (s >= 1) snprintf(buf, n, "%.3f s", s);
    else if (s >= 1e-3) snprintf(buf, n, "%.3f ms", s * 1e3);
    else snprintf(buf, n, "%.1f us", s * 1e6);
}

/* The trace of all executions, in the order of the programs' first use: each program's runs laid end to end
 * on the predicted device timeline (the simulator does not keep the interleaving, so runs of one program
 * are grouped; the totals are exact). */
static void pj_write_trace(PJRT_Client *c, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "{\"displayTimeUnit\": \"ns\", \"traceEvents\": [\n");
    fprintf(f, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 1, \"args\": {\"name\": \"tpusim %s (predicted)\"}}", c->slice);
    double t = 0;
    for (int i = 0; i < c->nnotes; i++) {
        const pj_exe_note *n = &c->notes[i];
        if (n->runs <= 0) continue;
        fprintf(f, ",\n{\"name\": \"%s\", \"ph\": \"X\", \"pid\": 1, \"tid\": 1, \"ts\": %.3f, \"dur\": %.3f, "
                   "\"args\": {\"runs\": %lld, \"step_s\": %.9g, \"mxu_utilization\": %.4f}}",
                n->name, t * 1e6, n->step_s * (double)n->runs * 1e6, (long long)n->runs, n->step_s, n->mxu_util);
        t += n->step_s * (double)n->runs;
    }
    fprintf(f, "\n]}\n");
    fclose(f);
}

/* Clients still alive when the process exits (frameworks rarely destroy theirs) report from an exit
 * handler: the one process-wide list the plugin keeps. */
static pthread_mutex_t pj_live_mu = PTHREAD_MUTEX_INITIALIZER;
static PJRT_Client *pj_live[16];
static int pj_nlive, pj_atexit_set;

static void pj_atexit(void)
{
    pthread_mutex_lock(&pj_live_mu);
    for (int i = 0; i < pj_nlive; i++) pj_report_summary(pj_live[i]);
    pj_nlive = 0;
    pthread_mutex_unlock(&pj_live_mu);
}

void pj_report_track(PJRT_Client *c, int alive)
{
    if (!c->profile_dir) return;
    pthread_mutex_lock(&pj_live_mu);
    if (alive) {
        if (!pj_atexit_set) pj_atexit_set = atexit(pj_atexit) == 0;
        if (pj_nlive < (int)(sizeof pj_live / sizeof pj_live[0])) pj_live[pj_nlive++] = c;
    } else {
        for (int i = 0; i < pj_nlive; i++)
            if (pj_live[i] == c) pj_live[i] = pj_live[--pj_nlive];
    }
    pthread_mutex_unlock(&pj_live_mu);
}

void pj_report_summary(PJRT_Client *c)
{
    pthread_mutex_lock(&c->mu);
    int done = c->summarized;
    c->summarized = 1;
    pthread_mutex_unlock(&c->mu);
    if (done || !c->profile_dir || c->nnotes == 0) return;
    char path[4352], tot[32];
    pj_fmt_time(tot, sizeof tot, c->predicted_s);
    snprintf(path, sizeof path, "%s/trace.json", c->profile_dir);
    pj_write_trace(c, path);
    char tb[4400];
    pj_write_tensorboard(c, tb, sizeof tb);
    /* the most expensive program's advice leads */
    int top = -1;
    double top_s = -1;
    for (int i = 0; i < c->nnotes; i++)
        if (c->notes[i].step_s * (double)c->notes[i].runs > top_s) top = i, top_s = c->notes[i].step_s * (double)c->notes[i].runs;
    double mxu = c->predicted_s > 0 ? c->mxu_weighted_s / c->predicted_s : 0;
    snprintf(path, sizeof path, "%s/summary.txt", c->profile_dir);
    FILE *f = fopen(path, "w");
    FILE *outs[2] = {f, pj_quiet() ? NULL : stderr};
    for (int k = 0; k < 2; k++) {
        FILE *o = outs[k];
        if (!o) continue;
        fprintf(o, "tpusim TPU summary (%s, simulated): %lld executions of %d programs, predicted device time %s, "
                   "MXU utilization %.2g%%\n", c->slice, (long long)c->executions, c->nnotes, tot, 100 * mxu);
        for (int i = 0; i < c->nnotes && k == 0; i++) {
            char st[32];
            pj_fmt_time(st, sizeof st, c->notes[i].step_s);
            fprintf(o, "  %-40s %6lld runs x %s\n", c->notes[i].name, (long long)c->notes[i].runs, st);
        }
        if (top >= 0 && c->notes[top].advice)
            fprintf(o, "Advice for %s (most device time):\n%s", c->notes[top].name, c->notes[top].advice);
        fprintf(o, "Profiles, memory plans and the trace: %s\n", c->profile_dir);
        if (tb[0]) fprintf(o, "TensorBoard profile: %s (tensorboard --logdir %s)\n", tb, c->profile_dir);
    }
    if (f) fclose(f);
}
