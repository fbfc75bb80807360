/* verify.h — shape inference, module verification and the TPU compatibility check.
 *
 * Arrows point one way: verify/ reads the hlo/ IR and never the other way round. The public loaders
 * (tpu_module_parse / _load / _load_split) live here (ver_api.c) because a module is only complete once the
 * shapes left out of the text have been inferred. Names start with ver_.
 */
#ifndef TPU_VERIFY_H
#define TPU_VERIFY_H

#include "hlo/hlo.h"

/* ---- shape inference (ver_infer.c) ---- */

typedef enum ver_infer_status {
    VER_INFER_OK,      /* *out is the shape the instruction must have */
    VER_INFER_GIVEN,   /* the result cannot be derived from operands (custom-call, parameter, infeed, ...): the
                          checks that can be made passed and *out is the declared shape */
    VER_INFER_ERROR    /* operands or attributes are inconsistent; msg says why, starting with the opcode */
} ver_infer_status;

/* The shape `in` must have, from its operands, attributes and called computations, with XLA's semantics
 * (operation_semantics and shape_inference). Tuple elements of *out are allocated in `arena`. Operands must
 * have shapes (callers infer in topological order). msg gets e.g. "dot: contracting dimension sizes differ:
 * lhs dim 1 is 64, rhs dim 0 is 32". The declared shape is used only where the result cannot be inferred
 * (VER_INFER_GIVEN) or is a free choice (the element type of convert, dot's preferred type, ...). */
ver_infer_status ver_infer_shape(const hlo_module *m, const hlo_instr *in, ut_arena *arena, hlo_shape *out,
                                 char *msg, size_t msg_size);

/* Same dtype and dimensions (bounds of dynamic dimensions included); layouts and dynamism ignored. */
int ver_shape_match(const hlo_shape *declared, const hlo_shape *inferred);
int ver_shape_match_ignoring_fp(const hlo_shape *declared, const hlo_shape *inferred);
/* Whether m is a TPU-compiled program (tiled layouts), verified with mixed float precision allowed. */
int ver_mixed_precision(const hlo_module *m);

/* Infers every result shape left out of the text (callees first, then in instruction order). Fails with
 * TPU_ERR_SHAPE and "file:line:col: ..." when one cannot be inferred. */
tpu_status ver_fill_shapes(tpu_ctx *ctx, hlo_module *m);

/* ---- problems and reports (ver_check.c) ---- */

typedef enum ver_severity { VER_ERROR, VER_WARNING, VER_NOTE } ver_severity;

typedef struct ver_problem {
    ver_severity sev;
    const char  *category;    /* group title: "shape", "dynamic shape", "custom-call", "element type", ... */
    char        *where;       /* file:line:col */
    char        *instr;       /* instruction name ("" for module-level problems) */
    char        *opcode;
    char        *op_name;     /* metadata op_name or NULL */
    char        *source;      /* metadata source_file:source_line (or from the stack frame) or NULL */
    char        *msg;
    char        *hint;        /* one-line fix, or NULL */
} ver_problem;

struct tpu_report {
    char        *module;
    char        *chip;         /* generation checked against, or NULL (generic) */
    int          nproblems, cap;
    ver_problem *problems;
    int          nerrors, nwarnings, nnotes;
    int          oom;          /* an allocation failed while building: the report is incomplete */
    char        *text;         /* built on demand */
    char        *json;
    /* the metadata of the last instruction reported on (one instruction with 100000 unknown attributes gets
     * 100000 notes: its attributes are searched once, not once per note) */
    const hlo_instr *meta_in;
    const char      *meta_op_name, *meta_sf, *meta_sl, *meta_frame;
};
typedef struct tpu_report ver_report;

ver_report *ver_report_new(const char *module, const char *chip);
/* Adds a problem about `in` (NULL for the module). Strings are copied. */
void ver_report_add(ver_report *r, const hlo_module *m, const hlo_instr *in, ver_severity sev,
                    const char *category, const char *hint, const char *fmt, ...) UT_PRINTF(7, 8);

/* ---- verification (ver_verify.c) ---- */

/* Checks every instruction's declared shape against the inferred one (layouts ignored), operand counts,
 * required attributes and called-computation signatures. Adds one "shape" error per problem found to r.
 * Returns the number of errors added. */
int ver_verify_module(tpu_ctx *ctx, const hlo_module *m, ver_report *r);

/* The gate in front of everything that executes or plans a program (run, the replicated runtime, training,
 * memory, profile): TPU_OK when m verifies, else TPU_ERR_SHAPE with "FILE does not verify (N errors)" and the
 * first errors, each at file:line:col. The verdict is kept on the module, so a training loop pays once. */
tpu_status ver_require(tpu_ctx *ctx, const hlo_module *m);

/* ver_stablehlo.c: StableHLO (MLIR text, bytecode, a jax.export serialization) through the context's converter */
int        ver_head_is_stablehlo(const char *head, size_t n);
int        ver_stablehlo_payload(const char *b, size_t n, const char **kind, size_t *off, size_t *len);
/* The HLO (text or binary proto; malloc'ed, free with free()) the converter makes of StableHLO bytes. */
tpu_status ver_convert(tpu_ctx *ctx, const char *b, size_t n, const char *file, char **out, size_t *out_len);

#endif
