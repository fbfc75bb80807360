/* coll.c — collectives on the slice's real topology (docs/timing.md "Collectives"): where a group of devices
 * lies on the torus (the chips it spans along each dimension, whether that dimension closes into a ring,
 * the cores of a chip, the slices of a multislice), and what each collective kind costs there.
 *
 * Model ([SCALE-S] = "How to Scale Your Model", chapter "Sharded Matrices", jax-ml/scaling-book sharding.md):
 *
 *   all-gather of V bytes (the result) over the chips:  T = max(T_hop x hops, V (n-1)/n / W)
 *     W = the sum over the dimensions the group spans of its bandwidth: a dimension that closes into a ring
 *         (wraparound along its whole side) sends both ways: 2 x link; a line (no wraparound) one way: 1 x
 *         link ([SCALE-S]: "bytes / (bidirectional ICI bandwidth * num_axes)"; without wraparound "we
 *         actually can't do a fully bidirectional AllGather")
 *     hops = per dimension size/2 on a ring, size-1 on a line ([SCALE-S]: the longest path, T_min per hop)
 *   reduce-scatter: as all-gather of its operand; all-reduce = reduce-scatter + all-gather (2x)
 *   all-to-all: 1/4 of an all-gather of its operand on rings ([SCALE-S]: "only has to pass shards part-way
 *     around the ring ... 1/4 the cost"), 1/2 on lines (assumption: no wraparound halves the bisection)
 *   collective-permute: V over one link, one hop (neighbours: the pattern ring and pipeline programs use)
 *   collective-broadcast: as an all-gather of V (pipelined along the ring)
 *
 * Devices that share a chip (the two TensorCores of v2/v3, v7's chiplets) exchange on the chip first: that
 * phase costs V (c-1)/c over the core's HBM bandwidth (assumption: an on-chip copy is bound by HBM), and
 * the chip's links then carry the chip's data once (both cores' shares), so the chip phase is unchanged.
 * A group spanning several slices of a multislice runs hierarchically: reduce-scatter within each slice,
 * the slice-crossing part over the data-center network on 1/n_slice of the data (each chip's share of its
 * host's DCN bandwidth, divided among the chip's devices), then all-gather within each slice. */
#include "timing/model.h"

#include <string.h>

#define TIM_ICI_HOP_S 1e-6   /* [SCALE-S]: T_min per ICI hop "about 1us"; also the old ring model's figure */
#define TIM_DCN_HOP_S 10e-6  /* assumption: one data-center network step (no public figure; order of a RTT) */

/* Bit set of up to 1 << 16 values (dimension positions, slices, cores). */
typedef struct tim_seen {
    uint64_t *w;
    int       n, count;
} tim_seen;

static int tim_seen_init(tim_seen *s, int n)
{
    s->n = n > 0 ? n : 1;
    s->count = 0;
    s->w = ut_calloc((size_t)(s->n + 63) / 64, sizeof *s->w);
    return s->w != NULL;
}

static void tim_seen_add(tim_seen *s, int v)
{
    if (v < 0 || v >= s->n) return;
    uint64_t bit = (uint64_t)1 << (v % 64);
    if (!(s->w[v / 64] & bit)) {
        s->w[v / 64] |= bit;
        s->count++;
    }
}

void tim_coll_geometry(const chp_slice *sl, const int *members, int n, tim_coll_geom *g)
{
    memset(g, 0, sizeof *g);
    g->n = n;
    int S = chp_nslices(sl), per_slice = sl->devices / S, chips = sl->chips / S;
    int per_chip = chips > 0 ? per_slice / chips : 1;
    if (per_chip < 1) per_chip = 1;
    int x = sl->ndims > 0 && sl->dims[0] > 0 ? sl->dims[0] : 1, y = sl->ndims > 1 && sl->dims[1] > 0 ? sl->dims[1] : 1;
    int z = sl->ndims > 2 && sl->dims[2] > 0 ? sl->dims[2] : 1;
    int dims[3] = {x, y, z};
    tim_seen seen[5];   /* x, y, z, core, slice */
    int ok = tim_seen_init(&seen[0], x) & tim_seen_init(&seen[1], y) & tim_seen_init(&seen[2], z) &
             tim_seen_init(&seen[3], per_chip) & tim_seen_init(&seen[4], S);
    for (int i = 0; ok && i < n; i++) {
        int d = members ? members[i] : i;
        if (d < 0 || d >= sl->devices) continue;
        int s = d / per_slice, r = d % per_slice, chip = r / per_chip;
        tim_seen_add(&seen[0], chip % x);
        tim_seen_add(&seen[1], (chip / x) % y);
        tim_seen_add(&seen[2], chip / (x * y));
        tim_seen_add(&seen[3], r % per_chip);
        tim_seen_add(&seen[4], s);
    }
    for (int k = 0; k < 3; k++) {
        g->size[k] = ok ? seen[k].count : 1;
        if (g->size[k] < 1) g->size[k] = 1;
        g->ring[k] = g->size[k] > 2 && k < sl->ndims && sl->wrap[k] && g->size[k] == dims[k];
    }
    g->cores = ok && seen[3].count > 0 ? seen[3].count : 1;
    g->slices = ok && seen[4].count > 0 ? seen[4].count : 1;
    if (!ok) g->size[0] = n;   /* no memory for the sets: one line of n chips */
    for (int k = 0; k < 5; k++) ut_free(seen[k].w);
}

/* One phase over the chips of a slice: all-gather-like movement of V bytes (result size) per device; *bw_s
 * gets its time without latency. */
static double tim_chip_phase(const chp_slice *sl, const tim_coll_geom *g, double V, int *hops, double *bw_s)
{
    const chp_chip *c = &sl->chip;
    double W = 0, lat = 0;
    int nc = 1;
    *hops = 0;
    *bw_s = 0;
    for (int k = 0; k < 3; k++) {
        if (g->size[k] <= 1) continue;
        nc *= g->size[k];
        W += (g->ring[k] ? 2 : 1) * c->ici_link_bw;
        *hops += g->ring[k] ? g->size[k] / 2 : g->size[k] - 1;
    }
    if (nc <= 1 || W <= 0) return 0;
    lat = TIM_ICI_HOP_S * *hops;
    double bw = V * (double)(nc - 1) / (double)nc / W;
    *bw_s = bw;
    return bw > lat ? bw : lat;
}

/* The on-chip phase among c devices of a chip: V (c-1)/c over one core's share of HBM bandwidth. */
static double tim_core_phase(const chp_chip *c, int cores, double V)
{
    if (cores <= 1) return 0;
    int per_chip = c->cores_per_chip / (c->cores_per_device > 0 ? c->cores_per_device : 1);
    double bw = c->hbm_bw / (per_chip > 0 ? per_chip : 1);
    return bw > 0 ? V * (double)(cores - 1) / (double)cores / bw : 0;
}

/* The data-center network phase among S slices: all-gather-like movement of V bytes per device (*bw_s: its
 * time without latency). */
static double tim_dcn_phase(const chp_slice *sl, const tim_coll_geom *g, double V, double *bw_s)
{
    *bw_s = 0;
    const chp_chip *c = &sl->chip;
    int S = g->slices;
    if (S <= 1) return 0;
    int per_host = c->chips_per_host_multi > 0 ? c->chips_per_host_multi : 1;
    int per_chip = c->cores_per_chip / (c->cores_per_device > 0 ? c->cores_per_device : 1);
    double W = c->dcn_host_bw / per_host / (per_chip > 0 ? per_chip : 1);
    double bw = W > 0 ? V * (double)(S - 1) / (double)S / W : 0;
    double lat = TIM_DCN_HOP_S * (S - 1);
    *bw_s = bw;
    return bw > lat ? bw : lat;
}

void tim_coll_cost_of(const chp_slice *sl, hlo_op op, const tim_coll_geom *g, double bytes, tim_coll_cost *out)
{
    memset(out, 0, sizeof *out);
    if (g->n <= 1 || bytes <= 0) return;
    const chp_chip *c = &sl->chip;
    int nici = g->cores;
    for (int k = 0; k < 3; k++) nici *= g->size[k];
    double frac = (double)(g->n - 1) / (double)g->n;
    /* the share each device holds after the in-slice reduce-scatter: what crosses the DCN */
    double dcn_v = bytes / (nici > 0 ? nici : 1);
    double core = tim_core_phase(c, g->cores, bytes), agbw = 0, dbw = 0;
    double ag = tim_chip_phase(sl, g, bytes, &out->hops, &agbw) + core;
    agbw += core;
    double dcn = 0;
    int ring = 1;
    for (int k = 0; k < 3; k++) ring = ring && (g->size[k] <= 2 || g->ring[k]);
    switch (op) {
    case HLO_ALL_REDUCE: case HLO_ALL_REDUCE_START:
        out->ici_s = 2 * ag;
        out->bw_s = 2 * agbw;
        dcn = 2 * tim_dcn_phase(sl, g, dcn_v, &dbw);
        dbw *= 2;
        out->ici_bytes = (int64_t)(2 * frac * bytes);
        break;
    case HLO_ALL_TO_ALL: case HLO_RAGGED_ALL_TO_ALL:
        out->ici_s = ag * (ring ? 0.25 : 0.5);
        out->bw_s = agbw * (ring ? 0.25 : 0.5);
        dcn = tim_dcn_phase(sl, g, bytes, &dbw);   /* most of each device's data leaves its slice */
        out->ici_bytes = (int64_t)(frac * bytes);
        break;
    case HLO_COLLECTIVE_PERMUTE: case HLO_COLLECTIVE_PERMUTE_START:
        out->bw_s = c->ici_link_bw > 0 ? bytes / c->ici_link_bw : 0;
        out->ici_s = c->ici_link_bw > 0 ? out->bw_s + TIM_ICI_HOP_S : 0;
        out->hops = 1;
        if (g->slices > 1) dcn = tim_dcn_phase(sl, g, bytes, &dbw);
        out->ici_bytes = (int64_t)bytes;
        break;
    default:   /* all-gather (result bytes), reduce-scatter (operand bytes), collective-broadcast */
        out->ici_s = ag;
        out->bw_s = agbw;
        dcn = tim_dcn_phase(sl, g, dcn_v, &dbw);
        out->ici_bytes = (int64_t)(frac * bytes);
        break;
    }
    out->dcn_s = dcn;
    out->bw_s += dbw;
    out->dcn_bytes = g->slices > 1 ? (int64_t)(dcn_v * (double)(g->slices - 1) / (double)g->slices) : 0;
    out->time_s = out->ici_s + out->dcn_s;
}

void tim_collective_group_cost(const chp_slice *sl, hlo_op op, const int *members, int n, double bytes, tim_coll_cost *c)
{
    tim_coll_geom g;
    tim_coll_geometry(sl, members, n, &g);
    tim_coll_cost_of(sl, op, &g, bytes, c);
}

double tim_collective_group_s(const chp_slice *sl, hlo_op op, const int *members, int n, double bytes, int64_t *moved)
{
    tim_coll_cost c;
    tim_collective_group_cost(sl, op, members, n, bytes, &c);
    if (moved) *moved = c.ici_bytes + c.dcn_bytes;
    return c.time_s;
}

double tim_collective_s(const chp_slice *sl, hlo_op op, int64_t n, double bytes, int64_t *moved)
{
    if (n <= sl->devices) return tim_collective_group_s(sl, op, NULL, (int)n, bytes, moved);
    /* more devices than the slice has (the runtime's "N:CHIP" systems): one ring of n chips */
    tim_coll_geom g = {(int)(n > 1 << 30 ? 1 << 30 : n), {(int)(n > 1 << 30 ? 1 << 30 : n), 1, 1}, {n > 2, false, false}, 1, 1};
    tim_coll_cost c;
    tim_coll_cost_of(sl, op, &g, bytes, &c);
    if (moved) *moved = c.ici_bytes + c.dcn_bytes;
    return c.time_s;
}

/* Id at position j of an iota group list [G,S]<=[d...]T(perm) (as rt_groups.c reads it). */
static int64_t tim_iota_id(const hlo_rgroups *g, int64_t j)
{
    int n = g->nreshape;
    int64_t td[TPU_MAX_RANK], t[TPU_MAX_RANK], o[TPU_MAX_RANK];
    for (int k = 0; k < n; k++) td[k] = g->reshape[g->nperm ? g->perm[k] : k];
    for (int k = n - 1; k >= 0; k--) {
        t[k] = td[k] ? j % td[k] : 0;
        j = td[k] ? j / td[k] : 0;
    }
    for (int k = 0; k < n; k++) o[g->nperm ? g->perm[k] : k] = t[k];
    int64_t v = 0;
    for (int k = 0; k < n; k++) v = v * g->reshape[k] + o[k];
    return v;
}

int tim_coll_group(const hlo_instr *in, int devices, int widen, int *members)
{
    const hlo_attr *a = hlo_attr_find(in, HK_REPLICA_GROUPS);
    const hlo_rgroups *g = a && a->kind == HA_RGROUPS ? a->v.rgroups : NULL;
    int n = 0;
    if (g && g->iota && g->gdims[1] > 0) {
        for (int64_t k = 0; k < g->gdims[1] && n < devices; k++) members[n++] = (int)tim_iota_id(g, k);
    } else if (g && g->ngroups > 0) {
        for (int k = 0; k < g->len[0] && n < devices; k++) members[n++] = (int)g->ids[0][k];
    } else {
        for (int k = 0; k < devices; k++) members[k] = k;   /* every device */
        return devices;
    }
    if (widen > 1 && n == widen) {   /* the program's every device: the whole slice */
        unsigned char *seen = ut_calloc((size_t)widen, 1);
        int all = seen != NULL;
        for (int k = 0; all && k < n; k++) {
            all = members[k] >= 0 && members[k] < widen && !seen[members[k]];
            if (all) seen[members[k]] = 1;
        }
        ut_free(seen);
        if (all) {
            for (int k = 0; k < devices; k++) members[k] = k;
            return devices;
        }
    }
    return n;
}
