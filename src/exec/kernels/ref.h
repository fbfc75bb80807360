/* ref.h — the naive reference kernels kept beside the fast ones in gather_scatter.c, window.c, sort.c, rng.c,
 * linalg.c, linalg_tpu.c, batchnorm.c and fft.c, exported only so tests can compare fast against reference on the same
 * instruction. Same signature and result as the fast kernel; slow and obviously correct. */
#ifndef TPU_EXEC_KERNELS_REF_H
#define TPU_EXEC_KERNELS_REF_H

#include "exec/exec.h"

/* Inside a kernel: whether this run asked for the references (EXE_REF_KERNELS in exe_run_cfg.ref, so a whole
 * program can be run both ways and compared; only tests ask). */
#define EXE_FORCE_REF(S) (((S)->ref & EXE_REF_KERNELS) != 0)

EXE_KERNEL(exe_k_gather_ref);
EXE_KERNEL(exe_k_scatter_ref);
EXE_KERNEL(exe_k_reduce_window_ref);
EXE_KERNEL(exe_k_select_and_scatter_ref);
EXE_KERNEL(exe_k_sort_ref);
EXE_KERNEL(exe_k_topk_ref);
EXE_KERNEL(exe_k_rng_bit_generator_ref);
EXE_KERNEL(exe_k_cholesky_ref);
EXE_KERNEL(exe_k_triangular_solve_ref);
EXE_KERNEL(exe_k_batch_norm_training_ref);
EXE_KERNEL(exe_k_batch_norm_inference_ref);
EXE_KERNEL(exe_k_batch_norm_grad_ref);
EXE_KERNEL(exe_k_fft_ref);
EXE_KERNEL(exe_k_lu_ref);
EXE_KERNEL(exe_k_qr_ref);
EXE_KERNEL(exe_k_householder_product_ref);
EXE_KERNEL(exe_k_eigh_ref);

/* rng.c: the counter-based generators (exposed for their known-answer tests). out[2] <- Threefry-2x32 (20
 * rounds) of x[2] under key[2]; out[4] <- Philox-4x32-10 of ctr[4] under key[2]. */
void exe_threefry2x32(const uint32_t key[2], const uint32_t x[2], uint32_t out[2]);
void exe_philox4x32(const uint32_t key[2], const uint32_t ctr[4], uint32_t out[4]);

#endif
