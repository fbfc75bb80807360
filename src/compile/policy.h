/* policy.h — precision policies as module rewrites (policy.c). */
#ifndef TPU_CMP_POLICY_H
#define TPU_CMP_POLICY_H

#include "hlo/hlo.h"

/* Returns a new module: "float32" (a copy) or "mixed_bfloat16" (Keras' policy, see policy.c). */
tpu_status cmp_apply_policy(tpu_ctx *ctx, const hlo_module *m, const char *policy, hlo_module **out);

/* inline.c: a copy of the module with every call inlined (as the TPU compiler does before fusion). */
/* The end of a rewrite of a clone (policy.c, inline.c): ids renumbered, and the result must verify; when it
 * does not, the error says which rewrite made it ("internal: <what> produced ..."). */
tpu_status cmp_rewrite_done(tpu_ctx *ctx, hlo_module *m, const char *what);

tpu_status cmp_inline_calls(tpu_ctx *ctx, const hlo_module *m, hlo_module **out);
/* Operands read through reshapes and dimension-preserving broadcasts that lead back to a value of the same
 * shape (reshape(reshape(x)) back to x's shape: what inlined jax calls leave behind) read that value directly.
 * The moves stay in place, dead when nothing else reads them. Shapes are unchanged: m still verifies. */
void       cmp_forward_moves(hlo_module *m);

#endif
