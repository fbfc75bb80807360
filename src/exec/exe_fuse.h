/* exe_fuse.h — fused elementwise loops (exe_fuse.c). */
#ifndef TPU_EXE_FUSE_H
#define TPU_EXE_FUSE_H

#include "exec.h"

typedef struct exe_fmember {
    const hlo_instr *in;
    int              op[3];   /* operand k: >= 0 a member slot; < 0 input slot -1-op */
} exe_fmember;

typedef struct exe_fgroup {
    const hlo_instr  *root;      /* the member whose value leaves the group */
    int               nmembers;
    exe_fmember      *members;   /* topological order, root last */
    int               ninputs;
    const hlo_instr **inputs;    /* instructions outside the group whose values members read */
} exe_fgroup;

int        exe_fusion_enabled(void);
/* Turns fusion on or off for later runs (tests compare both). */
void       exe_fusion_set(int on);
/* Groups for computation c: group_of[i] is the group of instruction i or -1. Only live instructions join. */
tpu_status exe_fuse_plan(tpu_ctx *ctx, const hlo_comp *c, const uint8_t *live, int *group_of, exe_fgroup **groups,
                         int *ngroups);
void       exe_fuse_free(exe_fgroup *groups, int n);
/* Runs a group: inputs[q] is the value of G->inputs[q]. reuse: an input (its index) whose value the caller
 * gives up — nobody else holds it and it is read element for element — to receive the result in place; -1
 * for none. */
tpu_status exe_fuse_run(exe_state *S, const exe_fgroup *G, exe_value *const *inputs, int reuse, exe_value **out);
/* Could input q receive the group's result in place (same element type and count, read only element for
 * element, not through a broadcast)? */
int        exe_fuse_can_reuse(const exe_fgroup *G, int q, const tpu_tensor *t);

#endif
