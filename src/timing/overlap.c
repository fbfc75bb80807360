/* overlap.c — how the collectives of a step share time with its compute (docs/timing.md, "Overlap").
 *
 * Each walk of a computation (the entry, one iteration of a loop body, one branch) is a dataflow graph: an op
 * depends on the last op of the same walk before it that wrote a value it reads (values from outside the
 * walk are ready when it starts). On that graph:
 *   1. combining (XLA's all-reduce / all-gather / reduce-scatter combiners): collectives of one kind and
 *      group size that do not depend on each other join one collective of up to 30 MiB. It pays the per-hop
 *      latency once, starts when the last of its operands is ready, and every reader of any part waits for
 *      all of it;
 *   2. hiding (XLA's latency-hiding scheduler with async collectives): a list schedule of the graph on two
 *      units, the core (every op but collectives) and the ICI (collectives, one at a time). The core runs
 *      first what lets a collective start soonest, the ICI the collective whose readers come soonest. The
 *      time both units were busy at once is collective time hidden behind compute.
 * So a collective hides only behind ops that neither feed it nor wait for it, and each op's time serves one
 * collective at most. A loop body is scheduled in its steady state, two consecutive iterations joined by the
 * loop state, so a collective may also hide behind the previous or next iteration's independent work (XLA's
 * collective pipeliner, xla/service/collective_pipeliner.h, moves them there; assumed of the TPU compiler).
 * Walks do not overlap each other otherwise (the entry's collectives do not hide behind a loop it calls).
 * Cost: linear in the ops and the values they read, plus the ready heaps (n log n). */
#include "timing/model.h"
#include "util/util.h"

#include <math.h>
#include <string.h>

typedef struct ovl_graph {
    int     n, nwalks;
    int    *order, *wfirst;   /* ops grouped by walk, timeline order within each: order[wfirst[w] .. wfirst[w+1]) */
    int    *pfirst, *pn;      /* producers of op i: prod[pfirst[i] .. pfirst[i] + pn[i]) */
    int    *prod;
    int    *node;             /* the op that stands for i in the schedule: i, or its combined collective's last member */
} ovl_graph;

static void ovl_free(ovl_graph *g)
{
    ut_free(g->order); ut_free(g->wfirst); ut_free(g->pfirst); ut_free(g->pn); ut_free(g->prod); ut_free(g->node);
    memset(g, 0, sizeof *g);
}

/* Ops grouped by walk (a counting sort, stable: timeline order within a walk). */
static int ovl_group_walks(ovl_graph *g, const int *walk)
{
    g->order = ut_malloc((size_t)(g->n ? g->n : 1) * sizeof(int));
    g->wfirst = ut_calloc((size_t)g->nwalks + 2, sizeof(int));
    if (!g->order || !g->wfirst) return 0;
    for (int i = 0; i < g->n; i++) g->wfirst[walk[i] + 1]++;
    for (int w = 0; w < g->nwalks; w++) g->wfirst[w + 1] += g->wfirst[w];
    int *at = ut_malloc((size_t)g->nwalks * sizeof(int));
    if (!at) return 0;
    memcpy(at, g->wfirst, (size_t)g->nwalks * sizeof(int));
    for (int i = 0; i < g->n; i++) g->order[at[walk[i]]++] = i;
    ut_free(at);
    return 1;
}

/* The producers of every op: per walk, the last earlier op that wrote each value it reads. */
static int ovl_producers(ovl_graph *g, const tim_op *ops, int nvalues)
{
    int n = g->n, total = 0;
    g->pfirst = ut_malloc(((size_t)n + 1) * sizeof(int));
    g->pn = ut_calloc((size_t)n + 1, sizeof(int));
    if (!g->pfirst || !g->pn) return 0;
    for (int i = 0; i < n; i++) {
        g->pfirst[i] = total;
        total += ops[i].op->nin;
    }
    g->pfirst[n] = total;
    int *last = ut_malloc(((size_t)nvalues + 1) * sizeof(int)), *lastw = ut_malloc(((size_t)nvalues + 1) * sizeof(int));
    int *seen = ut_malloc(((size_t)n + 1) * sizeof(int));
    g->prod = ut_malloc(((size_t)total + 1) * sizeof(int));
    if (!last || !lastw || !seen || !g->prod) {
        ut_free(last); ut_free(lastw); ut_free(seen);
        return 0;
    }
    for (int v = 0; v < nvalues; v++) lastw[v] = -1;
    for (int i = 0; i < n; i++) seen[i] = -1;
    for (int w = 0; w < g->nwalks; w++) {
        for (int q = g->wfirst[w]; q < g->wfirst[w + 1]; q++) {
            int i = g->order[q];
            const cmp_op *op = ops[i].op;
            for (int k = 0; k < op->nin; k++) {
                int v = op->in[k];
                if (v < 0 || v >= nvalues || lastw[v] != w || seen[last[v]] == i) continue;
                seen[last[v]] = i;
                g->prod[g->pfirst[i] + g->pn[i]++] = last[v];
            }
            for (int k = 0; k < op->nout; k++) {
                int v = op->out[k];
                if (v < 0 || v >= nvalues) continue;
                last[v] = i;
                lastw[v] = w;
            }
        }
    }
    ut_free(last); ut_free(lastw); ut_free(seen);
    return 1;
}

static int ovl_combinable(hlo_op k) { return k == HLO_ALL_REDUCE || k == HLO_ALL_GATHER || k == HLO_REDUCE_SCATTER; }

/* XLA combines independent all-reduces (all-gathers, reduce-scatters) of one computation into one collective
 * of up to a threshold of bytes (AllReduceCombiner and its siblings), so a step's hundred gradient
 * all-reduces pay the ring's per-hop latency a few times, not a hundred. Here: successive collectives of one
 * kind and group size in a walk (other ops between them allowed, a loop or call between them ends the group)
 * join up to 30 MiB (XLA's default combine threshold, debug_options_flags.cc; TPU's own is not public),
 * unless one depends on a collective at or after the group's first member (the combiners' independence
 * rule; maxcoll[i] is the latest collective op i depends on). All but the first keep only their bandwidth
 * time; node[] maps every member to the group's last. */
#define OVL_COMBINE_BYTES (30.0 * 1024 * 1024)
enum { OVL_KINDS = 3 };
static int ovl_kind(hlo_op k) { return k == HLO_ALL_REDUCE ? 0 : k == HLO_ALL_GATHER ? 1 : 2; }

static int ovl_combine(ovl_graph *g, const chp_chip *chip, tim_op *ops)
{
    int n = g->n;
    int *maxcoll = ut_malloc(((size_t)n + 1) * sizeof(int)), *first = ut_malloc(((size_t)n + 1) * sizeof(int));
    g->node = ut_malloc(((size_t)n + 1) * sizeof(int));
    if (!maxcoll || !first || !g->node) {
        ut_free(maxcoll); ut_free(first);
        return 0;
    }
    /* producers come before their readers in the timeline, so one pass in op order suffices */
    for (int i = 0; i < n; i++) {
        int m = -1;
        for (int k = 0; k < g->pn[i]; k++) {
            int p = g->prod[g->pfirst[i] + k];
            if (maxcoll[p] > m) m = maxcoll[p];
            if (tim_is_collective((hlo_op)ops[p].root->op) && p > m) m = p;
        }
        maxcoll[i] = m;
        g->node[i] = i;
        first[i] = -1;
    }
    for (int w = 0; w < g->nwalks; w++) {
        int open[OVL_KINDS] = {-1, -1, -1};
        double bytes[OVL_KINDS] = {0};
        for (int q = g->wfirst[w]; q < g->wfirst[w + 1]; q++) {
            int j = g->order[q];
            tim_op *u = &ops[j];
            if (u->op->kind == CMP_CONTROL) open[0] = open[1] = open[2] = -1;
            if (u->op->kind == CMP_CONTROL || !ovl_combinable((hlo_op)u->root->op)) continue;
            int k = ovl_kind((hlo_op)u->root->op), o = open[k];
            if (o >= 0 && ops[o].coll_n == u->coll_n && bytes[k] + u->coll_bytes <= OVL_COMBINE_BYTES && maxcoll[j] < o) {
                bytes[k] += u->coll_bytes;
                u->ici_s = u->ici_bw_s;
                u->combined = 1;
                tim_op_finish(chip, u);
                first[j] = o;
                g->node[o] = j;   /* the first member's node follows the group's end */
                continue;
            }
            open[k] = j;
            bytes[k] = u->coll_bytes;
            first[j] = j;
        }
    }
    /* every member stands for its group's last member (node of the first member holds it) */
    for (int i = 0; i < n; i++)
        if (first[i] >= 0) g->node[i] = g->node[first[i]];
    ut_free(maxcoll); ut_free(first);
    return 1;
}
/* ---- one walk's schedule ----
 * Its graph has a node per op standing for itself or a combined collective; a loop body's has two
 * consecutive iterations (the second's nodes are m..2m-1) joined by the loop state: an op of the second that
 * reads element j of the state waits for the op of the first that computed element j. */
typedef struct ovl_sched {
    int      m, nn;               /* nodes per iteration, nodes in all */
    int     *glob;                /* node -> op */
    int      ne, ecap;
    int     *src, *dst;           /* edges */
    int     *efirst, *succ, *deg; /* successors (CSR over nodes < the limit scheduled) */
    double  *t, *key, *keyi;      /* time; priority on the core and on the ICI (ovl_levels) */
    uint8_t *ici;
} ovl_sched;

static void ovl_sched_free(ovl_sched *s)
{
    ut_free(s->glob); ut_free(s->src); ut_free(s->dst); ut_free(s->efirst); ut_free(s->succ); ut_free(s->deg);
    ut_free(s->t); ut_free(s->key); ut_free(s->keyi); ut_free(s->ici);
    memset(s, 0, sizeof *s);
}

static int ovl_edge(ovl_sched *s, int a, int b)
{
    if (a == b) return 1;
    if (s->ne == s->ecap) {   /* two arrays of one length: the count moves once both have grown */
        int cap_src = s->ecap, cap_dst = s->ecap;
        int *ns = ut_grow(s->src, sizeof *ns, s->ne, &cap_src, 256);
        if (!ns) return 0;
        s->src = ns;
        int *nd = ut_grow(s->dst, sizeof *nd, s->ne, &cap_dst, 256);
        if (!nd) return 0;
        s->dst = nd;
        s->ecap = cap_src;
    }
    s->src[s->ne] = a;
    s->dst[s->ne++] = b;
    return 1;
}

static int ovl_on_ici(const tim_op *t) { return t->op->kind != CMP_CONTROL && tim_is_collective((hlo_op)t->root->op); }

/* The walk's nodes (twice for two iterations) and its edges within an iteration; loc[op] = its node. */
static int ovl_sched_init(ovl_sched *s, const ovl_graph *g, const tim_op *ops, int w, int iters, int *loc)
{
    int size = g->wfirst[w + 1] - g->wfirst[w], m = 0;
    s->glob = ut_malloc((size_t)iters * size * sizeof(int));
    s->t = ut_calloc((size_t)iters * size, sizeof(double));
    s->ici = ut_calloc((size_t)iters * size, 1);
    if (!s->glob || !s->t || !s->ici) return 0;
    for (int q = g->wfirst[w]; q < g->wfirst[w + 1]; q++) {
        int i = g->order[q];
        if (g->node[i] != i) continue;
        loc[i] = m;
        s->glob[m] = i;
        s->ici[m++] = (uint8_t)ovl_on_ici(&ops[i]);
    }
    for (int q = g->wfirst[w]; q < g->wfirst[w + 1]; q++) {
        int i = g->order[q];
        s->t[loc[g->node[i]]] += ops[i].time_s;
        for (int k = 0; k < g->pn[i]; k++)
            for (int it = 0; it < iters; it++)
                if (!ovl_edge(s, it * m + loc[g->node[g->prod[g->pfirst[i] + k]]], it * m + loc[g->node[i]])) return 0;
    }
    for (int a = m; a < iters * m; a++) {
        s->glob[a] = s->glob[a - m];
        s->t[a] = s->t[a - m];
        s->ici[a] = s->ici[a - m];
    }
    s->m = m;
    s->nn = iters * m;
    return 1;
}

/* Which element of the loop state (the body's parameter) x is, through get-tuple-element, tuple and bitcast:
 * its index, -2 for the whole state, -1 when x is not the state (an op's result, a constant). */
static int ovl_state_elem(const hlo_instr *x)
{
    for (int d = 0; d < 64; d++) {
        if (x->op == HLO_PARAMETER) return -2;
        if (x->op == HLO_BITCAST && x->nops == 1) {
            x = x->ops[0];
            continue;
        }
        if (x->op != HLO_GET_TUPLE_ELEMENT || x->nops != 1) return -1;
        const hlo_instr *y = x->ops[0];
        int64_t idx = hlo_attr_int(x, HK_INDEX, 0);
        if (y->op == HLO_PARAMETER) return (int)idx;
        if (y->op == HLO_TUPLE && idx >= 0 && idx < y->nops) x = y->ops[idx];
        else if (y->op == HLO_GET_TUPLE_ELEMENT) x = y;
        else return -1;
    }
    return -1;
}

/* The op of this iteration that computes x (an element of the body's result), or -1: passed through from the
 * state, or made of constants. */
static int ovl_state_producer(const hlo_instr *x, const int *op_of)
{
    for (int d = 0; d < 64; d++) {
        if (op_of[x->id] >= 0) return op_of[x->id];
        if (ovl_state_elem(x) != -1 || x->nops < 1) return -1;
        if (x->op == HLO_GET_TUPLE_ELEMENT && x->ops[0]->op == HLO_TUPLE) {
            int64_t idx = hlo_attr_int(x, HK_INDEX, 0);
            if (idx < 0 || idx >= x->ops[0]->nops) return -1;
            x = x->ops[0]->ops[idx];
        } else {
            x = x->ops[0];   /* a bitcast, a get-tuple-element of a multi-output op, a duplicated producer */
        }
    }
    return -1;
}

typedef struct ovl_dfs {
    const hlo_instr **v;
    int               n, cap;
} ovl_dfs;

static int ovl_dfs_push(ovl_dfs *st, const hlo_instr *x)
{
    const hlo_instr **nv = ut_grow((void *)st->v, sizeof *nv, st->n, &st->cap, 64);
    if (!nv) return 0;
    st->v = nv;
    st->v[st->n++] = x;
    return 1;
}

/* The state elements op i reads (through duplicated producers and get-tuple-elements, not through other
 * ops): an edge from the first iteration's producer of each to op i's node in the second iteration. */
static int ovl_reads(ovl_sched *s, const ovl_graph *g, const tim_op *ops, int i, const int *loc, const int *op_of,
                     const int *prod_of, int nelem, int *stamp, ovl_dfs *st)
{
    const cmp_op *op = ops[i].op;
    int b = s->m + loc[g->node[i]];
    st->n = 0;
    for (int k = 0; k < op->ninstrs; k++)
        for (int o = 0; o < op->instrs[k]->nops; o++)
            if (!ovl_dfs_push(st, op->instrs[k]->ops[o])) return 0;
    while (st->n > 0) {
        const hlo_instr *x = st->v[--st->n];
        if (stamp[x->id] == i + 1 || op_of[x->id] == i) continue;
        stamp[x->id] = i + 1;
        int e = ovl_state_elem(x);
        if (e >= 0 && e < nelem && prod_of[e] >= 0 && !ovl_edge(s, loc[g->node[prod_of[e]]], b)) return 0;
        for (int j = 0; e == -2 && j < nelem; j++)
            if (prod_of[j] >= 0 && !ovl_edge(s, loc[g->node[prod_of[j]]], b)) return 0;
        if (e != -1 || op_of[x->id] >= 0) continue;
        for (int o = 0; o < x->nops; o++)
            if (!ovl_dfs_push(st, x->ops[o])) return 0;
    }
    return 1;
}

/* The loop state's edges from the first iteration to the second. */
static int ovl_loop_edges(ovl_sched *s, const ovl_graph *g, const tim_op *ops, int w, const int *loc)
{
    const hlo_comp *c = ops[g->order[g->wfirst[w]]].root->parent;
    const hlo_instr *root = c->root;
    int nelem = root->op == HLO_TUPLE ? root->nops : 1;
    int *op_of = ut_malloc(((size_t)c->ninstrs + 1) * sizeof(int)), *stamp = ut_calloc((size_t)c->ninstrs + 1, sizeof(int));
    int *prod_of = ut_malloc(((size_t)nelem + 1) * sizeof(int));
    ovl_dfs st = {0};
    int ok = op_of && stamp && prod_of;
    for (int k = 0; ok && k < c->ninstrs; k++) op_of[k] = -1;
    for (int q = g->wfirst[w]; ok && q < g->wfirst[w + 1]; q++) {
        const cmp_op *op = ops[g->order[q]].op;
        for (int k = 0; k < op->ninstrs; k++)
            if (op->instrs[k]->parent == c) op_of[op->instrs[k]->id] = g->order[q];
    }
    for (int j = 0; ok && j < nelem; j++) prod_of[j] = ovl_state_producer(root->op == HLO_TUPLE ? root->ops[j] : root, op_of);
    for (int q = g->wfirst[w]; ok && q < g->wfirst[w + 1]; q++)
        ok = ovl_reads(s, g, ops, g->order[q], loc, op_of, prod_of, nelem, stamp, &st);
    ut_free(op_of); ut_free(stamp); ut_free(prod_of); ut_free((void *)st.v);
    return ok;
}

/* Successors of the nodes below `limit` (CSR), their in-degrees, and the units' priorities. */
static int ovl_levels(ovl_sched *s, int limit)
{
    ut_free(s->efirst); ut_free(s->succ); ut_free(s->deg); ut_free(s->key); ut_free(s->keyi);
    s->efirst = ut_calloc((size_t)limit + 2, sizeof(int));
    s->succ = ut_malloc(((size_t)s->ne + 1) * sizeof(int));
    s->deg = ut_calloc((size_t)limit + 1, sizeof(int));
    s->key = ut_calloc((size_t)limit + 1, sizeof(double));
    s->keyi = ut_calloc((size_t)limit + 1, sizeof(double));
    int *at = ut_malloc(((size_t)limit + 1) * sizeof(int)), *topo = ut_malloc(((size_t)limit + 1) * sizeof(int));
    if (!s->efirst || !s->succ || !s->deg || !s->key || !s->keyi || !at || !topo) {
        ut_free(at); ut_free(topo);
        return 0;
    }
    for (int e = 0; e < s->ne; e++)
        if (s->src[e] < limit && s->dst[e] < limit) s->efirst[s->src[e] + 1]++;
    for (int a = 0; a < limit; a++) s->efirst[a + 1] += s->efirst[a];
    memcpy(at, s->efirst, (size_t)limit * sizeof(int));
    for (int e = 0; e < s->ne; e++) {
        if (s->src[e] >= limit || s->dst[e] >= limit) continue;
        s->succ[at[s->src[e]]++] = s->dst[e];
        s->deg[s->dst[e]]++;
    }
    int nt = 0;
    for (int a = 0; a < limit; a++) {
        at[a] = s->deg[a];
        if (!at[a]) topo[nt++] = a;
    }
    for (int q = 0; q < nt; q++)
        for (int e = s->efirst[topo[q]]; e < s->efirst[topo[q] + 1]; e++)
            if (--at[s->succ[e]] == 0) topo[nt++] = s->succ[e];
    /* backwards: the core's key is minus the compute time from a node to the nearest collective it feeds
     * (-inf: none), so the work that lets a collective start runs first and the ICI starts early, as XLA's
     * scheduler starts async collectives as early as their operands allow; ties go in the program's order.
     * The ICI's key is the longest path after a collective: the one whose readers are needed soonest. */
    for (int q = nt - 1; q >= 0; q--) {
        int a = topo[q];
        double after = 0, near = INFINITY;
        for (int e = s->efirst[a]; e < s->efirst[a + 1]; e++) {
            int b = s->succ[e];
            if (s->keyi[b] + s->t[b] > after) after = s->keyi[b] + s->t[b];
            double d = s->ici[b] ? 0 : -s->key[b];
            if (d < near) near = d;
        }
        s->keyi[a] = after;
        s->key[a] = s->ici[a] ? 0 : -(s->t[a] + near);
    }
    ut_free(at); ut_free(topo);
    return 1;
}

/* A binary heap of ready nodes, the highest key first (ties: the earlier node, the program's order). */
typedef struct ovl_heap {
    int          *h;
    int           n;
    const double *key;
} ovl_heap;

static int ovl_before(const ovl_heap *q, int a, int b) { return q->key[a] > q->key[b] || (q->key[a] == q->key[b] && a < b); }

static void ovl_push(ovl_heap *q, int x)
{
    int i = q->n++;
    while (i > 0 && ovl_before(q, x, q->h[(i - 1) / 2])) {
        q->h[i] = q->h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    q->h[i] = x;
}

static int ovl_pop(ovl_heap *q)
{
    int top = q->h[0], x = q->h[--q->n], i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= q->n) break;
        if (c + 1 < q->n && ovl_before(q, q->h[c + 1], q->h[c])) c++;
        if (!ovl_before(q, q->h[c], x)) break;
        q->h[i] = q->h[c];
        i = c;
    }
    if (q->n) q->h[i] = x;
    return top;
}

/* Node x finished: successors whose producers all finished are ready on their unit. */
static void ovl_release(ovl_sched *s, int x, ovl_heap *core, ovl_heap *ici)
{
    for (int e = s->efirst[x]; e < s->efirst[x + 1]; e++) {
        int b = s->succ[e];
        if (--s->deg[b] == 0) ovl_push(s->ici[b] ? ici : core, b);
    }
}

/* The list schedule of nodes 0..limit-1 on the core and the ICI (after ovl_levels(s, limit)): its length, and
 * in *both the time the two units were busy at once. */
static double ovl_run(ovl_sched *s, int limit, int *heap, double *both)
{
    ovl_heap core = {heap, 0, s->key}, ici = {heap + limit, 0, s->keyi};
    for (int a = 0; a < limit; a++)
        if (!s->deg[a]) ovl_push(s->ici[a] ? &ici : &core, a);
    double now = 0, end_c = 0, end_i = 0;
    int run_c = -1, run_i = -1;
    *both = 0;
    for (;;) {
        if (run_c < 0 && core.n) {
            run_c = ovl_pop(&core);
            end_c = now + s->t[run_c];
        }
        if (run_i < 0 && ici.n) {
            run_i = ovl_pop(&ici);
            end_i = now + s->t[run_i];
        }
        if (run_c < 0 && run_i < 0) break;
        double next = run_c < 0 ? end_i : run_i < 0 ? end_c : end_c < end_i ? end_c : end_i;
        if (run_c >= 0 && run_i >= 0) *both += next - now;
        now = next;
        if (run_c >= 0 && end_c <= now) {
            ovl_release(s, run_c, &core, &ici);
            run_c = -1;
        }
        if (run_i >= 0 && end_i <= now) {
            ovl_release(s, run_i, &core, &ici);
            run_i = -1;
        }
    }
    return now;
}

/* The steady state of a loop body: the second of two iterations scheduled together adds its period P (at
 * least one iteration's core time and its ICI time, at most all its ops' time), so N trips take
 * M1 + (N-1) P, with M1 one iteration alone; N x (the iteration's ops' time) less that ran beside compute. */
static double ovl_loop_hidden(const ovl_sched *s, double trips, double m1, double m2)
{
    double all = 0, core = 0, ici = 0;
    for (int a = 0; a < s->m; a++) {
        all += s->t[a];
        if (s->ici[a]) ici += s->t[a];
        else core += s->t[a];
    }
    double period = m2 - m1;
    if (period < core) period = core;
    if (period < ici) period = ici;
    if (period > all) period = all;
    double h = trips * all - (m1 + (trips - 1) * period);
    return h > 0 ? h / trips : 0;   /* per iteration */
}

/* Collective time of walk w that ran beside compute, per execution of the walk; trips >= 2 for a loop body. */
static int ovl_walk_hidden(const ovl_graph *g, const tim_op *ops, int w, double trips, int *loc, double *hidden)
{
    ovl_sched s = {0};
    int iters = trips >= 2 ? 2 : 1, *heap = NULL;
    double both = 0, both2 = 0, m1 = 0, m2 = 0;
    int ok = ovl_sched_init(&s, g, ops, w, iters, loc) && (iters == 1 || ovl_loop_edges(&s, g, ops, w, loc));
    ok = ok && (heap = ut_malloc((2 * (size_t)s.nn + 1) * sizeof(int))) != NULL && ovl_levels(&s, s.m);
    if (ok) m1 = ovl_run(&s, s.m, heap, &both);
    if (ok && iters == 2 && (ok = ovl_levels(&s, s.nn))) m2 = ovl_run(&s, s.nn, heap, &both2);
    if (ok) *hidden = iters == 1 ? both : ovl_loop_hidden(&s, trips, m1, m2);
    ut_free(heap);
    ovl_sched_free(&s);
    return ok;
}

static int ovl_has_collective(const ovl_graph *g, const tim_op *ops, int w)
{
    for (int q = g->wfirst[w]; q < g->wfirst[w + 1]; q++)
        if (ovl_on_ici(&ops[g->order[q]])) return 1;
    return 0;
}

tpu_status tim_overlap(tpu_ctx *ctx, const cmp_program *p, const chp_chip *chip, tim_op *ops, const int *walk,
                       const double *trips, int n, int nwalks, double *hidden)
{
    *hidden = 0;
    if (n <= 0) return TPU_OK;
    ovl_graph g = {0};
    g.n = n;
    g.nwalks = nwalks;
    int ok = ovl_group_walks(&g, walk) && ovl_producers(&g, ops, p->nvalues) && ovl_combine(&g, chip, ops);
    int *loc = ok ? ut_malloc((size_t)n * sizeof(int)) : NULL;
    ok = ok && loc;
    for (int w = 0; ok && w < nwalks; w++) {
        if (g.wfirst[w] == g.wfirst[w + 1] || !ovl_has_collective(&g, ops, w)) continue;
        double h = 0;
        ok = ovl_walk_hidden(&g, ops, w, trips ? trips[w] : 0, loc, &h);
        *hidden += ops[g.order[g.wfirst[w]]].count * h;
    }
    ut_free(loc);
    ovl_free(&g);
    return ok ? TPU_OK : ut_nomem(ctx);
}
