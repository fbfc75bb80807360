/* xplane.c — predicted profiles as TensorBoard reads them: an XSpace, the XLA profiler's protobuf
 * (tsl/profiler/protobuf/xplane.proto), which TensorBoard's profile plugin (XProf) loads from
 * LOGDIR/plugins/profile/RUN/HOST.xplane.pb. No protobuf library: the wire format is written here.
 *
 * The shape follows what a real TPU profile holds, so the plugin's TPU tools work on it: one plane per
 * device named "/device:TPU:N" with the chip's peak FLOP/s and HBM bandwidth as plane stats, and three
 * lines — "Steps" (one event per step), "XLA Modules" (one per execution of a program) and "XLA Ops" (the
 * program's ops in schedule order; while and conditional ops span their bodies). Each op's event metadata
 * carries program_id, its HLO category, op_name (tf_op), FLOPs and bytes accessed, the stats the op profile
 * and overview pages are built from. Names start with xpl_. */
#include "profile.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define XPL_MAX_PLANES 8           /* devices drawn (the rest run the same SPMD program) */
#define XPL_MAX_OP_EVENTS 200000   /* per plane; later runs show their module and step events only */
#define XPL_MAX_RUNS 10000         /* runs drawn one by one per program; the rest as one event */

/* ---- protobuf wire format ---- */

static void xpl_varint(ut_buf *b, uint64_t v)
{
    char tmp[10];
    size_t n = 0;
    do {
        tmp[n++] = (char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    ut_buf_put(b, tmp, n);
}

static void xpl_key(ut_buf *b, int field, int wire) { xpl_varint(b, (uint64_t)field << 3 | (uint64_t)wire); }
static void xpl_int(ut_buf *b, int field, int64_t v) { xpl_key(b, field, 0), xpl_varint(b, (uint64_t)v); }

static void xpl_double(ut_buf *b, int field, double v)
{
    uint64_t u;
    memcpy(&u, &v, 8);
    char le[8];
    for (int i = 0; i < 8; i++) le[i] = (char)(u >> (8 * i));
    xpl_key(b, field, 1);
    ut_buf_put(b, le, 8);
}

static void xpl_bytes(ut_buf *b, int field, const void *p, size_t n)
{
    xpl_key(b, field, 2);
    xpl_varint(b, n);
    ut_buf_put(b, p, n);
}

static void xpl_str(ut_buf *b, int field, const char *s) { xpl_bytes(b, field, s, strlen(s)); }

/* Appends `sub` as embedded message `field` and empties it for reuse. */
static void xpl_msg(ut_buf *b, int field, ut_buf *sub)
{
    xpl_bytes(b, field, sub->data ? sub->data : "", sub->len);
    b->failed |= sub->failed;
    sub->len = 0;
    sub->failed = false;
}

/* ---- the schema's stats (names as XProf's xplane_schema spells them) ---- */

enum {
    XS_PROGRAM_ID = 1, XS_SYMBOL_ID, XS_HLO_CATEGORY, XS_TF_OP, XS_FLOPS, XS_BYTES, XS_DEVICE_TYPE, XS_PEAK_TF,
    XS_PEAK_HBM, XS_MEGACORE, XS_GROUP_ID, XS_STEP_NUM, XS_BOUND, XS_MXU_UTIL, XS_HLO_OP, XS_HLO_MODULE,
    XS_OCCURRENCES, XS_CORE_COUNT, XS_MEM_BREAKDOWN, XS_COUNT
};
static const char *const xpl_stat_names[XS_COUNT] = {
    [XS_PROGRAM_ID] = "program_id", [XS_SYMBOL_ID] = "symbol_id", [XS_HLO_CATEGORY] = "hlo_category",
    [XS_TF_OP] = "tf_op", [XS_FLOPS] = "flops", [XS_BYTES] = "bytes_accessed",
    [XS_DEVICE_TYPE] = "device_type_string", [XS_PEAK_TF] = "peak_teraflops_per_second",
    [XS_PEAK_HBM] = "peak_hbm_bw_gigabytes_per_second", [XS_MEGACORE] = "has_megacore", [XS_GROUP_ID] = "group_id",
    [XS_STEP_NUM] = "step_num", [XS_BOUND] = "tpusim_bound", [XS_MXU_UTIL] = "tpusim_mxu_utilization",
    [XS_HLO_OP] = "hlo_op", [XS_HLO_MODULE] = "hlo_module", [XS_OCCURRENCES] = "tpusim_executions_per_step",
    [XS_CORE_COUNT] = "core_count", [XS_MEM_BREAKDOWN] = "memory_access_breakdown",
};

static void xpl_stat_int(ut_buf *b, int field, int stat, int64_t v, ut_buf *tmp)
{
    xpl_int(tmp, 1, stat);
    xpl_int(tmp, 4, v);
    xpl_msg(b, field, tmp);
}

static void xpl_stat_uint(ut_buf *b, int field, int stat, uint64_t v, ut_buf *tmp)
{
    xpl_int(tmp, 1, stat);
    xpl_key(tmp, 3, 0);
    xpl_varint(tmp, v);
    xpl_msg(b, field, tmp);
}

static void xpl_stat_double(ut_buf *b, int field, int stat, double v, ut_buf *tmp)
{
    xpl_int(tmp, 1, stat);
    xpl_double(tmp, 2, v);
    xpl_msg(b, field, tmp);
}

static void xpl_stat_str(ut_buf *b, int field, int stat, const char *v, ut_buf *tmp)
{
    xpl_int(tmp, 1, stat);
    xpl_str(tmp, 5, v);
    xpl_msg(b, field, tmp);
}

/* ---- the space ---- */

typedef struct xpl_entry {
    const prf_profile *p;
    int64_t            runs;
} xpl_entry;

struct tpu_xspace {
    xpl_entry *e;
    int        n, cap;
};

tpu_status tpu_xspace_new(tpu_ctx *ctx, tpu_xspace **out)
{
    *out = ut_calloc(1, sizeof **out);
    return *out ? TPU_OK : ut_nomem(ctx);
}

void tpu_xspace_free(tpu_xspace *xs)
{
    if (!xs) return;
    ut_free(xs->e);
    ut_free(xs);
}

tpu_status tpu_xspace_add(tpu_ctx *ctx, tpu_xspace *xs, const tpu_profile *p, int64_t runs)
{
    if (!p || runs < 1) return ut_err(ctx, TPU_ERR_INVALID, "tpu_xspace_add: a profile and at least one run");
    xpl_entry *ne = ut_grow(xs->e, sizeof *ne, xs->n, &xs->cap, 8);
    if (!ne) return ut_nomem(ctx);
    xs->e = ne;
    xs->e[xs->n++] = (xpl_entry){p, runs};
    return TPU_OK;
}

/* The category the op profile groups by, in XLA's words where they exist. */
static const char *xpl_category(const tim_op *t)
{
    switch (t->op->kind) {
    case CMP_OUTPUT: return "convolution fusion";
    case CMP_INPUT: return t->op->ninstrs > 1 ? "reduction fusion" : hlo_op_name((hlo_op)t->root->op);
    case CMP_LOOP: return t->op->ninstrs > 1 ? "loop fusion" : hlo_op_name((hlo_op)t->root->op);
    default: return hlo_op_name((hlo_op)t->root->op);
    }
}

/* The op's HBM traffic as a MemoryAccessBreakdown (XProf's op_metrics.proto: memory_accessed 1 { is_read 1,
 * memory_space 2 (HBM = 1), bytes_accessed 3 }), from which the op profile computes bandwidth use. The model
 * counts reads and writes together; they go in as one entry, which XProf's read+write HBM figure sums the same. */
static void xpl_mem_breakdown(ut_buf *md, int64_t bytes, ut_buf *tmp)
{
    ut_buf acc, brk;
    ut_buf_init(&acc);
    ut_buf_init(&brk);
    xpl_int(&acc, 1, 1);
    xpl_int(&acc, 2, 1);
    xpl_int(&acc, 3, bytes > 0 ? bytes : 0);
    xpl_msg(&brk, 1, &acc);
    xpl_int(tmp, 1, XS_MEM_BREAKDOWN);
    xpl_bytes(tmp, 6, brk.data ? brk.data : "", brk.len);
    tmp->failed |= brk.failed;
    xpl_msg(md, 5, tmp);
    ut_buf_free(&acc);
    ut_buf_free(&brk);
}

/* Event metadata ids: per program a block of (ops + 2): its ops, then its module, then its step name. */
static int64_t xpl_meta_base(const tpu_xspace *xs, int prog)
{
    int64_t base = 1;
    for (int i = 0; i < prog; i++) base += xs->e[i].p->tim->nops + 2;
    return base;
}

/* XPlane.event_metadata entries of every program, and stat_metadata: the same in every plane. */
static void xpl_metadata(const tpu_xspace *xs, ut_buf *plane, ut_buf *ent, ut_buf *md, ut_buf *tmp)
{
    for (int i = 0; i < xs->n; i++) {
        const prf_profile *p = xs->e[i].p;
        const tim_result *r = p->tim;
        int64_t base = xpl_meta_base(xs, i);
        for (int k = 0; k < r->nops; k++) {
            const tim_op *t = &r->ops[k];
            xpl_int(md, 1, base + k);
            xpl_str(md, 2, t->root->name);
            xpl_stat_int(md, 5, XS_PROGRAM_ID, i + 1, tmp);
            xpl_stat_int(md, 5, XS_SYMBOL_ID, k + 1, tmp);
            xpl_stat_str(md, 5, XS_HLO_CATEGORY, xpl_category(t), tmp);
            const char *on = hlo_meta(t->root, "op_name");
            if (on) xpl_stat_str(md, 5, XS_TF_OP, on, tmp);
            xpl_stat_uint(md, 5, XS_FLOPS, (uint64_t)(t->flops > 0 ? t->flops : 0), tmp);
            xpl_stat_uint(md, 5, XS_BYTES, (uint64_t)(t->hbm_bytes > 0 ? t->hbm_bytes : 0), tmp);
            xpl_mem_breakdown(md, t->hbm_bytes, tmp);
            xpl_stat_str(md, 5, XS_BOUND, tim_bound_name(t->bound), tmp);
            xpl_stat_double(md, 5, XS_MXU_UTIL, t->mxu_util, tmp);
            xpl_stat_double(md, 5, XS_OCCURRENCES, t->count, tmp);
            xpl_int(ent, 1, base + k);
            xpl_msg(ent, 2, md);
            xpl_msg(plane, 4, ent);
        }
        xpl_int(md, 1, base + r->nops);
        xpl_str(md, 2, p->m->name);
        xpl_stat_int(md, 5, XS_PROGRAM_ID, i + 1, tmp);
        xpl_int(ent, 1, base + r->nops);
        xpl_msg(ent, 2, md);
        xpl_msg(plane, 4, ent);
        xpl_int(md, 1, base + r->nops + 1);
        xpl_str(md, 2, "step");
        xpl_int(ent, 1, base + r->nops + 1);
        xpl_msg(ent, 2, md);
        xpl_msg(plane, 4, ent);
    }
    for (int s = 1; s < XS_COUNT; s++) {
        xpl_int(md, 1, s);
        xpl_str(md, 2, xpl_stat_names[s]);
        xpl_int(ent, 1, s);
        xpl_msg(ent, 2, md);
        xpl_msg(plane, 5, ent);
    }
}

static void xpl_event(ut_buf *ev, int64_t meta, double t_s, double dur_s)
{
    xpl_int(ev, 1, meta);
    xpl_int(ev, 2, (int64_t)(t_s * 1e12 + 0.5));
    xpl_int(ev, 3, (int64_t)(dur_s * 1e12 + 0.5));
}

/* One execution's ops on the "XLA Ops" line from t0 (seconds); control ops span their bodies. */
static void xpl_ops(ut_buf *line, ut_buf *ev, ut_buf *tmp, const prf_profile *p, int64_t base, double t0, int64_t step)
{
    const tim_result *r = p->tim;
    double cur = t0;
    for (int k = 0; k < r->nops; k++) {
        const tim_op *t = &r->ops[k];
        double dur;
        if (t->op->kind == CMP_CONTROL) {
            dur = 0;
            for (int j = k + 1; j < r->nops && r->ops[j].depth > t->depth; j++)
                if (r->ops[j].op->kind != CMP_CONTROL) dur += r->ops[j].time_s * r->ops[j].count;
        } else {
            dur = t->time_s * t->count;
        }
        if (dur <= 0) continue;
        xpl_event(ev, base + k, cur, dur);
        xpl_stat_int(ev, 4, XS_GROUP_ID, step, tmp);
        xpl_msg(line, 4, ev);
        if (t->op->kind != CMP_CONTROL) cur += dur;
    }
}

static void xpl_line_head(ut_buf *line, int id, const char *name)
{
    xpl_int(line, 1, id);
    xpl_str(line, 2, name);
    xpl_int(line, 3, 0);   /* timestamp_ns: the predicted timeline starts at 0 */
}

/* The three lines of one device: every program's runs laid end to end. */
static void xpl_lines(const tpu_xspace *xs, ut_buf *plane, ut_buf *line, ut_buf *ev, ut_buf *tmp)
{
    for (int which = 0; which < 3; which++) {
        static const char *const names[3] = {"Steps", "XLA Modules", "XLA Ops"};
        xpl_line_head(line, which + 1, names[which]);
        double t = 0;
        int64_t step = 0, op_events = 0;
        for (int i = 0; i < xs->n; i++) {
            const prf_profile *p = xs->e[i].p;
            const tim_result *r = p->tim;
            int64_t base = xpl_meta_base(xs, i), runs = xs->e[i].runs;
            int64_t drawn = runs < XPL_MAX_RUNS ? runs : XPL_MAX_RUNS;
            for (int64_t s = 0; s < drawn; s++, step++) {
                double dev = t + r->host_s;
                /* the last drawn run stands for the rest */
                double span = s == drawn - 1 ? (double)(runs - drawn + 1) * r->step_s - r->host_s - r->idle_s : r->device_s;
                if (which == 0) {
                    xpl_event(ev, base + r->nops + 1, dev, span);
                    xpl_stat_int(ev, 4, XS_GROUP_ID, step, tmp);
                    xpl_stat_int(ev, 4, XS_STEP_NUM, step, tmp);
                    xpl_msg(line, 4, ev);
                } else if (which == 1) {
                    xpl_event(ev, base + r->nops, dev, span);
                    xpl_stat_int(ev, 4, XS_GROUP_ID, step, tmp);
                    xpl_msg(line, 4, ev);
                } else if (op_events + r->nops <= XPL_MAX_OP_EVENTS) {
                    xpl_ops(line, ev, tmp, p, base, dev, step);
                    op_events += r->nops;
                }
                t += s == drawn - 1 ? (double)(runs - drawn + 1) * r->step_s : r->step_s;
            }
        }
        xpl_msg(plane, 3, line);
    }
}

static tpu_status xpl_encode(tpu_ctx *ctx, const tpu_xspace *xs, const char *host, ut_buf *out)
{
    if (xs->n == 0) return ut_err(ctx, TPU_ERR_INVALID, "the profile holds no program");
    const chp_slice *sl = &xs->e[0].p->slice;
    tpu_chip tc;
    tc.s = *sl;
    tpu_device_info d0;
    if (tpu_chip_device(ctx, &tc, 0, &d0)) return TPU_ERR_INVALID;
    int planes = sl->devices < XPL_MAX_PLANES ? sl->devices : XPL_MAX_PLANES;
    if (planes < 1) planes = 1;
    ut_buf plane, line, ev, ent, md, tmp;
    ut_buf *bufs[] = {&plane, &line, &ev, &ent, &md, &tmp};
    for (int i = 0; i < UT_ARRAY_LEN(bufs); i++) ut_buf_init(bufs[i]);
    const chp_chip *c = &sl->chip;
    for (int d = 0; d < planes && !out->failed; d++) {
        char name[64];
        snprintf(name, sizeof name, "/device:TPU:%d", d);
        xpl_int(&plane, 1, d + 1);
        xpl_str(&plane, 2, name);
        xpl_lines(xs, &plane, &line, &ev, &tmp);
        xpl_metadata(xs, &plane, &ent, &md, &tmp);
        xpl_stat_str(&plane, 6, XS_DEVICE_TYPE, d0.kind, &tmp);
        xpl_stat_double(&plane, 6, XS_PEAK_TF, chp_device_peak_flops(c) / 1e12, &tmp);
        xpl_stat_double(&plane, 6, XS_PEAK_HBM, c->hbm_bw * (double)c->cores_per_device / (c->cores_per_chip > 0 ? c->cores_per_chip : 1) / 1e9, &tmp);
        xpl_stat_int(&plane, 6, XS_MEGACORE, c->cores_per_device > 1, &tmp);
        xpl_stat_uint(&plane, 6, XS_CORE_COUNT, (uint64_t)c->cores_per_device, &tmp);
        xpl_msg(out, 1, &plane);
    }
    xpl_str(out, 4, host);
    for (int i = 0; i < UT_ARRAY_LEN(bufs); i++) {
        out->failed |= bufs[i]->failed;
        ut_buf_free(bufs[i]);
    }
    return out->failed ? ut_nomem(ctx) : TPU_OK;
}

tpu_status tpu_xspace_write(tpu_ctx *ctx, const tpu_xspace *xs, const char *path)
{
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0 || !*host) snprintf(host, sizeof host, "localhost");
    ut_buf b;
    ut_buf_init(&b);
    tpu_status st = xpl_encode(ctx, xs, host, &b);
    if (!st) st = ut_write_file(ctx, path, b.data ? b.data : "", b.len, 0);
    ut_buf_free(&b);
    return st;
}

tpu_status tpu_profile_write_xplane(tpu_ctx *ctx, const tpu_profile *p, const char *path)
{
    xpl_entry e = {p, p->opts.steps < 1 ? 1 : p->opts.steps};
    tpu_xspace xs = {&e, 1, 1};
    return tpu_xspace_write(ctx, &xs, path);
}

tpu_status tpu_xspace_write_tensorboard(tpu_ctx *ctx, const tpu_xspace *xs, const char *logdir, const char *run,
                                        char **written)
{
    if (written) *written = NULL;
    char stamp[64];
    if (!run || !*run) {
        /* TensorBoard lists runs by directory name; the profiler names them by the time */
        time_t now = time(NULL);
        struct tm tmv;
        localtime_r(&now, &tmv);
        strftime(stamp, sizeof stamp, "%Y_%m_%d_%H_%M_%S", &tmv);
        run = stamp;
    }
    if (strchr(run, '/') || !strcmp(run, ".") || !strcmp(run, ".."))
        return ut_err(ctx, TPU_ERR_INVALID, "run name '%s': a single directory name, please", run);
    char host[256] = "localhost", dir[4096], path[4400];
    if (gethostname(host, sizeof host - 1) != 0 || !*host || strchr(host, '/')) snprintf(host, sizeof host, "localhost");
    if (snprintf(dir, sizeof dir, "%s/plugins/profile/%s", logdir, run) >= (int)sizeof dir)
        return ut_err(ctx, TPU_ERR_INVALID, "%s: path too long", logdir);
    tpu_status st = tpu_mkdirs(ctx, dir, 0777);
    if (st) return st;
    snprintf(path, sizeof path, "%s/%s.xplane.pb", dir, host);
    ut_buf b;
    ut_buf_init(&b);
    st = xpl_encode(ctx, xs, host, &b);
    if (!st) st = ut_write_file(ctx, path, b.data ? b.data : "", b.len, 0);
    ut_buf_free(&b);
    if (!st && written && !(*written = ut_strdup(path))) st = ut_nomem(ctx);
    return st;
}

tpu_status tpu_profile_write_tensorboard(tpu_ctx *ctx, const tpu_profile *p, const char *logdir, const char *run,
                                         char **written)
{
    xpl_entry e = {p, p->opts.steps < 1 ? 1 : p->opts.steps};
    tpu_xspace xs = {&e, 1, 1};
    return tpu_xspace_write_tensorboard(ctx, &xs, logdir, run, written);
}
