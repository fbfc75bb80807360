/* rt_groups.c — which devices take part in a collective.
 *
 * XLA (collective_ops_utils: GetCollectiveOpGroupMode, GetParticipatingDevices) reads replica_groups through
 * the instruction's group mode:
 *   no channel_id                           cross-replica: ids are replica ids; every partition runs its own
 *                                           group of replicas (device (g, p) for g in the group)
 *   channel_id, op without use_global_device_ids (all-to-all, collective-permute, collective-broadcast)
 *                                           cross-partition: ids are partition ids within this replica
 *   channel_id, use_global_device_ids=false cross-replica-and-partition: replica ids, each with every
 *                                           partition (replica-major order)
 *   channel_id, use_global_device_ids=true  flattened ids: replica * num_partitions + partition
 * Empty replica_groups means one group of every id. Iota groups [G,S]<=[d0,d1,...]T(perm) list the ids
 * iota(prod d) reshaped to d, transposed by perm and read as G rows of S. */
#include "runtime/runtime.h"

#include <string.h>

const char *rt_mode_name(rt_mode m)
{
    switch (m) {
    case RT_CROSS_REPLICA: return "cross-replica";
    case RT_CROSS_PARTITION: return "cross-partition";
    case RT_CROSS_REPLICA_AND_PARTITION: return "cross-replica-and-partition";
    case RT_FLATTENED_ID: return "flattened-id";
    }
    return "?";
}

static int rt_has_global_ids_field(hlo_op op)
{
    return op == HLO_ALL_REDUCE || op == HLO_ALL_REDUCE_START || op == HLO_REDUCE_SCATTER || op == HLO_ALL_GATHER ||
           op == HLO_ALL_GATHER_START;
}

rt_mode rt_group_mode(const hlo_instr *in)
{
    if (!hlo_attr_find(in, HK_CHANNEL_ID)) return RT_CROSS_REPLICA;
    if (!rt_has_global_ids_field((hlo_op)in->op)) return RT_CROSS_PARTITION;
    return hlo_attr_bool(in, HK_USE_GLOBAL_DEVICE_IDS, 0) ? RT_FLATTENED_ID : RT_CROSS_REPLICA_AND_PARTITION;
}

static tpu_status rt_gerr(tpu_ctx *ctx, const hlo_module *m, const hlo_instr *in, const char *fmt, ...) UT_PRINTF(4, 5);
static tpu_status rt_gerr(tpu_ctx *ctx, const hlo_module *m, const hlo_instr *in, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ut_err(ctx, TPU_ERR_INVALID, "%s:%d:%d: instruction '%s' (%s): %s", m->filename ? m->filename : "<module>",
                  in->line, in->col, in->name, hlo_op_name((hlo_op)in->op), msg);
}

/* Id at position j of an iota group list. */
static int64_t rt_iota_id(const hlo_rgroups *g, int64_t j)
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

tpu_status rt_group_members(tpu_ctx *ctx, const hlo_module *m, const hlo_instr *in, int R, int P, int dev,
                            int *members, int *n, int *rank)
{
    *n = 0;
    *rank = -1;
    rt_mode mode = rt_group_mode(in);
    hlo_op op = (hlo_op)in->op;
    int permute = op == HLO_COLLECTIVE_PERMUTE || op == HLO_COLLECTIVE_PERMUTE_START;
    if (!hlo_attr_find(in, HK_CHANNEL_ID) && hlo_attr_bool(in, HK_USE_GLOBAL_DEVICE_IDS, 0))
        return rt_gerr(ctx, m, in, "use_global_device_ids=true needs a channel_id (XLA rejects this combination)");
    int64_t space = mode == RT_CROSS_PARTITION ? P : mode == RT_FLATTENED_ID ? (int64_t)R * P : R;
    int64_t me = mode == RT_CROSS_PARTITION ? dev % P : mode == RT_FLATTENED_ID ? dev : dev / P;
    int64_t *ids = ut_malloc((size_t)space * sizeof *ids);
    uint8_t *seen = ut_calloc((size_t)space, 1);
    if (!ids || !seen) {
        ut_free(ids);
        ut_free(seen);
        return ut_nomem(ctx);
    }
    int64_t ng = 0;   /* ids in my group */
    tpu_status st = TPU_OK;
    const hlo_attr *a = permute ? NULL : hlo_attr_find(in, HK_REPLICA_GROUPS);
    const hlo_rgroups *g = a && a->kind == HA_RGROUPS ? a->v.rgroups : NULL;
    if (!g || (!g->iota && g->ngroups == 0)) {
        for (int64_t i = 0; i < space; i++) ids[ng++] = i;
    } else if (g->iota) {
        int64_t G = g->gdims[0], S = g->gdims[1];
        if (G * S != space)
            st = rt_gerr(ctx, m, in, "replica_groups [%lld,%lld] list %lld ids but the %s group mode has %lld (%d replica%s x %d partition%s)",
                         (long long)G, (long long)S, (long long)(G * S), rt_mode_name(mode), (long long)space, R,
                         R == 1 ? "" : "s", P, P == 1 ? "" : "s");
        for (int64_t gi = 0; !st && gi < G && ng == 0; gi++) {
            int mine = 0;
            for (int64_t k = 0; k < S; k++) mine |= rt_iota_id(g, gi * S + k) == me;
            if (mine)
                for (int64_t k = 0; k < S; k++) ids[ng++] = rt_iota_id(g, gi * S + k);
        }
    } else {
        for (int gi = 0; !st && gi < g->ngroups; gi++) {
            int mine = 0;
            for (int k = 0; !st && k < g->len[gi]; k++) {
                int64_t v = g->ids[gi][k];
                if (v < 0 || v >= space)
                    st = rt_gerr(ctx, m, in, "replica_groups name id %lld, but the %s group mode has ids 0..%lld (%d replica%s x %d partition%s)",
                                 (long long)v, rt_mode_name(mode), (long long)space - 1, R, R == 1 ? "" : "s", P,
                                 P == 1 ? "" : "s");
                else if (seen[v]) st = rt_gerr(ctx, m, in, "replica_groups name id %lld twice", (long long)v);
                else seen[v] = 1;
                if (!st && v == me) mine = 1;
            }
            if (!st && mine)
                for (int k = 0; k < g->len[gi]; k++) ids[ng++] = g->ids[gi][k];
        }
    }
    if (!st && ng == 0)
        st = rt_gerr(ctx, m, in, "%s id %lld is in no replica group", mode == RT_CROSS_PARTITION ? "partition"
                     : mode == RT_FLATTENED_ID ? "device" : "replica", (long long)me);
    if (!st) {
        int r = (int)(dev / P), p = (int)(dev % P);
        for (int64_t i = 0; i < ng; i++) {
            switch (mode) {
            case RT_CROSS_REPLICA: members[(*n)++] = (int)ids[i] * P + p; break;
            case RT_CROSS_PARTITION: members[(*n)++] = r * P + (int)ids[i]; break;
            case RT_CROSS_REPLICA_AND_PARTITION:
                for (int q = 0; q < P; q++) members[(*n)++] = (int)ids[i] * P + q;
                break;
            case RT_FLATTENED_ID: members[(*n)++] = (int)ids[i]; break;
            }
        }
        for (int i = 0; i < *n; i++)
            if (members[i] == dev) *rank = i;
        if (*rank < 0) st = rt_gerr(ctx, m, in, "device %d is not in its own group", dev);
    }
    ut_free(ids);
    ut_free(seen);
    return st;
}
