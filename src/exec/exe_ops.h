/* exe_ops.h — per-element semantics of elementwise HLO ops (exe_ops.c), shared by the elementwise kernels,
 * the scalar-computation evaluator and reference kernels. */
#ifndef TPU_EXE_OPS_H
#define TPU_EXE_OPS_H

#include "exec.h"

/* Unary op (abs ... is-finite); the result has dtype t except is-finite (pred, in .i). */
exe_scalar exe_scalar_unop(const exe_state *S, hlo_op op, tpu_dtype t, exe_scalar a);
exe_scalar exe_scalar_convert(const exe_state *S, tpu_dtype from, tpu_dtype to, exe_scalar a);
/* Rounds a double to the nearest value of float type t (bf16 flushing subnormals in TPU mode; S may be NULL
 * for plain rounding). */
double     exe_round_float(const exe_state *S, tpu_dtype t, double x);
/* Wraps an integer to the width and signedness of t. */
int64_t    exe_wrap_int(tpu_dtype t, int64_t v);
/* Key of element i of a float tensor in XLA's total order (-NaN < -inf < ... < -0 < +0 < ... < NaN),
 * computed from the stored bits. */
int64_t    exe_total_order_key(tpu_dtype t, const void *base, int64_t i);
exe_scalar exe_scalar_round(const exe_state *S, tpu_dtype t, exe_scalar v);

#endif
