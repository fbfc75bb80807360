/* trn_loop.c — the trainer (docs/step_dir.md section 3): per step every replica runs grad.hlo on its shard
 * of the global batch on the replicated runtime, a generated all-reduce program averages the gradients and
 * new statistics (f32 sum in the runtime's ring order, times 1/R; the runtime times it with the ICI model),
 * and apply.hlo runs once on the averaged gradients: its result is every replica's state, so one copy is
 * kept and handed to every device (the runtime only reads inputs). One device runs step.hlo. The state
 * tensors move from a program's outputs to the next program's inputs: nothing is copied between steps.
 * Also evaluation, checkpoints (atomic), --resume, metrics.jsonl and the progress line. */
#include "train/train.h"
#include "chip/chip.h"
#include "verify/verify.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "train/trn_trainer.h"

tpu_train_opts tpu_train_opts_default(void)
{
    tpu_train_opts o;
    memset(&o, 0, sizeof o);
    o.slice = "v3-8";
    o.steps_per_exec = 1;
    o.seed = -1;
    o.numerics = TPU_NUMERICS_TPU;
    return o;
}

/* ---- small file helpers ---- */

static char *trn_path(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = ut_malloc(a + b + 2);
    if (p) snprintf(p, a + b + 2, "%s%s%s", dir, a && dir[a - 1] == '/' ? "" : "/", name);
    return p;
}

static tpu_status trn_fsync_path(tpu_ctx *ctx, const char *path, int dir)
{
    int fd = open(path, dir ? O_RDONLY | O_DIRECTORY : O_RDONLY);
    if (fd < 0) return ut_err(ctx, TPU_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    int r = fsync(fd);
    close(fd);
    if (r && !dir) return ut_err(ctx, TPU_ERR_IO, "%s: fsync: %s", path, strerror(errno));
    return TPU_OK;
}

static char *trn_dirname(const char *path)
{
    const char *s = strrchr(path, '/');
    if (!s) return ut_strdup(".");
    if (s == path) return ut_strdup("/");
    return ut_strndup(path, (size_t)(s - path));
}

static tpu_status trn_write_tmp(tpu_ctx *ctx, const char *tmp, const void *data, size_t len)
{
    FILE *f = fopen(tmp, "wb");
    if (!f) return ut_err(ctx, TPU_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    int ok = fwrite(data, 1, len, f) == len;
    ok &= fflush(f) == 0;
    ok &= fsync(fileno(f)) == 0;
    ok &= fclose(f) == 0;
    if (!ok) return ut_err(ctx, TPU_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
    return TPU_OK;
}

static tpu_status trn_rename(tpu_ctx *ctx, const char *from, const char *to)
{
    if (rename(from, to)) return ut_err(ctx, TPU_ERR_IO, "rename %s -> %s: %s", from, to, strerror(errno));
    char *d = trn_dirname(to);
    if (d) trn_fsync_path(ctx, d, 1);
    ut_free(d);
    return TPU_OK;
}

tpu_status trn_write_atomic(tpu_ctx *ctx, const char *path, const void *data, size_t len)
{
    return ut_write_file(ctx, path, data, len, 1);
}

static tpu_status trn_file_crc(tpu_ctx *ctx, const char *path, uint32_t *crc)
{
    char *data = NULL;
    size_t len = 0;
    tpu_status st = ut_read_file(ctx, path, &data, &len);
    if (st) return st;
    uLong c = crc32(0L, Z_NULL, 0);
    size_t off = 0;
    while (off < len) {   /* crc32 takes a uInt length */
        size_t chunk = len - off > (1u << 30) ? (1u << 30) : len - off;
        c = crc32(c, (const Bytef *)data + off, (uInt)chunk);
        off += chunk;
    }
    ut_free(data);
    *crc = (uint32_t)c;
    return TPU_OK;
}

static void trn_json_num(ut_buf *b, double v)
{
    if (isfinite(v)) ut_buf_printf(b, "%.9g", v);
    else ut_buf_puts(b, "null");
}

/* ---- log ---- */

static void trn_log(tpu_trainer *tr, const char *fmt, ...) UT_PRINTF(2, 3);
static void trn_log(tpu_trainer *tr, const char *fmt, ...)
{
    if (!tr->o.log) return;
    if (tr->bar_open) {   /* finish the progress bar's line first */
        fputc('\n', tr->o.log);
        tr->bar_open = 0;
    }
    va_list ap;
    va_start(ap, fmt);
    vfprintf(tr->o.log, fmt, ap);
    va_end(ap);
    fflush(tr->o.log);
}

/* ---- the gradient all-reduce: a program the runtime runs on every replica ---- */

static tpu_status trn_mean_module(tpu_ctx *ctx, const trn_sig *s, int R, tpu_module **out)
{
    *out = NULL;
    int n = s->nparam + s->nstat;
    ut_buf b;
    ut_buf_init(&b);
    char sh[160], shf[160];
    ut_buf_printf(&b, "HloModule tpusim_grad_mean\n\nsum_f32 {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
                      "  ROOT c = f32[] add(a, b)\n}\n\nENTRY grad_mean {\n");
    int nred = 0;
    for (int i = 0; i < n; i++) {
        const trn_entry *e = &s->state[i < s->nparam ? s->param_idx[i] : s->stat_idx[i - s->nparam]];
        trn_shape_str(e->dtype, e->rank, e->dims, sh, sizeof sh);
        trn_shape_str(TPU_F32, e->rank, e->dims, shf, sizeof shf);
        ut_buf_printf(&b, "  p%d = %s parameter(%d)\n", i, sh, i);
        if (tpu_dtype_kind(e->dtype) != 'f') continue;   /* integer statistics pass through (replica 0's) */
        if (e->dtype != TPU_F32) ut_buf_printf(&b, "  x%d = %s convert(p%d)\n", i, shf, i);
        else ut_buf_printf(&b, "  x%d = %s copy(p%d)\n", i, shf, i);
        nred++;
    }
    if (nred) {
        ut_buf_puts(&b, "  ar = ");
        if (nred > 1) ut_buf_putc(&b, '(');
        int k = 0;
        for (int i = 0; i < n; i++) {
            const trn_entry *e = &s->state[i < s->nparam ? s->param_idx[i] : s->stat_idx[i - s->nparam]];
            if (tpu_dtype_kind(e->dtype) != 'f') continue;
            trn_shape_str(TPU_F32, e->rank, e->dims, shf, sizeof shf);
            ut_buf_printf(&b, "%s%s", k++ ? ", " : "", shf);
        }
        ut_buf_printf(&b, "%s all-reduce(", nred > 1 ? ")" : "");
        k = 0;
        for (int i = 0; i < n; i++) {
            const trn_entry *e = &s->state[i < s->nparam ? s->param_idx[i] : s->stat_idx[i - s->nparam]];
            if (tpu_dtype_kind(e->dtype) == 'f') ut_buf_printf(&b, "%sx%d", k++ ? ", " : "", i);
        }
        ut_buf_printf(&b, "), replica_groups={}, to_apply=sum_f32\n  inv = f32[] constant(%.9g)\n", (double)(float)(1.0 / R));
        k = 0;
        for (int i = 0; i < n; i++) {
            const trn_entry *e = &s->state[i < s->nparam ? s->param_idx[i] : s->stat_idx[i - s->nparam]];
            if (tpu_dtype_kind(e->dtype) != 'f') continue;
            trn_shape_str(e->dtype, e->rank, e->dims, sh, sizeof sh);
            trn_shape_str(TPU_F32, e->rank, e->dims, shf, sizeof shf);
            if (nred > 1) ut_buf_printf(&b, "  g%d = %s get-tuple-element(ar), index=%d\n", i, shf, k);
            else ut_buf_printf(&b, "  g%d = %s copy(ar)\n", i, shf);
            k++;
            ut_buf_printf(&b, "  v%d = %s broadcast(inv), dimensions={}\n  m%d = %s multiply(g%d, v%d)\n", i, shf, i, shf, i, i);
            if (e->dtype != TPU_F32) ut_buf_printf(&b, "  y%d = %s convert(m%d)\n", i, sh, i);
            else ut_buf_printf(&b, "  y%d = %s copy(m%d)\n", i, sh, i);
        }
    }
    ut_buf_puts(&b, "  ROOT out = (");
    for (int i = 0; i < n; i++) {
        const trn_entry *e = &s->state[i < s->nparam ? s->param_idx[i] : s->stat_idx[i - s->nparam]];
        trn_shape_str(e->dtype, e->rank, e->dims, sh, sizeof sh);
        ut_buf_printf(&b, "%s%s", i ? ", " : "", sh);
    }
    ut_buf_puts(&b, ") tuple(");
    for (int i = 0; i < n; i++) {
        const trn_entry *e = &s->state[i < s->nparam ? s->param_idx[i] : s->stat_idx[i - s->nparam]];
        ut_buf_printf(&b, "%s%c%d", i ? ", " : "", tpu_dtype_kind(e->dtype) == 'f' ? 'y' : 'p', i);
    }
    ut_buf_puts(&b, ")\n}\n");
    if (b.failed) {
        ut_buf_free(&b);
        return ut_nomem(ctx);
    }
    tpu_status st = tpu_module_parse(ctx, b.data, b.len, "<gradient all-reduce>", out);
    if (st) ut_err_prefix(ctx, "internal: the generated all-reduce program");
    ut_buf_free(&b);
    return st;
}

/* ---- setup ---- */

void tpu_trainer_free(tpu_trainer *tr)
{
    if (!tr) return;
    if (tr->metrics) fclose(tr->metrics);
    trn_pipe_free(tr->pipe);
    tpu_system_free(tr->sys);
    for (int i = 0; i < TRN_NPROG; i++) tpu_module_free(tr->prog[i]);
    tpu_module_free(tr->mean);
    if (tr->state) tpu_tensors_free(tr->state, tr->sig ? tr->sig->nstate : 0);
    if (tr->hyp) tpu_tensors_free(tr->hyp, tr->sig ? tr->sig->nhyper : 0);
    if (tr->in) {
        for (int d = 0; d < tr->R; d++) ut_free(tr->in[d]);
        ut_free(tr->in);
    }
    ut_free(tr->out);
    trn_data_free(tr->train);
    trn_data_free(tr->eval);
    ut_free(tr->msum);
    ut_free(tr->mlast);
    ut_free(tr->wsum);
    ut_free(tr->evals);
    ut_free(tr->model_dir);
    ut_free(tr->slice);
    ut_free(tr->f_metrics);
    tpu_profile_free(tr->prof);
    tpu_memory_free(tr->mem);
    ut_free(tr->advice);
    ut_free(tr->f_profile);
    ut_free(tr->f_trace);
    ut_free(tr->f_memory);
    trn_sig_free(tr->sig);
    ut_free(tr);
}

static tpu_status trn_load_programs(tpu_ctx *ctx, tpu_trainer *tr)
{
    const trn_sig *s = tr->sig;
    for (int k = 0; k < TRN_NPROG; k++) {
        int need = k == TRN_STEP || (k == TRN_EVAL && tr->eval) || ((k == TRN_GRAD || k == TRN_APPLY) && tr->R > 1);
        if (!need) continue;
        if (!s->prog[k]) {
            return ut_err(ctx, TPU_ERR_INVALID, "%s: key 'programs.%s': training on %d replicas needs grad.hlo and apply.hlo "
                          "(docs/step_dir.md section 2)", s->path, trn_prog_kind[k], tr->R);
        }
        tpu_status st = tpu_module_load(ctx, s->prog[k], &tr->prog[k]);
        if (st) {
            ut_err_prefix(ctx, "%s: programs.%s", s->path, trn_prog_kind[k]);
            return st;
        }
        tpu_warnings_clear(ctx);
        st = ver_require(ctx, tr->prog[k]);   /* docs/step_dir.md section 10: a program must verify */
        if (st) {
            ut_err_prefix(ctx, "%s: programs.%s", s->path, trn_prog_kind[k]);
            return st;
        }
        st = trn_sig_check_program(ctx, s, k, tr->prog[k]);
        if (st) return st;
    }
    if (tr->R > 1 && s->nparam + s->nstat > 0) return trn_mean_module(ctx, s, tr->R, &tr->mean);
    return TPU_OK;
}

/* Reads model_dir/progress.json (rolling a checkpoint forward whose last rename did not happen). */
static tpu_status trn_read_progress(tpu_ctx *ctx, tpu_trainer *tr, int64_t *step, uint64_t *seed, int *replicas)
{
    char *pj = trn_path(tr->model_dir, "progress.json"), *sn = trn_path(tr->model_dir, "state.npz");
    char *pt = trn_path(tr->model_dir, "progress.json.tmp");
    tpu_status st = pj && sn && pt ? TPU_OK : ut_nomem(ctx);
    for (int attempt = 0; !st && attempt < 2; attempt++) {
        char *text = NULL;
        size_t len = 0;
        const char *which = attempt ? pt : pj;
        st = ut_read_text(ctx, which, &text, &len);
        if (st) {
            if (!attempt) ut_err_prefix(ctx, "--resume: no checkpoint in %s", tr->model_dir);
            break;
        }
        cJSON *root = cJSON_ParseWithLength(text, len);
        ut_free(text);
        const cJSON *f = root ? cJSON_GetObjectItemCaseSensitive(root, "format") : NULL;
        const cJSON *n = root ? cJSON_GetObjectItemCaseSensitive(root, "name") : NULL;
        const cJSON *t = root ? cJSON_GetObjectItemCaseSensitive(root, "step") : NULL;
        const cJSON *sd = root ? cJSON_GetObjectItemCaseSensitive(root, "seed") : NULL;
        const cJSON *r = root ? cJSON_GetObjectItemCaseSensitive(root, "replicas") : NULL;
        const cJSON *c = root ? cJSON_GetObjectItemCaseSensitive(root, "state_crc32") : NULL;
        if (!root || !cJSON_IsString(f) || strcmp(f->valuestring, "tpusim.train_progress") || !cJSON_IsNumber(t) ||
            t->valuedouble < 0) {
            st = ut_err(ctx, TPU_ERR_INVALID, "%s: not a tpusim.train_progress file with a step", which);
        } else if (cJSON_IsString(n) && strcmp(n->valuestring, tr->sig->name)) {
            st = ut_err(ctx, TPU_ERR_INVALID, "%s: a checkpoint of '%s', not of '%s'", which, n->valuestring, tr->sig->name);
        } else {
            *step = (int64_t)t->valuedouble;
            *seed = cJSON_IsNumber(sd) ? (uint64_t)sd->valuedouble : tr->sig->seed;
            *replicas = cJSON_IsNumber(r) ? (int)r->valuedouble : 0;
            uint32_t crc = 0;
            if (cJSON_IsNumber(c) && !(st = trn_file_crc(ctx, sn, &crc)) && (double)crc != c->valuedouble) {
                /* state.npz is newer than progress.json: the crash came between the two renames */
                if (!attempt && access(pt, F_OK) == 0) {
                    cJSON_Delete(root);
                    continue;
                }
                st = ut_err(ctx, TPU_ERR_INVALID, "%s: state.npz does not belong to this progress file (a torn checkpoint)", which);
            }
            if (!st && attempt) st = trn_rename(ctx, pt, pj);   /* finish the interrupted checkpoint */
        }
        cJSON_Delete(root);
        break;
    }
    ut_free(pj);
    ut_free(sn);
    ut_free(pt);
    return st;
}

/* Keeps the metrics.jsonl records of steps <= step (a resumed run logs the rest again). */
static tpu_status trn_trim_metrics(tpu_ctx *ctx, const char *path, int64_t step)
{
    char *text = NULL;
    size_t len = 0;
    if (access(path, F_OK)) return TPU_OK;
    tpu_status st = ut_read_text(ctx, path, &text, &len);
    if (st) return st;
    ut_buf b;
    ut_buf_init(&b);
    char *p = text;
    while (p < text + len) {
        char *e = memchr(p, '\n', (size_t)(text + len - p));
        if (!e) break;   /* a torn last line */
        cJSON *o = cJSON_ParseWithLength(p, (size_t)(e - p));
        const cJSON *s = o ? cJSON_GetObjectItemCaseSensitive(o, "step") : NULL;
        if (cJSON_IsNumber(s) && s->valuedouble <= (double)step) ut_buf_put(&b, p, (size_t)(e - p + 1));
        cJSON_Delete(o);
        p = e + 1;
    }
    ut_free(text);
    if (b.failed) st = ut_nomem(ctx);
    else st = trn_write_atomic(ctx, path, b.data ? b.data : "", b.len);
    ut_buf_free(&b);
    return st;
}

static tpu_status trn_open_data(tpu_ctx *ctx, tpu_trainer *tr)
{
    const trn_sig *s = tr->sig;
    const char *tp = tr->o.data ? tr->o.data : tr->o.cached ? s->cached_train : s->data_train;
    if (!tp)
        return ut_err(ctx, TPU_ERR_INVALID, "no training data: give --data, or name it in %s's data.%strain", s->path,
                      tr->o.cached ? "cached." : "");
    tpu_status st = trn_data_open(ctx, tp, &tr->train);
    if (!st) st = trn_data_check(ctx, tr->train, s->batch, s->nbatch, s->B * tr->R, "batch input");
    if (st) return st;
    const char *ep = tr->o.eval_data ? tr->o.eval_data : tr->o.cached ? s->cached_eval : s->data_eval;
    if (ep && strcmp(ep, "none") && s->has_eval) {
        st = trn_data_open(ctx, ep, &tr->eval);
        if (!st) st = trn_data_check(ctx, tr->eval, s->ebatch, s->nebatch, 0, "eval input");
    }
    return st;
}

/* Several processes: this process's block of replicas on its part of the slice; every process must be
 * training the same thing (same programs, state, data, options); process 0 alone writes model_dir. */
static tpu_status trn_dist_setup(tpu_ctx *ctx, tpu_trainer *tr)
{
    int np = tpu_dist_size(tr->dist), rank = tpu_dist_rank(tr->dist);
    if (tr->R != tr->devices)
        return ut_err(ctx, TPU_ERR_INVALID, "a slice spread over %d processes trains on all its %d devices (--cores 1 "
                      "runs in one process)", np, tr->devices);
    tpu_status st = tpu_system_new_dist(ctx, tr->slice, tr->dist, NULL, &tr->sys);
    if (st) return st;
    int per = tr->R / np;
    tr->lo = rank * per;
    tr->hi = tr->lo + per;
    if (!tpu_system_is_local(tr->sys, tr->lo) || !tpu_system_is_local(tr->sys, tr->hi - 1))
        return ut_err(ctx, TPU_ERR_INTERNAL, "process %d does not run replicas %d..%d", rank, tr->lo, tr->hi - 1);
    const trn_sig *s = tr->sig;
    uint64_t h = 1469598103934665603ULL;
    for (int i = 0; i < TRN_NPROG; i++) h = (h ^ tpu_module_fingerprint(tr->prog[i])) * 1099511628211ULL;
    for (int i = 0; i < s->nstate; i++) {
        const unsigned char *b = tpu_tensor_cdata(tr->state[i]);
        for (size_t k = 0, n = tpu_tensor_nbytes(tr->state[i]); k < n; k++) h = (h ^ b[k]) * 1099511628211ULL;
    }
    char desc[256];
    snprintf(desc, sizeof desc, "%s: programs and state %016llx, step %lld of %lld, seed %llu, %s numerics, %d steps per "
             "execution, %lld training examples", s->name, (unsigned long long)h, (long long)tr->step, (long long)tr->o.steps,
             (unsigned long long)tr->seed, tr->o.numerics == TPU_NUMERICS_EXACT ? "exact" : "TPU", tr->o.steps_per_exec,
             (long long)tr->train->n);
    st = tpu_dist_agree(ctx, tr->dist, "training run", desc);
    if (!st && rank != 0) {   /* process 0 writes the model directory */
        ut_free(tr->model_dir);
        tr->model_dir = NULL;
    }
    return st;
}

/* vals[d * k + j] are filled for this process's replicas d; afterwards every replica's (the processes' blocks
 * in rank order are the replicas in order). */
static tpu_status trn_gather(tpu_ctx *ctx, tpu_trainer *tr, double *vals, int k)
{
    if (!tr->dist || k == 0) return TPU_OK;
    int np = tpu_dist_size(tr->dist);
    size_t blk = (size_t)(tr->hi - tr->lo) * (size_t)k;
    double *all = ut_malloc(blk * (size_t)np * sizeof *all);
    if (!all) return ut_nomem(ctx);
    tpu_status st = tpu_dist_allgather(ctx, tr->dist, vals + (size_t)tr->lo * k, blk * sizeof *all, all);
    if (!st) memcpy(vals, all, blk * (size_t)np * sizeof *all);
    ut_free(all);
    return st;
}

tpu_status tpu_trainer_new(tpu_ctx *ctx, const char *step_dir, const tpu_train_opts *opts, tpu_trainer **out)
{
    *out = NULL;
    tpu_trainer *tr = ut_calloc(1, sizeof *tr);
    if (!tr) return ut_nomem(ctx);
    tr->o = opts ? *opts : tpu_train_opts_default();
    if (!tr->o.slice) tr->o.slice = "v3-8";
    tr->dist = tpu_dist_size(tr->o.dist) > 1 ? tr->o.dist : NULL;
    if (tr->o.steps_per_exec < 1) tr->o.steps_per_exec = 1;
    if (tr->o.prefetch < 1) tr->o.prefetch = 8;
    tr->o.model_dir = NULL;
    tr->o.slice = NULL;
    tr->slice = ut_strdup(opts && opts->slice ? opts->slice : "v3-8");
    if (!tr->slice || (opts && opts->model_dir && !(tr->model_dir = ut_strdup(opts->model_dir)))) {
        tpu_trainer_free(tr);
        return ut_nomem(ctx);
    }
    tpu_status st = trn_sig_load(ctx, step_dir, &tr->sig);
    const trn_sig *s = tr->sig;
    /* replicas: the slice's devices, or one (a board trains on 1 or all of its cores) */
    chp_slice sl;
    if (!st) st = chp_slice_parse(ctx, tr->slice, &sl);
    if (!st) {
        tr->devices = sl.devices;
        if (tr->o.cores == 0 || tr->o.cores == sl.devices) tr->R = sl.devices;
        else if (tr->o.cores == 1) tr->R = 1;
        else
            st = ut_err(ctx, TPU_ERR_INVALID, "%s trains on 1 or all %d of its devices, as a real board does (not %d)",
                        sl.name, sl.devices, tr->o.cores);
    }
    if (!st && tr->o.steps < 1) st = ut_err(ctx, TPU_ERR_INVALID, "the step count (--steps) must be >= 1");
    if (!st && s->nparam == 0) st = ut_err(ctx, TPU_ERR_INVALID, "%s: key 'state': no entry has the role \"param\": nothing to train", s->path);
    for (int h = 0; !st && h < s->nhyper; h++)
        if (s->hyper[h].sched.kind == TRN_SCHED_ONE_CYCLE && s->hyper[h].sched.total_steps < 0 && tr->o.steps < 2)
            st = ut_err(ctx, TPU_ERR_INVALID, "%s: hyper '%s': a one_cycle schedule without total_steps needs --steps >= 2",
                        s->path, s->hyper[h].name);
    if (!st && !s->init_state)
        st = ut_err(ctx, TPU_ERR_INVALID, "%s: init_state is null: a shapes-only STEP_DIR can be profiled, not trained", s->path);
    if (!st) st = trn_open_data(ctx, tr);
    if (!st) st = trn_load_programs(ctx, tr);
    /* the state: init_state.npz, or the checkpoint */
    tr->seed = tr->o.seed >= 0 ? (uint64_t)tr->o.seed : s ? s->seed : 0;
    if (!st && tr->o.resume) {
        if (!tr->model_dir) st = ut_err(ctx, TPU_ERR_INVALID, "--resume needs --model-dir");
        int64_t step = 0;
        uint64_t seed = 0;
        int reps = 0;
        if (!st) st = trn_read_progress(ctx, tr, &step, &seed, &reps);
        char *sn = st ? NULL : trn_path(tr->model_dir, "state.npz");
        if (!st) st = sn ? trn_sig_load_state(ctx, s, sn, &tr->state) : ut_nomem(ctx);
        ut_free(sn);
        if (!st) {
            tr->step = step;
            if (tr->o.seed < 0) tr->seed = seed;
            else if ((uint64_t)tr->o.seed != seed)
                trn_log(tr, "warning: --seed %lld differs from the checkpoint's %llu: the data order changes\n",
                        (long long)tr->o.seed, (unsigned long long)seed);
            if (reps && reps != tr->R)
                trn_log(tr, "warning: the checkpoint was trained on %d replicas, this run has %d: the data order per step "
                        "changes with the global batch\n", reps, tr->R);
            trn_log(tr, "resuming %s at step %lld of %lld\n", tr->model_dir, (long long)step, (long long)tr->o.steps);
        }
    } else if (!st) {
        st = trn_sig_load_state(ctx, s, s->init_state, &tr->state);
    }
    /* host-side runs (apply, one device's step) of a small model on one thread (trn_team_begin) */
    if (!st) {
        size_t bytes = 0;
        for (int i = 0; i < s->nstate; i++) bytes += tpu_tensor_nbytes(tr->state[i]);
        tr->host_threads = bytes < (16u << 20) ? 1 : 0;
    }
    /* device-side buffers: the system, per-device input lists, the hypers */
    if (!st && tr->dist) st = trn_dist_setup(ctx, tr);
    if (!st && !tr->dist) {
        char spec[96];
        if (tr->R == tr->devices) snprintf(spec, sizeof spec, "%s", tr->slice);
        else snprintf(spec, sizeof spec, "1:%s", tr->slice);
        st = tpu_system_new(ctx, spec, &tr->sys);
        tr->lo = 0;
        tr->hi = tr->R;
    }
    if (!st) {
        int per = s->nstate + (s->nbatch > s->nebatch ? s->nbatch : s->nebatch) + s->nhyper + s->nparam + 1;
        tr->in = ut_calloc((size_t)tr->R, sizeof *tr->in);
        tr->out = ut_calloc((size_t)tr->R, sizeof *tr->out);
        tr->hyp = ut_calloc((size_t)s->nhyper + 1, sizeof *tr->hyp);
        tr->msum = ut_calloc((size_t)s->nmetric + 1, sizeof *tr->msum);
        tr->mlast = ut_calloc((size_t)s->nmetric + 1, sizeof *tr->mlast);
        tr->wsum = ut_calloc((size_t)s->nmetric + 1, sizeof *tr->wsum);
        tr->evals = ut_calloc((size_t)s->nreport + s->nemetric + 1, sizeof *tr->evals);
        if (!tr->in || !tr->out || !tr->hyp || !tr->msum || !tr->mlast || !tr->wsum || !tr->evals) st = ut_nomem(ctx);
        for (int d = 0; !st && d < tr->R; d++)
            if (!(tr->in[d] = ut_calloc((size_t)per, sizeof *tr->in[d]))) st = ut_nomem(ctx);
        for (int h = 0; !st && h < s->nhyper; h++)
            if (tpu_tensor_new(ctx, TPU_F32, 0, NULL, &tr->hyp[h])) st = TPU_ERR_NOMEM;
        for (int m = 0; !st && m < s->nmetric; m++) tr->mlast[m] = NAN;
        tr->has_eval_vals = 0;
    }
    /* the model directory: metrics.jsonl continues (resume) or starts over */
    if (!st && tr->model_dir) {
        st = tpu_mkdirs(ctx, tr->model_dir, 0777);
        if (!st && !(tr->f_metrics = trn_path(tr->model_dir, "metrics.jsonl"))) st = ut_nomem(ctx);
        if (!st && tr->o.resume) st = trn_trim_metrics(ctx, tr->f_metrics, tr->step);
        if (!st && !tr->o.resume) {
            /* a checkpoint is somebody's training: replaced only when asked (a note could be hidden by --quiet) */
            char *pj = trn_path(tr->model_dir, "progress.json"), *sn = trn_path(tr->model_dir, "state.npz");
            int has = (pj && access(pj, F_OK) == 0) || (sn && access(sn, F_OK) == 0);
            if (has && !tr->o.overwrite)
                st = ut_err(ctx, TPU_ERR_INVALID, "%s holds a checkpoint: --resume continues it, --overwrite starts over "
                            "from init_state and replaces it", tr->model_dir);
            else if (has)
                trn_log(tr, "note: %s holds a checkpoint; starting over from init_state (--overwrite)\n", tr->model_dir);
            ut_free(pj);
            ut_free(sn);
        }
        if (!st && !(tr->metrics = fopen(tr->f_metrics, tr->o.resume ? "a" : "w")))
            st = ut_err(ctx, TPU_ERR_IO, "%s: cannot open: %s", tr->f_metrics, strerror(errno));
    }
    if (st) {
        tpu_trainer_free(tr);
        return st;
    }
    /* what the run is: the replicas, the global batch and the scaling rule applied */
    int64_t G = s->B * tr->R;
    trn_log(tr, "%s on %s: %d replica%s x %lld examples = global batch %lld; %lld training examples (%lld steps per "
            "epoch), %s numerics\n", s->name, tr->slice, tr->R, tr->R == 1 ? "" : "s", (long long)s->B, (long long)G,
            (long long)tr->train->n, (long long)(tr->train->n / G), tr->o.numerics == TPU_NUMERICS_EXACT ? "exact" : "TPU");
    if (s->lr_linear) {
        double f = trn_lr_scale(s, tr->R);
        for (int h = 0; h < s->nhyper; h++)
            if (s->hyper[h].scaled)
                trn_log(tr, "%s x %g: linear scaling rule, %d replica%s (global batch %lld) %s the %d (%lld) the hypers are set "
                        "for\n", s->hyper[h].name, f, tr->R, tr->R == 1 ? "" : "s", (long long)G, f == 1 ? "=" : "vs",
                        s->ref_replicas, (long long)(s->B * s->ref_replicas));
    } else {
        trn_log(tr, "hypers fed unscaled (lr_scaling rule none)\n");
    }
    /* the predicted step time while training (the final report redoes it with the measured input rate) */
    tpu_profile_opts po = tpu_profile_opts_default();
    po.chip = tr->slice;
    po.steps_per_exec = tr->o.steps_per_exec;
    po.batch = s->B;
    if (tpu_profile_program(ctx, tr->prog[TRN_STEP], &po, &tr->prof) == TPU_OK) tr->sim_prog_s = tpu_profile_step_time(tr->prof);
    else trn_log(tr, "note: no predicted step time: %s\n", tpu_errmsg(ctx));
    tpu_profile_free(tr->prof);
    tr->prof = NULL;
    *out = tr;
    return TPU_OK;
}

/* ---- one step ---- */

static void trn_set_hypers(tpu_trainer *tr, int64_t t)
{
    const trn_sig *s = tr->sig;
    for (int h = 0; h < s->nhyper; h++) {
        float v;
        if (tr->lr_find) v = (float)(h == s->lr_hyper ? tr->lr_find_value : s->hyper[h].dflt);
        else v = trn_hyper_value(s, h, t, tr->o.steps, tr->R);
        *(float *)tpu_tensor_data(tr->hyp[h]) = v;
    }
}

static double trn_scalar(const tpu_tensor *t) { return tpu_tensor_get_f64(t, 0); }

/* Runs m on the caller's thread with the trainer's host team size: a small model's programs are a few
 * microseconds of work each, and waking an OpenMP team for each (the executor also sets the FPU modes in a
 * parallel region) costs more than the work, the more so on a shared host. */
static int trn_team_begin(const tpu_trainer *tr)
{
    int old = omp_get_max_threads();
    if (tr->host_threads > 0) omp_set_num_threads(tr->host_threads);
    return old;
}

static void trn_team_end(int old) { omp_set_num_threads(old); }

/* Replaces state entry i by t (the old tensor is freed). */
static void trn_set_state(tpu_trainer *tr, int i, tpu_tensor *t)
{
    tpu_tensor_free(tr->state[i]);
    tr->state[i] = t;
}

tpu_status trn_run_step(tpu_ctx *ctx, tpu_trainer *tr, const trn_batch *b, double *metrics)
{
    const trn_sig *s = tr->sig;
    int S = s->nstate, N = s->nbatch, P = s->nparam, T = s->nstat, M = s->nmetric, H = s->nhyper, R = tr->R;
    tpu_run_opts ro = tpu_run_opts_default();
    ro.numerics = tr->o.numerics;
    trn_set_hypers(tr, b->step);
    int nout = 0;
    tpu_status st;
    if (R == 1) {
        /* one device: the fused step, state donated to the next step */
        tpu_tensor **in = tr->in[0];
        memcpy(in, tr->state, (size_t)S * sizeof *in);
        memcpy(in + S, b->t, (size_t)N * sizeof *in);
        memcpy(in + S + N, tr->hyp, (size_t)H * sizeof *in);
        int team = trn_team_begin(tr);
        st = tpu_system_run(ctx, tr->sys, tr->prog[TRN_STEP], &ro, tr->in, S + N + H, tr->out, &nout);
        trn_team_end(team);
        if (st) return st;
        for (int m = 0; m < M; m++) metrics[m] = trn_scalar(tr->out[0][S + m]);
        for (int i = 0; i < S; i++) {
            trn_set_state(tr, i, tr->out[0][i]);
            tr->out[0][i] = NULL;
        }
        tpu_system_outputs_free(tr->out, 1, nout);
        tr->ici_s = 0;
        return TPU_OK;
    }
    /* every replica (of this process): gradients of its shard */
    for (int d = tr->lo; d < tr->hi; d++) {
        memcpy(tr->in[d], tr->state, (size_t)S * sizeof *tr->in[d]);
        memcpy(tr->in[d] + S, b->t + (size_t)d * N, (size_t)N * sizeof *tr->in[d]);
    }
    st = tpu_system_run(ctx, tr->sys, tr->prog[TRN_GRAD], &ro, tr->in, S + N, tr->out, &nout);
    if (st) return st;
    /* the metrics, combined on the host in replica order, in double (every process's replicas) */
    double *mv = ut_calloc((size_t)R * (size_t)M + 1, sizeof *mv);
    if (!mv) st = ut_nomem(ctx);
    for (int d = tr->lo; !st && d < tr->hi; d++)
        for (int m = 0; m < M; m++) mv[(size_t)d * M + m] = trn_scalar(tr->out[d][P + T + m]);
    if (!st) st = trn_gather(ctx, tr, mv, M);
    for (int m = 0; !st && m < M; m++) {
        double acc = 0;
        for (int d = 0; d < R; d++) acc += mv[(size_t)d * M + m];
        metrics[m] = s->metric[m].sum ? acc : acc / R;
    }
    ut_free(mv);
    /* the all-reduce (mean) of gradients and statistics, on the devices */
    tpu_tensor ***mo = ut_calloc((size_t)R, sizeof *mo);
    int nmo = 0;
    if (!st && !mo) st = ut_nomem(ctx);
    if (!st && tr->mean) {
        for (int d = tr->lo; d < tr->hi; d++) memcpy(tr->in[d], tr->out[d], (size_t)(P + T) * sizeof *tr->in[d]);
        st = tpu_system_run(ctx, tr->sys, tr->mean, &ro, tr->in, P + T, mo, &nmo);
        if (!st) {
            tpu_system_stats ss;
            tpu_system_last_stats(tr->sys, &ss);
            tr->ici_s = ss.ici_s;
            tr->ici_bytes = ss.ici_bytes;
        }
    }
    tpu_system_outputs_free(tr->out, R, nout);
    if (st) {
        if (mo) tpu_system_outputs_free(mo, R, nmo);
        ut_free(mo);
        return st;
    }
    /* every replica holds the same mean; one copy is the state's */
    tpu_tensor **mean = mo[tr->lo];
    mo[tr->lo] = NULL;
    tpu_system_outputs_free(mo, R, nmo);
    ut_free(mo);
    for (int j = 0; j < T; j++) {
        trn_set_state(tr, s->stat_idx[j], mean[P + j]);
        mean[P + j] = NULL;
    }
    /* the optimizer update, once: the same on every replica */
    tpu_tensor **in = tr->in[0];
    memcpy(in, tr->state, (size_t)S * sizeof *in);
    memcpy(in + S, mean, (size_t)P * sizeof *in);
    memcpy(in + S + P, tr->hyp, (size_t)H * sizeof *in);
    tpu_tensor **ao = NULL;
    int nao = 0;
    int team = trn_team_begin(tr);
    st = tpu_run(ctx, tr->prog[TRN_APPLY], &ro, in, S + P + H, &ao, &nao);
    trn_team_end(team);
    tpu_tensors_free(mean, P + T);
    if (st) return st;
    for (int i = 0; i < S; i++) {
        trn_set_state(tr, i, ao[i]);
        ao[i] = NULL;
    }
    tpu_tensors_free(ao, nao);
    return TPU_OK;
}

/* ---- reporting ---- */

static int64_t trn_per_epoch(const tpu_trainer *tr) { return tr->train->n / (tr->sig->B * tr->R); }

double trn_sim_step_s(const tpu_trainer *tr) { return tr->sim_prog_s + tr->ici_s; }

static void trn_fmt_time(char *b, size_t n, double s)
{
    if (s <= 0) snprintf(b, n, "-");
    else if (s >= 1) snprintf(b, n, "%.3f s", s);
    else if (s >= 1e-3) snprintf(b, n, "%.3f ms", s * 1e3);
    else snprintf(b, n, "%.1f us", s * 1e6);
}

/* The metrics.jsonl record of the host call that just ended (k steps). */
static void trn_record(tpu_trainer *tr, int k)
{
    const trn_sig *s = tr->sig;
    for (int m = 0; m < s->nmetric; m++) tr->mlast[m] = tr->msum[m] / k;
    if (!tr->metrics) return;
    ut_buf b;
    ut_buf_init(&b);
    int64_t t = tr->step - 1;
    ut_buf_printf(&b, "{\"step\": %lld, \"epoch\": %lld, \"steps\": %d", (long long)tr->step, (long long)(t / trn_per_epoch(tr)), k);
    for (int h = 0; h < s->nhyper; h++) {
        ut_buf_puts(&b, ", ");
        ut_buf_json_str(&b, s->hyper[h].name);
        ut_buf_puts(&b, ": ");
        trn_json_num(&b, *(const float *)tpu_tensor_cdata(tr->hyp[h]));
    }
    for (int m = 0; m < s->nmetric; m++) {
        ut_buf_puts(&b, ", ");
        ut_buf_json_str(&b, s->metric[m].name);
        ut_buf_puts(&b, ": ");
        trn_json_num(&b, tr->mlast[m]);
    }
    ut_buf_puts(&b, ", \"sim_step_time_s\": ");
    trn_json_num(&b, trn_sim_step_s(tr));
    double el = ut_now() - tr->t0;
    ut_buf_puts(&b, ", \"steps_per_s\": ");
    trn_json_num(&b, el > 0 ? (double)(tr->step - tr->step0) / el : 0);
    ut_buf_puts(&b, "}\n");
    if (!b.failed) {
        fwrite(b.data, 1, b.len, tr->metrics);
        fflush(tr->metrics);
    }
    ut_buf_free(&b);
}

static void trn_progress(tpu_trainer *tr, int force)
{
    const trn_sig *s = tr->sig;
    if (!tr->o.log || !tr->wsteps) return;
    int64_t every = tr->o.log_every > 0 ? tr->o.log_every : (tr->o.steps + 19) / 20;
    if (every < 1) every = 1;
    int due = force || tr->step >= tr->o.steps || tr->step - tr->last_line >= every;
    if (!tr->o.progress_bar && !due) return;
    double now = ut_now();
    if (tr->o.progress_bar && !due && now - tr->last_draw < 0.1) return;   /* redraw at most 10 times a second */
    tr->last_draw = now;
    double el = now - tr->t0;
    double sps = el > 0 ? (double)(tr->step - tr->step0) / el : 0;
    char sim[32], line[512];
    trn_fmt_time(sim, sizeof sim, trn_sim_step_s(tr));
    size_t len = 0;
    len += (size_t)snprintf(line + len, sizeof line - len, "epoch %lld  loss %.4f", (long long)((tr->step - 1) / trn_per_epoch(tr)),
                            tr->wsum[s->loss_idx] / tr->wsteps);
    for (int m = 0; m < s->nmetric && len < 300; m++)
        if (m != s->loss_idx) len += (size_t)snprintf(line + len, sizeof line - len, "  %s %.4f", s->metric[m].name, tr->wsum[m] / tr->wsteps);
    if (s->lr_hyper >= 0 && len < 350)
        len += (size_t)snprintf(line + len, sizeof line - len, "  %s %.3g", s->hyper[s->lr_hyper].name,
                                (double)*(const float *)tpu_tensor_cdata(tr->hyp[s->lr_hyper]));
    snprintf(line + len, sizeof line - len, "  %.1f steps/s  TPU %s/step", sps, sim);
    if (tr->o.progress_bar) {
        /* one line redrawn in place: shorter, and cut to the terminal's width so that it never wraps */
        int width = 20, fill = (int)(width * tr->step / (tr->o.steps ? tr->o.steps : 1));
        char bar[32], full[640];
        for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
        bar[width] = 0;
        len = (size_t)snprintf(full, sizeof full, "[%s] %lld/%lld loss %.4f", bar, (long long)tr->step, (long long)tr->o.steps,
                               tr->wsum[s->loss_idx] / tr->wsteps);
        for (int m = 0; m < s->nmetric && len < 400; m++)
            if (m != s->loss_idx) len += (size_t)snprintf(full + len, sizeof full - len, " %s %.4f", s->metric[m].name, tr->wsum[m] / tr->wsteps);
        snprintf(full + len, sizeof full - len, " | %.1f steps/s | TPU %s/step", sps, sim);
        struct winsize ws;
        int cols = ioctl(fileno(tr->o.log), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20 ? ws.ws_col : 100;
        if ((int)strlen(full) >= cols) full[cols - 1] = 0;
        fprintf(tr->o.log, "\r%s\033[K", full);
        tr->bar_open = 1;
    } else {
        fprintf(tr->o.log, "step %lld/%lld  %s\n", (long long)tr->step, (long long)tr->o.steps, line);
    }
    fflush(tr->o.log);
    if (due) {   /* a new window for the averages */
        tr->last_line = tr->step;
        memset(tr->wsum, 0, (size_t)s->nmetric * sizeof *tr->wsum);
        tr->wsteps = 0;
    }
}

/* ---- evaluation ---- */

tpu_status tpu_trainer_evaluate(tpu_ctx *ctx, tpu_trainer *tr)
{
    const trn_sig *s = tr->sig;
    if (!tr->eval || !tr->prog[TRN_EVAL]) return TPU_OK;
    int S = s->nstate, N = s->nebatch, R = tr->R, M = s->nemetric;
    int64_t E = s->E, n = tr->eval->n;
    double *sum = ut_calloc((size_t)M + 1, sizeof *sum);
    if (!sum) return ut_nomem(ctx);
    tpu_run_opts ro = tpu_run_opts_default();
    ro.numerics = tr->o.numerics;
    tpu_status st = TPU_OK;
    double *ev = ut_calloc((size_t)R * (size_t)M + 1, sizeof *ev);
    if (!ev) st = ut_nomem(ctx);
    for (int64_t base = 0; base < n && !st; base += E * R) {
        for (int d = tr->lo; d < tr->hi && !st; d++) {
            memcpy(tr->in[d], tr->state, (size_t)S * sizeof *tr->in[d]);
            int64_t lo = base + d * E < n ? base + d * E : n, hi = lo + E < n ? lo + E : n;
            for (int j = 0; j < N; j++) {
                const trn_entry *e = &s->ebatch[j];
                tpu_tensor *x = NULL;
                if ((st = tpu_tensor_new(ctx, e->dtype, e->rank, e->dims, &x))) break;   /* zeros: the padding */
                tr->in[d][S + j] = x;
                if (!e->source) {
                    float *mk = tpu_tensor_data(x);
                    for (int64_t i = 0; i < hi - lo; i++) mk[i] = 1.0f;
                } else {
                    int a = trn_data_find(tr->eval, e->source);
                    size_t eb = tr->eval->arr[a].ex_bytes;
                    for (int64_t i = lo; i < hi; i++) trn_data_copy(tr->eval, a, i, (uint8_t *)tpu_tensor_data(x) + (size_t)(i - lo) * eb);
                }
            }
        }
        int nout = 0;
        int team = trn_team_begin(tr);
        if (!st) st = tpu_system_run(ctx, tr->sys, tr->prog[TRN_EVAL], &ro, tr->in, S + N, tr->out, &nout);
        trn_team_end(team);
        if (!st) {   /* every process's replicas, in replica order */
            for (int d = tr->lo; d < tr->hi; d++)
                for (int m = 0; m < M; m++) ev[(size_t)d * M + m] = trn_scalar(tr->out[d][m]);
            tpu_system_outputs_free(tr->out, R, nout);
            st = trn_gather(ctx, tr, ev, M);
            for (int d = 0; !st && d < R; d++)
                for (int m = 0; m < M; m++) sum[m] += ev[(size_t)d * M + m];
        }
        for (int d = tr->lo; d < tr->hi; d++)
            for (int j = 0; j < N; j++) {
                tpu_tensor_free(tr->in[d][S + j]);
                tr->in[d][S + j] = NULL;
            }
    }
    ut_free(ev);
    if (st) {
        ut_free(sum);
        return st;
    }
    /* report = numerator / denominator; without a report, the sums */
    int nv = s->nreport ? s->nreport : M;
    for (int i = 0; i < nv; i++)
        tr->evals[i] = s->nreport ? (sum[s->report[i].den] != 0 ? sum[s->report[i].num] / sum[s->report[i].den] : NAN) : sum[i];
    tr->has_eval_vals = 1;
    ut_free(sum);
    ut_buf b;
    ut_buf_init(&b);
    ut_buf_printf(&b, "{\"step\": %lld, \"eval\": {", (long long)tr->step);
    char line[512];
    size_t len = (size_t)snprintf(line, sizeof line, "eval at step %lld (%lld examples):", (long long)tr->step, (long long)n);
    for (int i = 0; i < nv; i++) {
        const char *nm = s->nreport ? s->report[i].name : s->emetric[i].name;
        if (i) ut_buf_puts(&b, ", ");
        ut_buf_json_str(&b, nm);
        ut_buf_puts(&b, ": ");
        trn_json_num(&b, tr->evals[i]);
        if (len < sizeof line - 64) len += (size_t)snprintf(line + len, sizeof line - len, " %s %.4f", nm, tr->evals[i]);
    }
    ut_buf_puts(&b, "}}\n");
    if (tr->metrics && !b.failed) {
        fwrite(b.data, 1, b.len, tr->metrics);
        fflush(tr->metrics);
    }
    ut_buf_free(&b);
    trn_log(tr, "%s\n", line);
    return TPU_OK;
}

/* ---- checkpoints ---- */

tpu_status tpu_trainer_save(tpu_ctx *ctx, tpu_trainer *tr)
{
    if (!tr->model_dir) return ut_err(ctx, TPU_ERR_INVALID, "no model directory to save into (--model-dir)");
    const trn_sig *s = tr->sig;
    char *sn = trn_path(tr->model_dir, "state.npz"), *stmp = trn_path(tr->model_dir, "state.npz.tmp");
    char *pj = trn_path(tr->model_dir, "progress.json"), *ptmp = trn_path(tr->model_dir, "progress.json.tmp");
    const char **names = ut_calloc((size_t)s->nstate + 1, sizeof *names);
    tpu_status st = sn && stmp && pj && ptmp && names ? TPU_OK : ut_nomem(ctx);
    for (int i = 0; !st && i < s->nstate; i++) names[i] = s->state[i].name;
    /* the metrics so far reach the disk before the checkpoint that covers them */
    if (!st && tr->metrics) {
        fflush(tr->metrics);
        fsync(fileno(tr->metrics));
    }
    if (!st) st = tpu_npz_save(ctx, stmp, tr->state, names, s->nstate, 0);
    if (!st) st = trn_fsync_path(ctx, stmp, 0);
    uint32_t crc = 0;
    if (!st) st = trn_file_crc(ctx, stmp, &crc);
    if (!st) {
        ut_buf b;
        ut_buf_init(&b);
        ut_buf_puts(&b, "{\"format\": \"tpusim.train_progress\", \"version\": 1, \"name\": ");
        ut_buf_json_str(&b, s->name);
        ut_buf_printf(&b, ", \"step\": %lld, \"replicas\": %d, \"seed\": %llu, \"total_steps\": %lld, \"state_crc32\": %u}\n",
                      (long long)tr->step, tr->R, (unsigned long long)tr->seed, (long long)tr->o.steps, crc);
        st = b.failed ? ut_nomem(ctx) : trn_write_tmp(ctx, ptmp, b.data, b.len);
        ut_buf_free(&b);
    }
    /* state first, then progress: a crash between the renames is rolled forward by --resume (the crc) */
    if (!st) st = trn_rename(ctx, stmp, sn);
    if (!st) st = trn_rename(ctx, ptmp, pj);
    if (!st) tr->saved_step = tr->step;
    ut_free(sn);
    ut_free(stmp);
    ut_free(pj);
    ut_free(ptmp);
    ut_free(names);
    return st;
}

/* ---- the loop ---- */

tpu_status tpu_trainer_train(tpu_ctx *ctx, tpu_trainer *tr, int64_t until)
{
    const trn_sig *s = tr->sig;
    if (until <= 0 || until > tr->o.steps) until = tr->o.steps;
    if (tr->step >= until) {
        if (tr->step >= tr->o.steps) trn_log(tr, "nothing to do: the step count is already %lld\n", (long long)tr->step);
        return TPU_OK;
    }
    double *m1 = ut_calloc((size_t)s->nmetric + 1, sizeof *m1);
    if (!m1) return ut_nomem(ctx);
    trn_pipe_cfg pc = {tr->train, s, tr->R, tr->seed, s->shuffle, tr->step, until, tr->o.prefetch, tr->o.input_delay_s,
                       tr->lo, tr->hi};
    tpu_status st = trn_pipe_start(ctx, &pc, &tr->pipe);
    tr->t0 = ut_now();
    tr->step0 = tr->step;
    tr->last_line = tr->step;
    tr->wsteps = 0;
    memset(tr->wsum, 0, (size_t)s->nmetric * sizeof *tr->wsum);
    int K = tr->o.steps_per_exec;
    while (!st && tr->step < until) {
        /* one host call: K steps back to back, their metrics reported together */
        int k = 0;
        memset(tr->msum, 0, (size_t)s->nmetric * sizeof *tr->msum);
        for (; k < K && tr->step < until && !st; k++) {
            trn_batch *b = NULL;
            st = trn_pipe_next(ctx, tr->pipe, &b);
            double t0 = ut_now();
            if (!st) st = trn_run_step(ctx, tr, b, m1);
            tr->wall_s += ut_now() - t0;
            trn_batch_free(b);
            if (st) break;
            tr->step++;
            tr->steps_run++;
            for (int m = 0; m < s->nmetric; m++) {
                tr->msum[m] += m1[m];
                tr->wsum[m] += m1[m];
            }
            tr->wsteps++;
        }
        if (st) break;
        trn_record(tr, k);
        trn_progress(tr, 0);
        int end = tr->step >= tr->o.steps;
        int64_t prev = tr->step - k;
        if (!end && tr->o.eval_every > 0 && tr->step / tr->o.eval_every != prev / tr->o.eval_every) st = tpu_trainer_evaluate(ctx, tr);
        if (!st && !end && tr->model_dir && tr->o.save_every > 0 && tr->step / tr->o.save_every != prev / tr->o.save_every)
            st = tpu_trainer_save(ctx, tr);
    }
    if (tr->pipe) {
        double rate = 0, wait = 0;
        int64_t made = 0;
        trn_pipe_stats(tr->pipe, &rate, &wait, &made);
        if (made) {
            tr->pipe_samples += (double)made * (double)(s->B * tr->R);
            tr->pipe_busy_s += rate > 0 ? (double)made * (double)(s->B * tr->R) / rate : 0;
        }
        tr->pipe_wait_s += wait;
        trn_pipe_free(tr->pipe);
        tr->pipe = NULL;
    }
    ut_free(m1);
    if (!st && tr->step >= tr->o.steps) {
        if (tr->bar_open) trn_log(tr, "%s", "");
        st = tpu_trainer_evaluate(ctx, tr);
        if (!st && tr->model_dir) st = tpu_trainer_save(ctx, tr);
    }
    return st;
}

/* ---- accessors ---- */

int64_t tpu_trainer_step(const tpu_trainer *tr) { return tr->step; }
int tpu_trainer_replicas(const tpu_trainer *tr) { return tr->R; }
int tpu_trainer_num_state(const tpu_trainer *tr) { return tr->sig->nstate; }

const tpu_tensor *tpu_trainer_state(const tpu_trainer *tr, int i, const char **name)
{
    if (i < 0 || i >= tr->sig->nstate) return NULL;
    if (name) *name = tr->sig->state[i].name;
    return tr->state[i];
}

double tpu_trainer_metric(const tpu_trainer *tr, const char *name)
{
    for (int m = 0; m < tr->sig->nmetric; m++)
        if (!strcmp(tr->sig->metric[m].name, name)) return tr->mlast[m];
    return NAN;
}

double tpu_trainer_eval_value(const tpu_trainer *tr, const char *name)
{
    const trn_sig *s = tr->sig;
    if (!tr->has_eval_vals) return NAN;
    int nv = s->nreport ? s->nreport : s->nemetric;
    for (int i = 0; i < nv; i++)
        if (!strcmp(s->nreport ? s->report[i].name : s->emetric[i].name, name)) return tr->evals[i];
    return NAN;
}

int tpu_trainer_eval_result(const tpu_trainer *tr, int i, const char **name, double *value)
{
    const trn_sig *s = tr->sig;
    int nv = s->nreport ? s->nreport : s->nemetric;
    if (!tr->has_eval_vals || i < 0 || i >= nv) return 0;
    if (name) *name = s->nreport ? s->report[i].name : s->emetric[i].name;
    if (value) *value = tr->evals[i];
    return 1;
}
