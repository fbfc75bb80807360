/* t_mesh_groups.c — replica groups written over a named mesh (XLA's MeshAxesReplicaGroupList, as jax 0.10.2's
 * SPMD partitioner prints them: replica_groups=mesh['x'=2,'y'=4] {'y'}) read into explicit groups. The
 * expected groups are the ones XLA's own tests state (xla/hlo/ir/replica_group_test.cc at the XLA that jax
 * 0.10.2 pins): materialized groups over axes, sub-axes and non-iota device orders. */
#include "test.h"

#include <stdlib.h>

/* The groups tpusim reads for `rg` on an all-reduce over n partitions, printed back ("{{0,2},{1,3}}"). */
static char *mesh_groups(const char *rg, int n)
{
    char text[2048];
    snprintf(text, sizeof text,
             "HloModule m, num_partitions=%d\n\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
             "  ROOT s = f32[] add(a, b)\n}\n\nENTRY e {\n  p = f32[4] parameter(0)\n"
             "  ROOT r = f32[4] all-reduce(p), channel_id=1, replica_groups=%s, use_global_device_ids=true, "
             "to_apply=add\n}\n", n, rg);
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    char *out = NULL, *res = NULL;
    if (tpu_module_parse(ctx, text, strlen(text), "mesh.hlo", &m) != TPU_OK) {
        res = malloc(600);
        snprintf(res, 600, "error: %s", tpu_errmsg(ctx));
    } else if (tpu_module_to_string(ctx, m, &out) == TPU_OK) {
        const char *p = strstr(out, "replica_groups=");
        const char *q = p ? strstr(p, "}}") : NULL;
        if (p && q) {
            p += strlen("replica_groups=");
            res = malloc((size_t)(q - p) + 3);
            memcpy(res, p, (size_t)(q - p) + 2);
            res[q - p + 2] = 0;
        }
    }
    tpu_free(out);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
    return res;
}

#define CHECK_GROUPS(rg, n, want) do { char *got_ = mesh_groups(rg, n); CHECK_EQ_STR(got_, want); free(got_); } while (0)

TEST(mesh_replica_groups_over_axes)
{
    /* MaterializedReplicaGroups: mesh x=2,y=2 */
    CHECK_GROUPS("mesh['x'=2,'y'=2] {'x'}", 4, "{{0,2},{1,3}}");
    CHECK_GROUPS("mesh['x'=2,'y'=2] {'y'}", 4, "{{0,1},{2,3}}");
    CHECK_GROUPS("mesh['x'=2,'y'=2] {'x','y'}", 4, "{{0,1,2,3}}");
    /* what jax's SPMD partitioner writes for a batch axis of 8 */
    CHECK_GROUPS("mesh['axis_0'=8,'axis_1'=1] {'axis_0'}", 8, "{{0,1,2,3,4,5,6,7}}");
}

TEST(mesh_replica_groups_over_sub_axes)
{
    /* MaterializedReplicaGroupsWithSubaxes: mesh a=6,b=6 */
    CHECK_GROUPS("mesh['a'=6,'b'=6] {'a':(1)3}", 36,
                 "{{0,12,24},{1,13,25},{2,14,26},{3,15,27},{4,16,28},{5,17,29},{6,18,30},{7,19,31},{8,20,32},"
                 "{9,21,33},{10,22,34},{11,23,35}}");
    CHECK_GROUPS("mesh['a'=6,'b'=6] {'b':(3)2}", 36,
                 "{{0,1},{2,3},{4,5},{6,7},{8,9},{10,11},{12,13},{14,15},{16,17},{18,19},{20,21},{22,23},{24,25},"
                 "{26,27},{28,29},{30,31},{32,33},{34,35}}");
    CHECK_GROUPS("mesh['a'=6,'b'=6] {'a':(1)2,'b':(1)2}", 36,
                 "{{0,3,18,21},{1,4,19,22},{2,5,20,23},{6,9,24,27},{7,10,25,28},{8,11,26,29},{12,15,30,33},"
                 "{13,16,31,34},{14,17,32,35}}");
    CHECK_GROUPS("mesh['a'=6,'b'=6] {'a':(3)2,'b':(3)2}", 36,
                 "{{0,1,6,7},{2,3,8,9},{4,5,10,11},{12,13,18,19},{14,15,20,21},{16,17,22,23},{24,25,30,31},"
                 "{26,27,32,33},{28,29,34,35}}");
    /* MaterializedReplicaGroupsMatchExpectedV2: {a:(4)2, a:(1)2} == [2,4]<=[2,2,2]T(1,2,0) */
    CHECK_GROUPS("mesh['a'=8] {'a':(4)2,'a':(1)2}", 8, "{{0,4,1,5},{2,6,3,7}}");
}

TEST(mesh_replica_groups_with_device_ids)
{
    /* MaterializedReplicaGroupsRespectNonIotaDeviceOrdering: devices {{3,1},{0,2}} */
    CHECK_GROUPS("mesh['x'=2,'y'=2], device_ids=(3,1,0,2) {'x'}", 4, "{{3,0},{1,2}}");
    CHECK_GROUPS("mesh['x'=2,'y'=2], device_ids=(3,1,0,2) {'y'}", 4, "{{3,1},{0,2}}");
    /* an iota device list: [2,2]T(1,0) is 0,2,1,3 */
    CHECK_GROUPS("mesh['x'=2,'y'=2], device_ids=([2,2]T(1,0)) {'y'}", 4, "{{0,2},{1,3}}");
}

TEST(mesh_replica_groups_errors)
{
    char *e = mesh_groups("mesh['x'=2] {'z'}", 2);
    CHECK(e && strstr(e, "mesh.hlo:") && strstr(e, "'z'"));
    free(e);
    e = mesh_groups("mesh['x'=6] {'x':(4)2}", 6);
    CHECK(e && strstr(e, "does not divide"));
    free(e);
    e = mesh_groups("mesh['x'=4], device_ids=(0,1,2) {'x'}", 4);
    CHECK(e && strstr(e, "error"));
    free(e);
}
