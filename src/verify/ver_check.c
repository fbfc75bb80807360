/* ver_check.c — the TPU compatibility check (tpu_check) and its report: what the TPU compiler would refuse,
 * what compiles but not as written, and what tpusim can analyse but not run.
 *
 * The rules were checked against the real TPU compiler: libtpu 0.0.42.1 (jax 0.10.2) compiling ahead of time
 * for v4, v5e, v6e and tpu7x topologies on a CPU machine (docs/libtpu-reference.md shows how), with small JAX
 * functions and StableHLO modules, one rule each (tests/reference/libtpu_check_rules.py). Where a public source
 * says otherwise it is older.
 *  - shapes must verify (ver_verify_module);
 *  - unbounded dynamic dimensions ('?') are refused ("RET_CHECK failure ... layout.h: dimension >= 0").
 *    Bounded ones ('<=N', set-dimension-size) compile on every generation tried: XLA:TPU pads them to the
 *    bound. They are warnings: every op then runs at the bound;
 *  - custom-calls: the compiler answers "Custom emitter for X not found" for targets it does not know, e.g.
 *    xla_python_cpu_callback, PyFunc, InspectSharding, cu_threefry2x32, annotate_device_placement. Markers
 *    it removes (Sharding, SPMDFullToShardShape, SPMDShardToFullShape, MoveToHost, MoveToDevice,
 *    LayoutConstraint) compile; so do its own emitters (ApproxTopK, PartialReduce, TopK, X64Combine,
 *    X64SplitLow/High, PadToStatic, SliceToDynamic, tpu_custom_call = Mosaic/Pallas kernels);
 *  - element types: f64, s64 and c128 compile (XLA's X64 rewriting emulates them with 32-bit pairs: slower,
 *    and f64 is not IEEE double), so f64/c128 are warnings. Two ops have no rewrite and are refused: fft of
 *    f64/c128 ("Unexpected operand type for FFT: c128[8]") and reduce-precision of f64 ("While rewriting
 *    computation to not contain X{64|128} element types, XLA encountered an HLO for which this rewriting is
 *    not implemented"). 64-bit bitcast-convert, refused by older libtpu (jax-ml/jax#21108), now compiles.
 *    All fp8 types, f4e2m1fn and f8e8m0fnu compile on v5e; fp8 matrix units exist on TPU7x only ("TPU7x
 *    supports built-in hardware acceleration for FP8 data types", cloud.google.com/tpu/docs/
 *    ironwood-performance), so fp8 dots elsewhere are a note;
 *  - host send/recv compiles but costs a host round trip per step (a note); constants elided as {...} can be
 *    analysed but not run (a note).
 */
#include "verify.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- reports ---- */

ver_report *ver_report_new(const char *module, const char *chip)
{
    ver_report *r = ut_calloc(1, sizeof *r);
    if (!r) return NULL;
    r->module = ut_strdup(module ? module : "module");
    r->chip = chip ? ut_strdup(chip) : NULL;
    if (!r->module || (chip && !r->chip)) r->oom = 1;
    return r;
}

static char *vc_dup(ver_report *r, const char *s)
{
    if (!s) return NULL;
    char *d = ut_strdup(s);
    if (!d) r->oom = 1;
    return d;
}

void ver_report_add(ver_report *r, const hlo_module *m, const hlo_instr *in, ver_severity sev, const char *category,
                    const char *hint, const char *fmt, ...)
{
    ver_problem *grown = ut_grow(r->problems, sizeof *grown, r->nproblems, &r->cap, 16);
    if (!grown) {
        r->oom = 1;
        return;
    }
    r->problems = grown;
    ver_problem *p = &r->problems[r->nproblems++];
    memset(p, 0, sizeof *p);
    p->sev = sev;
    p->category = category;
    char buf[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    p->msg = vc_dup(r, buf);
    p->hint = vc_dup(r, hint);
    if (in) {
        char w[600];
        p->where = vc_dup(r, hlo_where(m, in, w, sizeof w));
        p->instr = vc_dup(r, in->name);
        p->opcode = vc_dup(r, hlo_op_name((hlo_op)in->op));
        if (r->meta_in != in) {
            r->meta_in = in;
            r->meta_op_name = hlo_meta(in, "op_name");
            r->meta_sf = hlo_meta(in, "source_file");
            r->meta_sl = hlo_meta(in, "source_line");
            r->meta_frame = hlo_meta(in, "stack_frame_id");
        }
        p->op_name = vc_dup(r, r->meta_op_name);
        const char *sf = r->meta_sf, *sl = r->meta_sl, *frame = r->meta_frame;
        int64_t line = 0;
        if (sf) {
            snprintf(w, sizeof w, "%s:%s", sf, sl ? sl : "?");
            p->source = vc_dup(r, w);
        } else if (frame && hlo_frame_source(m, strtoll(frame, NULL, 10), &sf, &line)) {
            snprintf(w, sizeof w, "%s:%lld", sf, (long long)line);
            p->source = vc_dup(r, w);
        }
    } else {
        p->where = vc_dup(r, m && m->filename ? m->filename : "<hlo>");
        p->instr = vc_dup(r, "");
    }
    if (sev == VER_ERROR) r->nerrors++;
    else if (sev == VER_WARNING) r->nwarnings++;
    else r->nnotes++;
}

void tpu_report_free(tpu_report *r)
{
    if (!r) return;
    for (int i = 0; i < r->nproblems; i++) {
        ver_problem *p = &r->problems[i];
        ut_free(p->where);
        ut_free(p->instr);
        ut_free(p->opcode);
        ut_free(p->op_name);
        ut_free(p->source);
        ut_free(p->msg);
        ut_free(p->hint);
    }
    ut_free(r->problems);
    ut_free(r->module);
    ut_free(r->chip);
    ut_free(r->text);
    ut_free(r->json);
    ut_free(r);
}

int tpu_report_compatible(const tpu_report *r) { return r && r->nerrors == 0; }
int tpu_report_num_problems(const tpu_report *r) { return r ? r->nerrors + r->nwarnings : 0; }

static const char *const vc_sev_names[] = {"error", "warning", "note"};

static void vc_verdict(const tpu_report *r, ut_buf *b)
{
    const char *chip = r->chip ? r->chip : "a TPU";
    if (r->nerrors)
        ut_buf_printf(b, "NOT COMPATIBLE with %s%s: %d error%s, %d warning%s, %d note%s", r->chip ? "TPU " : "", chip,
                      r->nerrors, r->nerrors == 1 ? "" : "s", r->nwarnings, r->nwarnings == 1 ? "" : "s", r->nnotes,
                      r->nnotes == 1 ? "" : "s");
    else
        ut_buf_printf(b, "compatible with %s%s: 0 errors, %d warning%s, %d note%s", r->chip ? "TPU " : "", chip,
                      r->nwarnings, r->nwarnings == 1 ? "" : "s", r->nnotes, r->nnotes == 1 ? "" : "s");
}

const char *tpu_report_text(const tpu_report *rc)
{
    tpu_report *r = (tpu_report *)rc;   /* the text is built once, on demand */
    if (!r) return "";
    if (r->text) return r->text;
    ut_buf b;
    ut_buf_init(&b);
    ut_buf_printf(&b, "tpusim check: module '%s'%s%s\n", r->module, r->chip ? " for TPU " : "", r->chip ? r->chip : "");
    static const char *const titles[][2] = {{"error (the TPU compiler would refuse it)", "errors (the TPU compiler would refuse these)"},
                                            {"warning (compiles, but not as written)", "warnings (compile, but not as written)"},
                                            {"note", "notes"}};
    for (int sev = 0; sev < 3; sev++) {
        int total = sev == 0 ? r->nerrors : sev == 1 ? r->nwarnings : r->nnotes;
        if (!total) continue;
        ut_buf_printf(&b, "\n%d %s:\n", total, titles[sev][total != 1]);
        /* groups in order of first appearance: the categories are a few fixed names, so one pass finds them
         * and one pass per category prints it (a report of 100000 problems stays linear) */
        const char *cats[64];
        int counts[64], ncat = 0;
        for (int i = 0; i < r->nproblems; i++) {
            const ver_problem *p = &r->problems[i];
            if ((int)p->sev != sev) continue;
            int c = 0;
            while (c < ncat && strcmp(cats[c], p->category)) c++;
            if (c == ncat && ncat < 64) {
                cats[ncat] = p->category;
                counts[ncat++] = 0;
            }
            if (c < ncat) counts[c]++;
        }
        for (int c = 0; c < ncat; c++) {
            ut_buf_printf(&b, "  [%s] %d\n", cats[c], counts[c]);
            for (int j = 0; j < r->nproblems; j++) {
                const ver_problem *q = &r->problems[j];
                if ((int)q->sev != sev || strcmp(q->category, cats[c])) continue;
                ut_buf_printf(&b, "    %s: ", q->where);
                if (q->instr && q->instr[0]) ut_buf_printf(&b, "%%%s (%s): ", q->instr, q->opcode);
                ut_buf_printf(&b, "%s\n", q->msg);
                if (q->op_name || q->source) {
                    ut_buf_puts(&b, "      ");
                    if (q->op_name) ut_buf_printf(&b, "op_name=\"%s\"%s", q->op_name, q->source ? " " : "");
                    if (q->source) ut_buf_printf(&b, "at %s", q->source);
                    ut_buf_putc(&b, '\n');
                }
                if (q->hint) ut_buf_printf(&b, "      fix: %s\n", q->hint);
            }
        }
    }
    if (r->oom) ut_buf_puts(&b, "\n(the report is incomplete: out of memory while building it)\n");
    ut_buf_puts(&b, "\nverdict: ");
    vc_verdict(r, &b);
    ut_buf_putc(&b, '\n');
    r->text = ut_buf_take(&b);
    return r->text ? r->text : "out of memory\n";
}

const char *tpu_report_verdict(const tpu_report *r)
{
    static _Thread_local char buf[256];
    if (!r) return "";
    ut_buf b;
    ut_buf_init(&b);
    vc_verdict(r, &b);
    snprintf(buf, sizeof buf, "%s", b.data && !b.failed ? b.data : "");
    ut_buf_free(&b);
    return buf;
}

const char *tpu_report_json(const tpu_report *rc)
{
    tpu_report *r = (tpu_report *)rc;
    if (!r) return "{}";
    if (r->json) return r->json;
    ut_buf b;
    ut_buf_init(&b);
    ut_buf_puts(&b, "{\"module\":");
    ut_buf_json_str(&b, r->module);
    ut_buf_puts(&b, ",\"chip\":");
    ut_buf_json_str(&b, r->chip);
    ut_buf_printf(&b, ",\"compatible\":%s,\"errors\":%d,\"warnings\":%d,\"notes\":%d,\"complete\":%s,\"problems\":[",
                  r->nerrors ? "false" : "true", r->nerrors, r->nwarnings, r->nnotes, r->oom ? "false" : "true");
    for (int i = 0; i < r->nproblems; i++) {
        const ver_problem *p = &r->problems[i];
        ut_buf_puts(&b, i ? ",\n {" : "\n {");
        ut_buf_printf(&b, "\"severity\":\"%s\",\"category\":", vc_sev_names[p->sev]);
        ut_buf_json_str(&b, p->category);
        ut_buf_puts(&b, ",\"where\":");
        ut_buf_json_str(&b, p->where);
        ut_buf_puts(&b, ",\"instruction\":");
        ut_buf_json_str(&b, p->instr);
        ut_buf_puts(&b, ",\"opcode\":");
        ut_buf_json_str(&b, p->opcode);
        ut_buf_puts(&b, ",\"op_name\":");
        ut_buf_json_str(&b, p->op_name);
        ut_buf_puts(&b, ",\"source\":");
        ut_buf_json_str(&b, p->source);
        ut_buf_puts(&b, ",\"message\":");
        ut_buf_json_str(&b, p->msg);
        ut_buf_puts(&b, ",\"hint\":");
        ut_buf_json_str(&b, p->hint);
        ut_buf_putc(&b, '}');
    }
    ut_buf_puts(&b, "],\n\"verdict\":");
    ut_buf vb;
    ut_buf_init(&vb);
    vc_verdict(r, &vb);
    ut_buf_json_str(&b, vb.data && !vb.failed ? vb.data : "");
    ut_buf_free(&vb);
    ut_buf_puts(&b, "}\n");
    r->json = ut_buf_take(&b);
    return r->json ? r->json : "{}";
}

/* ---- the chip table: only what differs between generations and matters to these rules ---- */

typedef struct vc_gen {
    const char *name;
    const char *aliases;   /* space separated */
    int         fp8_mxu;   /* native fp8 matrix units (documented for TPU7x) */
} vc_gen;

static const vc_gen vc_gens[] = {
    {"v2", "tpuv2", 0},
    {"v3", "tpuv3", 0},
    {"v4", "tpuv4", 0},
    {"v5e", "v5lite v5litepod tpuv5e", 0},
    {"v5p", "tpuv5p v5", 0},
    {"v6e", "trillium tpuv6e v6", 0},
    {"v7", "tpu7x v7x ironwood tpuv7", 1},
};

static const vc_gen *vc_find_gen(const char *chip)
{
    char low[32];
    size_t n = 0;
    for (; chip[n] && n < sizeof low - 1; n++) low[n] = (char)(chip[n] >= 'A' && chip[n] <= 'Z' ? chip[n] - 'A' + 'a' : chip[n]);
    low[n] = 0;
    /* "v5e-8", "v4-32": the slice size does not change the rules */
    char *dash = strchr(low, '-');
    if (dash) *dash = 0;
    n = strlen(low);
    for (size_t i = 0; i < sizeof vc_gens / sizeof vc_gens[0]; i++) {
        if (!strcmp(vc_gens[i].name, low)) return &vc_gens[i];
        const char *a = vc_gens[i].aliases;
        while (*a) {
            const char *e = strchr(a, ' ');
            size_t k = e ? (size_t)(e - a) : strlen(a);
            if (k == n && !memcmp(a, low, n)) return &vc_gens[i];
            a += k + (e ? 1 : 0);
        }
    }
    return NULL;
}

/* ---- rules ---- */

/* The first dynamic array in s (for the message), or NULL. */
static const hlo_shape *vc_first_dynamic(const hlo_shape *s)
{
    if (hlo_shape_is_tuple(s)) {
        for (int i = 0; i < s->ntuple; i++) {
            const hlo_shape *d = vc_first_dynamic(&s->tuple[i]);
            if (d) return d;
        }
        return NULL;
    }
    return s->dyn_mask ? s : NULL;
}

static int vc_has_type(const hlo_shape *s, int t)
{
    if (hlo_shape_is_tuple(s)) {
        for (int i = 0; i < s->ntuple; i++)
            if (vc_has_type(&s->tuple[i], t)) return 1;
        return 0;
    }
    return s->dtype == t;
}

/* A shape for messages, without its layout. */
static const char *vc_ss(const hlo_shape *s, char *buf, size_t n)
{
    ut_buf b;
    ut_buf_init(&b);
    hlo_shape_print(&b, s, 0);
    snprintf(buf, n, "%s", b.data && !b.failed ? b.data : "?");
    ut_buf_free(&b);
    return buf;
}

static int vc_is_fp8(int t)
{
    return t == TPU_F8E5M2 || t == TPU_F8E4M3FN || t == TPU_F8E4M3B11FNUZ || t == TPU_F8E5M2FNUZ ||
           t == TPU_F8E4M3FNUZ || t == TPU_F8E4M3 || t == TPU_F8E3M4;
}

typedef enum { VC_CC_NOOP, VC_CC_TPU, VC_CC_TPU_INTERNAL, VC_CC_HOST, VC_CC_GPU, VC_CC_UNKNOWN } vc_cc_kind;

/* What a custom-call target is on a TPU (each list checked with libtpu, see the top of the file). */
static vc_cc_kind vc_custom_call_kind(const char *t)
{
    static const char *const noop[] = {
        "Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape",   /* SPMD partitioner markers */
        "MoveToHost", "MoveToDevice", "LayoutConstraint",             /* placement and layout markers */
        "dce_sink",                                                   /* jax.lax.dce_sink: keeps a value alive */
        "xla.sdy.FuncResultSharding",   /* Shardy's result-sharding marker, removed by XLA's Shardy import */
        NULL};
    static const char *const tpu[] = {"tpu_custom_call", "ApproxTopK", "PartialReduce", "TopK", "X64Combine",
                                      "X64SplitLow", "X64SplitHigh", "PadToStatic", "SliceToDynamic",
                                      /* jax.numpy.linalg for TPUs (libtpu compiles them; tpusim runs them) */
                                      "LuDecomposition", "Qr", "ProductOfElementaryHouseholderReflectors", "Eigh",
                                      NULL};
    /* written by the TPU compiler itself into the programs it optimizes (seen in libtpu's dumps) */
    static const char *const internal[] = {"ConcatBitcast", "AllocateBuffer", "AssumeGatherIndicesInBound",
                                           "GatherScatterIndicesBitpacked", NULL};
    static const char *const host[] = {"xla_python_cpu_callback", "xla_python_gpu_callback", "xla_ffi_python_cpu_callback",
                                       "xla_ffi_python_gpu_callback", "PyFunc", "EagerPyFunc", "py_func",
                                       "InspectSharding", NULL};
    for (int i = 0; noop[i]; i++)
        if (!strcmp(t, noop[i])) return VC_CC_NOOP;
    for (int i = 0; tpu[i]; i++)
        if (!strcmp(t, tpu[i])) return VC_CC_TPU;
    for (int i = 0; internal[i]; i++)
        if (!strcmp(t, internal[i])) return VC_CC_TPU_INTERNAL;
    for (int i = 0; host[i]; i++)
        if (!strcmp(t, host[i])) return VC_CC_HOST;
    if (strstr(t, "PyFunc") || strstr(t, "python") || strstr(t, "callback")) return VC_CC_HOST;
    if (!strncmp(t, "__cublas", 8) || !strncmp(t, "__cudnn", 7) || !strncmp(t, "__gpu", 5) || !strncmp(t, "cu_", 3) ||
        !strncmp(t, "te_", 3) || strstr(t, "cuda") || strstr(t, "triton") || strstr(t, "Triton"))
        return VC_CC_GPU;
    return VC_CC_UNKNOWN;
}

static void vc_custom_call(ver_report *r, const hlo_module *m, const hlo_instr *in)
{
    const char *t = hlo_attr_str(in, HK_CUSTOM_CALL_TARGET);
    if (!t) t = "";
    switch (vc_custom_call_kind(t)) {
    case VC_CC_NOOP: return;
    case VC_CC_TPU:
        if (!strcmp(t, "tpu_custom_call"))
            ver_report_add(r, m, in, VER_NOTE, "custom-call",
                           "run it on a real TPU, or use the kernel's reference (plain JAX) version to simulate it",
                           "custom-call '%s' is a Mosaic (Pallas) TPU kernel: the TPU compiler accepts it, tpusim cannot "
                           "run or time its body", t);
        return;
    case VC_CC_TPU_INTERNAL:
        if (!ver_mixed_precision(m))
            ver_report_add(r, m, in, VER_WARNING, "custom-call", "give tpusim the program as exported, before optimization",
                           "custom-call '%s' is one the TPU compiler writes into programs it has optimized; this "
                           "program has no compiled (tiled) layouts, so it may not be what the compiler produced", t);
        return;
    case VC_CC_HOST:
        ver_report_add(r, m, in, VER_ERROR, "custom-call",
                       "remove the Python callback, or export for TPU so callbacks become send/recv host transfers",
                       "custom-call '%s' calls back into the host (Python/CPU); the TPU compiler has no emitter for it "
                       "(\"Custom emitter for %s not found\")", t, t);
        return;
    case VC_CC_GPU:
        ver_report_add(r, m, in, VER_ERROR, "custom-call",
                       "export the program for TPU (this one was lowered for GPU) or use the plain-HLO version of the op",
                       "custom-call '%s' is a GPU (CUDA/cuDNN/Triton) kernel; the TPU compiler has no such target", t);
        return;
    case VC_CC_UNKNOWN:
        ver_report_add(r, m, in, VER_ERROR, "custom-call",
                       "replace it with standard HLO ops, or check that the TPU runtime registers this target",
                       "custom-call target '%s' is not one the TPU compiler knows (it would say \"Custom emitter for %s "
                       "not found\")", t, t);
        return;
    }
}

static void vc_instr(ver_report *r, const hlo_module *m, const hlo_instr *in, const vc_gen *gen)
{
    char sb[200];
    hlo_op op = (hlo_op)in->op;
    /* static shapes: unbounded dimensions are refused, bounded ones padded to the bound */
    const hlo_shape *dyn = vc_first_dynamic(&in->shape);
    if (dyn) {
        int unbounded = 0;
        for (int i = 0; i < dyn->rank; i++) unbounded |= (dyn->dyn_mask >> i & 1) && dyn->dims[i] < 0;
        if (unbounded)
            ver_report_add(r, m, in, VER_ERROR, "dynamic shape", "give the dimension a fixed size or a bound (export with "
                           "static shapes)", "dynamic shape %s — the TPU compiler needs static shapes or bounded ones "
                           "('?' has no bound)", vc_ss(dyn, sb, sizeof sb));
        else
            ver_report_add(r, m, in, VER_WARNING, "dynamic shape", "pad to the bound and mask (or carry the true length) "
                           "to make the shape static", "dynamic shape %s — XLA:TPU pads it to its bound, so it compiles "
                           "but every op runs at the full bound", vc_ss(dyn, sb, sizeof sb));
    }
    /* element types */
    int has_c128 = vc_has_type(&in->shape, TPU_C128), has_f64 = vc_has_type(&in->shape, TPU_F64);
    for (int k = 0; k < in->nops && op == HLO_FFT; k++) {
        has_c128 |= vc_has_type(&in->ops[k]->shape, TPU_C128);
        has_f64 |= vc_has_type(&in->ops[k]->shape, TPU_F64);
    }
    if (op == HLO_FFT && (has_c128 || has_f64))
        ver_report_add(r, m, in, VER_ERROR, "element type", "compute the FFT in c64/f32, or on the host",
                       "fft of %s — the TPU has FFTs for c64/f32 only (\"Unexpected operand type for FFT\")",
                       has_c128 ? "c128" : "f64");
    else if (op == HLO_REDUCE_PRECISION && has_f64)
        ver_report_add(r, m, in, VER_ERROR, "element type", "convert to f32 first, or keep this computation off the TPU",
                       "reduce-precision of f64 — XLA:TPU emulates f64 with f32 pairs and has no rewrite for this op");
    else if ((has_c128 || has_f64) && op != HLO_PARAMETER && op != HLO_CONSTANT && op != HLO_TUPLE &&
             op != HLO_GET_TUPLE_ELEMENT)
        ver_report_add(r, m, in, VER_WARNING, "element type",
                       "use f32/c64 (or leave jax_enable_x64 off) unless double precision is required",
                       "%s — TPUs have no float64 hardware: XLA emulates it with pairs of f32 (slow, and not IEEE double)",
                       has_c128 ? "c128" : "f64");
    if ((op == HLO_DOT || op == HLO_CONVOLUTION || op == HLO_RAGGED_DOT) && in->nops >= 2 && gen && !gen->fp8_mxu &&
        (vc_is_fp8(in->ops[0]->shape.dtype) || vc_is_fp8(in->ops[1]->shape.dtype)))
        ver_report_add(r, m, in, VER_NOTE, "element type", "expect bf16 speed; native fp8 matrix units start with TPU7x",
                       "%s on %s operands: TPU %s has no fp8 matrix units, so XLA computes it in bf16", hlo_op_name(op),
                       tpu_dtype_name((tpu_dtype)in->ops[0]->shape.dtype), gen->name);
    /* ops */
    if (op == HLO_CUSTOM_CALL) vc_custom_call(r, m, in);
    if ((op == HLO_SEND || op == HLO_RECV) && hlo_attr_bool(in, HK_IS_HOST_TRANSFER, 0))
        ver_report_add(r, m, in, VER_NOTE, "host transfer", "keep host callbacks out of the training step",
                       "%s to the host: supported, but every execution stops for a host round trip", hlo_op_name(op));
    if (op == HLO_CONSTANT && in->literal && in->literal->elided)
        ver_report_add(r, m, in, VER_NOTE, "elided constant", "dump with --xla_dump_large_constants to keep the values",
                       "constant %s written as {...}: its values are not in the text, so the program can be checked and "
                       "timed but not run", vc_ss(&in->shape, sb, sizeof sb));
    for (int a = 0; a < in->nattrs; a++)
        if (in->attrs[a].key == HK_UNKNOWN)
            ver_report_add(r, m, in, VER_NOTE, "unknown attribute", NULL,
                           "attribute '%s' is not known to tpusim and was ignored", in->attrs[a].name);
}

tpu_status tpu_check(tpu_ctx *ctx, const tpu_module *m, const char *chip, tpu_report **out)
{
    if (!out) return ut_err(ctx, TPU_ERR_INVALID, "tpu_check: out is NULL");
    *out = NULL;
    if (!m) return ut_err(ctx, TPU_ERR_INVALID, "tpu_check: module is NULL");
    const vc_gen *gen = NULL;
    if (chip && *chip) {
        gen = vc_find_gen(chip);
        if (!gen)
            return ut_err(ctx, TPU_ERR_INVALID, "unknown TPU generation '%s' (known: v2, v3, v4, v5e, v5p, v6e, v7)", chip);
    }
    ver_report *r = ver_report_new(m->name, gen ? gen->name : NULL);
    if (!r) return ut_nomem(ctx);
    ver_verify_module(ctx, m, r);
    for (int c = 0; c < m->ncomps; c++)
        for (int i = 0; i < m->comps[c]->ninstrs; i++) vc_instr(r, m, m->comps[c]->instrs[i], gen);
    if (r->oom) {
        tpu_report_free(r);
        return ut_nomem(ctx);
    }
    *out = r;
    return TPU_OK;
}
