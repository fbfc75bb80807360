/* gpu.c — the same per-device program on NVIDIA GPUs, for "TPU pod vs N GPUs" comparisons (tpusim scale): a
 * roofline per op from each GPU's published peak and bandwidth, with no other modelling.
 *
 * Per op of the TPU model's op list (the same fusion; a GPU compiler fuses at least as much):
 *     time = max(matrix FLOPs / tensor peak, other FLOPs / vector peak, dense bytes / HBM bandwidth)
 *            + kernel launch
 * Bytes are the op's operands and results as dense arrays (GPUs do not pad to (8,128) tiles). Collectives
 * run as NVLink rings among the n GPUs of one server (all-reduce 2 (n-1)/n of the bytes, others (n-1)/n) at
 * each GPU's NVLink bandwidth one way, plus a latency per ring step, combined like the TPU's (coll_bytes
 * batches: the launch and latency once per combined collective). Nothing is fitted: real GPU kernels
 * reach a fraction of the roofline (docs/pods.md states the error against MLPerf's 8 x V100).
 *
 * Sources (per GPU, SXM modules with NVLink):
 *   V100  NVIDIA Tesla V100 datasheet (2017/2018): 125 TFLOPS tensor (fp16 in, fp32 accumulate; the V100 has
 *         no bf16 path, so bf16 programs are taken as fp16 mixed precision), 15.7 TFLOPS fp32, 900 GB/s HBM2,
 *         NVLink 300 GB/s per GPU (both directions together)
 *   A100  NVIDIA A100 datasheet (2020): 312 TFLOPS bf16 tensor (dense), 19.5 TFLOPS fp32, 2039 GB/s HBM2e
 *         (80 GB SXM), NVLink 600 GB/s per GPU
 *   H100  NVIDIA H100 datasheet (2022): 989 TFLOPS bf16 tensor (dense; 1979 with sparsity), 67 TFLOPS fp32,
 *         3.35 TB/s HBM3 (SXM5), NVLink 900 GB/s per GPU
 *   kernel launch 4 us, ring step 5 us: assumptions (the order of a CUDA kernel launch and of an NCCL step
 *   inside one server; neither is a published constant)
 */
#include "timing/model.h"

#include <ctype.h>
#include <string.h>

static const tim_gpu tim_gpus[] = {
    {"V100", 125e12, 15.7e12, 900e9, 150e9, 32e9, "NVIDIA Tesla V100 SXM2 datasheet"},
    {"A100", 312e12, 19.5e12, 2039e9, 300e9, 80e9, "NVIDIA A100 80GB SXM datasheet"},
    {"H100", 989e12, 67e12, 3350e9, 450e9, 80e9, "NVIDIA H100 SXM5 datasheet"},
};

#define TIM_GPU_LAUNCH_S 4e-6
#define TIM_GPU_RING_STEP_S 5e-6

const tim_gpu *tim_gpu_find(const char *name)
{
    for (size_t i = 0; i < sizeof tim_gpus / sizeof tim_gpus[0]; i++) {
        const char *a = tim_gpus[i].name, *b = name;
        while (*a && *b && tolower((unsigned char)*a) == tolower((unsigned char)*b)) a++, b++;
        if (!*a && !*b) return &tim_gpus[i];
    }
    return NULL;
}

int tim_gpu_count_known(void) { return (int)(sizeof tim_gpus / sizeof tim_gpus[0]); }
const tim_gpu *tim_gpu_at(int i) { return i >= 0 && i < tim_gpu_count_known() ? &tim_gpus[i] : NULL; }

static int tim_is_coll(hlo_op op)
{
    switch (op) {
    case HLO_ALL_REDUCE: case HLO_ALL_REDUCE_START: case HLO_ALL_GATHER: case HLO_ALL_GATHER_START:
    case HLO_REDUCE_SCATTER: case HLO_ALL_TO_ALL: case HLO_COLLECTIVE_PERMUTE: case HLO_COLLECTIVE_PERMUTE_START:
    case HLO_COLLECTIVE_BROADCAST: case HLO_RAGGED_ALL_TO_ALL:
        return 1;
    default: return 0;
    }
}

/* Dense bytes an op reads and writes. */
static double tim_gpu_bytes(const cmp_program *p, const cmp_op *op)
{
    double b = 0;
    for (int i = 0; i < op->nin; i++) b += (double)p->values[op->in[i]].unpadded;
    for (int i = 0; i < op->nout; i++) b += (double)p->values[op->out[i]].unpadded;
    return b;
}

double tim_gpu_step_s(const tim_result *r, const tim_gpu *g, int n, double *coll_s)
{
    double total = 0, coll = 0;
    for (int i = 0; i < r->nops; i++) {
        const tim_op *t = &r->ops[i];
        if (t->op->kind == CMP_CONTROL || t->fused_into) continue;
        hlo_op k = (hlo_op)t->root->op;
        double s;
        if (tim_is_coll(k)) {
            if (n <= 1) continue;
            double bytes = 0;
            for (int j = 0; j < t->op->nin; j++) bytes += (double)r->prog->values[t->op->in[j]].unpadded;
            double frac = (double)(n - 1) / n, traffic = (k == HLO_ALL_REDUCE || k == HLO_ALL_REDUCE_START ? 2 : 1) * frac * bytes;
            s = traffic / g->link_bw;
            if (!t->combined) s += TIM_GPU_RING_STEP_S * (n - 1) * (k == HLO_ALL_REDUCE || k == HLO_ALL_REDUCE_START ? 2 : 1)
                                   + TIM_GPU_LAUNCH_S;
            coll += s * t->count;
        } else {
            double mxu = t->mxu_flops / g->tensor_flops, vec = (t->flops - t->mxu_flops) / g->vector_flops;
            double mem = tim_gpu_bytes(r->prog, t->op) / g->hbm_bw;
            s = mxu;
            if (vec > s) s = vec;
            if (mem > s) s = mem;
            s += TIM_GPU_LAUNCH_S;
        }
        total += s * t->count;
    }
    if (coll_s) *coll_s = coll;
    return total;
}
