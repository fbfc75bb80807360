/* exe_fuse.h — fused elementwise loops (exe_fuse.c). */
#ifndef TPU_EXE_FUSE_H
#define TPU_EXE_FUSE_H

#include "exec.h"

/* group_of[] values besides a group index */
#define EXE_FUSE_NONE     (-1)   /* runs on its own */
#define EXE_FUSE_ABSORBED (-2)   /* a broadcast every user of which computes it inside its own group, or a static
                                  * move (slice, reshape, transpose, reverse) under such a member (exe_fmember.view):
                                  * no value */

typedef struct exe_fmember {
    const hlo_instr *in;
    int              op[3];   /* operand k: >= 0 a member slot; < 0 input slot -1-op */
    int              out;     /* >= 0: index in the group's outputs (its value leaves the group); -1 */
    int8_t           cls;     /* scratch class of the result (FU_F, FU_P, FU_I, FU_L in exe_fuse.c) */
    int8_t           dir;     /* compare: direction 0..5 (EQ NE LT LE GT GE), -1 unknown */
    uint8_t          uns;     /* integer operands read as unsigned (u32/u64, or compare type=UNSIGNED) */
    uint8_t          total;   /* compare type=TOTALORDER */
    uint8_t          fold;    /* computed inside the member that reads it (rotate, multiply-add): no value */
    uint8_t          rot;     /* or(shift-left(x, l), shift-right-logical(x, r)) in one pass: rop = x, l, r */
    uint8_t          madd;    /* f32 add/subtract of a folded multiply: rop = other operand, p, q; 1: op(x, p*q),
                               * 2: op(p*q, x) */
    int              rop[3];
    /* a broadcast of an array in a one-block group of static shape: for output element i, the element of its
     * operand (of bidx_n elements) it reads (fu_plan_layout); NULL: worked out per block */
    int32_t         *bidx;
    int64_t          bidx_n;
    int64_t          bspan;   /* every bidx entry is below it (a small span is permuted in registers, not gathered) */
    /* a view: a static move (slice, reshape, transpose, reverse, broadcast) of at most FU_VIEW_MAX elements,
     * possibly over a chain of further moves each read by nothing else; it reads vsrc (the chain's bottom,
     * its input op[0]) through bidx, the composed index map (always planned), so no move is materialised;
     * 2: the map is a contiguous run (bidx[i] = bidx[0] + i), read in place; vrun: the map is runs of vrun
     * contiguous elements (a slice's rows), copied as runs when long */
    uint8_t          view;
    int32_t          vrun;
    const hlo_instr *vsrc;
} exe_fmember;

typedef struct exe_fgroup {
    const hlo_instr  *last;      /* the member at whose place in the computation the group runs */
    int               nmembers;
    exe_fmember      *members;   /* absorbed broadcasts first, then compute members in topological order */
    int               ninputs;
    const hlo_instr **inputs;    /* instructions outside the group whose values members read */
    int               noutputs;
    const hlo_instr **outputs;   /* members whose values leave the group (used outside it, or the root) */
    /* scratch buffers (exe_fuse_run): slots (members, then inputs) share a buffer when their lifetimes in a
     * block do not overlap, so a long chain's blocks stay in L1; -1: the slot needs none */
    int              *buf;       /* per slot: its buffer */
    int               nbuf;
    uint8_t          *buf_es;    /* per buffer: bytes per element */
    uint8_t          *fixed;     /* per slot: a scalar broadcast or scalar input, filled once per scratch */
    uint8_t          *in_moved;  /* per input: read by a broadcast, dynamic-slice or view member, not element for
                                  * element (so it never receives an output in place) */
    /* the block layout, fixed by the shapes (exe_fuse_plan; NULL off: exe_fuse_run works it out): elements,
     * elements per block, and each slot's byte offset in a thread's scratch (then the total) */
    int64_t           lay_n, lay_blk;
    size_t           *lay_off;
} exe_fgroup;

/* Groups for computation c: group_of[i] is the group of instruction i, EXE_FUSE_NONE or EXE_FUSE_ABSORBED.
 * Only live instructions join; with `enabled` 0 none does (the run's EXE_NO_FUSION). A group runs where its
 * `last` member stands; every other member has no value of its own unless it is an output. */
tpu_status exe_fuse_plan(tpu_ctx *ctx, const hlo_comp *c, int enabled, const uint8_t *live, int *group_of, exe_fgroup **groups,
                         int *ngroups);
void       exe_fuse_free(exe_fgroup *groups, int n);
/* Runs a group: inputs[q] is the value of G->inputs[q]; outs[k] receives output k's value. reuse[k]: an input
 * (its index) whose value the caller gives up — nobody else holds it and it is read element for element — to
 * receive output k in place; -1 for none. */
tpu_status exe_fuse_run(exe_state *S, const exe_fgroup *G, exe_value *const *inputs, const int *reuse, exe_value **outs);
/* Could input q receive output k in place (same element type and count, read only element for element, not
 * through a broadcast)? */
int        exe_fuse_can_reuse(const exe_fgroup *G, int k, int q, const tpu_tensor *t);

/* A scalar computation (a reducer, a combiner: scalar parameters and results, elementwise body) evaluated on
 * `len` <= 1024 independent argument sets at once with the fused loops' block operations: exactly what
 * exe_scalar_fn_eval gives for each lane. Lanes of a parameter or result hold its class's layout: f32 (bf16
 * as f32 values), u8 (pred), 32-bit or 64-bit integers (exe_vfn_lane_bytes). exe_vfn_build returns NULL
 * when some instruction has no block form (then use exe_scalar_fn_eval). Results may not alias arguments. */
typedef struct exe_vfn exe_vfn;
exe_vfn *exe_vfn_build(const hlo_comp *c);
void     exe_vfn_free(exe_vfn *f);
int      exe_vfn_lane_bytes(tpu_dtype t);           /* 0: the type has no lanes */
size_t   exe_vfn_scratch_bytes(const exe_vfn *f);   /* per concurrent caller */
const exe_vfn *exe_scalar_fn_vfn(const exe_scalar_fn *fn);   /* built with fn (exe_scalar.c); or NULL */
void     exe_vfn_eval(const exe_state *S, const exe_vfn *f, void *const *args, void *const *res, int len, void *scratch);

#endif
