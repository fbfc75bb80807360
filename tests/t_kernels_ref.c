/* t_kernels_ref.c — the fast kernels against their naive references (EXE_REF_KERNELS in exe_run_cfg.ref) on programs
 * larger than the golden cases, so the fast paths (key sorts, parallel loops, BLAS/LAPACK, radix-2 and
 * Bluestein FFTs) run; and clear errors for malformed instructions. Inputs come from tpu_random_inputs
 * (floats in [-1, 1), integers in [0, 8): many ties and some out-of-bounds indices). */
#include "test.h"
#include "exec/kernels/ref.h"

#include <stdlib.h>
#include <time.h>

typedef struct kr_case {
    const char *name;
    const char *hlo;
    double      atol, rtol;
} kr_case;

#define KR_ADD "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = f32[] add(a, b) }\n"
#define KR_MAX "max { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = f32[] maximum(a, b) }\n"
#define KR_GE "ge { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = pred[] compare(a, b), direction=GE }\n"

static const kr_case kr_cases[] = {
    {"gather_big",
     "HloModule g\nENTRY main {\n p = f32[64,32,8] parameter(0)\n i = s32[50,40,2] parameter(1)\n"
     " ROOT g = f32[50,40,16,4] gather(p, i), offset_dims={2,3}, collapsed_slice_dims={0}, start_index_map={0,2},"
     " index_vector_dim=2, slice_sizes={1,16,4}\n}\n", 0, 0},
    {"scatter_add_big",
     "HloModule s\n" KR_ADD "ENTRY main {\n p = f32[8,64] parameter(0)\n i = s32[3000,1] parameter(1)\n"
     " u = f32[3000,64] parameter(2)\n ROOT s = f32[8,64] scatter(p, i, u), update_window_dims={1},"
     " inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add\n}\n", 0, 0},
    /* an operand that dies at the scatter is updated in place; integer max combiner; gathers of single elements */
    {"scatter_s32_max_in_place",
     "HloModule s\nmx { a = s32[] parameter(0)\n b = s32[] parameter(1)\n ROOT r = s32[] maximum(a, b) }\n"
     "ENTRY main {\n p = s32[50,7] parameter(0)\n q = s32[50,7] add(p, p)\n i = s32[4000,1] parameter(1)\n"
     " u = s32[4000,7] parameter(2)\n ROOT s = s32[50,7] scatter(q, i, u), update_window_dims={1},"
     " inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=mx\n}\n", 0, 0},
    {"gather_take_along_batching",
     "HloModule g\nENTRY main {\n p = f32[64,300] parameter(0)\n i = s32[64,90,1] parameter(1)\n"
     " ROOT g = f32[64,90] gather(p, i), offset_dims={}, collapsed_slice_dims={1}, start_index_map={1},"
     " operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=2, slice_sizes={1,1}\n}\n", 0, 0},
    /* the fast row and point gathers, with indices below 0 and past the end (clamped) */
    {"gather_rows_clamped",
     "HloModule g\nENTRY main {\n p = f32[5,8] parameter(0)\n q = bf16[6,8] parameter(1)\n r = f32[7,3] parameter(2)\n"
     " j = s32[3000,1] parameter(3)\n k = s64[2000,1] parameter(4)\n t = s32[] constant(3)\n"
     " tb = s32[3000,1] broadcast(t), dimensions={}\n i = s32[3000,1] subtract(j, tb)\n"
     " u = s64[] constant(3)\n ub = s64[2000,1] broadcast(u), dimensions={}\n l = s64[2000,1] subtract(k, ub)\n"
     " a = f32[3000,8] gather(p, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,8}\n"
     " b = bf16[3000,8] gather(q, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,8}\n"
     " c = f32[2000,3] gather(r, l), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,3}\n"
     " d = f32[8,3000] gather(p, i), offset_dims={0}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,8}\n"
     " ROOT o = (f32[3000,8], bf16[3000,8], f32[2000,3], f32[8,3000]) tuple(a, b, c, d)\n}\n", 0, 0},
    /* bags of ids (two batch dims that flatten) gathering long rows (prefetched) and scattering them back; a
     * result whose batch dims do not flatten (offset dim in the middle); s64 ids with a trailing index dim */
    {"gather_scatter_bags_long_rows",
     "HloModule g\n" KR_ADD "ENTRY main {\n p = f32[50,70] parameter(0)\n j = s32[30,20,1] parameter(1)\n"
     " t = s32[] constant(3)\n tb = s32[30,20,1] broadcast(t), dimensions={}\n i = s32[30,20,1] subtract(j, tb)\n"
     " k = s64[30,20] parameter(2)\n u = f32[30,20,70] parameter(3)\n"
     " a = f32[30,20,70] gather(p, i), offset_dims={2}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=2, slice_sizes={1,70}\n"
     " b = f32[30,70,20] gather(p, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=2, slice_sizes={1,70}\n"
     " c = f32[30,20,70] gather(p, k), offset_dims={2}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=2, slice_sizes={1,70}\n"
     " z = f32[] constant(0)\n zb = f32[50,70] broadcast(z), dimensions={}\n"
     " d = f32[50,70] scatter(zb, i, u), update_window_dims={2}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=2, to_apply=add\n"
     " e = f32[50,70] scatter(p, k, u), update_window_dims={2}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=2, to_apply=add\n"
     " ROOT o = (f32[30,20,70], f32[30,70,20], f32[30,20,70], f32[50,70], f32[50,70]) tuple(a, b, c, d, e)\n}\n", 0, 0},
    {"gather_points_clamped",
     "HloModule g\nENTRY main {\n p = f32[70,6] parameter(0)\n v = f32[6] parameter(1)\n j = s32[70,50,1] parameter(2)\n"
     " t = s32[] constant(3)\n tb = s32[70,50,1] broadcast(t), dimensions={}\n i = s32[70,50,1] subtract(j, tb)\n"
     " a = f32[70,50] gather(p, i), offset_dims={}, collapsed_slice_dims={1}, start_index_map={1},"
     " operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=2, slice_sizes={1,1}\n"
     " b = f32[70,50] gather(v, i), offset_dims={}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=2, slice_sizes={1}\n"
     " k = s32[3000,2] parameter(3)\n tk = s32[3000,2] broadcast(t), dimensions={}\n i2 = s32[3000,2] subtract(k, tk)\n"
     " c = f32[3000] gather(p, i2), offset_dims={}, collapsed_slice_dims={0,1}, start_index_map={0,1}, index_vector_dim=1, slice_sizes={1,1}\n"
     " ROOT o = (f32[70,50], f32[70,50], f32[3000]) tuple(a, b, c)\n}\n", 0, 0},
    /* point gathers with 3-component index vectors (an unrolled loop) and s64 ones; take_along_axis over rows
     * long enough for the next-row prefetch, chunks starting mid-row */
    {"gather_points_nv3_take_along_rows",
     "HloModule g\nENTRY main {\n p = f32[9,10,11] parameter(0)\n j = s32[5000,3] parameter(1)\n"
     " t = s32[] constant(3)\n tb = s32[5000,3] broadcast(t), dimensions={}\n i = s32[5000,3] subtract(j, tb)\n"
     " a = f32[5000] gather(p, i), offset_dims={}, collapsed_slice_dims={0,1,2}, start_index_map={0,1,2}, index_vector_dim=1, slice_sizes={1,1,1}\n"
     " k = s64[5000,3] parameter(2)\n"
     " b = f32[5000] gather(p, k), offset_dims={}, collapsed_slice_dims={0,1,2}, start_index_map={2,0,1}, index_vector_dim=1, slice_sizes={1,1,1}\n"
     " q = f32[33,1500] parameter(3)\n l = s32[33,700,1] parameter(4)\n"
     " c = f32[33,700] gather(q, l), offset_dims={}, collapsed_slice_dims={1}, start_index_map={1},"
     " operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=2, slice_sizes={1,1}\n"
     " ROOT o = (f32[5000], f32[5000], f32[33,700]) tuple(a, b, c)\n}\n", 0, 0},
    /* jnp.argmin / argmax reduces (rd_argminmax): ties (floor), rows with NaNs, +0 and -0 mixed, subnormals
     * (read as zero), an init that wins, indices that are not an iota (repeats), a reduce over the major dim;
     * iota indices (broadcast or direct, not read) and an iota along the kept dim (read) */
    {"reduce_argmin_argmax",
     "HloModule a\n"
     "amin { a = f32[] parameter(0)\n ai = s32[] parameter(1)\n b = f32[] parameter(2)\n bi = s32[] parameter(3)\n"
     " lt = pred[] compare(a, b), direction=LT\n ne = pred[] compare(a, a), direction=NE\n c = pred[] or(lt, ne)\n"
     " v = f32[] select(c, a, b)\n eq = pred[] compare(a, b), direction=EQ\n il = pred[] compare(ai, bi), direction=LT\n"
     " e = pred[] and(eq, il)\n d = pred[] or(c, e)\n i = s32[] select(d, ai, bi)\n ROOT t = (f32[], s32[]) tuple(v, i) }\n"
     "amax { a = f32[] parameter(0)\n ai = s32[] parameter(1)\n b = f32[] parameter(2)\n bi = s32[] parameter(3)\n"
     " gt = pred[] compare(a, b), direction=GT\n ne = pred[] compare(a, a), direction=NE\n c = pred[] or(ne, gt)\n"
     " v = f32[] select(c, a, b)\n eq = pred[] compare(a, b), direction=EQ\n il = pred[] compare(ai, bi), direction=LT\n"
     " e = pred[] and(il, eq)\n d = pred[] or(e, c)\n i = s32[] select(d, ai, bi)\n ROOT t = (f32[], s32[]) tuple(v, i) }\n"
     "ENTRY main {\n p = f32[300,70] parameter(0)\n p2 = f32[300,70] parameter(1)\n s = s32[300,70] parameter(2)\n"
     " k3 = f32[] constant(3)\n k3b = f32[300,70] broadcast(k3), dimensions={}\n q = f32[300,70] floor(f32[300,70] multiply(p, k3b))\n"
     " hi = f32[] constant(0.995)\n hib = f32[300,70] broadcast(hi), dimensions={}\n nn = f32[] constant(nan)\n"
     " nnb = f32[300,70] broadcast(nn), dimensions={}\n c1 = pred[300,70] compare(p2, hib), direction=GT\n qn = f32[300,70] select(c1, nnb, q)\n"
     " aq = f32[300,70] abs(q)\n z = f32[] constant(0)\n zb = f32[300,70] broadcast(z), dimensions={}\n"
     " c2 = pred[300,70] compare(p2, zb), direction=GT\n pz = f32[300,70] select(c2, aq, f32[300,70] negate(aq))\n"
     " sub = f32[300,70] bitcast-convert(s)\n m9 = f32[] constant(-0.9)\n m9b = f32[300,70] broadcast(m9), dimensions={}\n"
     " c3 = pred[300,70] compare(p, m9b), direction=LT\n sn = f32[300,70] select(c3, p, sub)\n"
     " io = s32[70] iota(), iota_dimension=0\n iob = s32[300,70] broadcast(io), dimensions={1}\n"
     " inf = f32[] constant(inf)\n ninf = f32[] constant(-inf)\n i0 = s32[] constant(0)\n i3 = s32[] constant(3)\n"
     " h = f32[] constant(-0.5)\n"
     " r0 = (f32[300], s32[300]) reduce(qn, iob, inf, i0), dimensions={1}, to_apply=amin\n"
     " r1 = (f32[300], s32[300]) reduce(qn, iob, ninf, i0), dimensions={1}, to_apply=amax\n"
     " r2 = (f32[300], s32[300]) reduce(pz, s, inf, i3), dimensions={1}, to_apply=amin\n"
     " r3 = (f32[300], s32[300]) reduce(pz, s, ninf, i3), dimensions={1}, to_apply=amax\n"
     " r4 = (f32[300], s32[300]) reduce(sn, iob, inf, i0), dimensions={1}, to_apply=amin\n"
     " r5 = (f32[300], s32[300]) reduce(sn, s, h, i3), dimensions={1}, to_apply=amax\n"
     " r6 = (f32[300], s32[300]) reduce(p, s, h, i3), dimensions={1}, to_apply=amin\n"
     " r7 = (f32[70], s32[70]) reduce(q, s, inf, i0), dimensions={0}, to_apply=amin\n"
     " r8 = (f32[70], s32[70]) reduce(sub, s, ninf, i0), dimensions={0}, to_apply=amax\n"
     " q3 = f32[300,3] slice(q), slice={[0:300], [0:3]}\n p3 = f32[300,3] slice(p), slice={[0:300], [0:3]}\n"
     " s3 = s32[300,3] slice(s), slice={[0:300], [0:3]}\n m1 = f32[] constant(-1)\n"
     " r9 = (f32[300], s32[300]) reduce(q3, s3, m1, i3), dimensions={1}, to_apply=amin\n"
     " r10 = (f32[300], s32[300]) reduce(p3, s3, h, i3), dimensions={1}, to_apply=amin\n"
     " io1 = s32[300,70] iota(), iota_dimension=1\n io0 = s32[300,70] iota(), iota_dimension=0\n"
     " r11 = (f32[300], s32[300]) reduce(qn, io1, inf, i3), dimensions={1}, to_apply=amin\n"
     " r12 = (f32[300], s32[300]) reduce(qn, io0, inf, i3), dimensions={1}, to_apply=amin\n"
     " ROOT o = ((f32[300], s32[300]), (f32[300], s32[300]), (f32[300], s32[300]), (f32[300], s32[300]), (f32[300], s32[300]),"
     " (f32[300], s32[300]), (f32[300], s32[300]), (f32[70], s32[70]), (f32[70], s32[70]), (f32[300], s32[300]), (f32[300], s32[300]),"
     " (f32[300], s32[300]), (f32[300], s32[300])) tuple(r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12)\n}\n",
     0, 0},
    /* reduces over dims of size 1: a copy when the init is the reducer's identity (pred and/or, s32 add/max,
     * u32 min), the literal f(init, x) otherwise (an init of 5, pred and with false, f32 add of -0) */
    {"reduce_size1_identity",
     "HloModule r\n" KR_ADD
     "land { a = pred[] parameter(0)\n b = pred[] parameter(1)\n ROOT r = pred[] and(a, b) }\n"
     "lor { a = pred[] parameter(0)\n b = pred[] parameter(1)\n ROOT r = pred[] or(a, b) }\n"
     "iadd { a = s32[] parameter(0)\n b = s32[] parameter(1)\n ROOT r = s32[] add(a, b) }\n"
     "imax { a = s32[] parameter(0)\n b = s32[] parameter(1)\n ROOT r = s32[] maximum(a, b) }\n"
     "umin { a = u32[] parameter(0)\n b = u32[] parameter(1)\n ROOT r = u32[] minimum(a, b) }\n"
     "ENTRY main {\n s = s32[70,1,30] parameter(0)\n u = u32[70,1,30] parameter(1)\n f = f32[70,30,1] parameter(2)\n"
     " three = s32[] constant(3)\n tb = s32[70,1,30] broadcast(three), dimensions={}\n"
     " pr = pred[70,1,30] compare(s, tb), direction=LT\n t = pred[] constant(true)\n fa = pred[] constant(false)\n"
     " z = s32[] constant(0)\n five = s32[] constant(5)\n mn = s32[] constant(-2147483648)\n um = u32[] constant(4294967295)\n"
     " fz = f32[] constant(-0)\n ng = f32[70,30,1] negate(f)\n"
     " a = pred[70,30] reduce(pr, t), dimensions={1}, to_apply=land\n b = pred[70,30] reduce(pr, fa), dimensions={1}, to_apply=lor\n"
     " c = pred[70,30] reduce(pr, fa), dimensions={1}, to_apply=land\n d = s32[70,30] reduce(s, z), dimensions={1}, to_apply=iadd\n"
     " e = s32[70,30] reduce(s, five), dimensions={1}, to_apply=iadd\n g = s32[70,30] reduce(s, mn), dimensions={1}, to_apply=imax\n"
     " h = u32[70,30] reduce(u, um), dimensions={1}, to_apply=umin\n k = f32[70,30] reduce(ng, fz), dimensions={2}, to_apply=add\n"
     " ROOT o = (pred[70,30], pred[70,30], pred[70,30], s32[70,30], s32[70,30], s32[70,30], u32[70,30], f32[70,30])"
     " tuple(a, b, c, d, e, g, h, k)\n}\n", 0, 0},
    /* the row scatters: f32 add (1-D, and a window that keeps dim 0 at size 1), max, min, s32 add; rows of 1, 3,
     * 4, 8 and 16 elements; s32 and s64 indices below 0 and past the end (skipped) */
    {"scatter_rows_clamped",
     "HloModule s\n" KR_ADD KR_MAX "mn { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = f32[] minimum(a, b) }\n"
     "ad { a = s32[] parameter(0)\n b = s32[] parameter(1)\n ROOT r = s32[] add(a, b) }\n"
     "ENTRY main {\n p = f32[5,8] parameter(0)\n v = f32[6] parameter(1)\n w = s32[5,3] parameter(2)\n"
     " j = s32[3000,1] parameter(3)\n k = s64[3000] parameter(4)\n u = f32[3000,8] parameter(5)\n"
     " uv = f32[3000] parameter(6)\n uw = s32[3000,3] parameter(7)\n"
     " t = s32[] constant(3)\n tb = s32[3000,1] broadcast(t), dimensions={}\n i = s32[3000,1] subtract(j, tb)\n"
     " t6 = s64[] constant(1)\n tb6 = s64[3000] broadcast(t6), dimensions={}\n l = s64[3000] subtract(k, tb6)\n"
     " a = f32[5,8] scatter(p, i, u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add\n"
     " b = f32[5,8] scatter(p, i, u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=max\n"
     " c = f32[5,8] scatter(p, i, u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=mn\n"
     " d = f32[6] scatter(v, l, uv), update_window_dims={}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add\n"
     " e = s32[5,3] scatter(w, i, uw), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=ad\n"
     " u3 = f32[3000,1,8] reshape(u)\n"
     " f = f32[5,8] scatter(p, i, u3), update_window_dims={1,2}, inserted_window_dims={}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add\n"
     " u2 = f32[60,50,8] reshape(u)\n i3 = s32[60,50,1] reshape(i)\n"
     " g = f32[5,8] scatter(p, i3, u2), update_window_dims={2}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=2, to_apply=add\n"
     " p4 = f32[5,4] parameter(8)\n u4 = f32[3000,4] parameter(9)\n p16 = f32[5,16] parameter(10)\n u16 = f32[3000,16] parameter(11)\n"
     " h = f32[5,4] scatter(p4, i, u4), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add\n"
     " q = f32[5,16] scatter(p16, i, u16), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=max\n"
     " ROOT o = (f32[5,8], f32[5,8], f32[5,8], f32[6], s32[5,3], f32[5,8], f32[5,8], f32[5,4], f32[5,16]) tuple(a, b, c, d, e, f, g, h, q)\n}\n", 0, 0},
    /* broadcasts of whole blocks (operand dims trailing or leading, in order) and the strided copy beside them */
    {"broadcast_blocks",
     "HloModule b\nENTRY main {\n v = f32[256] parameter(0)\n h = bf16[7,5] parameter(1)\n q = s8[9] parameter(2)\n"
     " d = f64[3,4] parameter(3)\n"
     " a = f32[300,256] broadcast(v), dimensions={1}\n b = f32[256,300] broadcast(v), dimensions={0}\n"
     " c = bf16[3,7,5] broadcast(h), dimensions={1,2}\n e = bf16[7,5,6] broadcast(h), dimensions={0,1}\n"
     " f = s8[9,40] broadcast(q), dimensions={0}\n g = s8[40,9] broadcast(q), dimensions={1}\n"
     " k = f64[3,4,11] broadcast(d), dimensions={0,1}\n l = f64[2,3,4] broadcast(d), dimensions={1,2}\n"
     " m = bf16[7,3,5] broadcast(h), dimensions={0,2}\n"
     " ROOT o = (f32[300,256], f32[256,300], bf16[3,7,5], bf16[7,5,6], s8[9,40], s8[40,9], f64[3,4,11], f64[2,3,4], bf16[7,3,5])"
     " tuple(a, b, c, e, f, g, k, l, m)\n}\n", 0, 0},
    {"scatter_max_window_first",
     "HloModule s\n" KR_MAX "ENTRY main {\n p = f32[6,9,5] parameter(0)\n i = s32[2,300] parameter(1)\n"
     " u = f32[6,300] parameter(2)\n ROOT s = f32[6,9,5] scatter(p, i, u), update_window_dims={0},"
     " inserted_window_dims={1,2}, scatter_dims_to_operand_dims={1,2}, index_vector_dim=0, to_apply=max\n}\n", 0, 0},
    {"reduce_window_max_big",
     "HloModule r\n" KR_MAX "ENTRY main {\n x = f32[4,33,35,8] parameter(0)\n c = f32[] constant(-inf)\n"
     " ROOT r = f32[4,17,17,8] reduce-window(x, c), window={size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x0_0x0_0}, to_apply=max\n}\n", 0, 0},
    {"reduce_window_sum_dilated",
     "HloModule r\n" KR_ADD "ENTRY main {\n x = f32[2,40,30] parameter(0)\n c = f32[] constant(0)\n"
     " ROOT r = f32[2,26,20] reduce-window(x, c), window={size=1x4x3 stride=1x3x3 pad=0_0x2_3x1_0 lhs_dilate=1x2x2 rhs_dilate=1x2x1}, to_apply=add\n}\n",
     0, 0},
    {"reduce_window_cumsum_2d",
     "HloModule r\n" KR_ADD "ENTRY main {\n x = f32[300,5] parameter(0)\n c = f32[] constant(0)\n"
     " ROOT r = f32[300,5] reduce-window(x, c), window={size=300x1 pad=299_0x0_0}, to_apply=add\n}\n", 0, 0},
    /* scans in f32 (XLA's tree) along the lanes and across them, reverse and exclusive, max */
    {"reduce_window_scans_f32",
     "HloModule r\n" KR_ADD KR_MAX "ENTRY main {\n x = f32[37,300] parameter(0)\n c = f32[] constant(0)\n"
     " m = f32[] constant(-inf)\n a = f32[37,300] reduce-window(x, c), window={size=1x300 pad=0_0x299_0}, to_apply=add\n"
     " b = f32[37,301] reduce-window(x, c), window={size=1x300 pad=0_0x0_300}, to_apply=add\n"
     " d = f32[37,300] reduce-window(x, m), window={size=37x1 pad=0_36x0_0}, to_apply=max\n"
     " e = f32[38,300] reduce-window(x, c), window={size=37x1 pad=37_0x0_0}, to_apply=add\n"
     " ROOT t = (f32[37,300], f32[37,301], f32[37,300], f32[38,300]) tuple(a, b, d, e)\n}\n", 0, 0},
    /* scans along the minor dim take 16 rows at a time as lanes: max and reverse sums over 34 rows (a partial
     * block), a single row */
    {"reduce_window_scans_minor_rows",
     "HloModule r\n" KR_ADD KR_MAX "ENTRY main {\n x = f32[2,17,700] parameter(0)\n c = f32[] constant(0)\n"
     " m = f32[] constant(-inf)\n a = f32[2,17,700] reduce-window(x, m), window={size=1x1x700 pad=0_0x0_0x699_0}, to_apply=max\n"
     " b = f32[2,17,701] reduce-window(x, c), window={size=1x1x700 pad=0_0x0_0x0_700}, to_apply=add\n"
     " y = f32[1,1,700] slice(x), slice={[0:1], [0:1], [0:700]}\n"
     " d = f32[1,1,700] reduce-window(y, c), window={size=1x1x700 pad=0_0x0_0x699_0}, to_apply=add\n"
     " ROOT t = (f32[2,17,700], f32[2,17,701], f32[1,1,700]) tuple(a, b, d)\n}\n", 0, 0},
    /* the row form (last dim windowed, no lhs dilation there): strides, padding, rhs dilation, NaN */
    {"reduce_window_rows_min_nan",
     "HloModule r\nmin { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = f32[] minimum(a, b) }\n"
     "ENTRY main {\n x = f32[3,40,37] parameter(0)\n l = f32[3,40,37] log(x)\n c = f32[] constant(inf)\n"
     " ROOT r = f32[4,21,12] reduce-window(l, c), window={size=2x3x5 stride=1x2x3 pad=1_1x1_2x2_4 rhs_dilate=1x1x2}, to_apply=min\n}\n", 0, 0},
    /* one long f32 max/min row: split across threads (rd_rows_split), the same bits as one serial fold;
     * NaN (log of negatives), subnormals (x * 1e-39: read as signed zeros) and an odd tail */
    {"reduce_long_row_maxmin",
     "HloModule r\n" KR_MAX "min { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = f32[] minimum(a, b) }\n"
     "ENTRY main {\n x = f32[300001] parameter(0)\n l = f32[300001] log(x)\n t = f32[] constant(1e-39)\n"
     " tb = f32[300001] broadcast(t), dimensions={}\n s = f32[300001] multiply(x, tb)\n"
     " lo = f32[] constant(-inf)\n hi = f32[] constant(inf)\n"
     " a = f32[] reduce(x, lo), dimensions={0}, to_apply=max\n b = f32[] reduce(x, hi), dimensions={0}, to_apply=min\n"
     " c = f32[] reduce(l, lo), dimensions={0}, to_apply=max\n d = f32[] reduce(s, lo), dimensions={0}, to_apply=max\n"
     " e = f32[] reduce(s, hi), dimensions={0}, to_apply=min\n"
     " ROOT r = (f32[], f32[], f32[], f32[], f32[]) tuple(a, b, c, d, e)\n}\n", 0, 0},
    /* column reductions (kept dims innermost) read with prefetches RD_PF_ROWS rows ahead: bf16 sums in place
     * (rd_lp_block) against the widened, transposed reference; rows fewer than, and many more than, the
     * prefetch distance; odd widths */
    {"reduce_cols_prefetched",
     "HloModule r\nbadd { a = bf16[] parameter(0)\n b = bf16[] parameter(1)\n ROOT r = bf16[] add(a, b) }\n" KR_ADD KR_MAX
     "ENTRY main {\n x = bf16[3,301,67] parameter(0)\n y = bf16[5,67] parameter(1)\n f = f32[2,517,37] parameter(2)\n"
     " z = bf16[] constant(0)\n c = f32[] constant(0)\n m = f32[] constant(-inf)\n"
     " a = bf16[67] reduce(x, z), dimensions={0,1}, to_apply=badd\n b = bf16[3,67] reduce(x, z), dimensions={1}, to_apply=badd\n"
     " d = bf16[67] reduce(y, z), dimensions={0}, to_apply=badd\n e = f32[37] reduce(f, c), dimensions={0,1}, to_apply=add\n"
     " g = f32[2,37] reduce(f, m), dimensions={1}, to_apply=max\n"
     " ROOT r = (bf16[67], bf16[3,67], bf16[67], f32[37], f32[2,37]) tuple(a, b, d, e, g)\n}\n", 0, 0},
    {"reduce_window_rows_sum_1d",
     "HloModule r\n" KR_ADD "ENTRY main {\n x = f32[5000] parameter(0)\n c = f32[] constant(0)\n"
     " ROOT r = f32[1662] reduce-window(x, c), window={size=32 stride=3 pad=7_9}, to_apply=add\n}\n", 0, 0},
    {"select_and_scatter_big",
     "HloModule s\n" KR_ADD KR_GE "ENTRY main {\n x = f32[4,32,32,8] parameter(0)\n g = f32[4,16,16,8] parameter(1)\n"
     " c = f32[] constant(0)\n ROOT s = f32[4,32,32,8] select-and-scatter(x, g, c), window={size=1x3x3x1 stride=1x2x2x1"
     " pad=0_0x1_1x1_1x0_0}, select=ge, scatter=add\n}\n", 0, 0},
    /* the lane forms (last dim untouched by the window): ties (floor), NaN (log of negatives), odd widths */
    {"reduce_window_min_lanes_nan",
     "HloModule r\nmin { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = f32[] minimum(a, b) }\n"
     "ENTRY main {\n x = f32[3,20,37] parameter(0)\n l = f32[3,20,37] log(x)\n c = f32[] constant(inf)\n"
     " ROOT r = f32[2,11,37] reduce-window(l, c), window={size=2x3x1 stride=1x2x1 pad=0_0x1_2x0_0}, to_apply=min\n}\n", 0, 0},
    /* narrow lanes (last dim untouched, under 8 wide: window.c rwl_lane_rows): LeNet's 2x2 average pools (stride
     * 2, and stride 1 over a padded input as in their gradient), max with NaN and padding, min with rhs dilation */
    {"reduce_window_narrow_lanes",
     "HloModule r\n" KR_ADD KR_MAX "min { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = f32[] minimum(a, b) }\n"
     "ENTRY main {\n x = f32[4,24,24,6] parameter(0)\n p = f32[4,25,25,6] parameter(1)\n q = f32[3,13,11,3] parameter(2)\n"
     " l = f32[3,13,11,3] log(q)\n c = f32[] constant(0)\n m = f32[] constant(-inf)\n h = f32[] constant(inf)\n"
     " a = f32[4,12,12,6] reduce-window(x, c), window={size=1x2x2x1 stride=1x2x2x1}, to_apply=add\n"
     " b = f32[4,24,24,6] reduce-window(p, c), window={size=1x2x2x1}, to_apply=add\n"
     " e = f32[3,7,6,3] reduce-window(l, m), window={size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x1_1x0_0}, to_apply=max\n"
     " f = f32[2,12,6,3] reduce-window(l, h), window={size=2x2x3x1 stride=1x1x2x1 pad=0_0x0_0x2_3x0_0 rhs_dilate=1x1x2x1}, to_apply=min\n"
     " ROOT t = (f32[4,12,12,6], f32[4,24,24,6], f32[3,7,6,3], f32[2,12,6,3]) tuple(a, b, e, f)\n}\n", 0, 0},
    {"reduce_window_sum_lanes_2d",
     "HloModule r\n" KR_ADD "ENTRY main {\n x = f32[41,50] parameter(0)\n c = f32[] constant(0)\n"
     " ROOT r = f32[12,50] reduce-window(x, c), window={size=5x1 stride=3x1 pad=2_1x0_0 rhs_dilate=2x1}, to_apply=add\n}\n", 0, 0},
    {"select_and_scatter_lanes_ties_gt",
     "HloModule s\n" KR_ADD "gt { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = pred[] compare(a, b), direction=GT }\n"
     "ENTRY main {\n x = f32[2,12,12,19] parameter(0)\n k = f32[] constant(2)\n kb = f32[2,12,12,19] broadcast(k), dimensions={}\n"
     " m = f32[2,12,12,19] multiply(x, kb)\n f = f32[2,12,12,19] floor(m)\n g = f32[2,11,11,19] parameter(1)\n"
     " c = f32[] constant(0)\n ROOT s = f32[2,12,12,19] select-and-scatter(f, g, c), window={size=1x2x2x1 stride=1x1x1x1},"
     " select=gt, scatter=add\n}\n", 0, 0},
    {"select_and_scatter_lanes_ties_ge_pad",
     "HloModule s\n" KR_ADD KR_GE "ENTRY main {\n x = f32[13,10,24] parameter(0)\n k = f32[] constant(2)\n"
     " kb = f32[13,10,24] broadcast(k), dimensions={}\n m = f32[13,10,24] multiply(x, kb)\n f = f32[13,10,24] floor(m)\n"
     " g = f32[5,5,24] parameter(1)\n c = f32[] constant(0)\n ROOT s = f32[13,10,24] select-and-scatter(f, g, c),"
     " window={size=3x3x1 stride=3x2x1 pad=1_2x1_1x0_0}, select=ge, scatter=add\n}\n", 0, 0},
    {"sort_int_keys_stable",
     "HloModule s\ncmp { a = s32[] parameter(0)\n b = s32[] parameter(1)\n c = f32[] parameter(2)\n d = f32[] parameter(3)\n"
     " ROOT r = pred[] compare(a, b), direction=LT }\n"
     "ENTRY main {\n k = s32[64,200] parameter(0)\n v = f32[64,200] parameter(1)\n"
     " ROOT s = (s32[64,200], f32[64,200]) sort(k, v), dimensions={1}, is_stable=true, to_apply=cmp\n}\n", 0, 0},
    {"sort_f32_desc_axis0",
     "HloModule s\ncmp { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = pred[] compare(b, a), direction=LT }\n"
     "ENTRY main {\n k = f32[300,7] parameter(0)\n ROOT s = f32[300,7] sort(k), dimensions={0}, to_apply=cmp\n}\n", 0, 0},
    {"sort_bf16_jax_canonical",
     "HloModule s\ncmp {\n a = bf16[] parameter(0)\n b = bf16[] parameter(1)\n i = s32[] parameter(2)\n j = s32[] parameter(3)\n"
     " nan = bf16[] constant(nan)\n z = bf16[] constant(0)\n na = pred[] compare(a, a), direction=NE\n"
     " ea = pred[] compare(a, z), direction=EQ\n a0 = bf16[] select(ea, z, a)\n a1 = bf16[] select(na, nan, a0)\n"
     " nb = pred[] compare(b, b), direction=NE\n eb = pred[] compare(b, z), direction=EQ\n b0 = bf16[] select(eb, z, b)\n"
     " b1 = bf16[] select(nb, nan, b0)\n ROOT r = pred[] compare(a1, b1), direction=LT, type=TOTALORDER\n}\n"
     "ENTRY main {\n k = bf16[20,150] parameter(0)\n i = s32[20,150] iota(), iota_dimension=1\n"
     " ROOT s = (bf16[20,150], s32[20,150]) sort(k, i), dimensions={1}, is_stable=true, to_apply=cmp\n}\n", 0, 0},
    {"topk_bf16_smallest",
     "HloModule t\nENTRY main {\n x = bf16[16,300] parameter(0)\n ROOT t = (bf16[16,20], s32[16,20]) topk(x), k=20, largest=false\n}\n", 0, 0},
    /* f32 rows through the block filter (tk_rows_f32): ties (floor), NaN and -NaN, +0 and -0, k of 1 and the
     * whole row, rows not a multiple of the block and shorter than one */
    {"topk_f32_ties_nan_zeros",
     "HloModule t\nENTRY main {\n p = f32[6,1000] parameter(0)\n p2 = f32[6,1000] parameter(1)\n"
     " k9 = f32[] constant(9)\n k9b = f32[6,1000] broadcast(k9), dimensions={}\n q = f32[6,1000] floor(f32[6,1000] multiply(p, k9b))\n"
     " hi = f32[] constant(0.99)\n hib = f32[6,1000] broadcast(hi), dimensions={}\n c1 = pred[6,1000] compare(p2, hib), direction=GT\n"
     " lo = f32[] constant(-0.99)\n lob = f32[6,1000] broadcast(lo), dimensions={}\n c2 = pred[6,1000] compare(p2, lob), direction=LT\n"
     " nn = f32[] constant(nan)\n nnb = f32[6,1000] broadcast(nn), dimensions={}\n z = f32[] constant(0)\n"
     " zb = f32[6,1000] broadcast(z), dimensions={}\n pz = f32[6,1000] multiply(p, zb)\n"
     " mid = f32[] constant(0.3)\n midb = f32[6,1000] broadcast(mid), dimensions={}\n c3 = pred[6,1000] compare(p2, midb), direction=GT\n"
     " w0 = f32[6,1000] select(c3, pz, q)\n w1 = f32[6,1000] select(c1, nnb, w0)\n x = f32[6,1000] select(c2, f32[6,1000] negate(nnb), w1)\n"
     " a = (f32[6,40], s32[6,40]) topk(x), k=40, largest=true\n b = (f32[6,40], s32[6,40]) topk(x), k=40, largest=false\n"
     " c = (f32[6,1], s32[6,1]) topk(x), k=1, largest=true\n"
     " y = f32[6,45] slice(x), slice={[0:6], [0:45]}\n d = (f32[6,45], s32[6,45]) topk(y), k=45, largest=false\n"
     " e = (f32[6,3], s32[6,3]) topk(y), k=3, largest=true\n"
     " v = f32[6,20] slice(x), slice={[0:6], [100:120]}\n f = (f32[6,2], s32[6,2]) topk(v), k=2, largest=false\n"
     " ROOT o = ((f32[6,40], s32[6,40]), (f32[6,40], s32[6,40]), (f32[6,1], s32[6,1]), (f32[6,45], s32[6,45]), (f32[6,3], s32[6,3]),"
     " (f32[6,2], s32[6,2])) tuple(a, b, c, d, e, f)\n}\n", 0, 0},
    {"topk_f32_largest",
     "HloModule t\nENTRY main {\n x = f32[8,1000] parameter(0)\n ROOT t = (f32[8,10], s32[8,10]) topk(x), k=10, largest=true\n}\n", 0, 0},
    {"rbg_threefry_big",
     "HloModule r\nENTRY main {\n s = u64[2] parameter(0)\n"
     " ROOT r = (u64[2], u32[301,1001]) rng-bit-generator(s), algorithm=rng_three_fry\n}\n", 0, 0},
    {"rbg_threefry_odd_u8",
     "HloModule r\nENTRY main {\n s = u64[2] parameter(0)\n"
     " ROOT r = (u64[2], u8[7,9,301]) rng-bit-generator(s), algorithm=rng_three_fry\n}\n", 0, 0},
    {"rbg_philox_big_u64",
     "HloModule r\nENTRY main {\n s = u64[3] parameter(0)\n"
     " ROOT r = (u64[3], u64[70001]) rng-bit-generator(s), algorithm=rng_philox\n}\n", 0, 0},
    {"cholesky_spd",
     "HloModule c\nENTRY main {\n x = f32[3,70,70] parameter(0)\n t = f32[3,70,70] transpose(x), dimensions={0,2,1}\n"
     " s = f32[3,70,70] add(x, t)\n r = s32[3,70,70] iota(), iota_dimension=1\n c = s32[3,70,70] iota(), iota_dimension=2\n"
     " e = pred[3,70,70] compare(r, c), direction=EQ\n n = f32[] constant(150)\n z = f32[] constant(0)\n"
     " nb = f32[3,70,70] broadcast(n), dimensions={}\n zb = f32[3,70,70] broadcast(z), dimensions={}\n"
     " d = f32[3,70,70] select(e, nb, zb)\n a = f32[3,70,70] add(s, d)\n ROOT l = f32[3,70,70] cholesky(a), lower=false\n}\n",
     1e-5, 1e-5},
    {"trsm_f64_right_upper_trans",
     "HloModule t\nENTRY main {\n x = f64[2,40,40] parameter(0)\n b = f64[2,25,40] parameter(1)\n"
     " r = s32[2,40,40] iota(), iota_dimension=1\n c = s32[2,40,40] iota(), iota_dimension=2\n"
     " e = pred[2,40,40] compare(r, c), direction=EQ\n n = f64[] constant(8)\n z = f64[] constant(0)\n"
     " nb = f64[2,40,40] broadcast(n), dimensions={}\n zb = f64[2,40,40] broadcast(z), dimensions={}\n"
     " d = f64[2,40,40] select(e, nb, zb)\n a = f64[2,40,40] add(x, d)\n"
     " ROOT s = f64[2,25,40] triangular-solve(a, b), left_side=false, lower=false, unit_diagonal=false, transpose_a=TRANSPOSE\n}\n",
     1e-12, 1e-12},
    {"trsm_f32_left_lower_unit",
     "HloModule t\nENTRY main {\n a = f32[12,12] parameter(0)\n b = f32[12,9] parameter(1)\n"
     " ROOT s = f32[12,9] triangular-solve(a, b), left_side=true, lower=true, unit_diagonal=true, transpose_a=NO_TRANSPOSE\n}\n",
     1e-3, 1e-4},
    {"batchnorm_bf16_training",
     "HloModule b\nENTRY main {\n x = bf16[8,6,6,16] parameter(0)\n s = bf16[16] parameter(1)\n o = bf16[16] parameter(2)\n"
     " ROOT t = (bf16[8,6,6,16], bf16[16], bf16[16]) batch-norm-training(x, s, o), epsilon=0.001, feature_index=3\n}\n",
     0, 0.02},
    {"batchnorm_grad_f32",
     "HloModule b\nENTRY main {\n x = f32[8,12,5,5] parameter(0)\n s = f32[12] parameter(1)\n m = f32[12] parameter(2)\n"
     " v = f32[12] parameter(3)\n g = f32[8,12,5,5] parameter(4)\n"
     " ROOT t = (f32[8,12,5,5], f32[12], f32[12]) batch-norm-grad(x, s, m, v, g), epsilon=1, feature_index=1\n}\n",
     1e-5, 1e-5},
    /* reduce through lanes (exe_vfn: argmin, bf16 sums rounded at every step) and the order-free integer folds */
    /* reducers run in lanes (not a plain binop): every lane starts from the init value (1, 4, 8-byte lanes),
     * including a reduce over a dim of size 1 */
    {"reduce_lanes_inits",
     "HloModule r\nan { a = pred[] parameter(0)\n b = pred[] parameter(1)\n ROOT r = pred[] and(a, b) }\n"
     "sq { a = s32[] parameter(0)\n b = s32[] parameter(1)\n m = s32[] multiply(b, b)\n ROOT r = s32[] add(a, m) }\n"
     "sq6 { a = s64[] parameter(0)\n b = s64[] parameter(1)\n m = s64[] multiply(b, b)\n ROOT r = s64[] subtract(m, a) }\n"
     "ENTRY main {\n x = s32[40,30,1] parameter(0)\n y = s64[40,30] parameter(1)\n c3 = s32[] constant(3)\n"
     " b3 = s32[40,30,1] broadcast(c3), dimensions={}\n p = pred[40,30,1] compare(x, b3), direction=LT\n t = pred[] constant(true)\n"
     " a = pred[40,30] reduce(p, t), dimensions={2}, to_apply=an\n b = pred[30] reduce(p, t), dimensions={0,2}, to_apply=an\n"
     " k = s32[] constant(5)\n c = s32[40,30] reduce(x, k), dimensions={2}, to_apply=sq\n d = s32[30] reduce(x, k), dimensions={0,2}, to_apply=sq\n"
     " k6 = s64[] constant(-7)\n e = s64[40] reduce(y, k6), dimensions={1}, to_apply=sq6\n"
     " ROOT o = (pred[40,30], pred[30], s32[40,30], s32[30], s64[40]) tuple(a, b, c, d, e)\n}\n", 0, 0},
    {"reduce_argmin_nan_ties",
     "HloModule r\nam { a = f32[] parameter(0)\n b = f32[] parameter(2)\n lt = pred[] compare(a, b), direction=LT\n"
     " ne = pred[] compare(a, a), direction=NE\n o = pred[] or(lt, ne)\n v = f32[] select(o, a, b)\n"
     " eq = pred[] compare(a, b), direction=EQ\n i = s32[] parameter(1)\n j = s32[] parameter(3)\n"
     " li = pred[] compare(i, j), direction=LT\n an = pred[] and(eq, li)\n o2 = pred[] or(o, an)\n"
     " k = s32[] select(o2, i, j)\n ROOT t = (f32[], s32[]) tuple(v, k) }\n"
     "ENTRY main {\n x = f32[300,7,70] parameter(0)\n l = f32[300,7,70] log(x)\n f = f32[300,7,70] floor(l)\n"
     " io = s32[300,7,70] iota(), iota_dimension=2\n c = f32[] constant(inf)\n z = s32[] constant(0)\n"
     " ROOT r = (f32[300,7], s32[300,7]) reduce(f, io, c, z), dimensions={2}, to_apply=am\n}\n", 0, 0},
    {"reduce_bf16_sum_middle",
     "HloModule r\nadd { a = bf16[] parameter(0)\n b = bf16[] parameter(1)\n ROOT r = bf16[] add(a, b) }\n"
     "ENTRY main {\n x = bf16[20,64,33] parameter(0)\n c = bf16[] constant(0.5)\n"
     " ROOT r = bf16[20,33] reduce(x, c), dimensions={1}, to_apply=add\n}\n", 0, 0},
    /* the lanes read in place from rows (a reduction over the minor dim), bf16 rounded at every step */
    {"reduce_bf16_sum_minor",
     "HloModule r\nadd { a = bf16[] parameter(0)\n b = bf16[] parameter(1)\n ROOT r = bf16[] add(a, b) }\n"
     "ENTRY main {\n x = bf16[300,70] parameter(0)\n c = bf16[] constant(0.5)\n"
     " ROOT r = bf16[300] reduce(x, c), dimensions={1}, to_apply=add\n}\n", 0, 0},
    /* batch-norm statistics of NHWC bf16 (f32 accumulation): kept dims innermost, summed in place by columns
     * (reduce.c rd_lp_in_place) against the widened, transposed reference; odd row count for the tail, and
     * kept dims on both sides; signed zeros and a NaN in the data */
    {"reduce_bf16_sum_leading",
     "HloModule r\nadd { a = bf16[] parameter(0)\n b = bf16[] parameter(1)\n ROOT r = bf16[] add(a, b) }\n"
     "ENTRY main {\n x = bf16[5,7,13,37] parameter(0)\n c = bf16[] constant(0.5)\n z = bf16[] constant(0)\n"
     " nz = bf16[] constant(-0)\n b = bf16[5,7,13,37] broadcast(nz), dimensions={}\n"
     " a = bf16[] constant(nan)\n ba = bf16[5,7,13,37] broadcast(a), dimensions={}\n"
     " io = s32[5,7,13,37] iota(), iota_dimension=3\n k = s32[] constant(3)\n bk = s32[5,7,13,37] broadcast(k), dimensions={}\n"
     " lt = pred[5,7,13,37] compare(io, bk), direction=LT\n eq = pred[5,7,13,37] compare(io, bk), direction=EQ\n"
     " y = bf16[5,7,13,37] select(lt, b, x)\n w = bf16[5,7,13,37] select(eq, ba, y)\n"
     " r0 = bf16[37] reduce(w, c), dimensions={0,1,2}, to_apply=add\n"
     " r1 = bf16[37] reduce(y, nz), dimensions={0,1,2}, to_apply=add\n"
     " r2 = bf16[5,37] reduce(x, z), dimensions={1,2}, to_apply=add\n"
     " ROOT t = (bf16[37], bf16[37], bf16[5,37]) tuple(r0, r1, r2)\n}\n", 0, 0},
    {"reduce_f32_sum_leading",
     "HloModule r\n" KR_ADD "ENTRY main {\n x = f32[3,4096,40] parameter(0)\n c = f32[] constant(0.5)\n"
     " ROOT r = f32[40] reduce(x, c), dimensions={0,1}, to_apply=add\n}\n", 0, 0},
    /* f32 sums of a whole array to one element (rd_sum_all_f32, a loop body's small sums): the general path's
     * value, init included, bit for bit; lengths with and without a tail of the 8 lanes, kept dims of size 1,
     * dims listed out of order */
    {"reduce_sum_all_f32",
     "HloModule r\n" KR_ADD "ENTRY main {\n x = f32[64] parameter(0)\n y = f32[61] parameter(1)\n z = f32[1,5,13] parameter(2)\n"
     " w = f32[7,9] parameter(3)\n c = f32[] constant(0.75)\n k = f32[] constant(-3e+07)\n"
     " a = f32[] reduce(x, c), dimensions={0}, to_apply=add\n b = f32[] reduce(y, k), dimensions={0}, to_apply=add\n"
     " d = f32[1] reduce(z, c), dimensions={2,1}, to_apply=add\n e = f32[] reduce(w, k), dimensions={1,0}, to_apply=add\n"
     " ROOT t = (f32[], f32[], f32[1], f32[]) tuple(a, b, d, e)\n}\n", 0, 0},
    {"reduce_int_folds",
     "HloModule r\nadd { a = s32[] parameter(0)\n b = s32[] parameter(1)\n ROOT r = s32[] add(a, b) }\n"
     "mx { a = u32[] parameter(0)\n b = u32[] parameter(1)\n ROOT r = u32[] maximum(a, b) }\n"
     "ml { a = s64[] parameter(0)\n b = s64[] parameter(1)\n ROOT r = s64[] multiply(a, b) }\n"
     "xr { a = u32[] parameter(0)\n b = u32[] parameter(1)\n ROOT r = u32[] xor(a, b) }\n"
     "ENTRY main {\n x = s32[300001] parameter(0)\n k = s32[] constant(-7)\n s = s32[] reduce(x, k), dimensions={0}, to_apply=add\n"
     " y = u32[9,5000] parameter(1)\n m = u32[] constant(3)\n ym = u32[5000] reduce(y, m), dimensions={0}, to_apply=mx\n"
     " w = s64[40,1000] parameter(2)\n o = s64[] constant(1)\n wm = s64[40] reduce(w, o), dimensions={1}, to_apply=ml\n"
     " yx = u32[9] reduce(y, m), dimensions={1}, to_apply=xr\n"
     " ROOT t = (s32[], u32[5000], s64[40], u32[9]) tuple(s, ym, wm, yx)\n}\n", 0, 0},
    /* iota along each dim, every type class (the fast kernel fills one run and copies it) */
    {"iota_dims_types",
     "HloModule i\nENTRY main {\n a = s32[3,70,5] iota(), iota_dimension=1\n b = u64[3000] iota(), iota_dimension=0\n"
     " c = f32[7,3,9] iota(), iota_dimension=2\n d = bf16[600,2] iota(), iota_dimension=0\n e = u32[4,5,6] iota(), iota_dimension=0\n"
     " f = s8[300,2] iota(), iota_dimension=0\n g = f64[2,40] iota(), iota_dimension=1\n"
     " ROOT o = (s32[3,70,5], u64[3000], f32[7,3,9], bf16[600,2], u32[4,5,6], s8[300,2], f64[2,40]) tuple(a, b, c, d, e, f, g)\n}\n", 0, 0},
    {"fft_bluestein_105",
     "HloModule f\nENTRY main {\n x = f32[4,105] parameter(0)\n y = f32[4,105] parameter(1)\n c = c64[4,105] complex(x, y)\n"
     " ROOT f = c64[4,105] fft(c), fft_type=FFT, fft_length={105}\n}\n", 2e-5, 1e-5},
    {"fft_irfft2_16x64",
     "HloModule f\nENTRY main {\n x = f64[3,16,33] parameter(0)\n y = f64[3,16,33] parameter(1)\n c = c128[3,16,33] complex(x, y)\n"
     " ROOT f = f64[3,16,64] fft(c), fft_type=IRFFT, fft_length={16,64}\n}\n", 1e-13, 1e-12},
};

static double kr_get(const tpu_tensor *t, int64_t i)
{
    switch (tpu_tensor_dtype(t)) {
    case TPU_C64: return ((const float *)tpu_tensor_cdata(t))[i];
    case TPU_C128: return ((const double *)tpu_tensor_cdata(t))[i];
    default: return tpu_tensor_get_f64(t, i);
    }
}

static void kr_run(const kr_case *c)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    tpu_tensor **in = NULL, **out[2] = {NULL, NULL};
    int nin = 0, nout[2] = {0, 0};
    tpu_status st = tpu_module_parse(ctx, c->hlo, strlen(c->hlo), c->name, &m);
    CHECK_MSG(st == TPU_OK, "%s: %s", c->name, tpu_errmsg(ctx));
    if (!st) {
        st = tpu_random_inputs(ctx, m, 7, &in, &nin);
        CHECK_MSG(st == TPU_OK, "%s: %s", c->name, tpu_errmsg(ctx));
    }
    for (int ref = 0; !st && ref < 2; ref++) {
        tpu_run_opts o = tpu_run_opts_default();
        o.numerics = TPU_NUMERICS_EXACT;
        exe_run_cfg cfg = {.ref = ref ? EXE_REF_KERNELS : 0};
        st = exe_run(ctx, m, &o, &cfg, in, nin, &out[ref], &nout[ref]);
        CHECK_MSG(st == TPU_OK, "%s (%s): %s", c->name, ref ? "ref" : "fast", tpu_errmsg(ctx));
    }
    if (!st && nout[0] == nout[1]) {
        for (int k = 0; k < nout[0]; k++) {
            const tpu_tensor *a = out[0][k], *b = out[1][k];
            REQUIRE(tpu_tensor_count(a) == tpu_tensor_count(b) && tpu_tensor_dtype(a) == tpu_tensor_dtype(b));
            char kind = tpu_dtype_kind(tpu_tensor_dtype(a));
            if (c->atol == 0 && c->rtol == 0) {
                CHECK_MSG(!memcmp(tpu_tensor_cdata(a), tpu_tensor_cdata(b), tpu_tensor_nbytes(a)), "%s out%d: fast != reference", c->name, k);
                continue;
            }
            int64_t n = tpu_tensor_count(a) * (kind == 'c' ? 2 : 1);
            int bad = 0;
            for (int64_t i = 0; i < n && bad < 3; i++) {
                double x = kr_get(a, i), y = kr_get(b, i);
                if ((isnan(x) && isnan(y)) || fabs(x - y) <= c->atol + c->rtol * fabs(y)) continue;
                test_fail(__FILE__, __LINE__, "%s out%d[%lld]: fast %.9g, reference %.9g", c->name, k, (long long)i, x, y);
                bad++;
            }
        }
    }
    for (int r = 0; r < 2; r++) tpu_tensors_free(out[r], nout[r]);
    tpu_tensors_free(in, nin);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

TEST(kernels_fast_vs_reference)
{
    int verbose = getenv("TPUSIM_TEST_VERBOSE") != NULL;
    for (size_t i = 0; i < sizeof kr_cases / sizeof kr_cases[0]; i++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        kr_run(&kr_cases[i]);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (verbose) printf("    %-32s %.3f s\n", kr_cases[i].name, (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    }
}

/* f32 max/min reduces along rows (rd_maxmin_f32: integer keys and a NaN flag) against the same reduces down
 * columns (rd_cols: the reducer's literal steps), bit for bit: NaNs, +0 and -0, subnormals (read as zero),
 * infinities, inits that win. Outputs 2k and 2k+1 must agree. */
TEST(reduce_maxmin_rows_vs_columns)
{
    static const char *hlo =
        "HloModule m\n" KR_MAX "mn { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = f32[] minimum(a, b) }\n"
        "ENTRY main {\n p = f32[40,300] parameter(0)\n p2 = f32[40,300] parameter(1)\n s = s32[40,300] parameter(2)\n"
        " sub = f32[40,300] bitcast-convert(s)\n nsub = f32[40,300] negate(sub)\n z = f32[] constant(0)\n"
        " zb = f32[40,300] broadcast(z), dimensions={}\n pz = f32[40,300] multiply(p, zb)\n ap = f32[40,300] abs(p)\n"
        " nn = f32[] constant(nan)\n nnb = f32[40,300] broadcast(nn), dimensions={}\n inf = f32[] constant(inf)\n"
        " infb = f32[40,300] broadcast(inf), dimensions={}\n"
        " t1 = f32[] constant(0.998)\n t1b = f32[40,300] broadcast(t1), dimensions={}\n c1 = pred[40,300] compare(p2, t1b), direction=GT\n"
        " t2 = f32[] constant(-0.997)\n t2b = f32[40,300] broadcast(t2), dimensions={}\n c2 = pred[40,300] compare(p2, t2b), direction=LT\n"
        " c3 = pred[40,300] compare(p2, zb), direction=LT\n"
        " w0 = f32[40,300] select(c3, pz, ap)\n w1 = f32[40,300] select(c2, infb, w0)\n a = f32[40,300] select(c1, nnb, w1)\n"
        " b = f32[40,300] select(c3, sub, nsub)\n c = f32[40,300] select(c3, sub, pz)\n d = f32[40,300] select(c2, infb, p)\n"
        " x = f32[160,300] concatenate(a, b, c, d), dimensions={0}\n xt = f32[300,160] transpose(x), dimensions={1,0}\n"
        " ninf = f32[] constant(-inf)\n h = f32[] constant(0.999)\n hn = f32[] constant(-0.999)\n"
        " r0 = f32[160] reduce(x, ninf), dimensions={1}, to_apply=max\n r1 = f32[160] reduce(xt, ninf), dimensions={0}, to_apply=max\n"
        " r2 = f32[160] reduce(x, inf), dimensions={1}, to_apply=mn\n r3 = f32[160] reduce(xt, inf), dimensions={0}, to_apply=mn\n"
        " r4 = f32[160] reduce(x, h), dimensions={1}, to_apply=max\n r5 = f32[160] reduce(xt, h), dimensions={0}, to_apply=max\n"
        " r6 = f32[160] reduce(x, hn), dimensions={1}, to_apply=mn\n r7 = f32[160] reduce(xt, hn), dimensions={0}, to_apply=mn\n"
        " ROOT o = (f32[160], f32[160], f32[160], f32[160], f32[160], f32[160], f32[160], f32[160]) tuple(r0, r1, r2, r3, r4, r5, r6, r7)\n}\n";
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    tpu_tensor **in = NULL, **out = NULL;
    int nin = 0, nout = 0;
    tpu_status st = tpu_module_parse(ctx, hlo, strlen(hlo), "maxmin", &m);
    CHECK_MSG(st == TPU_OK, "%s", tpu_errmsg(ctx));
    if (!st) st = tpu_random_inputs(ctx, m, 11, &in, &nin);
    for (int mode = 0; !st && mode < 2; mode++) {
        tpu_run_opts o = tpu_run_opts_default();
        o.numerics = mode ? TPU_NUMERICS_EXACT : TPU_NUMERICS_TPU;
        exe_run_cfg cfg = {0};
        st = exe_run(ctx, m, &o, &cfg, in, nin, &out, &nout);
        CHECK_MSG(st == TPU_OK, "%s", tpu_errmsg(ctx));
        for (int k = 0; !st && k + 1 < nout; k += 2)
            CHECK_MSG(!memcmp(tpu_tensor_cdata(out[k]), tpu_tensor_cdata(out[k + 1]), tpu_tensor_nbytes(out[k])),
                      "%s mode: rows (out%d) != columns (out%d)", mode ? "exact" : "tpu", k, k + 1);
        tpu_tensors_free(out, nout);
        out = NULL;
    }
    tpu_tensors_free(in, nin);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* exe_nd_copy's one-dimensional strided runs (a column of an [n, 2] or [n, 3] array sliced out or concatenated
 * back: constant-stride loops, long ones split between threads) against a plain loop, every element size. */
TEST(nd_copy_strided_runs)
{
    static const int64_t st[][2] = {{1, 2}, {1, 3}, {2, 1}, {3, 1}, {1, 5}, {4, 1}, {2, 2}, {1, 4}, {1, 8}, {8, 1}, {6, 1}};
    static const int64_t lens[] = {1, 15, 16, 1000, 32768 * 2, 32768 * 3 + 17};
    static const size_t ess[] = {1, 2, 4, 8};
    int64_t maxn = 32768 * 3 + 17;
    unsigned char *src = malloc((size_t)maxn * 8 * 8), *dst = malloc((size_t)maxn * 8 * 8), *want = malloc((size_t)maxn * 8 * 8);
    REQUIRE(src && dst && want);
    for (int64_t i = 0; i < maxn * 8 * 8; i++) src[i] = (unsigned char)(i * 131 + (i >> 9));
    for (size_t e = 0; e < sizeof ess / sizeof ess[0]; e++)
        for (size_t s = 0; s < sizeof st / sizeof st[0]; s++)
            for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
                size_t es = ess[e];
                int64_t n = lens[l], ds = st[s][0], ss = st[s][1], bytes = n * 8 * (int64_t)es;
                memset(dst, 0xEE, (size_t)bytes);
                memset(want, 0xEE, (size_t)bytes);
                /* the source run ends where its allocation does (a sanitizer sees any read past it) */
                size_t sb = (size_t)((n - 1) * ss + 1) * es;
                unsigned char *s1 = malloc(sb);
                REQUIRE(s1);
                memcpy(s1, src, sb);
                for (int64_t j = 0; j < n; j++) memcpy(want + j * ds * (int64_t)es, s1 + j * ss * (int64_t)es, es);
                exe_nd_copy(dst, &ds, s1, &ss, &n, 1, es);
                free(s1);
                CHECK_MSG(!memcmp(dst, want, (size_t)bytes), "nd_copy of %lld elements of %zu bytes, strides %lld <- %lld",
                          (long long)n, es, (long long)ds, (long long)ss);
            }
    free(src);
    free(dst);
    free(want);
}

/* Malformed instructions give an error naming the instruction and the problem, never a crash. */
TEST(kernels_errors)
{
    static const struct { const char *hlo, *want; } bad[] = {
        {"HloModule e\nENTRY main {\n p = f32[6,5] parameter(0)\n i = s32[4] parameter(1)\n"
         " ROOT g = f32[4,5] gather(p, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,9}\n}\n",
         "slice size 9"},
        {"HloModule e\nENTRY main {\n p = f32[6,5] parameter(0)\n i = s32[4,2] parameter(1)\n"
         " ROOT g = f32[4,5] gather(p, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,5}\n}\n",
         "start_index_map"},
        {"HloModule e\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = f32[] add(a, b) }\n"
         "ENTRY main {\n p = f32[6,3] parameter(0)\n i = s32[5,1] parameter(1)\n u = f32[5,4] parameter(2)\n"
         " ROOT s = f32[6,3] scatter(p, i, u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add\n}\n",
         "larger than operand dimension"},
        {"HloModule e\ncmp { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = pred[] compare(a, b), direction=LT }\n"
         "ENTRY main {\n k = f32[5] parameter(0)\n ROOT s = f32[5] sort(k), dimensions={3}, to_apply=cmp\n}\n",
         "sort dimension 3"},
        {"HloModule e\nENTRY main {\n x = f32[4,9] parameter(0)\n ROOT t = (f32[4,12], s32[4,12]) topk(x), k=12, largest=true\n}\n", "k=12"},
        {"HloModule e\nENTRY main {\n s = u32[4] parameter(0)\n ROOT r = (u32[4], u32[3]) rng-bit-generator(s), algorithm=rng_philox\n}\n",
         "u64"},
        {"HloModule e\nENTRY main {\n a = f32[3,4] parameter(0)\n ROOT l = f32[3,4] cholesky(a), lower=true\n}\n", "square"},
        {"HloModule e\nENTRY main {\n a = f32[4,4] parameter(0)\n b = f32[3,2] parameter(1)\n"
         " ROOT x = f32[3,2] triangular-solve(a, b), left_side=true, lower=true, transpose_a=NO_TRANSPOSE\n}\n", "second-minor dimension"},
        {"HloModule e\nENTRY main {\n x = c64[4,10] parameter(0)\n ROOT y = c64[4,10] fft(x), fft_type=FFT, fft_length={8}\n}\n",
         "fft_length"},
        {"HloModule e\nENTRY main {\n x = f32[4,3] parameter(0)\n s = f32[4] parameter(1)\n o = f32[3] parameter(2)\n"
         " ROOT t = (f32[4,3], f32[3], f32[3]) batch-norm-training(x, s, o), epsilon=0.001, feature_index=1\n}\n", "operand 1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tpu_ctx *ctx = tpu_ctx_new();
        tpu_module *m = NULL;
        tpu_tensor **in = NULL, **outs = NULL;
        int nin = 0, nout = 0;
        tpu_status st = tpu_module_parse(ctx, bad[i].hlo, strlen(bad[i].hlo), "bad.hlo", &m);
        if (!st) st = tpu_random_inputs(ctx, m, 1, &in, &nin);
        if (!st) {
            st = tpu_run(ctx, m, NULL, in, nin, &outs, &nout);
            CHECK_MSG(st != TPU_OK, "case %zu ran", i);
        }
        /* the verifier, which runs first, names the problem (the kernels' own checks stay behind it) */
        CHECK_MSG(st == TPU_OK || strstr(tpu_errmsg(ctx), bad[i].want), "case %zu: \"%s\" lacks \"%s\"", i, tpu_errmsg(ctx), bad[i].want);
        tpu_tensors_free(outs, nout);
        tpu_tensors_free(in, nin);
        tpu_module_free(m);
        tpu_ctx_free(ctx);
    }
}

/* Zero-sized operands run (and give empty or untouched results) without touching memory they do not own. */
TEST(kernels_zero_sized)
{
    static const char *progs[] = {
        "HloModule z\nENTRY main {\n p = f32[6,5] parameter(0)\n i = s32[0] parameter(1)\n"
        " ROOT g = f32[0,5] gather(p, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,5}\n}\n",
        "HloModule z\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = f32[] add(a, b) }\n"
        "ENTRY main {\n p = f32[6,3] parameter(0)\n i = s32[0,1] parameter(1)\n u = f32[0,3] parameter(2)\n"
        " ROOT s = f32[6,3] scatter(p, i, u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add\n}\n",
        "HloModule z\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = f32[] add(a, b) }\n"
        "ENTRY main {\n x = f32[0,40] parameter(0)\n c = f32[] constant(0)\n"
        " ROOT r = f32[0,40] reduce-window(x, c), window={size=1x40 pad=0_0x39_0}, to_apply=add\n}\n",
        "HloModule z\ncmp { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = pred[] compare(a, b), direction=LT }\n"
        "ENTRY main {\n k = f32[3,0] parameter(0)\n ROOT s = f32[3,0] sort(k), dimensions={1}, to_apply=cmp\n}\n",
        "HloModule z\nENTRY main {\n x = f32[3,0] parameter(0)\n ROOT t = (f32[3,0], s32[3,0]) topk(x), k=0, largest=true\n}\n",
        "HloModule z\nENTRY main {\n s = u64[2] parameter(0)\n ROOT r = (u64[2], u32[0,7]) rng-bit-generator(s), algorithm=rng_three_fry\n}\n",
        "HloModule z\nENTRY main {\n a = f32[0,3,3] parameter(0)\n ROOT l = f32[0,3,3] cholesky(a), lower=true\n}\n",
        "HloModule z\nENTRY main {\n x = c64[0,8] parameter(0)\n ROOT y = c64[0,8] fft(x), fft_type=FFT, fft_length={8}\n}\n",
    };
    for (size_t i = 0; i < sizeof progs / sizeof progs[0]; i++) {
        kr_case c = {"zero", progs[i], 0, 0};
        kr_run(&c);
    }
}
