/* exe_interp.c — the interpreter: runs computations instruction by instruction in topological order,
 * dispatching each opcode to its kernel, freeing each value after its last use, and handling control flow
 * (call, fusion, while, conditional), tuples and the ops that need no kernel. Also tpu_run and
 * tpu_random_inputs, the public entry points. */
#include "exec.h"
#include "exe_fuse.h"
#include "compile/policy.h"
#include "verify/verify.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

struct exe_comp_info {
    int          n;
    uint8_t     *live;        /* instruction contributes to the result (or has side effects) */
    int         *free_start;  /* values to drop after instruction i: free_list[free_start[i] .. free_start[i+1]) */
    int         *free_list;
    int         *fgroup_of;   /* fused elementwise group of each instruction, or -1 */
    exe_fgroup  *fgroups;
    int          nfgroups;
    uint32_t    *dies;        /* bit k: operand k of instruction i is dropped after i (and is no other operand) */
    uint8_t     *gte_move;    /* get-tuple-element i may move its element out of a tuple nobody else holds */
    int         *dot_tr;      /* dot i: the transpose whose result it writes directly (S->cur_dot_out), or -1;
                               * that transpose: the dot's id (it passes the value on), or -1 */
    /* what exe_call_owned visits, resolved once (a loop body runs thousands of times): the live instructions
     * that do something at their place (not absorbed broadcasts, not group members before their group's last),
     * in order, each with what the loop needs in one record, and every operand id in one array (no pointer
     * chase per operand) */
    int          nsteps;
    struct exe_step *steps;
    int         *opid;
};

enum { EXE_STEP_KERNEL, EXE_STEP_GROUP, EXE_STEP_PARAM, EXE_STEP_CONST, EXE_STEP_GTE };
typedef struct exe_step {
    const hlo_instr *in;
    exe_kernel       k;          /* EXE_STEP_KERNEL: the opcode's kernel (NULL: not supported) */
    int              i;          /* instruction index */
    int              opid;       /* its operand ids: exe_comp_info.opid[opid .. opid + in->nops) */
    int              free0, free1;   /* values dropped after it: free_list[free0 .. free1) */
    uint32_t         dies;
    int              dot_tr;
    int              gte_index;  /* EXE_STEP_GTE: the tuple index (from index=) */
    uint8_t          kind;
    uint8_t          mixed;      /* an opcode exe_mixed_move may apply to */
} exe_step;

static exe_kernel exe_kernels[HLO_OP_COUNT];

/* TPUSIM_EXEC_PROFILE=1: wall time per opcode (and fused groups), printed after each run — a developer's
 * view of where the executor spends its time; =2 also lists the slowest single instructions. The setting is
 * read once; the counters belong to the run (exe_state.prof). */
#define EXE_PROF_TOP 25
struct exe_prof {
    double  s[HLO_OP_COUNT + 1];   /* seconds by opcode; [HLO_OP_COUNT]: fused groups */
    int64_t n[HLO_OP_COUNT + 1];   /* calls */
    struct { double s; const hlo_instr *in; } top[EXE_PROF_TOP];
};
static int exe_prof_flag = -1;
static void exe_prof_init(void)
{
    const char *e = getenv("TPUSIM_EXEC_PROFILE");
    exe_prof_flag = e && *e && strcmp(e, "0") ? (atoi(e) >= 2 ? 2 : 1) : 0;
}
static pthread_once_t exe_prof_once = PTHREAD_ONCE_INIT;

/* Off for multi-device runs: every device would print its own table. */
static int exe_prof_wanted(const exe_state *S)
{
    pthread_once(&exe_prof_once, exe_prof_init);
    return exe_prof_flag && !S->coll;
}
#define exe_prof_on() (S->prof != NULL)

static void exe_prof_note(exe_prof *P, const hlo_instr *in, double s)
{
    if (exe_prof_flag < 2) return;
    int w = 0;
    for (int i = 1; i < EXE_PROF_TOP; i++)
        if (P->top[i].s < P->top[w].s) w = i;
    if (s > P->top[w].s) {
        P->top[w].s = s;
        P->top[w].in = in;
    }
}

static void exe_prof_report(exe_prof *P)
{
    if (exe_prof_flag >= 2) {
        fprintf(stderr, "slowest instructions:\n");
        for (int k = 0; k < EXE_PROF_TOP; k++) {
            int b = -1;
            for (int i = 0; i < EXE_PROF_TOP; i++)
                if (P->top[i].in && (b < 0 || P->top[i].s > P->top[b].s)) b = i;
            if (b < 0) break;
            char sh[160];
            const hlo_instr *in = P->top[b].in;
            fprintf(stderr, "  %9.4f s  %-22s %-28s %s\n", P->top[b].s, hlo_op_name((hlo_op)in->op), in->name,
                    hlo_shape_str(&in->shape, sh, sizeof sh));
            P->top[b].in = NULL;
        }
    }
    double total = 0;
    for (int i = 0; i <= HLO_OP_COUNT; i++) total += P->s[i];
    fprintf(stderr, "executor time by opcode (TPUSIM_EXEC_PROFILE):\n");
    for (int pass = 0; pass < 40; pass++) {
        int best = -1;
        for (int i = 0; i <= HLO_OP_COUNT; i++)
            if (P->n[i] > 0 && (best < 0 || P->s[i] > P->s[best])) best = i;
        if (best < 0) break;
        fprintf(stderr, "  %-24s %9.3f s %5.1f%% %8lld calls\n", best == HLO_OP_COUNT ? "(fused elementwise)" : hlo_op_name((hlo_op)best),
                P->s[best], total > 0 ? 100 * P->s[best] / total : 0, (long long)P->n[best]);
        P->n[best] = -P->n[best] - 1;   /* mark as printed */
    }
}
static EXE_KERNEL(exe_k_control);

static void exe_init_kernels_once(void);
static pthread_once_t exe_kernels_once = PTHREAD_ONCE_INIT;

/* The dispatch table is built once, thread-safely (device threads of the replicated runtime start together). */
static void exe_init_kernels(void) { pthread_once(&exe_kernels_once, exe_init_kernels_once); }

static void exe_init_kernels_once(void)
{
    for (int op = 0; op < HLO_OP_COUNT; op++) {
        hlo_class c = hlo_op_class((hlo_op)op);
        if (c == HLO_CLASS_EW1) exe_kernels[op] = exe_k_unary;
        else if (c == HLO_CLASS_EW2) exe_kernels[op] = exe_k_binary;
    }
    exe_kernels[HLO_CONVERT] = exe_k_convert;
    exe_kernels[HLO_REDUCE_PRECISION] = exe_k_reduce_precision;
    exe_kernels[HLO_BITCAST_CONVERT] = exe_k_bitcast_convert;
    exe_kernels[HLO_COMPARE] = exe_k_compare;
    exe_kernels[HLO_SELECT] = exe_k_select;
    exe_kernels[HLO_CLAMP] = exe_k_clamp;
    exe_kernels[HLO_MAP] = exe_k_map;
    exe_kernels[HLO_BROADCAST] = exe_k_broadcast;
    exe_kernels[HLO_RESHAPE] = exe_k_reshape;
    exe_kernels[HLO_BITCAST] = exe_k_bitcast;
    exe_kernels[HLO_TRANSPOSE] = exe_k_transpose;
    exe_kernels[HLO_SLICE] = exe_k_slice;
    exe_kernels[HLO_CONCATENATE] = exe_k_concatenate;
    exe_kernels[HLO_PAD] = exe_k_pad;
    exe_kernels[HLO_REVERSE] = exe_k_reverse;
    exe_kernels[HLO_IOTA] = exe_k_iota;
    exe_kernels[HLO_DYNAMIC_SLICE] = exe_k_dynamic_slice;
    exe_kernels[HLO_DYNAMIC_UPDATE_SLICE] = exe_k_dynamic_update_slice;
    exe_kernels[HLO_REDUCE] = exe_k_reduce;
    exe_kernels[HLO_DOT] = exe_k_dot;
    exe_kernels[HLO_CONVOLUTION] = exe_k_convolution;
    exe_kernels[HLO_GATHER] = exe_k_gather;
    exe_kernels[HLO_SCATTER] = exe_k_scatter;
    exe_kernels[HLO_REDUCE_WINDOW] = exe_k_reduce_window;
    exe_kernels[HLO_SELECT_AND_SCATTER] = exe_k_select_and_scatter;
    exe_kernels[HLO_SORT] = exe_k_sort;
    exe_kernels[HLO_TOPK] = exe_k_topk;
    exe_kernels[HLO_RNG_BIT_GENERATOR] = exe_k_rng_bit_generator;
    exe_kernels[HLO_RNG] = exe_k_rng;
    exe_kernels[HLO_CHOLESKY] = exe_k_cholesky;
    exe_kernels[HLO_TRIANGULAR_SOLVE] = exe_k_triangular_solve;
    exe_kernels[HLO_BATCH_NORM_TRAINING] = exe_k_batch_norm_training;
    exe_kernels[HLO_BATCH_NORM_INFERENCE] = exe_k_batch_norm_inference;
    exe_kernels[HLO_BATCH_NORM_GRAD] = exe_k_batch_norm_grad;
    exe_kernels[HLO_FFT] = exe_k_fft;
    static const hlo_op control[] = {
        HLO_TUPLE, HLO_GET_TUPLE_ELEMENT, HLO_CALL, HLO_FUSION, HLO_WHILE, HLO_CONDITIONAL, HLO_CUSTOM_CALL,
        HLO_OPT_BARRIER, HLO_DOMAIN, HLO_ADD_DEPENDENCY, HLO_AFTER_ALL, HLO_COPY, HLO_REPLICA_ID,
        HLO_PARTITION_ID, HLO_ALL_REDUCE, HLO_ALL_GATHER, HLO_REDUCE_SCATTER, HLO_ALL_TO_ALL,
        HLO_COLLECTIVE_PERMUTE, HLO_COLLECTIVE_BROADCAST, HLO_ALL_REDUCE_START, HLO_ALL_REDUCE_DONE,
        HLO_ALL_GATHER_START, HLO_ALL_GATHER_DONE, HLO_COLLECTIVE_PERMUTE_START, HLO_COLLECTIVE_PERMUTE_DONE,
        HLO_ASYNC_START, HLO_ASYNC_DONE, HLO_ASYNC_UPDATE, HLO_COPY_START, HLO_COPY_DONE, HLO_GET_DIMENSION_SIZE,
        HLO_SEND, HLO_SEND_DONE, HLO_RECV, HLO_RECV_DONE,
    };
    for (size_t i = 0; i < sizeof control / sizeof control[0]; i++) exe_kernels[control[i]] = exe_k_control;
}

/* ---- per-computation plan ---- */

static void exe_comp_info_free(exe_comp_info *ci)
{
    if (!ci) return;
    ut_free(ci->fgroup_of);
    exe_fuse_free(ci->fgroups, ci->nfgroups);
    ut_free(ci->live);
    ut_free(ci->free_start);
    ut_free(ci->free_list);
    ut_free(ci->dies);
    ut_free(ci->gte_move);
    ut_free(ci->dot_tr);
    ut_free(ci->steps);
    ut_free(ci->opid);
    ut_free(ci);
}

static int exe_has_side_effect(const hlo_instr *in)
{
    switch ((hlo_op)in->op) {
    case HLO_OUTFEED: case HLO_SEND: case HLO_SEND_DONE: case HLO_RECV: case HLO_RECV_DONE: case HLO_INFEED:
        return 1;
    case HLO_CUSTOM_CALL: return hlo_attr_bool(in, HK_CUSTOM_CALL_HAS_SIDE_EFFECT, 0);
    default: return 0;
    }
}

/* The step list and operand ids (exe_comp_info.steps, opid), once the rest of the plan is made. Returns
 * non-zero on no memory. */
static int exe_comp_steps(const hlo_comp *c, exe_comp_info *ci)
{
    int n = c->ninstrs, nops = 0;
    for (int i = 0; i < n; i++) nops += c->instrs[i]->nops;
    ci->steps = ut_malloc((size_t)(n ? n : 1) * sizeof *ci->steps);
    ci->opid = ut_malloc((size_t)(nops ? nops : 1) * sizeof *ci->opid);
    if (!ci->steps || !ci->opid) return 1;
    nops = 0;
    for (int i = 0; i < n; i++) {
        const hlo_instr *in = c->instrs[i];
        int start = nops;
        for (int k = 0; k < in->nops; k++) ci->opid[nops++] = in->ops[k]->id;
        int fg = ci->fgroup_of[i];
        if (!ci->live[i] || fg == EXE_FUSE_ABSORBED || (fg >= 0 && ci->fgroups[fg].last != in)) continue;
        exe_step *st = &ci->steps[ci->nsteps++];
        memset(st, 0, sizeof *st);
        st->in = in;
        st->i = i;
        st->opid = start;
        st->free0 = ci->free_start[i];
        st->free1 = ci->free_start[i + 1];
        st->dies = ci->dies[i];
        st->dot_tr = ci->dot_tr[i];
        st->kind = fg >= 0 ? EXE_STEP_GROUP : in->op == HLO_PARAMETER ? EXE_STEP_PARAM
                   : in->op == HLO_CONSTANT ? EXE_STEP_CONST : EXE_STEP_KERNEL;
        st->k = exe_kernels[in->op];
        /* get-tuple-element: resolved here, run in the loop (the kernel, exe_kc_gte, reports bad indices) */
        int64_t gi = in->op == HLO_GET_TUPLE_ELEMENT && in->nops == 1 ? hlo_attr_int(in, HK_INDEX, -1) : -1;
        if (gi >= 0 && gi < INT32_MAX) {
            st->kind = EXE_STEP_GTE;
            st->gte_index = (int)gi;
        }
        switch ((hlo_op)in->op) {
        case HLO_DYNAMIC_SLICE: case HLO_SLICE: case HLO_RESHAPE: case HLO_TRANSPOSE: case HLO_BROADCAST: case HLO_REVERSE:
            st->mixed = 1;
            break;
        default: break;
        }
    }
    return 0;
}

/* Makes the plan of computation c (fused groups unless `fuse` is 0). */
static tpu_status exe_comp_info_make(exe_state *S, const hlo_comp *c, int fuse, exe_comp_info **out)
{
    int n = c->ninstrs;
    exe_comp_info *ci = ut_calloc(1, sizeof *ci);
    int *last = ut_malloc((size_t)n * sizeof *last);
    int *count = ut_calloc((size_t)n + 1, sizeof *count);
    if (!ci || !last || !count) goto nomem;
    ci->n = n;
    ci->live = ut_calloc((size_t)n, 1);
    ci->free_start = ut_calloc((size_t)n + 1, sizeof *ci->free_start);
    if (!ci->live || !ci->free_start) goto nomem;
    /* liveness: backwards from the root and side-effecting instructions */
    ci->live[c->root->id] = 1;
    for (int i = n - 1; i >= 0; i--) {
        const hlo_instr *in = c->instrs[i];
        if (exe_has_side_effect(in)) ci->live[i] = 1;
        if (!ci->live[i]) continue;
        for (int k = 0; k < in->nops; k++) ci->live[in->ops[k]->id] = 1;
        for (int k = 0; k < in->nctrl; k++) ci->live[in->ctrl[k]->id] = 1;
    }
    /* fused elementwise groups: members run when their group's root does */
    ci->fgroup_of = ut_malloc((size_t)n * sizeof *ci->fgroup_of);
    if (!ci->fgroup_of) goto nomem;
    if (exe_fuse_plan(S->ctx, c, fuse, ci->live, ci->fgroup_of, &ci->fgroups, &ci->nfgroups)) {
        ut_free(last);
        ut_free(count);
        exe_comp_info_free(ci);
        return TPU_ERR_NOMEM;
    }
    /* last use of each value among live instructions (a group reads its inputs where its last member stands);
     * values nobody uses die right after they are made; members of groups have no values of their own unless
     * they are outputs, absorbed broadcasts none at all (count[] marks the outputs for now) */
    for (int i = 0; i < n; i++) last[i] = i;
    for (int i = 0; i < n; i++) {
        const hlo_instr *in = c->instrs[i];
        if (!ci->live[i] || ci->fgroup_of[i] != EXE_FUSE_NONE) continue;
        for (int k = 0; k < in->nops; k++)
            if (last[in->ops[k]->id] < i) last[in->ops[k]->id] = i;
    }
    for (int g = 0; g < ci->nfgroups; g++) {
        const exe_fgroup *G = &ci->fgroups[g];
        for (int q = 0; q < G->ninputs; q++)
            if (last[G->inputs[q]->id] < G->last->id) last[G->inputs[q]->id] = G->last->id;
        for (int k = 0; k < G->noutputs; k++) count[G->outputs[k]->id] = 1;
    }
#define EXE_HAS_VALUE(i) (ci->live[i] && (ci->fgroup_of[i] == EXE_FUSE_NONE || (ci->fgroup_of[i] >= 0 && count[i] == 1)))
    for (int i = 0; i < n; i++) last[i] = last[i] | (EXE_HAS_VALUE(i) ? 0 : INT32_MIN);   /* no value: no entry */
    memset(count, 0, (size_t)n * sizeof *count);
#undef EXE_HAS_VALUE
#define EXE_HAS_VALUE(i) (last[i] >= 0)
    for (int i = 0; i < n; i++)
        if (EXE_HAS_VALUE(i) && i != c->root->id) count[last[i]]++;
    int total = 0;
    for (int i = 0; i < n; i++) {
        ci->free_start[i] = total;
        total += count[i];
    }
    ci->free_start[n] = total;
    ci->free_list = ut_malloc((size_t)(total ? total : 1) * sizeof(int));
    if (!ci->free_list) goto nomem;
    memset(count, 0, (size_t)n * sizeof *count);
    for (int i = 0; i < n; i++)
        if (EXE_HAS_VALUE(i) && i != c->root->id) ci->free_list[ci->free_start[last[i]] + count[last[i]]++] = i;
#undef EXE_HAS_VALUE
    /* which operands die at each instruction (buffer reuse, exe_take_operand) */
    ci->dies = ut_calloc((size_t)n, sizeof *ci->dies);
    ci->gte_move = ut_calloc((size_t)n, 1);
    if (!ci->dies || !ci->gte_move) goto nomem;
    for (int i = 0; i < n; i++)
        for (int f = ci->free_start[i]; f < ci->free_start[i + 1]; f++) {
            const hlo_instr *in = c->instrs[i];
            int v = ci->free_list[f], at = -1, times = 0;
            for (int k = 0; k < in->nops; k++)
                if (in->ops[k]->id == v) {
                    at = k;
                    times++;
                }
            if (times == 1 && at < 32) ci->dies[i] |= 1u << at;
        }
    /* a tuple read only by get-tuple-elements, each index once, can give each element away: nobody else will
     * read that slot (used when the tuple's value is held by nobody else, e.g. a while loop's state) */
    memset(count, 0, (size_t)n * sizeof *count);
    for (int i = 0; i < n; i++) {
        const hlo_instr *in = c->instrs[i];
        if (!ci->live[i]) continue;
        for (int k = 0; k < in->nops; k++)
            if (in->op != HLO_GET_TUPLE_ELEMENT) count[in->ops[k]->id] = -1;   /* used whole */
        for (int k = 0; k < in->nctrl; k++) count[in->ctrl[k]->id] = -1;
    }
    count[c->root->id] = -1;
    /* bucket the get-tuple-elements by tuple (last[] is free again: next in the tuple's list) */
    for (int i = 0; i < n; i++) last[i] = -1;
    for (int i = n - 1; i >= 0; i--) {
        const hlo_instr *in = c->instrs[i];
        if (!ci->live[i] || in->op != HLO_GET_TUPLE_ELEMENT || in->nops != 1 || count[in->ops[0]->id] < 0) continue;
        int t = in->ops[0]->id;
        last[i] = count[t] > 0 ? count[t] - 1 : -1;   /* count[t] holds 1 + the first gte of t */
        count[t] = i + 1;
    }
    for (int t = 0; t < n; t++) {
        if (count[t] <= 0) continue;
        for (int i = count[t] - 1; i >= 0; i = last[i]) {
            int64_t idx = hlo_attr_int(c->instrs[i], HK_INDEX, -1);
            int unique = 1;
            for (int j = count[t] - 1; j >= 0 && unique; j = last[j])
                if (j != i && hlo_attr_int(c->instrs[j], HK_INDEX, -1) == idx) unique = 0;
            ci->gte_move[i] = (uint8_t)unique;
        }
    }
    /* dots read only by a transpose that swaps the lhs-free and rhs-free dimensions (uses counted in count[]) */
    ci->dot_tr = ut_malloc((size_t)n * sizeof *ci->dot_tr);
    if (!ci->dot_tr) goto nomem;
    memset(count, 0, (size_t)n * sizeof *count);
    for (int i = 0; i < n; i++) {
        const hlo_instr *in = c->instrs[i];
        ci->dot_tr[i] = -1;
        if (!ci->live[i]) continue;
        for (int k = 0; k < in->nops; k++) count[in->ops[k]->id]++;
        for (int k = 0; k < in->nctrl; k++) count[in->ctrl[k]->id] += 2;
    }
    for (int i = 0; i < n; i++) {
        const hlo_instr *t = c->instrs[i];
        if (!ci->live[i] || t->op != HLO_TRANSPOSE || t->nops != 1 || ci->fgroup_of[i] != EXE_FUSE_NONE) continue;
        const hlo_instr *d = t->ops[0];
        if (d->op != HLO_DOT || d == c->root || count[d->id] != 1 || ci->fgroup_of[d->id] >= 0 || d->nops != 2 ||
            !hlo_shape_is_array(&d->shape) || !hlo_shape_is_array(&t->shape) || t->shape.dtype != d->shape.dtype)
            continue;
        const int64_t *lb, *lc, *rc, *perm;
        int nb = hlo_attr_ints(d, HK_LHS_BATCH_DIMS, &lb), nlc = hlo_attr_ints(d, HK_LHS_CONTRACTING_DIMS, &lc);
        int nrc = hlo_attr_ints(d, HK_RHS_CONTRACTING_DIMS, &rc), np = hlo_attr_ints(t, HK_DIMENSIONS, &perm);
        int nm = d->ops[0]->shape.rank - nb - nlc, nn = d->ops[1]->shape.rank - nb - nrc;
        if (nm < 1 || nn < 1 || np != nb + nm + nn || np != d->shape.rank) continue;
        int ok = 1;
        for (int k = 0; k < np && ok; k++) {
            int64_t want = k < nb ? k : k < nb + nn ? nm + k : k - nn;
            ok = perm[k] == want;
        }
        if (!ok) continue;
        ci->dot_tr[d->id] = i;
        ci->dot_tr[i] = d->id;
    }
    if (exe_comp_steps(c, ci)) goto nomem;
    ut_free(last);
    ut_free(count);
    *out = ci;
    return TPU_OK;
nomem:
    ut_free(last);
    ut_free(count);
    exe_comp_info_free(ci);
    return ut_nomem(S->ctx);
}

/* The module's kept plans (hlo_module.exec_plans): slot 2 * computation id + 1 with fused groups, + 0
 * without (EXE_NO_FUSION runs). Slots are filled once, by compare-and-swap: threads that made the same plan
 * at the same time keep the first one published and free theirs. */
typedef struct exe_plans {
    hlo_module    *inl;       /* the module with the calls inside loops inlined (exe_inlined), or NULL */
    int            inl_none;  /* 1: nothing to inline (or it failed): run the module as written */
    int            n;
    exe_comp_info *slot[];
} exe_plans;

static void exe_plans_free(void *p)
{
    exe_plans *P = p;
    for (int i = 0; i < P->n; i++) exe_comp_info_free(P->slot[i]);
    hlo_module_free(P->inl);
    ut_free(P);
}

static exe_plans *exe_plans_of(const hlo_module *m)
{
    hlo_module *mm = (hlo_module *)m;   /* the cache is the only field a run writes */
    exe_plans *P = __atomic_load_n(&mm->exec_plans, __ATOMIC_ACQUIRE);
    if (P) return P;
    P = ut_calloc(1, sizeof *P + (size_t)(2 * m->ncomps) * sizeof P->slot[0]);
    if (!P) return NULL;
    P->n = 2 * m->ncomps;
    void *none = NULL;
    if (!__atomic_compare_exchange_n(&mm->exec_plans, &none, (void *)P, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        ut_free(P);
        return none;
    }
    mm->exec_plans_free = exe_plans_free;   /* only the publisher writes it; only hlo_module_free reads it */
    return P;
}

int exe_plans_count(const hlo_module *m)
{
    exe_plans *P = __atomic_load_n(&((hlo_module *)m)->exec_plans, __ATOMIC_ACQUIRE);
    int n = 0;
    for (int i = 0; P && i < P->n; i++) n += __atomic_load_n(&P->slot[i], __ATOMIC_ACQUIRE) != NULL;
    return n;
}

/* Does a computation that a while loop runs (its body or condition, or what they call) hold a call? Each
 * such call costs a computation call per iteration (arguments, a tuple of results, a value table) and keeps
 * the callee's elementwise ops apart from the caller's. */
static int exe_loop_calls(const hlo_module *m)
{
    uint8_t *in_loop = ut_calloc((size_t)m->ncomps + 1, 1);
    if (!in_loop) return 0;
    for (int c = 0; c < m->ncomps; c++)
        for (int i = 0; i < m->comps[c]->ninstrs; i++) {
            const hlo_instr *in = m->comps[c]->instrs[i];
            for (int k = 0; in->op == HLO_WHILE && k < in->ncalled; k++) in_loop[in->called[k]->id] = 1;
        }
    int found = 0;
    for (int changed = 1; changed && !found;) {   /* what loop computations call runs in the loop too */
        changed = 0;
        for (int c = 0; c < m->ncomps && !found; c++) {
            if (!in_loop[c]) continue;
            for (int i = 0; i < m->comps[c]->ninstrs && !found; i++) {
                const hlo_instr *in = m->comps[c]->instrs[i];
                if (in->op == HLO_CALL && in->ncalled == 1 && !hlo_attr_bool(in, HK_IS_COMPOSITE, 0)) found = 1;
                for (int k = 0; k < in->ncalled; k++)
                    if (!in_loop[in->called[k]->id]) changed = in_loop[in->called[k]->id] = 1;
            }
        }
    }
    ut_free(in_loop);
    return found;
}

/* The module a run executes: m itself, or (made once, kept with m's plans) a copy of m with its calls inlined
 * (compile/inline.c, as the TPU compiler does) when a loop runs calls — the same instructions, in the same
 * order, without a computation call per iteration, and fused across what were call boundaries (the reshapes
 * that only carried values across them skipped: cmp_forward_moves). A failed
 * inlining (no memory) leaves m as it is. */
static const hlo_module *exe_inlined(tpu_ctx *ctx, const hlo_module *m)
{
    exe_plans *P = exe_plans_of(m);
    if (!P || __atomic_load_n(&P->inl_none, __ATOMIC_ACQUIRE)) return m;
    hlo_module *inl = __atomic_load_n(&P->inl, __ATOMIC_ACQUIRE);
    if (inl) return inl;
    if (!exe_loop_calls(m) || cmp_inline_calls(ctx, m, &inl)) {
        __atomic_store_n(&P->inl_none, 1, __ATOMIC_RELEASE);
        return m;
    }
    cmp_forward_moves(inl);
    hlo_module *none = NULL;
    if (!__atomic_compare_exchange_n(&P->inl, &none, inl, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        hlo_module_free(inl);   /* another thread published its copy first */
        return none;
    }
    return inl;
}

static tpu_status exe_comp_info_get(exe_state *S, const hlo_comp *c, const exe_comp_info **out)
{
    if (!S->comp_info) {
        S->comp_info = ut_calloc((size_t)S->m->ncomps, sizeof *S->comp_info);
        if (!S->comp_info) return ut_nomem(S->ctx);
    }
    if (S->comp_info[c->id]) {
        *out = S->comp_info[c->id];
        return TPU_OK;
    }
    exe_plans *P = exe_plans_of(S->m);
    if (!P) return ut_nomem(S->ctx);
    int fuse = !(S->ref & EXE_NO_FUSION);
    exe_comp_info **slot = &P->slot[2 * c->id + fuse];
    exe_comp_info *ci = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (!ci) {
        tpu_status st = exe_comp_info_make(S, c, fuse, &ci);
        if (st) return st;
        exe_comp_info *none = NULL;
        if (!__atomic_compare_exchange_n(slot, &none, ci, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            exe_comp_info_free(ci);
            ci = none;
        }
    }
    S->comp_info[c->id] = ci;
    *out = ci;
    return TPU_OK;
}

static tpu_status exe_literal_value(exe_state *S, const hlo_instr *in, const hlo_literal *lit, exe_value **out);

/* The value of constant instruction i of computation c, made once per run (values are reference counted
 * without atomics: they are not shared between runs). */
static tpu_status exe_const_value(exe_state *S, const hlo_comp *c, const hlo_instr *in, exe_value **out)
{
    if (!S->consts) {
        S->consts = ut_calloc((size_t)S->m->ncomps, sizeof *S->consts);
        if (!S->consts) return ut_nomem(S->ctx);
    }
    exe_value **cv = S->consts[c->id];
    if (!cv) {
        cv = S->consts[c->id] = ut_calloc((size_t)c->ninstrs, sizeof *cv);
        if (!cv) return ut_nomem(S->ctx);
    }
    tpu_status st = cv[in->id] ? TPU_OK : exe_literal_value(S, in, in->literal, &cv[in->id]);
    if (!st) *out = exe_value_ref(cv[in->id]);
    return st;
}

/* ---- constants ---- */

static tpu_status exe_literal_value(exe_state *S, const hlo_instr *in, const hlo_literal *lit, exe_value **out)
{
    if (hlo_shape_is_tuple(&lit->shape)) {
        exe_value *elems[256];
        if (lit->ntuple > 256) return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "tuple constant with more than 256 elements");
        for (int i = 0; i < lit->ntuple; i++) {
            tpu_status st = exe_literal_value(S, in, &lit->tuple[i], &elems[i]);
            if (st) {
                for (int k = 0; k < i; k++) exe_value_unref(elems[k]);
                return st;
            }
        }
        *out = exe_value_tuple(elems, lit->ntuple);
        return *out ? TPU_OK : ut_nomem(S->ctx);
    }
    if (!hlo_shape_is_array(&lit->shape)) {
        *out = exe_value_tuple(NULL, 0);   /* token */
        return *out ? TPU_OK : ut_nomem(S->ctx);
    }
    if (lit->elided)
        return exe_fail(S, in, TPU_ERR_UNRUNNABLE,
                        "its values were elided in the dump ({...}); this program can be analysed but not run "
                        "(re-dump with --xla_dump_large_constants)");
    tpu_tensor *t;
    tpu_status st = exe_alloc_shape(S, &lit->shape, &t);
    if (st) return st;
    if (lit->nbytes) memcpy(t->data, lit->data, lit->nbytes);
    return exe_out_array(S, t, out);
}

/* ---- the ops handled here ---- */

static tpu_status exe_identity(exe_value *const *ops, exe_value **out)
{
    *out = exe_value_ref(ops[0]);
    return TPU_OK;
}

static tpu_status exe_token(exe_state *S, exe_value **out)
{
    *out = exe_value_tuple(NULL, 0);
    return *out ? TPU_OK : ut_nomem(S->ctx);
}

static tpu_status exe_scalar_int(exe_state *S, const hlo_instr *in, int64_t v, exe_value **out)
{
    tpu_tensor *t;
    tpu_status st = exe_alloc(S, in, &t);
    if (st) return st;
    ten_store_i64(t->dtype, t->data, 0, v);
    return exe_out_array(S, t, out);
}

/* A tuple of `n` values (references taken over); frees them on failure. */
static tpu_status exe_tuple_of(exe_state *S, exe_value **v, int n, exe_value **out)
{
    for (int i = 0; i < n; i++)
        if (!v[i]) {
            for (int k = 0; k < n; k++) exe_value_unref(v[k]);
            return ut_nomem(S->ctx);
        }
    *out = exe_value_tuple(v, n);
    if (!*out) {
        for (int k = 0; k < n; k++) exe_value_unref(v[k]);
        return ut_nomem(S->ctx);
    }
    return TPU_OK;
}

/* send / send-done / recv / recv-done to the host (jax's host callbacks). The transfer happens at send and
 * recv; the -done halves pass their token (and recv's value) on. send(x, token) -> (x, u32[] context, token);
 * recv(token) -> (value, u32[] context, token); recv-done -> (value, token). */
static tpu_status exe_host_transfer(exe_state *S, const hlo_instr *in, exe_value *const *ops, exe_value **out)
{
    hlo_op op = (hlo_op)in->op;
    if (!hlo_attr_bool(in, HK_IS_HOST_TRANSFER, 0))
        return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "device-to-device send/recv is not supported by the executor");
    if (!S->host)
        return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "a host transfer (a host callback such as jax.debug.print) needs a "
                        "host to talk to: it runs through the PJRT plugin, not in tpusim run");
    int64_t ch = hlo_attr_int(in, HK_CHANNEL_ID, 0);
    int device = (int)(S->replica_id * (S->coll ? S->coll->num_partitions : 1) + S->partition_id);
    if (op == HLO_SEND_DONE) return exe_token(S, out);
    if (op == HLO_RECV_DONE) {
        if (ops[0]->t || ops[0]->ntuple < 3) return exe_fail(S, in, TPU_ERR_SHAPE, "operand is not a recv tuple");
        exe_value *v[2] = {exe_value_ref(ops[0]->elems[0]), exe_value_ref(ops[0]->elems[2])};
        return exe_tuple_of(S, v, 2, out);
    }
    if (!hlo_shape_is_tuple(&in->shape) || in->shape.ntuple < 3 || !hlo_shape_is_array(&in->shape.tuple[0]))
        return exe_fail(S, in, TPU_ERR_SHAPE, "expected a (value, u32[], token[]) result");
    exe_value *v[3] = {NULL, NULL, NULL};
    tpu_status st = TPU_OK;
    if (op == HLO_SEND) {
        if (!ops[0]->t) return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "sending a tuple to the host");
        st = S->host->send(S->host->user, S->ctx, device, ch, ops[0]->t);
        v[0] = exe_value_ref(ops[0]);
    } else {
        tpu_tensor *t;
        st = exe_alloc_shape(S, &in->shape.tuple[0], &t);
        if (!st) st = S->host->recv(S->host->user, S->ctx, device, ch, t);
        if (!st) st = exe_out_array(S, t, &v[0]);
        else exe_tensor_release(t);
    }
    if (st) {
        exe_value_unref(v[0]);
        char where[256];
        ut_err_prefix(S->ctx, "%s: host transfer '%s' (channel %lld)", hlo_where(S->m, in, where, sizeof where),
                      in->name, (long long)ch);
        return st;
    }
    tpu_tensor *ctxt;
    st = exe_alloc_shape(S, &in->shape.tuple[1], &ctxt);
    if (st) {
        exe_value_unref(v[0]);
        return st;
    }
    memset(ctxt->data, 0, ctxt->nbytes);
    if (exe_out_array(S, ctxt, &v[1]) || exe_token(S, &v[2])) {
        for (int k = 0; k < 3; k++) exe_value_unref(v[k]);
        return ut_nomem(S->ctx);
    }
    return exe_tuple_of(S, v, 3, out);
}

/* Group size of a collective from replica_groups (all devices when the attribute is empty or absent). */
static int64_t exe_group_size(exe_state *S, const hlo_instr *in)
{
    const hlo_attr *a = hlo_attr_find(in, HK_REPLICA_GROUPS);
    int64_t all = S->coll ? (int64_t)S->coll->num_replicas * S->coll->num_partitions
                          : hlo_module_replica_count(S->m) * hlo_module_num_partitions(S->m);
    if (!a || a->kind != HA_RGROUPS) return all;
    const hlo_rgroups *g = a->v.rgroups;
    if (g->iota) return g->gdims[1];
    if (g->ngroups == 0) return all;
    return g->len[0];
}

/* Instruction number across the module (computations in order), for per-instruction tables. */
static int64_t exe_global_index(const exe_state *S, const hlo_instr *in)
{
    int64_t base = 0;
    for (int c = 0; c < in->parent->id; c++) base += S->m->comps[c]->ninstrs;
    return base + in->id;
}

/* ConcatBitcast, the TPU compiler's own custom-call: its operands (slices of one array, fetched separately)
 * laid end to end in memory along the result's most-major dimension, i.e. a concatenation along the one
 * dimension in which the operands differ from the result. */
/* Programs the TPU compiler optimized move data and change its float type in one instruction
 * (`bf16[64,1024] dynamic-slice(f32[2048,1024] ...)` in a loop that feeds a matmul). */
static int exe_mixed_move(const hlo_instr *in, exe_value *const *ops)
{
    switch ((hlo_op)in->op) {
    case HLO_DYNAMIC_SLICE: case HLO_SLICE: case HLO_RESHAPE: case HLO_TRANSPOSE: case HLO_BROADCAST: case HLO_REVERSE:
        break;
    default: return 0;
    }
    if (!in->nops || !ops[0]->t || !hlo_shape_is_array(&in->shape)) return 0;
    tpu_dtype from = ops[0]->t->dtype, to = (tpu_dtype)in->shape.dtype;
    return from != to && tpu_dtype_kind(from) == 'f' && tpu_dtype_kind(to) == 'f';
}

/* Converts operand 0 to the result's type (as the `convert` kernel does), then moves it with kernel k. */
static tpu_status exe_move_converted(exe_state *S, const hlo_instr *in, exe_value *const *ops, exe_kernel k,
                                     exe_value **out)
{
    hlo_instr cv = *in;
    cv.op = HLO_CONVERT;
    cv.nops = 1;
    cv.shape = in->ops[0]->shape;
    cv.shape.dtype = in->shape.dtype;
    exe_value *conv = NULL;
    tpu_status st = exe_k_convert(S, &cv, ops, &conv);
    if (st) return st;
    exe_value *nops[16];
    int n = in->nops < 16 ? in->nops : 16;
    for (int q = 0; q < n; q++) nops[q] = q ? ops[q] : conv;
    st = k(S, in, nops, out);
    exe_value_unref(conv);
    return st;
}

static tpu_status exe_concat_bitcast(exe_state *S, const hlo_instr *in, exe_value *const *ops, exe_value **out)
{
    if (!hlo_shape_is_array(&in->shape) || in->nops < 1)
        return exe_fail(S, in, TPU_ERR_SHAPE, "ConcatBitcast needs array operands and result");
    const hlo_shape *rs = &in->shape;
    int m2m[TPU_MAX_RANK];
    hlo_shape_m2m(rs, m2m);
    int d = rs->rank > 0 ? m2m[rs->rank - 1] : -1;
    int64_t sum = 0;
    int bytes = 0;   /* operands of another type or rank (bytes of a bitcast array): their bytes end to end */
    size_t nb = 0;
    for (int i = 0; i < in->nops; i++) {
        if (!ops[i]->t) return exe_fail(S, in, TPU_ERR_SHAPE, "ConcatBitcast operand %d is not an array", i);
        if (ops[i]->t->rank != rs->rank || ops[i]->t->dtype != (tpu_dtype)rs->dtype) bytes = 1;
        nb += ops[i]->t->nbytes;
    }
    if (bytes) {
        tpu_tensor *t;
        tpu_status st = exe_alloc(S, in, &t);
        if (st) return st;
        if (nb != t->nbytes) {
            size_t tb = t->nbytes;   /* read before t is released */
            exe_tensor_release(t);
            return exe_fail(S, in, TPU_ERR_SHAPE, "ConcatBitcast operands hold %zu bytes, the result %zu", nb, tb);
        }
        size_t off = 0;
        for (int i = 0; i < in->nops; i++) {
            memcpy((char *)t->data + off, ops[i]->t->data, ops[i]->t->nbytes);
            off += ops[i]->t->nbytes;
        }
        return exe_out_array(S, t, out);
    }
    for (int i = 0; i < in->nops; i++) {
        const tpu_tensor *a = ops[i]->t;
        for (int k = 0; k < rs->rank; k++)
            if (k != d && a->dims[k] != rs->dims[k])
                return exe_fail(S, in, TPU_ERR_SHAPE, "ConcatBitcast operand %d differs from the result in dimension %d "
                                "(not only in the most-major dimension %d)", i, k, d);
        sum += d >= 0 ? a->dims[d] : 1;
    }
    if (d < 0 || sum != rs->dims[d])
        return exe_fail(S, in, TPU_ERR_SHAPE, "ConcatBitcast operands add up to %lld in dimension %d, the result has %lld",
                        (long long)sum, d, d >= 0 ? (long long)rs->dims[d] : 1LL);
    return exe_concat_dim(S, in, ops, d, out);
}

/* get-tuple-element */
static EXE_KERNEL(exe_kc_gte)
{
    int64_t idx = hlo_attr_int(in, HK_INDEX, -1);
    if (ops[0]->t || idx < 0 || idx >= ops[0]->ntuple || !ops[0]->elems[idx])
        return exe_fail(S, in, TPU_ERR_SHAPE, "tuple index %lld out of range", (long long)idx);
    /* the only holder of the tuple and the only reader of this slot: move the element out, so that it
     * stays the sole reference to its buffer (a loop state updated in place) */
    const exe_comp_info *ci = S->comp_info ? S->comp_info[in->parent->id] : NULL;
    if (ci && ci->gte_move[in->id] && ops[0]->refs == 1 && S->cur_vals && S->cur_vals[in->ops[0]->id] == ops[0]) {
        *out = ops[0]->elems[idx];
        ops[0]->elems[idx] = NULL;
        return TPU_OK;
    }
    *out = exe_value_ref(ops[0]->elems[idx]);
    return TPU_OK;
}

/* ---- loop-invariant values (XLA's while-loop invariant code motion, done at run time) ----
 * A state element that the body passes back unchanged (root operand k is get-tuple-element k of the state) is
 * the same value in every iteration, and so is what the body or the condition computes from such elements and
 * constants alone: a kernel step of that kind runs in the first iteration only, later ones take its value
 * (a convergence test's max |a| over an input that never changes). Held values have a second reference, so no
 * kernel updates them in place. */
typedef struct exe_hoist {
    uint8_t    *want;   /* per instruction of the computation: computed once per loop */
    exe_value **val;    /* the values, once computed */
    int         n;
} exe_hoist;

/* Ops whose result depends only on their operands (no state, no side effects, no computations but a reducer). */
static int exe_hoist_pure(const hlo_instr *in)
{
    switch (hlo_op_class((hlo_op)in->op)) {
    case HLO_CLASS_EW1: case HLO_CLASS_EW2: case HLO_CLASS_EW3: case HLO_CLASS_CMP: return in->ncalled == 0;
    default: break;
    }
    switch ((hlo_op)in->op) {
    case HLO_BROADCAST: case HLO_RESHAPE: case HLO_TRANSPOSE: case HLO_SLICE: case HLO_CONCATENATE: case HLO_PAD:
    case HLO_REVERSE: case HLO_DOT: case HLO_IOTA: return in->ncalled == 0;
    case HLO_REDUCE: return 1;
    default: return 0;
    }
}

/* The state elements (bit k: element k) that `body` passes back unchanged. */
static uint64_t exe_hoist_elems(const hlo_comp *body)
{
    const hlo_instr *r = body->root;
    uint64_t m = 0;
    if (body->nparams != 1 || r->op != HLO_TUPLE) return 0;
    for (int k = 0; k < r->nops && k < 64; k++) {
        const hlo_instr *g = r->ops[k];
        if (g->op == HLO_GET_TUPLE_ELEMENT && g->nops == 1 && g->ops[0] == body->params[0] && hlo_attr_int(g, HK_INDEX, -1) == k)
            m |= (uint64_t)1 << k;
    }
    return m;
}

/* The plan for computation c (a loop's body or condition) given the invariant elements; H->want stays NULL
 * when nothing is worth holding. */
static tpu_status exe_hoist_plan(exe_state *S, const hlo_comp *c, uint64_t elems, exe_hoist *H)
{
    memset(H, 0, sizeof *H);
    if (!elems || c->nparams != 1 || (S->ref & EXE_NO_HOIST)) return TPU_OK;
    const exe_comp_info *ci;
    tpu_status st = exe_comp_info_get(S, c, &ci);
    if (st) return st;
    uint8_t *inv = ut_calloc((size_t)c->ninstrs + 1, 1);
    if (!inv) return ut_nomem(S->ctx);
    int any = 0;
    for (int i = 0; i < c->ninstrs; i++) {
        const hlo_instr *in = c->instrs[i];
        int64_t k = in->op == HLO_GET_TUPLE_ELEMENT && in->nops == 1 && in->ops[0] == c->params[0] ? hlo_attr_int(in, HK_INDEX, -1) : -1;
        if (k >= 0 && k < 64) {
            inv[i] = (uint8_t)(elems >> k & 1);
            continue;
        }
        if (in->op == HLO_CONSTANT) {
            inv[i] = 1;
            continue;
        }
        if (!exe_hoist_pure(in) || in->nctrl) continue;
        int ok = 1;
        for (int q = 0; q < in->nops && ok; q++) ok = inv[in->ops[q]->id];
        inv[i] = (uint8_t)ok;
        /* held: values a kernel of its own makes (not fused members, not a dot writing a transpose's result) */
        if (ok && ci->live[i] && ci->fgroup_of[i] == EXE_FUSE_NONE && ci->dot_tr[i] < 0 && in != c->root &&
            hlo_shape_is_array(&in->shape)) {
            inv[i] = 2;
            any = 1;
        }
    }
    if (!any) {
        ut_free(inv);
        return TPU_OK;
    }
    for (int i = 0; i < c->ninstrs; i++) inv[i] = inv[i] == 2;
    H->val = ut_calloc((size_t)c->ninstrs, sizeof *H->val);
    if (!H->val) {
        ut_free(inv);
        return ut_nomem(S->ctx);
    }
    H->want = inv;
    H->n = c->ninstrs;
    return TPU_OK;
}

static void exe_hoist_free(exe_hoist *H)
{
    for (int i = 0; H->val && i < H->n; i++) exe_value_unref(H->val[i]);
    ut_free(H->val);
    ut_free(H->want);
}

/* exe_call with the loop's held values (H->want NULL: none). */
static tpu_status exe_call_hoisted(exe_state *S, exe_hoist *H, const hlo_comp *c, exe_value **args, uint64_t owned,
                                   exe_value **out)
{
    S->hoist = H->want ? H : NULL;
    tpu_status st = exe_call_owned(S, c, args, 1, owned, out);
    S->hoist = NULL;
    return st;
}

/* ---- counted loops ----
 * A condition that compares an integer state element with a constant (every fori_loop and scan) is evaluated
 * directly on the state, without a computation call per iteration: the same comparison (exe_scalar_compare)
 * on the same values. */
typedef struct exe_counted {
    int               elem;      /* the state element compared; -1: not a counted loop */
    int               swapped;   /* the constant is the first operand */
    tpu_dtype         dtype;
    exe_scalar        bound;
    const char       *dir, *type;
} exe_counted;

static void exe_counted_plan(const exe_state *S, const hlo_comp *cond, exe_counted *K)
{
    memset(K, 0, sizeof *K);
    K->elem = -1;
    const hlo_instr *r = cond->root;
    if ((S->ref & EXE_NO_COUNTED) || S->max_steps || S->deadline > 0 || cond->nparams != 1 || r->op != HLO_COMPARE ||
        r->nops != 2 || r->nctrl || !hlo_attr_str(r, HK_DIRECTION))
        return;
    for (int i = 0; i < cond->ninstrs; i++)
        if (exe_has_side_effect(cond->instrs[i])) return;
    int g = r->ops[0]->op == HLO_GET_TUPLE_ELEMENT ? 0 : 1;
    const hlo_instr *e = r->ops[g], *c = r->ops[1 - g];
    char kind = tpu_dtype_kind((tpu_dtype)e->shape.dtype);
    int64_t k = e->op == HLO_GET_TUPLE_ELEMENT && e->nops == 1 && e->ops[0] == cond->params[0] ? hlo_attr_int(e, HK_INDEX, -1) : -1;
    if (k < 0 || k >= INT32_MAX || (kind != 's' && kind != 'u') || e->shape.rank != 0 || c->op != HLO_CONSTANT ||
        !c->literal || c->literal->elided || !c->literal->data || c->shape.dtype != e->shape.dtype || c->shape.rank != 0)
        return;
    K->elem = (int)k;
    K->swapped = g == 1;
    K->dtype = (tpu_dtype)e->shape.dtype;
    K->bound = exe_scalar_load(K->dtype, c->literal->data, 0);
    K->dir = hlo_attr_str(r, HK_DIRECTION);
    K->type = hlo_attr_str(r, HK_TYPE);
}

/* The condition's value on `state`, or -1 when the state is not what the plan expects (the computation then
 * runs and reports it). */
static int exe_counted_test(const exe_counted *K, const exe_value *state)
{
    if (K->elem < 0 || state->t || K->elem >= state->ntuple || !state->elems[K->elem]) return -1;
    const tpu_tensor *t = state->elems[K->elem]->t;
    if (!t || t->dtype != K->dtype || t->count != 1) return -1;
    exe_scalar v = exe_scalar_load(t->dtype, t->data, 0);
    return K->swapped ? exe_scalar_compare(K->dtype, K->bound, v, K->dir, K->type)
                      : exe_scalar_compare(K->dtype, v, K->bound, K->dir, K->type);
}

/* while */
static EXE_KERNEL(exe_kc_while)
{
    const hlo_attr *ca = hlo_attr_find(in, HK_CONDITION), *ba = hlo_attr_find(in, HK_BODY);
    if (!ca || !ba) return exe_fail(S, in, TPU_ERR_SHAPE, "needs condition= and body=");
    const hlo_comp *cond = ca->v.comps.v[0], *body = ba->v.comps.v[0];
    /* the loop owns its state and hands it to each body call, so the body can update it in place */
    exe_value *state = exe_take_operand(S, 0);
    if (!state) state = exe_value_ref(ops[0]);
    uint64_t elems = exe_hoist_elems(body);
    exe_hoist hc, hb;
    tpu_status st = exe_hoist_plan(S, cond, elems, &hc);
    if (!st) st = exe_hoist_plan(S, body, elems, &hb);
    else memset(&hb, 0, sizeof hb);
    exe_counted K;
    exe_counted_plan(S, cond, &K);
    int64_t iter = 0;
    S->loop_depth++;
    for (; !st; iter++) {
        int go = exe_counted_test(&K, state);
        S->counted += go >= 0;
        if (go < 0) {
            exe_value *p;
            st = exe_call_hoisted(S, &hc, cond, &state, 0, &p);
            if (st) break;
            go = p->t && p->t->count == 1 && ((uint8_t *)p->t->data)[0];
            exe_value_unref(p);
        }
        if (!go) break;
        exe_value *next;
        st = exe_call_hoisted(S, &hb, body, &state, 1, &next);
        state = st ? NULL : next;   /* the body took the state */
    }
    exe_hoist_free(&hc);
    exe_hoist_free(&hb);
    exe_dot_cache_drop(S, --S->loop_depth);   /* the weights this loop's dots packed, and their references */
    if (st) {
        exe_value_unref(state);
        return st;
    }
    if (S->trip_counts) S->trip_counts[exe_global_index(S, in)] = iter;
    *out = state;
    return TPU_OK;
}

/* conditional */
static EXE_KERNEL(exe_kc_conditional)
{
    const tpu_tensor *sel = ops[0]->t;
    if (!sel || sel->count != 1) return exe_fail(S, in, TPU_ERR_SHAPE, "selector must be a scalar");
    int64_t b;
    int nb = in->ncalled;
    if (sel->dtype == TPU_PRED) {
        b = ((uint8_t *)sel->data)[0] ? 0 : 1;   /* true_computation first, then false_computation */
        const hlo_attr *ta = hlo_attr_find(in, HK_TRUE_COMPUTATION), *fa = hlo_attr_find(in, HK_FALSE_COMPUTATION);
        if (!ta || !fa) return exe_fail(S, in, TPU_ERR_SHAPE, "pred conditional needs true_computation and false_computation");
        const hlo_comp *c = b == 0 ? ta->v.comps.v[0] : fa->v.comps.v[0];
        return exe_call(S, c, ops + 1 + b, 1, out);
    }
    b = exe_index_value(sel, 0);
    if (b < 0 || b >= nb) b = nb - 1;   /* out-of-range index runs the last branch */
    return exe_call(S, in->called[b], ops + 1 + b, 1, out);
}

/* custom-call */
static EXE_KERNEL(exe_kc_custom_call)
{
    const char *target = hlo_attr_str(in, HK_CUSTOM_CALL_TARGET);
    /* every target handled here is listed in exe_custom_call_targets (tpu_module_runnable) */
    if (target && in->nops == 1 &&
        (!strcmp(target, "Sharding") || !strcmp(target, "SPMDFullToShardShape") ||
         !strcmp(target, "SPMDShardToFullShape") || !strcmp(target, "LayoutConstraint") ||
         !strcmp(target, "MoveToDevice") || !strcmp(target, "MoveToHost") ||
         !strcmp(target, "annotate_device_placement") || !strcmp(target, "X64Combine") ||
         !strcmp(target, "xla.sdy.FuncResultSharding"))) {
        if (strcmp(target, "Sharding") && strcmp(target, "xla.sdy.FuncResultSharding") && hlo_module_num_partitions(S->m) > 1 &&
            strcmp(target, "LayoutConstraint") && strncmp(target, "Move", 4))
            return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "%s with %lld partitions needs the SPMD partitioner", target,
                            (long long)hlo_module_num_partitions(S->m));
        return exe_identity(ops, out);
    }
    if (target && !strcmp(target, "AssumeGatherIndicesInBound") && in->nops == 1) return exe_identity(ops, out);
    if (target && !strcmp(target, "dce_sink")) return exe_token(S, out);   /* jax.lax.dce_sink: () */
    /* the compiler's note that a gather's or scatter's indices may be bit-packed: the same index values */
    if (target && !strcmp(target, "GatherScatterIndicesBitpacked") && in->nops == 1 && ops[0]->t &&
        hlo_shape_is_array(&in->shape) && ops[0]->t->count == hlo_shape_count(&in->shape) &&
        ops[0]->t->dtype == (tpu_dtype)in->shape.dtype)
        return exe_identity(ops, out);
    if (target && !strcmp(target, "AllocateBuffer") && in->nops == 0 && hlo_shape_is_array(&in->shape)) {
        /* the TPU compiler's uninitialised buffer (a loop's output stack); zeros here */
        tpu_tensor *t;
        tpu_status st = exe_alloc(S, in, &t);
        if (st) return st;
        memset(t->data, 0, t->nbytes);
        return exe_out_array(S, t, out);
    }
    if (target && !strcmp(target, "ConcatBitcast")) return exe_concat_bitcast(S, in, ops, out);
    /* the TPU's linear algebra, as jax.numpy.linalg lowers it for TPUs */
    if (target && !strcmp(target, "LuDecomposition")) return exe_k_lu(S, in, ops, out);
    if (target && !strcmp(target, "Qr")) return exe_k_qr(S, in, ops, out);
    if (target && !strcmp(target, "ProductOfElementaryHouseholderReflectors"))
        return exe_k_householder_product(S, in, ops, out);
    if (target && !strcmp(target, "Eigh")) return exe_k_eigh(S, in, ops, out);
    return exe_fail(S, in, TPU_ERR_UNSUPPORTED,
                    "custom-call target \"%s\" is not something a TPU can run (like PyFunc on a real TPU, it "
                    "calls code outside the program); express it in HLO ops", target ? target : "?");
}

/* all-reduce, all-gather, reduce-scatter, all-to-all, collective-broadcast, all-reduce-start, all-gather-start */
static EXE_KERNEL(exe_kc_collective)
{
    /* with the runtime present every collective goes to it (a group of one replica can still span several
     * partitions); alone, a group of one device makes every collective the identity */
    if (S->coll) return S->coll->run(S->coll->user, S, in, ops, out);
    int64_t g = exe_group_size(S, in);
    if (g != 1)
        return exe_fail(S, in, TPU_ERR_UNSUPPORTED,
                        "collective over a group of %lld devices needs the replicated runtime (tpusim run "
                        "--replicas N, or tpusim train)", (long long)g);
    if (in->nops == 1) return exe_identity(ops, out);
    for (int i = 0; i < in->nops; i++) exe_value_ref(ops[i]);
    *out = exe_value_tuple((exe_value **)ops, in->nops);
    return *out ? TPU_OK : ut_nomem(S->ctx);
}

/* collective-permute, collective-permute-start */
static EXE_KERNEL(exe_kc_permute)
{
    /* one device: data goes to itself if (0,0) is a pair, else the result is zeros */
    const hlo_attr *a = hlo_attr_find(in, HK_SOURCE_TARGET_PAIRS);
    int self = 0;
    for (int i = 0; a && a->kind == HA_INTSS && i < a->v.intss.n; i++)
        if (a->v.intss.len[i] == 2 && a->v.intss.v[i][0] == S->replica_id && a->v.intss.v[i][1] == S->replica_id) self = 1;
    if (hlo_module_replica_count(S->m) * hlo_module_num_partitions(S->m) > 1) {
        if (S->coll) return S->coll->run(S->coll->user, S, in, ops, out);
        return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "collective-permute across devices needs the replicated runtime");
    }
    if (self || in->op == HLO_COLLECTIVE_PERMUTE_START) {
        if (!self) {
            tpu_tensor *t = ten_alloc(ops[0]->t->dtype, ops[0]->t->rank, ops[0]->t->dims);
            if (!t) return ut_nomem(S->ctx);
            return exe_out_array(S, t, out);
        }
        return exe_identity(ops, out);
    }
    tpu_tensor *t;
    tpu_status st = exe_alloc(S, in, &t);
    if (st) return st;
    memset(t->data, 0, t->nbytes);
    return exe_out_array(S, t, out);
}

/* copy-start */
static EXE_KERNEL(exe_kc_copy_start)
{
    exe_value *e[3] = {exe_value_ref(ops[0]), exe_value_ref(ops[0]), NULL};
    tpu_tensor *ctx_t = ten_alloc(TPU_U32, 0, NULL);
    e[2] = ctx_t ? exe_value_array(ctx_t) : NULL;
    if (!e[2]) {
        exe_value_unref(e[0]);
        exe_value_unref(e[1]);
        return ut_nomem(S->ctx);
    }
    *out = exe_value_tuple(e, 3);
    return *out ? TPU_OK : ut_nomem(S->ctx);
}

/* async-start */
static EXE_KERNEL(exe_kc_async_start)
{
    /* ((operands...), result, context): run the wrapped computation now */
    if (in->ncalled < 1) return exe_fail(S, in, TPU_ERR_SHAPE, "no called computation");
    exe_value *res;
    tpu_status st = exe_call(S, in->called[0], ops, in->nops, &res);
    if (st) return st;
    for (int i = 0; i < in->nops; i++) exe_value_ref(ops[i]);
    exe_value *args = exe_value_tuple((exe_value **)ops, in->nops);
    tpu_tensor *ctx_t = ten_alloc(TPU_S32, 0, NULL);
    exe_value *cv = ctx_t ? exe_value_array(ctx_t) : NULL;
    if (!args || !cv) {
        exe_value_unref(args);
        exe_value_unref(cv);
        exe_value_unref(res);
        return ut_nomem(S->ctx);
    }
    exe_value *e[3] = {args, res, cv};
    *out = exe_value_tuple(e, 3);
    return *out ? TPU_OK : ut_nomem(S->ctx);
}

/* Tuples, calls, control flow, custom-calls, one-device collectives, async pairs: one kernel (the executor's
 * profiler leaves its time to the ops inside), the larger cases in exe_kc_* above. */
static EXE_KERNEL(exe_k_control)
{
    switch ((hlo_op)in->op) {
    case HLO_TUPLE: {
        for (int i = 0; i < in->nops; i++) exe_value_ref(ops[i]);
        *out = exe_value_tuple((exe_value **)ops, in->nops);
        return *out ? TPU_OK : ut_nomem(S->ctx);
    }
    case HLO_GET_TUPLE_ELEMENT:
        return exe_kc_gte(S, in, ops, out);
    case HLO_CALL: case HLO_FUSION: {
        if (in->ncalled < 1) return exe_fail(S, in, TPU_ERR_SHAPE, "no called computation");
        /* operands that die here are handed to the callee */
        uint64_t owned = 0;
        for (int k = 0; k < in->nops && k < 32; k++)
            if (exe_take_operand(S, k)) owned |= (uint64_t)1 << k;
        return exe_call_owned(S, in->called[0], ops, in->nops, owned, out);
    }
    case HLO_WHILE:
        return exe_kc_while(S, in, ops, out);
    case HLO_CONDITIONAL:
        return exe_kc_conditional(S, in, ops, out);
    case HLO_CUSTOM_CALL:
        return exe_kc_custom_call(S, in, ops, out);
    case HLO_COPY:
        /* programs the TPU compiler optimized copy f32 values into bf16 ones (and back) */
        if (ops[0]->t && hlo_shape_is_array(&in->shape) && ops[0]->t->dtype != (tpu_dtype)in->shape.dtype)
            return exe_k_convert(S, in, ops, out);
        return exe_identity(ops, out);
    case HLO_OPT_BARRIER: case HLO_DOMAIN: case HLO_ADD_DEPENDENCY:
        return exe_identity(ops, out);
    case HLO_AFTER_ALL: return exe_token(S, out);
    case HLO_SEND: case HLO_SEND_DONE: case HLO_RECV: case HLO_RECV_DONE: return exe_host_transfer(S, in, ops, out);
    case HLO_REPLICA_ID: return exe_scalar_int(S, in, S->replica_id, out);
    case HLO_PARTITION_ID: return exe_scalar_int(S, in, S->partition_id, out);
    case HLO_GET_DIMENSION_SIZE: {
        const int64_t *d;
        int nd = hlo_attr_ints(in, HK_DIMENSIONS, &d);
        if (nd != 1 || !ops[0]->t || d[0] < 0 || d[0] >= ops[0]->t->rank)
            return exe_fail(S, in, TPU_ERR_SHAPE, "bad dimensions={...}");
        return exe_scalar_int(S, in, ops[0]->t->dims[d[0]], out);
    }
    case HLO_ALL_REDUCE: case HLO_ALL_GATHER: case HLO_REDUCE_SCATTER: case HLO_ALL_TO_ALL:
    case HLO_COLLECTIVE_BROADCAST: case HLO_ALL_REDUCE_START: case HLO_ALL_GATHER_START:
        return exe_kc_collective(S, in, ops, out);
    case HLO_COLLECTIVE_PERMUTE: case HLO_COLLECTIVE_PERMUTE_START:
        return exe_kc_permute(S, in, ops, out);
    case HLO_ALL_REDUCE_DONE: case HLO_ALL_GATHER_DONE: case HLO_COLLECTIVE_PERMUTE_DONE: {
        /* the start op's value is the result (all-gather-start may carry (input, output)) */
        if (!ops[0]->t && ops[0]->ntuple >= 2 && in->op == HLO_ALL_GATHER_DONE) {
            *out = exe_value_ref(ops[0]->elems[ops[0]->ntuple - 1]);
            return TPU_OK;
        }
        return exe_identity(ops, out);
    }
    case HLO_COPY_START:
        return exe_kc_copy_start(S, in, ops, out);
    case HLO_COPY_DONE:
        if (ops[0]->t || ops[0]->ntuple < 2) return exe_fail(S, in, TPU_ERR_SHAPE, "operand is not a copy-start tuple");
        *out = exe_value_ref(ops[0]->elems[1]);
        return TPU_OK;
    case HLO_ASYNC_START:
        return exe_kc_async_start(S, in, ops, out);
    case HLO_ASYNC_UPDATE: return exe_identity(ops, out);
    case HLO_ASYNC_DONE:
        if (ops[0]->t || ops[0]->ntuple < 2) return exe_fail(S, in, TPU_ERR_SHAPE, "operand is not an async-start tuple");
        *out = exe_value_ref(ops[0]->elems[1]);
        return TPU_OK;
    default: break;
    }
    return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "opcode not supported by the executor");
}

/* ---- what the executor can run (checked before a run starts: tpu_module_runnable) ---- */

static const char *const exe_custom_call_targets[] = {
    "Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "LayoutConstraint", "MoveToDevice", "MoveToHost",
    "annotate_device_placement", "X64Combine", "xla.sdy.FuncResultSharding", "AssumeGatherIndicesInBound",
    "AllocateBuffer", "ConcatBitcast", "dce_sink", "GatherScatterIndicesBitpacked",
    /* the TPU's linear algebra (kernels/linalg_tpu.c), what jax.numpy.linalg lowers to for a TPU */
    "LuDecomposition", "Qr", "ProductOfElementaryHouseholderReflectors", "Eigh",
};

static tpu_status exe_instr_runnable(tpu_ctx *ctx, const hlo_module *m, const hlo_instr *in)
{
    char where[256];
    hlo_op op = (hlo_op)in->op;
    if (op == HLO_PARAMETER) return TPU_OK;
    if (op == HLO_CONSTANT) {
        if (in->literal && in->literal->elided)
            return ut_err(ctx, TPU_ERR_UNRUNNABLE, "%s: constant '%s' was written as {...}: its values are not in the "
                          "program, so it can be checked and timed but not run", hlo_where(m, in, where, sizeof where), in->name);
        return TPU_OK;
    }
    if ((op == HLO_SEND || op == HLO_RECV || op == HLO_SEND_DONE || op == HLO_RECV_DONE) && !hlo_attr_bool(in, HK_IS_HOST_TRANSFER, 0))
        return ut_err(ctx, TPU_ERR_UNSUPPORTED, "%s: '%s' (%s) between devices: the executor runs send/recv only to "
                      "and from the host", hlo_where(m, in, where, sizeof where), in->name, hlo_op_name(op));
    if (op == HLO_CUSTOM_CALL) {
        const char *t = hlo_attr_str(in, HK_CUSTOM_CALL_TARGET);
        for (size_t i = 0; t && i < sizeof exe_custom_call_targets / sizeof exe_custom_call_targets[0]; i++)
            if (!strcmp(t, exe_custom_call_targets[i])) return TPU_OK;
        return ut_err(ctx, TPU_ERR_UNSUPPORTED, "%s: custom-call '%s' to \"%s\": tpusim's executor has no kernel for it",
                      hlo_where(m, in, where, sizeof where), in->name, t ? t : "?");
    }
    if (!exe_kernels[op])
        return ut_err(ctx, TPU_ERR_UNSUPPORTED, "%s: '%s': the executor cannot run %s", hlo_where(m, in, where, sizeof where),
                      in->name, hlo_op_name(op));
    return TPU_OK;
}

tpu_status tpu_module_runnable(tpu_ctx *ctx, const tpu_module *m)
{
    exe_init_kernels();
    for (int c = 0; c < m->ncomps; c++)
        for (int i = 0; i < m->comps[c]->ninstrs; i++) {
            tpu_status st = exe_instr_runnable(ctx, m, m->comps[c]->instrs[i]);
            if (st) return st;
        }
    return TPU_OK;
}

/* ---- running a computation ---- */

/* Drops the references an owned call hands over (when the call fails before taking them). */
static void exe_drop_owned(exe_value *const *args, int nargs, uint64_t owned)
{
    for (int i = 0; i < nargs && i < 64; i++)
        if (owned >> i & 1) exe_value_unref(args[i]);
}

tpu_status exe_call(exe_state *S, const hlo_comp *c, exe_value *const *args, int nargs, exe_value **out)
{
    return exe_call_owned(S, c, args, nargs, 0, out);
}

exe_value *exe_take_operand(exe_state *S, int k)
{
    if (!S->cur_vals || !S->cur_in || k >= S->cur_in->nops || k >= 32 || !(S->cur_dies >> k & 1)) return NULL;
    exe_value **slot = &S->cur_vals[S->cur_in->ops[k]->id];
    exe_value *v = *slot;
    *slot = NULL;
    return v;
}

exe_value *exe_take_unique(exe_state *S, int k)
{
    if (!S->cur_vals || !S->cur_in || k >= S->cur_in->nops || k >= 32 || !(S->cur_dies >> k & 1)) return NULL;
    exe_value *v = S->cur_vals[S->cur_in->ops[k]->id];
    if (!v || v->refs != 1 || !v->t || v->borrowed || v->base) return NULL;
    return exe_take_operand(S, k);
}

/* Counts one step (an instruction run, or a computation called) against the caller's limits (only called when
 * there are limits: a clock read costs less than the smallest kernel). */
static tpu_status exe_tick(exe_state *S, const hlo_instr *in)
{
    S->steps++;
    if (S->max_steps && S->steps > S->max_steps)
        return exe_fail(S, in, TPU_ERR_LIMIT, "stopped: the step limit (%lld instructions run; tpu_run_opts.max_steps, "
                        "tpusim run --max-steps) was reached here", (long long)S->max_steps);
    if (S->deadline > 0 && ut_now() > S->deadline)
        return exe_fail(S, in, TPU_ERR_LIMIT, "stopped: the time limit (tpu_run_opts.max_seconds, tpusim run --timeout) "
                        "was reached here after %lld instructions", (long long)S->steps);
    return TPU_OK;
}

/* Runs fused group G (at instruction i, its last member): its outputs' values go to their slots. An input
 * that dies here, held by nobody else, takes an output of its type and size (no fresh buffer). */
static tpu_status exe_run_group(exe_state *S, const exe_comp_info *ci, const exe_fgroup *G, exe_value **vals, int i)
{
    exe_value *fin[64], *fout[64];
    int rv[64];
    exe_value **fins = G->ninputs <= 64 ? fin : ut_malloc((size_t)G->ninputs * sizeof *fins);
    exe_value **outs = G->noutputs <= 64 ? fout : ut_malloc((size_t)G->noutputs * sizeof *outs);
    int *reuse = G->noutputs <= 64 ? rv : ut_malloc((size_t)G->noutputs * sizeof *reuse);
    tpu_status st = TPU_OK;
    if (!fins || !outs || !reuse) {
        st = ut_nomem(S->ctx);
        goto done;
    }
    for (int q = 0; q < G->ninputs; q++) fins[q] = vals[G->inputs[q]->id];
    for (int k = 0; k < G->noutputs; k++) reuse[k] = -1;
    for (int q = 0; q < G->ninputs; q++) {
        exe_value *v = fins[q];
        int dies = 0;
        if (!v || v->refs != 1 || !v->t || v->borrowed || v->base) continue;
        for (int f = ci->free_start[i]; f < ci->free_start[i + 1]; f++) dies |= ci->free_list[f] == G->inputs[q]->id;
        for (int k = 0; dies && k < G->noutputs; k++)
            if (reuse[k] < 0 && exe_fuse_can_reuse(G, k, q, v->t)) {
                reuse[k] = q;
                break;
            }
    }
    st = exe_fuse_run(S, G, fins, reuse, outs);
    for (int k = 0; !st && k < G->noutputs; k++) vals[G->outputs[k]->id] = outs[k];
done:
    if (fins != fin) ut_free(fins);
    if (outs != fout) ut_free(outs);
    if (reuse != rv) ut_free(reuse);
    return st;
}

/* get-tuple-element as exe_kc_gte runs it, without the kernel call: moves the element out when this is the
 * tuple's only holder and the slot's only reader, else shares it. Returns 0 (nothing done) when the operand is
 * not a tuple with that element: the kernel then reports it. */
static int exe_gte_fast(const exe_comp_info *ci, const exe_step *sp, exe_value **vals)
{
    exe_value *t = vals[ci->opid[sp->opid]];
    int idx = sp->gte_index;
    if (!t || t->t || idx >= t->ntuple || !t->elems[idx]) return 0;
    if (ci->gte_move[sp->i] && t->refs == 1) {
        vals[sp->i] = t->elems[idx];
        t->elems[idx] = NULL;
    } else {
        vals[sp->i] = exe_value_ref(t->elems[idx]);
    }
    return 1;
}

tpu_status exe_call_owned(exe_state *S, const hlo_comp *c, exe_value *const *args, int nargs, uint64_t owned,
                          exe_value **out)
{
    *out = NULL;
    if (S->max_steps || S->deadline > 0) {
        tpu_status lst = exe_tick(S, c->root);
        if (lst) {
            exe_drop_owned(args, nargs, owned);
            return lst;
        }
    }
    if (nargs != c->nparams) {
        exe_drop_owned(args, nargs, owned);
        return ut_err(S->ctx, TPU_ERR_SHAPE, "computation '%s' takes %d arguments, called with %d", c->name, c->nparams, nargs);
    }
    if (S->depth > 200) {
        exe_drop_owned(args, nargs, owned);
        return ut_err(S->ctx, TPU_ERR_UNSUPPORTED, "calls nested more than 200 deep in '%s'", c->name);
    }
    exe_hoist *H = S->hoist;   /* for this computation only, not for what it calls */
    S->hoist = NULL;
    const exe_comp_info *ci = NULL;
    tpu_status st = exe_comp_info_get(S, c, &ci);
    if (st) {
        exe_drop_owned(args, nargs, owned);
        return st;
    }
    int n = c->ninstrs;
    exe_value *small[64];
    exe_value **vals = n <= 64 ? small : ut_calloc((size_t)n, sizeof *vals);
    if (!vals) {
        exe_drop_owned(args, nargs, owned);
        return ut_nomem(S->ctx);
    }
    if (vals == small) memset(small, 0, (size_t)n * sizeof *small);
    /* owned arguments not consumed by a live parameter are dropped at the end */
    uint64_t unclaimed = owned;
    exe_value **saved_vals = S->cur_vals;
    const hlo_instr *saved_in = S->cur_in;
    uint32_t saved_dies = S->cur_dies;
    S->depth++;
    exe_value *opv[16];
    const int prof = exe_prof_on();   /* once per call, not per instruction */
    const int limits = S->max_steps || S->deadline > 0;
    for (int r = 0, prev = -1; r < ci->nsteps && !st; r++) {
        const exe_step *sp = &ci->steps[r];
        const int i = sp->i;
        const hlo_instr *in = sp->in;
        /* every live instruction counts as a step, those computed inside a group too */
        for (int j = prev + 1; limits && j <= i && !st; j++)
            if (ci->live[j]) st = exe_tick(S, c->instrs[j]);
        prev = i;
        if (st) break;
        if (sp->kind == EXE_STEP_GROUP) {
            const exe_fgroup *G = &ci->fgroups[ci->fgroup_of[i]];
            double t0 = prof ? ut_now() : 0;
            st = exe_run_group(S, ci, G, vals, i);
            if (prof) {
                S->prof->s[HLO_OP_COUNT] += ut_now() - t0;
                S->prof->n[HLO_OP_COUNT]++;
                exe_prof_note(S->prof, in, ut_now() - t0);
            }
        } else if (sp->kind == EXE_STEP_PARAM) {
            int p = (int)in->param_no;
            if (p < 64 && (unclaimed >> p & 1)) {
                vals[i] = args[p];
                unclaimed &= ~((uint64_t)1 << p);
            } else {
                vals[i] = exe_value_ref(args[p]);
            }
        } else if (sp->kind == EXE_STEP_CONST) {
            st = exe_const_value(S, c, in, &vals[i]);
        } else if (sp->kind == EXE_STEP_GTE && exe_gte_fast(ci, sp, vals)) {
            /* done: what exe_kc_gte does for a valid index */
        } else if (H && H->want[i] && H->val[i]) {
            vals[i] = exe_value_ref(H->val[i]);   /* loop-invariant: made by an earlier iteration */
            S->hoisted++;
        } else {
            exe_kernel k = sp->k;
            hlo_op op = (hlo_op)in->op;
            if (!k) {
                st = exe_fail(S, in, TPU_ERR_UNSUPPORTED, "opcode not supported by the executor");
                break;
            }
            int nops = in->nops;
            exe_value **ops = nops <= 16 ? opv : ut_malloc((size_t)nops * sizeof *ops);
            if (!ops) {
                st = ut_nomem(S->ctx);
                break;
            }
            const int *oid = ci->opid + sp->opid;
            for (int k2 = 0; k2 < nops; k2++) ops[k2] = vals[oid[k2]];
            int timed = prof && k != exe_k_control;
            double t0 = timed ? ut_now() : 0;
            S->cur_vals = vals;
            S->cur_in = in;
            S->cur_dies = sp->dies;
            if (sp->dot_tr >= 0 && op == HLO_TRANSPOSE) {
                st = exe_identity(ops, &vals[i]);   /* its dot wrote the transposed result */
            } else if (sp->mixed && exe_mixed_move(in, ops)) {
                st = exe_move_converted(S, in, ops, k, &vals[i]);
            } else {
                S->cur_dot_out = sp->dot_tr >= 0 ? &c->instrs[sp->dot_tr]->shape : NULL;
                st = k(S, in, ops, &vals[i]);
                S->cur_dot_out = NULL;
            }
            S->cur_vals = saved_vals;
            S->cur_in = saved_in;
            S->cur_dies = saved_dies;
            if (timed) {
                S->prof->s[op] += ut_now() - t0;
                S->prof->n[op]++;
                exe_prof_note(S->prof, in, ut_now() - t0);
            }
            if (ops != opv) ut_free(ops);
            if (!st && !vals[i]) st = exe_fail(S, in, TPU_ERR_INTERNAL, "kernel returned no value");
            if (!st && H && H->want[i]) H->val[i] = exe_value_ref(vals[i]);
        }
        if (st) break;
        for (int f = sp->free0; f < sp->free1; f++) {
            exe_value **slot = &vals[ci->free_list[f]];
            exe_value *v = *slot;
            if (v && v->refs > 1) v->refs--;   /* still held elsewhere: no call (most values of a loop body) */
            else exe_value_unref(v);
            *slot = NULL;
        }
    }
    S->depth--;
    if (!st) {
        *out = vals[c->root->id];
        vals[c->root->id] = NULL;
    }
    /* every value has gone at its last use after a successful call (the root was moved out): only a failed
     * one leaves values behind */
    for (int i = 0; st && i < n; i++)
        if (vals[i]) exe_value_unref(vals[i]);
    if (vals != small) ut_free(vals);
    exe_drop_owned(args, nargs, unclaimed);
    return st;
}

/* ---- public entry points ---- */

tpu_run_opts tpu_run_opts_default(void)
{
    tpu_run_opts o;
    memset(&o, 0, sizeof o);
    o.numerics = TPU_NUMERICS_TPU;
    return o;
}

static void exe_state_free(exe_state *S)
{
    exe_dot_cache_drop(S, -1);
    ut_free(S->comp_info);   /* the plans are the module's */
    for (int k = 0; S->consts && k < S->m->ncomps; k++) {
        const hlo_comp *c = S->m->comps[k];
        exe_value **cv = S->consts[c->id];
        for (int i = 0; cv && i < c->ninstrs; i++) exe_value_unref(cv[i]);
        ut_free(cv);
    }
    ut_free(S->consts);
    for (int i = 0; S->scalar_fns && i < S->m->ncomps; i++) exe_scalar_fn_free(S->scalar_fns[i]);
    ut_free(S->scalar_fns);
}

/* Leaves of a shape, depth first. */
static int exe_count_leaves(const hlo_shape *s)
{
    if (!hlo_shape_is_tuple(s)) return 1;
    int n = 0;
    for (int i = 0; i < s->ntuple; i++) n += exe_count_leaves(&s->tuple[i]);
    return n;
}

/* Builds the value for parameter shape s from the flat inputs, checking each leaf. */
static tpu_status exe_bind_input(exe_state *S, int param, const hlo_shape *s, tpu_tensor *const *inputs, int *next,
                                 exe_value **out)
{
    if (hlo_shape_is_tuple(s)) {
        exe_value *e[256];
        if (s->ntuple > 256) return ut_err(S->ctx, TPU_ERR_UNSUPPORTED, "parameter %d: tuple too large", param);
        for (int i = 0; i < s->ntuple; i++) {
            tpu_status st = exe_bind_input(S, param, &s->tuple[i], inputs, next, &e[i]);
            if (st) {
                for (int k = 0; k < i; k++) exe_value_unref(e[k]);
                return st;
            }
        }
        *out = exe_value_tuple(e, s->ntuple);
        return *out ? TPU_OK : ut_nomem(S->ctx);
    }
    if (!hlo_shape_is_array(s)) {
        (*next)++;   /* a token parameter takes an (ignored) input slot */
        *out = exe_value_tuple(NULL, 0);
        return *out ? TPU_OK : ut_nomem(S->ctx);
    }
    const tpu_tensor *t = inputs[(*next)++];
    char want[128], got[128];
    if (!t) return ut_err(S->ctx, TPU_ERR_INVALID, "input %d (parameter %d) is NULL", *next - 1, param);
    int ok = t->dtype == s->dtype && t->rank == s->rank;
    for (int i = 0; ok && i < s->rank; i++) ok = t->dims[i] == s->dims[i];
    if (!ok) {
        tpu_tensor_shape_str(t, got, sizeof got);
        return ut_err(S->ctx, TPU_ERR_INVALID, "input %d (parameter %d of '%s'): expected %s, got %s", *next - 1, param,
                      S->m->entry->name, hlo_shape_str(s, want, sizeof want), got);
    }
    exe_value *v = ut_calloc(1, sizeof *v);
    if (!v) return ut_nomem(S->ctx);
    v->refs = 1;
    v->borrowed = 1;
    v->t = (tpu_tensor *)t;
    *out = v;
    return TPU_OK;
}

/* Appends the array leaves of v to outs (tokens are skipped). Owned tensors with one reference are moved. */
static tpu_status exe_flatten(exe_state *S, exe_value *v, tpu_tensor ***outs, int *n, int *cap)
{
    if (!v->t) {
        for (int i = 0; i < v->ntuple; i++) {
            tpu_status st = exe_flatten(S, v->elems[i], outs, n, cap);
            if (st) return st;
        }
        return TPU_OK;
    }
    tpu_tensor **no = ut_grow(*outs, sizeof *no, *n, cap, 8);
    if (!no) return ut_nomem(S->ctx);
    *outs = no;
    tpu_tensor *t;
    if (v->refs == 1 && !v->borrowed) {
        t = v->t;
        v->t = NULL;
        v->borrowed = 1;   /* the tensor now belongs to the caller; keep the value an (empty) array */
    } else {
        t = ten_clone(v->t);
        if (!t) return ut_nomem(S->ctx);
    }
    exe_output_mark(t);
    (*outs)[(*n)++] = t;
    return TPU_OK;
}

/* Both XLA:CPU (it sets FTZ/DAZ around every execution) and the TPU's vector and matrix units treat f32
 * subnormals as zero. Setting the CPU's flush-to-zero and denormals-are-zero modes for the duration of a run
 * reproduces that for all float arithmetic; the thread pool (exe_par) runs every chunk with the caller's
 * mode. Returns the previous mode. */
static unsigned exe_denormals_off(void)
{
#if defined(__x86_64__) || defined(__i386__)
    unsigned old = _mm_getcsr();
    _mm_setcsr(old | 0x8040u);   /* FTZ (bit 15) | DAZ (bit 6) */
    return old;
#else
    return 0;
#endif
}

static void exe_denormals_restore(unsigned old)
{
#if defined(__x86_64__) || defined(__i386__)
    _mm_setcsr(old);
#else
    (void)old;
#endif
}

tpu_status tpu_run(tpu_ctx *ctx, const tpu_module *m, const tpu_run_opts *opts, tpu_tensor *const *inputs, int ninputs,
                   tpu_tensor ***outputs, int *noutputs)
{
    return exe_run(ctx, m, opts, NULL, inputs, ninputs, outputs, noutputs);
}

tpu_status exe_run(tpu_ctx *ctx, const hlo_module *m, const tpu_run_opts *opts, const exe_run_cfg *cfg,
                   tpu_tensor *const *inputs, int ninputs, tpu_tensor ***outputs, int *noutputs)
{
    *outputs = NULL;
    *noutputs = 0;
    exe_init_kernels();
    tpu_run_opts o = opts ? *opts : tpu_run_opts_default();
    exe_state S;
    memset(&S, 0, sizeof S);
    S.ctx = ctx;
    S.m = m;
    S.numerics = o.numerics;
    S.threads = o.threads;
    S.replica_id = o.replica_id;
    S.verbose = o.verbose;
    S.host = o.host;
    if (o.max_steps < 0 || !(o.max_seconds >= 0))
        return ut_err(ctx, TPU_ERR_INVALID, "tpu_run_opts: max_steps (%lld) and max_seconds (%g) must be 0 (no limit) or "
                      "positive", (long long)o.max_steps, o.max_seconds);
    S.max_steps = o.max_steps;
    S.deadline = o.max_seconds > 0 ? ut_now() + o.max_seconds : 0;
    if (cfg) {
        S.replica_id = cfg->replica_id;
        S.partition_id = cfg->partition_id;
        S.coll = cfg->coll;
        S.trip_counts = cfg->trip_counts;
        S.ref = cfg->ref;
    }
    const char *nf = getenv("TPUSIM_NO_FUSION");
    if (nf && *nf && strcmp(nf, "0")) S.ref |= EXE_NO_FUSION;
    /* nothing runs that does not verify: the kernels trust the shapes the verifier checked */
    tpu_status vst = ver_require(ctx, m);
    if (vst) return vst;
    /* the step limit counts calls, and trip counts and collectives name the module's own instructions */
    const char *ni = getenv("TPUSIM_NO_INLINE");
    if (ni && *ni && strcmp(ni, "0")) S.ref |= EXE_NO_INLINE;
    const char *nh = getenv("TPUSIM_NO_HOIST");
    if (nh && *nh && strcmp(nh, "0")) S.ref |= EXE_NO_HOIST;
    if (!(S.ref & EXE_NO_INLINE) && !S.max_steps && !S.trip_counts && !S.coll) S.m = m = exe_inlined(ctx, m);
    const hlo_comp *e = m->entry;
    int want = 0;
    for (int i = 0; i < e->nparams; i++) want += exe_count_leaves(&e->params[i]->shape);
    if (ninputs != want)
        return ut_err(ctx, TPU_ERR_INVALID, "'%s' takes %d input%s (%d parameter%s), got %d", e->name, want,
                      want == 1 ? "" : "s", e->nparams, e->nparams == 1 ? "" : "s", ninputs);
    exe_value **args = ut_calloc((size_t)(e->nparams ? e->nparams : 1), sizeof *args);
    if (!args) return ut_nomem(ctx);
    tpu_status st = TPU_OK;
    int next = 0;
    for (int i = 0; i < e->nparams && !st; i++) st = exe_bind_input(&S, i, &e->params[i]->shape, inputs, &next, &args[i]);
    if (!st && exe_prof_wanted(&S) && !(S.prof = ut_calloc(1, sizeof *S.prof))) st = ut_nomem(ctx);
    exe_value *res = NULL;
    unsigned csr = exe_denormals_off();
    exe_pool *pool = exe_pool_push();
    if (!st) st = exe_call(&S, e, args, e->nparams, &res);
    for (int i = 0; i < e->nparams; i++) exe_value_unref(args[i]);
    ut_free(args);
    if (!st) {
        int cap = 0;
        st = exe_flatten(&S, res, outputs, noutputs, &cap);
        if (st) {
            tpu_tensors_free(*outputs, *noutputs);
            *outputs = NULL;
            *noutputs = 0;
        }
    }
    exe_value_unref(res);
    exe_pool_pop(pool);
    exe_denormals_restore(csr);
    if (cfg && cfg->hoisted) *cfg->hoisted = S.hoisted;
    if (cfg && cfg->counted) *cfg->counted = S.counted;
    if (S.prof) exe_prof_report(S.prof);
    ut_free(S.prof);
    exe_state_free(&S);
    return st;
}

/* splitmix64, seeded per parameter leaf: the same generator is written in tests/conformance/mobilenet_ref.py */
static uint64_t exe_splitmix(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static tpu_status exe_random_leaf(tpu_ctx *ctx, const hlo_shape *s, uint64_t seed, int k, tpu_tensor **out)
{
    *out = NULL;
    if (!hlo_shape_is_array(s)) return TPU_OK;
    if (s->dyn_mask) return ut_err(ctx, TPU_ERR_UNSUPPORTED, "parameter %d has a dynamic shape", k);
    tpu_tensor *t = ten_alloc_uninit((tpu_dtype)s->dtype, s->rank, s->dims);
    if (!t) {
        char b[128];
        return ut_err(ctx, TPU_ERR_NOMEM, "input %d (%s, %.3g GB): out of memory (this machine has %.3g GB)", k,
                      hlo_shape_str(s, b, sizeof b), (double)hlo_shape_count(s) * (double)tpu_dtype_size((tpu_dtype)s->dtype) / 1e9,
                      (double)ten_max_bytes() / 1e9);
    }
    uint64_t state = seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(k + 1));
    char kind = tpu_dtype_kind(t->dtype);
    for (int64_t i = 0; i < t->count; i++) {
        uint64_t z = exe_splitmix(&state);
        if (kind == 'f' || kind == 'c') ten_store_f64(t->dtype, t->data, i, (double)(z >> 40) * (1.0 / 16777216.0) * 2.0 - 1.0);
        else if (kind == 'p') ((uint8_t *)t->data)[i] = (uint8_t)(z >> 63);
        else ten_store_i64(t->dtype, t->data, i, (int64_t)(z % 8));
    }
    *out = t;
    return TPU_OK;
}

static tpu_status exe_random_param(tpu_ctx *ctx, const hlo_shape *s, uint64_t seed, int *k, tpu_tensor **ins, int *n)
{
    if (hlo_shape_is_tuple(s)) {
        for (int i = 0; i < s->ntuple; i++) {
            tpu_status st = exe_random_param(ctx, &s->tuple[i], seed, k, ins, n);
            if (st) return st;
        }
        return TPU_OK;
    }
    tpu_status st = exe_random_leaf(ctx, s, seed, *k, &ins[*n]);
    (*k)++;
    if (st) return st;
    if (!ins[*n] && !hlo_shape_is_array(s)) {
        /* token: an empty placeholder tensor keeps the input count equal to the leaf count */
        ins[*n] = ten_alloc(TPU_PRED, 1, (int64_t[]){0});
        if (!ins[*n]) return ut_nomem(ctx);
    }
    (*n)++;
    return TPU_OK;
}

tpu_status tpu_random_inputs(tpu_ctx *ctx, const tpu_module *m, uint64_t seed, tpu_tensor ***inputs, int *count)
{
    *inputs = NULL;
    *count = 0;
    tpu_status vst = ver_require(ctx, m);   /* inputs for a program that will not run are not made */
    if (vst) return vst;
    const hlo_comp *e = m->entry;
    int total = 0;
    for (int i = 0; i < e->nparams; i++) total += exe_count_leaves(&e->params[i]->shape);
    tpu_tensor **ins = ut_calloc((size_t)(total ? total : 1), sizeof *ins);
    if (!ins) return ut_nomem(ctx);
    int n = 0, k = 0;
    tpu_status st = TPU_OK;
    for (int i = 0; i < e->nparams && !st; i++) st = exe_random_param(ctx, &e->params[i]->shape, seed, &k, ins, &n);
    if (st) {
        tpu_tensors_free(ins, n);
        return st;
    }
    *inputs = ins;
    *count = n;
    return TPU_OK;
}
