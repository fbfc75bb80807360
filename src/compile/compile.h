/* compile.h — compiling a verified module for a chip: layout assignment, tiling and padding, fusion, a
 * schedule, and buffer assignment by liveness with aliasing. The result (cmp_program) is what the memory
 * report, the memory viewer and the timing model read. Everything here works on shapes only, so programs
 * far too large to run are planned in well under a second. Names start with cmp_. */
#ifndef TPU_COMPILE_H
#define TPU_COMPILE_H

#include "hlo/hlo.h"
#include "chip/chip.h"

/* ---- fusion ---- */
typedef enum cmp_op_kind {
    CMP_LOOP,        /* elementwise / data-movement chain: one pass over its output */
    CMP_INPUT,       /* a reduction with its producers fused in (XLA's kInput) */
    CMP_OUTPUT,      /* dot or convolution with fused operand converts and elementwise epilogue (kOutput) */
    CMP_SINGLE,      /* one unfusible instruction: gather, scatter, sort, custom-call, collective, ... */
    CMP_CONTROL,     /* while / conditional / call: runs sub-plans */
    CMP_NOOP         /* parameter, constant, tuple, get-tuple-element, bitcast: no kernel, no traffic */
} cmp_op_kind;

const char *cmp_op_kind_name(cmp_op_kind k);

/* A buffer-sized value: one array leaf of an instruction's result. */
/* CMP_V_CALLER: a sub-plan's result, written straight into the caller's buffer (a while loop's state, a
 * branch's or callee's result), so it takes no space in the sub-plan's own heap. */
typedef enum cmp_value_kind { CMP_V_TEMP, CMP_V_ARG, CMP_V_OUTPUT, CMP_V_CONST, CMP_V_CALLER } cmp_value_kind;

typedef struct cmp_value {
    const hlo_instr *def;          /* defining instruction */
    int              leaf;         /* leaf index within def's (tuple) shape, depth first */
    hlo_shape        shape;        /* array shape of the leaf, with the assigned layout */
    int64_t          unpadded;     /* bytes as a dense array */
    int64_t          padded;       /* bytes in HBM with tiling */
    cmp_value_kind   kind;
    int              alias;        /* index of the value whose buffer this one shares, or -1 */
    int              start, end;   /* live range in schedule positions of its computation plan (inclusive) */
    int              comp;         /* computation id */
    int64_t          offset;       /* assigned HBM offset (for temps within their heap), -1 if none */
    int              donated;      /* an argument whose buffer the outputs may reuse (input_output_alias) */
    const hlo_instr *copy_of;      /* a copy the compiler adds (an entry parameter in a convolution's layout,
                                    * def = the first convolution reading it), else NULL */
    int              vmem;         /* a temporary the compiler keeps in VMEM (chip->vmem_temp_bytes): no HBM */
} cmp_value;

typedef struct cmp_op {
    cmp_op_kind        kind;
    const hlo_instr   *root;        /* the instruction whose result leaves the op */
    int                ninstrs;
    const hlo_instr  **instrs;      /* members in topological order (root last) */
    int                nin, nout;
    int               *in;          /* values read (indices into program values) */
    int               *out;         /* values written */
    int                nsub;
    struct cmp_plan  **sub;         /* control ops: the plans they run (body, condition, branches, callee) */
    int64_t            sub_peak;    /* control ops: temp bytes their sub-plans need while running */
} cmp_op;

/* The schedule of one computation that runs as a sequence of ops (the entry and control-flow bodies). */
typedef struct cmp_plan {
    const hlo_comp *comp;
    int             nops;
    cmp_op         *ops;
    int64_t         peak;          /* peak bytes of this plan's temp heap (including sub-plans) */
    int64_t         peak_live;     /* largest sum of live temp bytes at one point (peak minus fragmentation) */
    int64_t         peak_live_unpadded;
    int64_t         vmem_peak;     /* most bytes of temporaries this plan keeps in VMEM at one time */
    int             peak_pos;      /* schedule position of the peak */
} cmp_plan;

typedef struct cmp_opts {
    int verbose;
} cmp_opts;

typedef struct cmp_program {
    const hlo_module *m;
    const chp_chip   *chip;
    ut_arena          arena;
    int               nplans;
    cmp_plan        **plans;       /* by computation id; NULL for embedded computations */
    cmp_plan         *entry;
    int               nvalues;
    cmp_value        *values;
    int              *value_of;    /* first value index of each instruction (by a global instruction number) */
    int              *comp_base;   /* global instruction number of each computation's first instruction */
    const hlo_layout **lay;        /* layout assigned to each instruction (by global number; NULL: as written) */
    /* totals (bytes) */
    int64_t           args_padded, args_unpadded;
    int64_t           outputs_padded, outputs_unpadded;   /* outputs not aliased to arguments */
    int64_t           consts_padded;
    int64_t           temp_peak;   /* entry heap peak: temps and outputs together */
    int64_t           thread_local;/* scalars of the computations unfused ops call (sort comparators, reduce-window
                                    * and scatter reducers): one smallest allocation each, outside the heap */
    int64_t           fused_instrs, ops_total;
} cmp_program;

tpu_status cmp_compile(tpu_ctx *ctx, const hlo_module *m, const chp_chip *chip, const cmp_opts *opts, cmp_program **out);
void       cmp_program_free(cmp_program *p);

/* MXU passes of a dot or convolution: 1 for bf16 (and f32 at default precision, rounded to bf16), 3 or 6
 * for f32 at HIGH/HIGHEST precision or a multi-pass algorithm. */
int        cmp_mxu_passes(const hlo_instr *in);

/* The shape of `in` (an array) with the layout the compiler assigned it. */
hlo_shape  cmp_instr_shape(const cmp_program *p, const hlo_instr *in);

/* Padded and unpadded bytes of an array shape with its (assigned) layout on this chip. */
int64_t    cmp_padded_bytes(const chp_chip *chip, const hlo_shape *s);
int64_t    cmp_unpadded_bytes(const hlo_shape *s);
/* "s32[29360128,10]{1,0:T(8,128)}" — the shape with the tiling the chip applies. */
void       cmp_print_tiled_shape(ut_buf *b, const chp_chip *chip, const hlo_shape *s);

/* cmp_api.c: helpers shared with the timing model */
tpu_status cmp_resolve_chip(tpu_ctx *ctx, const char *chip, chp_slice *out);
tpu_status cmp_verify_or_fail(tpu_ctx *ctx, const hlo_module *m);

#endif
