/* policy.h — precision policies as module rewrites (policy.c). */
#ifndef TPU_CMP_POLICY_H
#define TPU_CMP_POLICY_H

#include "hlo/hlo.h"

/* Returns a new module: "float32" (a copy) or "mixed_bfloat16" (Keras' policy, see policy.c). */
tpu_status cmp_apply_policy(tpu_ctx *ctx, const hlo_module *m, const char *policy, hlo_module **out);

/* inline.c: a copy of the module with every call inlined (as the TPU compiler does before fusion). */
tpu_status cmp_inline_calls(tpu_ctx *ctx, const hlo_module *m, hlo_module **out);

#endif
