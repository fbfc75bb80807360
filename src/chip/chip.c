/* chip.c — the built-in TPU generations (one table, every constant with its public source), the one tiling
 * table for HBM layouts, slices (Cloud TPU accelerator-type names, topologies, hosts, wraparound) and the
 * derived figures. Chip files are in chip_file.c, printing and the public tpu_chip_* API in chip_print.c.
 *
 * Sources, cited below by these short names:
 *   [CACM20]  Jouppi et al., "A Domain-Specific Supercomputer for Training Deep Neural Networks", CACM 63(7),
 *             2020 (TPUv2/v3: clocks, MXUs, HBM, ICI links).
 *   [ISCA23]  Jouppi et al., "TPU v4: An Optically Reconfigurable Supercomputer for Machine Learning with
 *             Hardware Support for Embeddings", ISCA 2023 (v4: 1050 MHz, CMEM, SparseCores, OCS cubes).
 *   [DOC-v3] https://cloud.google.com/tpu/docs/v3     [DOC-v4] https://cloud.google.com/tpu/docs/v4
 *   [DOC-v5e] https://cloud.google.com/tpu/docs/v5e   [DOC-v5p] https://cloud.google.com/tpu/docs/v5p
 *   [DOC-v6e] https://cloud.google.com/tpu/docs/v6e   [DOC-7x] https://cloud.google.com/tpu/docs/tpu7x
 *   [DOC-arch] https://cloud.google.com/tpu/docs/system-architecture-tpu-vm (MXU = 128x128, bf16 x bf16 -> f32)
 *   [JAX-info] jax/_src/pallas/mosaic/tpu_info.py (JAX 2025: per-TensorCore VMEM, SMEM, CMEM, lanes,
 *             sublanes, MXU column size, sublane tiling per generation), rendered at
 *             https://docs.jax.dev/en/latest/pallas/tpu/hardware.html ("TPU Hardware Reference").
 *   [SCALE]   "How to Scale Your Model", jax-ml/scaling-book, chapter "How to Think About TPUs" (tpus.md):
 *             ICI GB/s per link, PCIe GB/s, v5e clock, VPU ALUs, wraparound rules.
 *   [XPK]     AI-Hypercomputer/xpk src/xpk/core/system_characteristics.py (accelerator types, topologies,
 *             chips per VM, max cubes per pod).
 *   [PTXLA]   pytorch/xla torch_xla/_internal/tpu.py (_ACCELERATOR_TYPE_TO_HOST_BOUNDS: v2/v3/v4 slice
 *             topologies; the accelerator-type regex ^(v|tpu)(\d)...-(\d+)$ accepting "tpu7x-8").
 *   [OOM-*]   XLA:TPU "Ran out of memory in memory space hbm. Used X of Y hbm ... reserved Z" reports quoted in
 *             public issues: v2 "of 7.48G" (erfanzar/EasyDeL#78, TPU v2-8); v3 "of 15.48G", "reserved
 *             530.00M" (LargeWorldModel/LWM#60 on v3-8, erfanzar/EasyDeL#142); v4 "of 30.75G", "reserved
 *             1.25G" (erfanzar/EasyDeL#166, v4-32); v5e "of 15.75G" (several v5litepod-1/v5e-8 reports);
 *             v5p "of 95.74G"; v6e "of 31.25G", "reserved 260.00M"; TPU7x "of 94.75G" (MaxText/vLLM notes).
 *             G and M there are GiB and MiB.
 *   [SWEEP]   published bf16 GEMM timings, listed with their sources in docs/timing-validation.md:
 *             v5e: JAX's Pallas TPU matmul guide; v6e and Ironwood: yangwhale/gpu-tpu-pedia tpu/v7_perf,
 *             AI-Hypercomputer/accelerator-microbenchmarks Ironwood README
 *   [LIBTPU-REF] tests/reference/libtpu_memory.json: programs compiled ahead of time by libtpu 0.0.42.1
 *             (docs/libtpu-reference.md); the VMEM figures are its memory-usage reports per memory space
 */
#include "chip.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KiB ((int64_t)1 << 10)
#define MiB ((int64_t)1 << 20)
#define GiB ((int64_t)1 << 30)

/* ---------------------------------------------------------------------------------------------------------
 * The tiling table (design §5). ONE table; correct a generation by adding rows with its range.
 * ------------------------------------------------------------------------------------------------------- */

#define CHP_SRC_TILE_32 "XLA:TPU layouts in public HLO dumps: f32[...]{...:T(8,128)}, s32[2048]{0:T(1024)}, " \
                        "s32[16]{0:T(128)}, u32[]{:T(128)}; design §5"
#define CHP_SRC_TILE_16 "bf16[...]{1,0:T(8,128)(2,1)} and bf16[6144]{0:T(1024)(128)(2,1)}, " \
                        "bf16[128]{0:T(256)(128)(2,1)} in public TPU dumps; [JAX-info] get_sublane_tiling: " \
                        "16-bit uses 8 sublanes before TPU7x"
#define CHP_SRC_TILE_8  "[JAX-info] get_sublane_tiling: 8-bit and narrower use 8 x (32/bits) sublanes " \
                        "(f8e4m3fn[...]{...:T(32,128)(4,1)}, pred[1]{0:T(512)(128)(4,1)} in public dumps; " \
                        "older XLA used T(8,128)(4,1))"

static const chp_tile_rule chp_tile_rules[] = {
    /* 64-bit types are emulated as pairs of 32-bit words; assumed to tile like 32-bit (no public dump). */
    {2, 7, 64, 8, 128, 1, 128, 1024, "assumed: as 32-bit"},
    {2, 7, 32, 8, 128, 1, 128, 1024, CHP_SRC_TILE_32},
    {2, 6, 16, 8, 128, 2, 256, 1024, CHP_SRC_TILE_16},
    /* TPU7x turns on the "large second-minor" tiling for 16-bit by default: T(16,128)(2,1). */
    {7, 7, 16, 16, 128, 2, 256, 1024, "[JAX-info] get_sublane_tiling: generation 7 uses 8 x (32/bits) "
                                      "sublanes for every width below 32; layout_hint \"{1,0:T(16,128)(2,1)}\""},
    {2, 7, 8, 32, 128, 4, 512, 1024, CHP_SRC_TILE_8},
    {2, 7, 4, 64, 128, 8, 1024, 1024, "[JAX-info] 8 x (32/4) sublanes"},
    {2, 7, 2, 128, 128, 16, 2048, 2048, "[JAX-info] 8 x (32/2) sublanes"},
};

static int chp_bits_class(int bits)
{
    if (bits > 32) return 64;
    if (bits > 16) return 32;
    if (bits > 8) return 16;
    if (bits > 4) return 8;
    if (bits > 2) return 4;
    return 2;
}

const chp_tile_rule *chp_tile_rule_for(const chp_chip *c, tpu_dtype dtype)
{
    if ((int)dtype <= 0 || dtype >= TPU_DTYPE_COUNT || tpu_dtype_kind(dtype) == 'o') return NULL;
    int bits = tpu_dtype_bits(dtype);
    if (bits <= 0) return NULL;
    int cls = chp_bits_class(bits);
    int gen = c ? c->generation : 6;
    if (gen < 2) gen = 2;
    if (gen > 7) gen = 7;
    for (int i = 0; i < UT_ARRAY_LEN(chp_tile_rules); i++) {
        const chp_tile_rule *r = &chp_tile_rules[i];
        if (r->bits == cls && gen >= r->first_gen && gen <= r->last_gen) return r;
    }
    return NULL;
}

/* Saturating arithmetic: sizes beyond int64 are reported as INT64_MAX, never wrapped. */
static int64_t chp_mul(int64_t a, int64_t b)
{
    if (a == 0 || b == 0) return 0;
    if (a < 0 || b < 0 || a > INT64_MAX / b) return INT64_MAX;
    return a * b;
}

static int64_t chp_round_up(int64_t n, int64_t m)
{
    if (n <= 0 || m <= 1) return n < 0 ? 0 : n;
    int64_t q = n / m + (n % m != 0);
    return chp_mul(q, m);
}

/* elements x bits / 8, rounded up, saturating */
static int64_t chp_elems_to_bytes(int64_t elems, int bits)
{
    if (elems == INT64_MAX) return INT64_MAX;
    if (bits % 8 == 0) return chp_mul(elems, bits / 8);
    int64_t per = 8 / bits;   /* bits is 1, 2 or 4 here */
    return elems / per + (elems % per != 0);
}

static int64_t chp_tile_1d(const chp_tile_rule *r, int64_t n)
{
    int64_t t = 1;
    while (t < n && t < r->max_1d) t <<= 1;
    if (t < r->min_1d) t = r->min_1d;
    if (t > r->max_1d) t = r->max_1d;
    return t;
}

/* The two most-minor dimensions from minor_to_major (or the default layout). */
static void chp_minor_dims(int rank, const int *m2m, int *minor, int *second)
{
    *minor = rank - 1;
    *second = rank - 2;
    if (!m2m) return;
    if (m2m[0] >= 0 && m2m[0] < rank && m2m[1] >= 0 && m2m[1] < rank && m2m[0] != m2m[1]) {
        *minor = m2m[0];
        *second = m2m[1];
    }
}

int64_t chp_unpadded_bytes(tpu_dtype dtype, int rank, const int64_t *dims)
{
    if ((int)dtype <= 0 || dtype >= TPU_DTYPE_COUNT || tpu_dtype_kind(dtype) == 'o') return 0;
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n = chp_mul(n, dims[i] < 0 ? 0 : dims[i]);
    return chp_elems_to_bytes(n, tpu_dtype_bits(dtype));
}

/* The tile the compiler uses for one array. Measured with the real TPU compiler (libtpu 0.0.42.1, ahead-of-time
 * compiles of 480 single arrays on v2..v7, tests/reference/libtpu_memory.md):
 *   - a short second-minor dimension gets a short tile: 16/32/64-bit rows pad to 2 (32-bit: 1 on v5e and
 *     later) up to 2 rows and to 4 up to 4 rows, else to the rule's 8 (16 for bf16 on TPU7x)
 *     [T(2,128), T(4,128), T(4,128)(2,1)];
 *   - 8-bit and pred: 8 rows with (4,1) packing up to v4; from v5e, 4 rows up to 4, 32 rows when the
 *     dimension is a multiple of 32, else 8;
 *   - rank-1 32-bit arrays use T(256) at least up to v4 (T(128) from v5e), growing to T(1024);
 *   - every array takes at least 1 KiB up to v4, 512 bytes from v5e. */
typedef struct chp_tile {
    int64_t rows, cols, one_d;   /* 2-D tile, or (rank <= 1) the 1-D tile */
    int     pack;
} chp_tile;

static chp_tile chp_tile_for(const chp_chip *c, const chp_tile_rule *r, int bits, int rank, const int64_t *dims, int second)
{
    chp_tile t = {r->rows, r->cols, 0, r->pack};
    int gen = c ? c->generation : 6;
    if (rank <= 1) {
        int64_t n = rank == 0 || !dims ? 1 : dims[0];
        chp_tile_rule rr = *r;
        if (bits >= 32 && gen <= 4 && rr.min_1d < 256) rr.min_1d = 256;
        t.one_d = chp_tile_1d(&rr, n);
        return t;
    }
    int64_t s = second >= 0 ? dims[second] : 1;
    if (bits >= 16) {
        /* measured for 32-bit (T(2,128), T(4,128); T(1,128) from v5e) and for bf16 (T(4,128)(2,1) on 3 rows) */
        if (s <= 1 && gen >= 5 && bits >= 32) t.rows = 1;
        else if (s <= 2) t.rows = 2;
        else if (s <= 4) t.rows = 4;
    } else if (bits == 8) {
        if (gen <= 4) t.rows = 8;
        else if (s <= 4) t.rows = 4;
        else if (s % 32 == 0) t.rows = 32;
        else t.rows = 8;
    }
    return t;
}

static int64_t chp_min_bytes(const chp_chip *c) { return c && c->generation >= 5 ? 512 : 1024; }

int64_t chp_padded_bytes(const chp_chip *c, tpu_dtype dtype, int rank, const int64_t *dims, const int *m2m)
{
    const chp_tile_rule *r = chp_tile_rule_for(c, dtype);
    if (!r || rank < 0 || rank > TPU_MAX_RANK) return 0;
    int bits = tpu_dtype_bits(dtype);
    for (int i = 0; i < rank; i++)
        if (dims[i] <= 0) return 0;
    int64_t bytes;
    if (rank <= 1) {
        int64_t n = rank == 0 ? 1 : dims[0];
        chp_tile t = chp_tile_for(c, r, bits, rank, dims, -1);
        bytes = chp_elems_to_bytes(chp_round_up(n, t.one_d), bits);
    } else {
        int minor, second;
        chp_minor_dims(rank, m2m, &minor, &second);
        chp_tile t = chp_tile_for(c, r, bits, rank, dims, second);
        int64_t n = 1;
        for (int i = 0; i < rank; i++) {
            int64_t d = dims[i];
            if (i == minor) d = chp_round_up(d, t.cols);
            else if (i == second) d = chp_round_up(d, t.rows);
            n = chp_mul(n, d);
        }
        bytes = chp_elems_to_bytes(n, bits);
    }
    int64_t minb = chp_min_bytes(c);
    return bytes < minb ? minb : bytes;
}

void chp_tile_str_m2m(const chp_chip *c, tpu_dtype dtype, int rank, const int64_t *dims, const int *m2m, char *buf,
                      size_t size)
{
    if (!size) return;
    buf[0] = 0;
    const chp_tile_rule *r = chp_tile_rule_for(c, dtype);
    if (!r) return;
    int bits = tpu_dtype_bits(dtype);
    int minor = -1, second = -1;
    if (rank >= 2) chp_minor_dims(rank, m2m, &minor, &second);
    chp_tile t = chp_tile_for(c, r, bits, rank, dims, second);
    if (rank <= 1) {
        if (t.pack > 1) snprintf(buf, size, "T(%lld)(128)(%d,1)", (long long)t.one_d, t.pack);
        else snprintf(buf, size, "T(%lld)", (long long)t.one_d);
    } else if (t.pack > 1) {
        snprintf(buf, size, "T(%lld,%lld)(%d,1)", (long long)t.rows, (long long)t.cols, t.pack);
    } else {
        snprintf(buf, size, "T(%lld,%lld)", (long long)t.rows, (long long)t.cols);
    }
}

void chp_tile_str(const chp_chip *c, tpu_dtype dtype, int rank, const int64_t *dims, char *buf, size_t size)
{
    chp_tile_str_m2m(c, dtype, rank, dims, NULL, buf, size);
}

/* ---------------------------------------------------------------------------------------------------------
 * The generations
 * ------------------------------------------------------------------------------------------------------- */

typedef struct chp_shape {
    int chips;
    int dims[CHP_MAX_DIMS];
} chp_shape;

typedef struct chp_gen {
    chp_chip         chip;
    const char      *aliases;   /* other names for the generation, space separated, lower case */
    const chp_shape *shapes;    /* 2-D: every slice offered; 3-D: the slices smaller than one cube */
    int              nshapes;
} chp_gen;

/* v2: [PTXLA] host bounds (2x2 chips per host): v2-8 1x1 hosts, v2-32 2x2, v2-128 4x4, v2-256 4x8, v2-512 8x8. */
static const chp_shape chp_v2_shapes[] = {
    {4, {2, 2, 0}}, {16, {4, 4, 0}}, {64, {8, 8, 0}}, {128, {8, 16, 0}}, {256, {16, 16, 0}},
};
/* v3: [PTXLA] v3-8 ... v3-2048, including v3-64 (2x4 hosts = 4x8 chips). */
static const chp_shape chp_v3_shapes[] = {
    {4, {2, 2, 0}},     {16, {4, 4, 0}},    {32, {4, 8, 0}},     {64, {8, 8, 0}},
    {128, {8, 16, 0}},  {256, {16, 16, 0}}, {512, {16, 32, 0}}, {1024, {32, 32, 0}},
};
/* v5e, v6e: [DOC-v5e], [DOC-v6e], [XPK]: 1x1, 2x2, 2x4 on one host, then 4x4 ... 16x16. */
static const chp_shape chp_lite_shapes[] = {
    {1, {1, 1, 0}},    {4, {2, 2, 0}},    {8, {2, 4, 0}},     {16, {4, 4, 0}},
    {32, {4, 8, 0}},   {64, {8, 8, 0}},   {128, {8, 16, 0}},  {256, {16, 16, 0}},
};
/* v4, v5p: slices smaller than one 4x4x4 cube: [PTXLA] v4-8 2x2x1, v4-16 2x2x2, v4-32 2x2x4, v4-64 2x4x4;
 * [DOC-v5p] table; [XPK] generate_tpu_topologies adds the same four. */
static const chp_shape chp_3d_shapes[] = {
    {4, {2, 2, 1}}, {8, {2, 2, 2}}, {16, {2, 2, 4}}, {32, {2, 4, 4}},
};
/* TPU7x: the same, plus one chip (tpu7x-2, machine type tpu7x-standard-1t, topology 1x1x1 in [XPK]). */
static const chp_shape chp_v7_shapes[] = {
    {1, {1, 1, 1}}, {4, {2, 2, 1}}, {8, {2, 2, 2}}, {16, {2, 2, 4}}, {32, {2, 4, 4}},
};

#define VPU_8x128 8, 128, 2   /* [JAX-info] NUM_SUBLANES 8, NUM_LANES 128 on every generation; [SCALE]: "each
                               * (lane, sublane) pair on v4 contains 2 ... ALUs" — assumed for the others */

static const chp_gen chp_gens[] = {
    /* ---- v2 ---------------------------------------------------------------------------------------- */
    {{
        .name = "v2", .cloud_prefix = "v2", .generation = 2, .names_count_cores = true, .builtin = true,
        .cores_per_chip = 2,                 /* [CACM20]: two TensorCores per chip */
        .cores_per_device = 1,               /* no megacore: each core is a device ([JAX-info]) */
        .mxus_per_core = 1,                  /* [CACM20]: one 128x128 MXU per core */
        .mxu_rows = 128, .mxu_cols = 128,
        .peak_bf16_flops = 46e12,            /* [CACM20] 46 TFLOPS; = 2*128*128*1*2*700 MHz = 45.9e12 */
        .peak_int8_ops = 0,                  /* no int8 MXU path ([JAX-info]: matmul f32/bf16 only) */
        .peak_fp8_flops = 0,
        .clock_hz = 700e6,                   /* [CACM20] 700 MHz */
        .vpu_sublanes = 8, .vpu_lanes = 128, .vpu_alus_per_lane = 2,
        .hbm_bytes = 16 * GiB,               /* [CACM20] 16 GiB HBM per chip, 8 GiB per core */
        .hbm_usable_bytes = 8 * GiB - 530 * MiB, /* [OOM-v2] "of 7.48G hbm": 8 GiB - 530 MiB = 7.48 GiB */
        .hbm_reserved_bytes = 530 * MiB,     /* [OOM-v2] "reserved 530.00M" (same runtime as v3) */
        .hbm_bw = 700e9,                     /* [CACM20] 700 GB/s; [JAX-info] 7.16e11. Chose the paper. */
        .vmem_bytes = 16 * MiB,              /* [JAX-info] 16 MiB per core */
        .cmem_bytes = 0,
        .smem_bytes = 16 * KiB,              /* [JAX-info] 16 KiB per core */
        .sparse_cores = 0,
        .ici_links = 4,                      /* [CACM20] 4 ICI links per chip, 2-D torus */
        .ici_link_bw = 62e9,                 /* [CACM20] 496 Gbit/s per link = 62 GB/s */
        .torus_dims = 2, .pod_dims = {16, 16, 0}, .cube = 0,
        .max_pod_chips = 256,                /* [CACM20] 256-chip pod, 16x16 ([PTXLA] v2-512 = 8x8 hosts) */
        .max_slice_chips = 256,
        .chips_per_host = 4, .chips_per_host_multi = 4, /* [PTXLA] TPU_CHIPS_PER_HOST_BOUNDS 2,2,1 */
        .host_bw = 15e9,                     /* [SCALE] "PCIe bandwidth is typically around 1.5e10 bytes/s per chip" */
        .pcie_gen = 0,                       /* not stated in the sources above */
        .dcn_host_bw = 0,                    /* v2 pods are not joined into multislices (Multislice: v4 and later) */
        .op_overhead_s = 1e-6,               /* not public; tiny fusions in TPU profiles take about 1 us */
        .mxu_efficiency = 0.94,              /* assumed as v5e's (the same 128x128 MXU and matmul emitter family): no
                                              * published GEMM sweep found for this generation */
        .source = "Jouppi et al., A Domain-Specific Supercomputer for Training Deep Neural Networks, CACM 2020; JAX pallas/mosaic/tpu_info.py; XLA OOM reports (github.com/erfanzar/EasyDeL/issues/78)",
        .note = "HBM bandwidth: CACM 2020 says 700 GB/s, JAX's tpu_info.py 716 GB/s; 700 chosen.",
    }, "tpuv2 tpu-v2", chp_v2_shapes, UT_ARRAY_LEN(chp_v2_shapes)},

    /* ---- v3 ---------------------------------------------------------------------------------------- */
    {{
        .name = "v3", .cloud_prefix = "v3", .generation = 3, .names_count_cores = true, .builtin = true,
        .cores_per_chip = 2,                 /* [DOC-v3] two TensorCores per chip */
        .cores_per_device = 1,
        .mxus_per_core = 2,                  /* [DOC-v3] two MXUs per TensorCore */
        .mxu_rows = 128, .mxu_cols = 128,
        .peak_bf16_flops = 123e12,           /* [DOC-v3] 123 TFLOPS; = 2*128*128*2*2*940 MHz = 123.2e12 */
        .peak_int8_ops = 0, .peak_fp8_flops = 0,
        .clock_hz = 940e6,                   /* [CACM20] 940 MHz */
        .vpu_sublanes = 8, .vpu_lanes = 128, .vpu_alus_per_lane = 2,
        .hbm_bytes = 32 * GiB,               /* [DOC-v3] 32 GiB per chip, 16 GiB per core */
        .hbm_usable_bytes = 16 * GiB - 530 * MiB, /* [OOM-v3] "of 15.48G hbm" = 16 GiB - 530 MiB */
        .hbm_reserved_bytes = 530 * MiB,     /* [OOM-v3] "reserved 530.00M" */
        .hbm_bw = 900e9,                     /* [DOC-v3] 900 GBps; [JAX-info] 8.25e11. Chose the doc. */
        .vmem_bytes = 16 * MiB,              /* [JAX-info] */
        .cmem_bytes = 0, .smem_bytes = 16 * KiB, .sparse_cores = 0,
        .ici_links = 4,                      /* [CACM20] 4 links, 2-D torus */
        .ici_link_bw = 82e9,                 /* [CACM20] 656 Gbit/s = 82 GB/s; check: [DOC-v3] all-reduce
                                              * 340 TB/s per 1024-chip pod = 332 GB/s/chip = 4 x 83 GB/s.
                                              * [SCALE] rounds it to 1e11. */
        .torus_dims = 2, .pod_dims = {32, 32, 0}, .cube = 0,
        .max_pod_chips = 1024,               /* [DOC-v3] 1024 chips, 2-D torus ([PTXLA] v3-2048 16x16 hosts) */
        .max_slice_chips = 1024,
        .chips_per_host = 4, .chips_per_host_multi = 4,
        .host_bw = 15e9, .pcie_gen = 0,      /* [SCALE] typical figure */
        .dcn_host_bw = 0,                    /* as v2: no multislice */
        .op_overhead_s = 1e-6,
        .mxu_efficiency = 0.94,              /* assumed as v5e's (the same 128x128 MXU and matmul emitter family): no
                                              * published GEMM sweep found for this generation */
        .source = "https://cloud.google.com/tpu/docs/v3; Jouppi et al., CACM 2020; JAX pallas/mosaic/tpu_info.py; XLA OOM reports (github.com/LargeWorldModel/LWM/issues/60)",
        .note = "HBM bandwidth: the v3 doc says 900 GBps, JAX's tpu_info.py 825 GB/s; 900 chosen.",
    }, "tpuv3 tpu-v3", chp_v3_shapes, UT_ARRAY_LEN(chp_v3_shapes)},

    /* ---- v4 ---------------------------------------------------------------------------------------- */
    {{
        .name = "v4", .cloud_prefix = "v4", .generation = 4, .names_count_cores = true, .builtin = true,
        .cores_per_chip = 2,                 /* [DOC-v4] */
        .cores_per_device = 2,               /* megacore: one program drives both cores ([JAX-info]) */
        .mxus_per_core = 4,                  /* [DOC-v4] four MXUs per TensorCore */
        .mxu_rows = 128, .mxu_cols = 128,
        .peak_bf16_flops = 275e12,           /* [DOC-v4] 275 TFLOPS; = 2*128*128*4*2*1050 MHz = 275.3e12 */
        .peak_int8_ops = 275e12,             /* [DOC-v4] "275 teraflops (bf16 or int8)" */
        .peak_fp8_flops = 0,
        .clock_hz = 1050e6,                  /* [ISCA23] 1050 MHz */
        .vpu_sublanes = 8, .vpu_lanes = 128, .vpu_alus_per_lane = 2,
        .hbm_bytes = 32 * GiB,               /* [DOC-v4] 32 GiB */
        .hbm_usable_bytes = 32 * GiB - 1280 * MiB, /* [OOM-v4] "of 30.75G hbm" = 32 GiB - 1.25 GiB */
        .hbm_reserved_bytes = 1280 * MiB,    /* [OOM-v4] "reserved 1.25G" */
        .hbm_bw = 1200e9,                    /* [DOC-v4] 1200 GBps */
        .vmem_bytes = 16 * MiB,              /* [JAX-info] 16 MiB per core */
        .cmem_bytes = 128 * MiB,             /* [ISCA23] 128 MiB CMEM per chip ([JAX-info] 134e6 bytes) */
        .smem_bytes = 1 * MiB,               /* [JAX-info] */
        .sparse_cores = 4,                   /* [ISCA23] four SparseCores per chip */
        .ici_links = 6,                      /* [ISCA23] 3-D torus: 6 links per chip */
        .ici_link_bw = 45e9,                 /* [SCALE] 4.5e10 B/s one way per link; check: [DOC-v4] all-reduce
                                              * 1.1 PB/s per 4096 chips = 268 GB/s = 6 x 44.8 GB/s */
        .torus_dims = 3, .pod_dims = {16, 16, 16}, .cube = 4, /* [ISCA23] 4x4x4 cubes joined by OCS */
        .max_pod_chips = 4096,               /* [DOC-v4] 4096 chips */
        .max_slice_chips = 4096,             /* [XPK] max_cubes=64; the doc's list stops at v4-4096 (8x16x16) */
        .chips_per_host = 4, .chips_per_host_multi = 4,
        .dcn_host_bw = 25e9,                 /* [SCALE] "DCN bandwidth is typically around 2.5e10 bytes / second
                                              * per host" */
        .host_bw = 16e9, .pcie_gen = 3,      /* [SCALE] "PCIe bandwidth for TPU v4 is 16GB/s each way";
                                              * PCIe Gen3 x16 (glennklockwood.com/garden/processors/TPUv4) */
        .op_overhead_s = 1e-6,
        .mxu_efficiency = 0.94,              /* assumed as v5e's (the same 128x128 MXU and matmul emitter family): no
                                              * published GEMM sweep found for this generation */
        .source = "https://cloud.google.com/tpu/docs/v4; Jouppi et al., TPU v4: An Optically Reconfigurable Supercomputer ..., ISCA 2023; JAX pallas/mosaic/tpu_info.py; How to Scale Your Model (jax-ml/scaling-book); XLA OOM reports (github.com/erfanzar/EasyDeL/issues/166)",
        .note = "VMEM: JAX's tpu_info.py says 16 MiB per core (used here). Largest documented Cloud slice is "
                "v4-4096 (8x16x16); the pod holds 4096 chips (16x16x16).",
    }, "tpuv4 tpu-v4", chp_3d_shapes, UT_ARRAY_LEN(chp_3d_shapes)},

    /* ---- v5e --------------------------------------------------------------------------------------- */
    {{
        .name = "v5e", .cloud_prefix = "v5litepod", .generation = 5, .names_count_cores = false,
        .builtin = true,
        .cores_per_chip = 1,                 /* [DOC-v5e] one TensorCore per chip */
        .cores_per_device = 1,
        .mxus_per_core = 4,                  /* [DOC-v5e] four MXUs */
        .mxu_rows = 128, .mxu_cols = 128,
        .peak_bf16_flops = 197e12,           /* [DOC-v5e] 197 TFLOPs; = 2*128*128*4*1.5 GHz = 196.6e12 */
        .peak_int8_ops = 393e12,             /* [DOC-v5e] 393 TOPs ([SCALE] 3.94e14) */
        .peak_fp8_flops = 0,
        .clock_hz = 1.5e9,                   /* [SCALE] "5e13 bf16 FLOPs/s per MXU at 1.5GHz on TPU v5e" */
        .vpu_sublanes = 8, .vpu_lanes = 128, .vpu_alus_per_lane = 2,
        .hbm_bytes = 16 * GiB,               /* [DOC-v5e] "16 GB"; the runtime reports memory size
                                              * 17179869184 = 16 GiB */
        .hbm_usable_bytes = 16 * GiB - 256 * MiB, /* [OOM-v5e] "of 15.75G hbm" */
        .hbm_reserved_bytes = 256 * MiB,     /* derived: 16 GiB - 15.75 GiB (no report with the line found) */
        .hbm_bw = 819e9,                     /* [DOC-v5e] 819 GBps (another revision says 800 GiBps) */
        .vmem_bytes = 128 * MiB,             /* [JAX-info] 128 MiB */
        .vmem_temp_bytes = 112 * MiB,        /* [LIBTPU-REF] temporaries in VMEM up to 112.0 MiB (128 less the
                                              * 16 MiB scoped default); a 98 MiB buffer goes there, 2 x 49 fit */
        .mxu_recompute_operands = 1,         /* [LIBTPU-REF] attention's dS and cross-entropy's dlogits are
                                              * recomputed in the two matmuls reading them (written once on v3) */
        .cmem_bytes = 0, .smem_bytes = 1 * MiB, .sparse_cores = 0,
        .ici_links = 4,                      /* [DOC-v5e] 4 ICI ports per chip */
        .ici_link_bw = 50e9,                 /* [DOC-v5e] 400 GBps bidirectional per chip / 4 ports / 2; older
                                              * revision "1600 Gbps" = 200 GB/s per direction / 4; check:
                                              * all-reduce 51.2 TB/s per 256 chips = 200 GB/s = 4 x 50 */
        .torus_dims = 2, .pod_dims = {16, 16, 0}, .cube = 0,
        .max_pod_chips = 256, .max_slice_chips = 256, /* [DOC-v5e] 256 chips, 2-D torus */
        .chips_per_host = 8,                 /* [DOC-v5e] chips per host 8 (v5litepod-8 is one VM) */
        .chips_per_host_multi = 4,           /* [XPK] ct5lp-hightpu-4t: 4 chips per VM in multi-host slices */
        .dcn_host_bw = 25e9,                 /* [SCALE] "DCN bandwidth is typically around 2.5e10 bytes / second
                                              * per host" */
        .host_bw = 16e9, .pcie_gen = 0,      /* [SCALE] "around 1.6e10 bytes/s per TPU" */
        .op_overhead_s = 1e-6,
        .mxu_efficiency = 0.94,              /* [SWEEP] jnp.matmul bf16 4096^3 and 8192^3 on v5e: 97% and 94% of peak
                                              * once the ~0.1 ms Python dispatch is taken out (docs/timing.md) */
        .source = "https://cloud.google.com/tpu/docs/v5e; How to Scale Your Model (jax-ml/scaling-book); JAX pallas/mosaic/tpu_info.py; xpk system_characteristics.py; XLA OOM reports",
        .note = "The reserved HBM (256 MiB) is derived from the 15.75 GiB capacity in OOM reports; the doc "
                "says 16 GB and 819 GBps (one revision: 800 GiBps).",
    }, "v5lite tpuv5e tpu-v5-lite v5-lite tpu-v5-lite-podslice", chp_lite_shapes, UT_ARRAY_LEN(chp_lite_shapes)},

    /* ---- v5p --------------------------------------------------------------------------------------- */
    {{
        .name = "v5p", .cloud_prefix = "v5p", .generation = 5, .names_count_cores = true, .builtin = true,
        .cores_per_chip = 2,                 /* [DOC-v5p] 2 TensorCores per chip */
        .cores_per_device = 2,               /* megacore ([JAX-info]) */
        .mxus_per_core = 4,                  /* [DOC-v5p] four MXUs per TensorCore */
        .mxu_rows = 128, .mxu_cols = 128,
        .peak_bf16_flops = 459e12,           /* [DOC-v5p] 459 TFLOPs */
        .peak_int8_ops = 918e12,             /* [SCALE], [JAX-info] 9.18e14 */
        .peak_fp8_flops = 459e12,            /* [DOC-7x] table: FP8 459 (no faster FP8 path) */
        .clock_hz = 0,                       /* not public; 459e12 / (2*128*128*4*2) = 1.75 GHz */
        .vpu_sublanes = 8, .vpu_lanes = 128, .vpu_alus_per_lane = 2,
        .hbm_bytes = 96 * GiB,               /* [DOC-v5p] says 95 GiB, but XLA reports "of 95.74G hbm" usable,
                                              * so the chip has at least that: 96 GiB ([JAX-info] 103e9 bytes) */
        .hbm_usable_bytes = 98038 * MiB,     /* [OOM-v5p] "of 95.74G hbm" = 98038 MiB (95.740 GiB) */
        .hbm_reserved_bytes = 266 * MiB,     /* derived: 96 GiB - 95.74 GiB */
        .hbm_bw = 2765e9,                    /* [DOC-v5p] 2765 GBps (one revision: 2575 GiBps) */
        .vmem_bytes = 64 * MiB,              /* [JAX-info] 64 MiB */
        .vmem_temp_bytes = 48 * MiB,         /* [LIBTPU-REF] probe of 5 programs: 37 MiB of temporaries in VMEM,
                                              * a 49 MiB buffer not; 64 less a 16 MiB scoped share assumed */
        .mxu_recompute_operands = 2,         /* [LIBTPU-REF] as v6e: probes compiled for v5p write a
                                              * non-causal attention step's dS once (heads of 64) and
                                              * recompute a SwiGLU MLP step's products (widths 1024-4096) */
        .cmem_bytes = 0, .smem_bytes = 1 * MiB,
        .sparse_cores = 4,                   /* [DOC-v5p] 4 SparseCores per chip */
        .ici_links = 6,                      /* 3-D torus ([SCALE]: "connected to the nearest 6 neighbors") */
        .ici_link_bw = 100e9,                /* [DOC-v5p] 1200 GBps bidirectional per chip / 6 / 2 (older
                                              * revision: 4800 Gbps = 600 GB/s per direction); [SCALE] 9e10 */
        .torus_dims = 3, .pod_dims = {16, 20, 28}, .cube = 4, /* [SCALE] superpod 16x20x28 */
        .max_pod_chips = 8960,               /* [DOC-v5p] 8960 chips per pod */
        .max_slice_chips = 6144,             /* [DOC-v5p] "largest job ... 96 cube (6144 chip)", 16x16x24 */
        .chips_per_host = 4, .chips_per_host_multi = 4, /* [DOC-v5p] 4-chip VMs */
        .dcn_host_bw = 25e9,                 /* [SCALE] typical DCN figure per host */
        .host_bw = 16e9, .pcie_gen = 0,      /* [SCALE] typical figure */
        .op_overhead_s = 1e-6,
        .mxu_efficiency = 0.94,              /* assumed as v5e's (the same 128x128 MXUs): no published GEMM sweep */
        .source = "https://cloud.google.com/tpu/docs/v5p; How to Scale Your Model (jax-ml/scaling-book); JAX pallas/mosaic/tpu_info.py; XLA OOM reports",
        .note = "Clock not public (459 TFLOP/s implies 1.75 GHz). HBM: the doc says 95 GB/GiB, XLA offers "
                "95.74 GiB to a program, so 96 GiB is used; reserved 266 MiB is derived.",
    }, "tpuv5p v5 tpu-v5p tpu-v5p-slice", chp_3d_shapes, UT_ARRAY_LEN(chp_3d_shapes)},

    /* ---- v6e (Trillium) ---------------------------------------------------------------------------- */
    {{
        .name = "v6e", .cloud_prefix = "v6e", .generation = 6, .names_count_cores = false, .builtin = true,
        .cores_per_chip = 1,                 /* [DOC-v6e] one TensorCore */
        .cores_per_device = 1,
        .mxus_per_core = 2,                  /* [DOC-v6e] "two 256x256 matrix-multiply units" — see note */
        .mxu_rows = 256, .mxu_cols = 256,    /* [DOC-v6e]; [JAX-info] MXU column size 256 from generation 6 */
        .peak_bf16_flops = 918e12,           /* [DOC-v6e] 918 TFLOPs (launch blog: 926) */
        .peak_int8_ops = 1836e12,            /* [DOC-v6e] 1836 TOPs */
        .peak_fp8_flops = 918e12,            /* [DOC-7x] table */
        .clock_hz = 0,                       /* not public */
        .vpu_sublanes = 8, .vpu_lanes = 128, .vpu_alus_per_lane = 2, /* [DOC-v6e] "128 lanes x 8 sublanes" */
        .hbm_bytes = 32 * GiB,               /* [DOC-v6e] 32 GB ([JAX-info] 34.4e9 bytes = 32 GiB) */
        .hbm_usable_bytes = 32000 * MiB,     /* [OOM-v6e] "of 31.25G hbm" */
        .hbm_reserved_bytes = 260 * MiB,     /* [OOM-v6e] "reserved 260.00M" */
        .hbm_bw = 1638e9,                    /* [DOC-v6e] 1638 GBps */
        .vmem_bytes = 128 * MiB,             /* [JAX-info] */
        .vmem_temp_bytes = 95 * MiB + 920 * KiB, /* [LIBTPU-REF] temporaries in VMEM up to 95.9 MiB (128 less the
                                              * 32 MiB scoped default); a 98 MiB buffer stays in HBM, one 49 fits */
        .mxu_recompute_operands = 2,         /* [LIBTPU-REF] by the reading matmuls' width: attention's dS
                                              * written once (attention_train_bf16, long_attention_train_bf16,
                                              * heads of 64 and 128), a SwiGLU product and dlogits recomputed
                                              * (xent_vocab_train; a SwiGLU MLP step compiled for v6e) */
        .cmem_bytes = 0, .smem_bytes = 1 * MiB,
        .sparse_cores = 2,                   /* [DOC-7x] table: 2 SparseCores per v6e chip */
        .ici_links = 4,                      /* [DOC-v6e] 4 ICI ports */
        .ici_link_bw = 100e9,                /* [DOC-v6e] 800 GBps bidirectional / 4 / 2; check: all-reduce
                                              * 102.4 TB/s per 256 chips = 400 GB/s = 4 x 100 */
        .torus_dims = 2, .pod_dims = {16, 16, 0}, .cube = 0,
        .max_pod_chips = 256, .max_slice_chips = 256,
        .chips_per_host = 8, .chips_per_host_multi = 4, /* [DOC-v6e] 8 per host; [XPK] ct6e-standard-4t */
        .dcn_host_bw = 25e9,                 /* [SCALE] "DCN bandwidth is typically around 2.5e10 bytes / second
                                              * per host" */
        .host_bw = 32e9, .pcie_gen = 5,      /* [DOC-v6e] "connects to the host through a PCIe Gen5
                                              * interface"; [SCALE] 3.2e10 B/s for v6e */
        .op_overhead_s = 1e-6,
        .mxu_efficiency = 0.87,              /* [SWEEP] v6e bf16 GEMMs of 4096-8192 a side: 79-94% of peak, median 87%
                                              * (8192^3 79% in a device trace) */
        .source = "https://cloud.google.com/tpu/docs/v6e; Google Cloud blog, Introducing Trillium (May 2024); JAX pallas/mosaic/tpu_info.py; XLA OOM reports",
        .note = "MXUs: the doc says two 256x256 MXUs, but then 918 TFLOP/s needs a 3.5 GHz clock; the launch "
                "blog ('larger MXUs and a higher clock', 4.7x v5e) fits four at ~1.75 GHz. The doc's 2 is kept; "
                "timing uses peak FLOP/s. Usable 31.25 GiB + reserved 260 MiB leave 0.5 GiB unexplained.",
    }, "trillium tpuv6e v6 tpu-v6e tpu-v6e-slice v6lite", chp_lite_shapes, UT_ARRAY_LEN(chp_lite_shapes)},

    /* ---- v7 (TPU7x, Ironwood) ---------------------------------------------------------------------- */
    {{
        .name = "v7", .cloud_prefix = "tpu7x", .generation = 7, .names_count_cores = true, .builtin = true,
        .cores_per_chip = 2,                 /* [DOC-7x] two TensorCores (and four SparseCores) per chip */
        .cores_per_device = 1,               /* [DOC-7x] dual-chiplet: each chiplet is a device; [JAX-info]:
                                              * no megacore; "tpu7x-128 = 64 chips" in public AOT notes */
        .mxus_per_core = 2,                  /* not in [DOC-7x]; design §7 table — see note */
        .mxu_rows = 256, .mxu_cols = 256,    /* [JAX-info] mxu_column_size 256 */
        .peak_bf16_flops = 2307e12,          /* [DOC-7x] 2307 TFLOPs */
        .peak_int8_ops = 0,                  /* [JAX-info]: not available */
        .peak_fp8_flops = 4614e12,           /* [DOC-7x] 4614 TFLOPs */
        .clock_hz = 0,
        .vpu_sublanes = 8, .vpu_lanes = 128, .vpu_alus_per_lane = 2,
        .hbm_bytes = 192 * GiB,              /* [DOC-7x] 192 GiB per chip, 96 GiB per chiplet */
        .hbm_usable_bytes = 96 * GiB - 1280 * MiB, /* [OOM-7x] "of 94.75G hbm" per device */
        .hbm_reserved_bytes = 1280 * MiB,    /* derived: 96 GiB - 94.75 GiB (as v4's reported 1.25G) */
        .hbm_bw = 7380e9,                    /* [DOC-7x] 7380 GB/s per chip */
        .vmem_bytes = 64 * MiB,              /* [JAX-info] 64 MiB */
        .vmem_temp_bytes = 48 * MiB,         /* [LIBTPU-REF] probe of 5 programs: 41 MiB of temporaries in VMEM,
                                              * a 49 MiB buffer not; 64 less a 16 MiB scoped share assumed */
        .mxu_recompute_operands = 2,         /* [LIBTPU-REF] as v6e: the same probes compiled for tpu7x */
        .cmem_bytes = 0, .smem_bytes = 1 * MiB,
        .sparse_cores = 4,                   /* [DOC-7x] */
        .ici_links = 6,                      /* assumed: 3-D torus like v5p ([DOC-7x] "shares many similarities
                                              * with v5p"; [XPK] 4x4x4 cubes) */
        .ici_link_bw = 100e9,                /* [DOC-7x] 1200 GB/s bidirectional per chip / 6 / 2 */
        .torus_dims = 3, .pod_dims = {0, 0, 0}, .cube = 4,
        .max_pod_chips = 9216,               /* [DOC-7x] 9216 chips per pod */
        .max_slice_chips = 9216,             /* [XPK] max_cubes=144 */
        .chips_per_host = 4, .chips_per_host_multi = 4, /* [XPK] tpu7x-standard-4t: 4 chips per VM */
        .dcn_host_bw = 25e9,                 /* [SCALE] typical DCN figure per host */
        .host_bw = 16e9, .pcie_gen = 0,      /* [SCALE] typical figure */
        .op_overhead_s = 1.4e-6,             /* [SWEEP] the fixed cost of one MXU kernel: device-trace time of the
                                              * sweep's 128^3 and 256^3 bf16 GEMMs (1.62, 1.84 us) less their
                                              * modelled work (0.29, 0.37 us: data and MXU fill/drain), mean */
        .mxu_efficiency = 0.89,              /* [SWEEP] Ironwood bf16 GEMMs 4096-32768 a side: 77-83% in the
                                              * accelerator-microbenchmarks sweep, 94-96% in a later device-trace
                                              * sweep; between the two */
        .source = "https://cloud.google.com/tpu/docs/tpu7x; JAX pallas/mosaic/tpu_info.py; xpk system_characteristics.py; XLA OOM reports",
        .note = "MXUs per core are not published: with 2 x 256x256 per core, 2307 TFLOP/s needs 4.4 GHz (4 per "
                "core: 2.2 GHz). ICI links assumed 6 (3-D torus). Reserved HBM derived. Cloud names count "
                "TensorCores: tpu7x-8 is 4 chips.",
    }, "v7x tpu7 tpuv7 ironwood tpu-v7", chp_v7_shapes, UT_ARRAY_LEN(chp_v7_shapes)},
};

int chp_num_generations(void) { return UT_ARRAY_LEN(chp_gens); }

const chp_chip *chp_generation_at(int i)
{
    return i >= 0 && i < UT_ARRAY_LEN(chp_gens) ? &chp_gens[i].chip : NULL;
}

static int chp_ieq(const char *a, size_t alen, const char *b)
{
    size_t blen = strlen(b);
    if (alen != blen) return 0;
    for (size_t i = 0; i < alen; i++)
        if (tolower((unsigned char)a[i]) != tolower((unsigned char)b[i])) return 0;
    return 1;
}

/* The generation named by name[0..len) (its own name, its Cloud prefix or an alias), or NULL. */
static const chp_gen *chp_gen_lookup(const char *name, size_t len)
{
    for (int i = 0; i < UT_ARRAY_LEN(chp_gens); i++) {
        const chp_gen *g = &chp_gens[i];
        if (chp_ieq(name, len, g->chip.name) || chp_ieq(name, len, g->chip.cloud_prefix)) return g;
        for (const char *a = g->aliases; *a;) {
            size_t n = strcspn(a, " ");
            if (n == len) {
                int same = 1;
                for (size_t k = 0; k < n; k++)
                    if (tolower((unsigned char)name[k]) != a[k]) same = 0;
                if (same) return g;
            }
            a += n;
            while (*a == ' ') a++;
        }
    }
    return NULL;
}

const chp_chip *chp_generation_find(const char *name)
{
    if (!name) return NULL;
    const chp_gen *g = chp_gen_lookup(name, strlen(name));
    return g ? &g->chip : NULL;
}

static const chp_gen *chp_gen_of(const chp_chip *c)
{
    if (!c->builtin) return NULL;
    for (int i = 0; i < UT_ARRAY_LEN(chp_gens); i++)
        if (!strcmp(chp_gens[i].chip.name, c->name)) return &chp_gens[i];
    return NULL;
}

/* ---------------------------------------------------------------------------------------------------------
 * Derived figures
 * ------------------------------------------------------------------------------------------------------- */

double chp_mxu_clock_hz(const chp_chip *c)
{
    if (c->clock_hz > 0) return c->clock_hz;
    double units = 2.0 * c->mxu_rows * c->mxu_cols * c->mxus_per_core * c->cores_per_chip;
    return units > 0 ? c->peak_bf16_flops / units : 0;
}

double chp_core_peak_flops(const chp_chip *c)
{
    return c->cores_per_chip > 0 ? c->peak_bf16_flops / c->cores_per_chip : 0;
}

double chp_device_peak_flops(const chp_chip *c) { return chp_core_peak_flops(c) * c->cores_per_device; }

int64_t chp_device_hbm_bytes(const chp_chip *c)
{
    if (c->cores_per_chip <= 0 || c->cores_per_device <= 0) return c->hbm_bytes;
    int devices = c->cores_per_chip / c->cores_per_device;
    return devices > 0 ? c->hbm_bytes / devices : c->hbm_bytes;
}

double chp_vpu_ops(const chp_chip *c)
{
    return (double)c->vpu_sublanes * c->vpu_lanes * c->vpu_alus_per_lane * chp_mxu_clock_hz(c);
}

/* ---------------------------------------------------------------------------------------------------------
 * Validation of a chip's figures (built-ins are checked by the tests; chip files on load)
 * ------------------------------------------------------------------------------------------------------- */

tpu_status chp_chip_validate(tpu_ctx *ctx, const chp_chip *c, const char *what)
{
#define BAD(...) return ut_err(ctx, TPU_ERR_INVALID, __VA_ARGS__)
    if (!c->name[0]) BAD("%s: the chip needs a 'name'", what);
    if (c->generation < 2 || c->generation > 7) BAD("%s: 'tiling' must name a generation v2 ... v7", what);
    if (c->cores_per_chip < 1) BAD("%s: 'cores_per_chip' must be at least 1", what);
    if (c->cores_per_device < 1 || c->cores_per_chip % c->cores_per_device)
        BAD("%s: 'cores_per_device' (%d) must divide 'cores_per_chip' (%d)", what, c->cores_per_device,
            c->cores_per_chip);
    if (c->mxus_per_core < 1) BAD("%s: 'mxus_per_core' must be at least 1", what);
    if (c->mxu_rows < 1 || c->mxu_cols < 1) BAD("%s: 'mxu_rows' and 'mxu_cols' must be at least 1", what);
    if (!(c->peak_bf16_flops > 0) || !isfinite(c->peak_bf16_flops))
        BAD("%s: 'peak_bf16_tflops' must be positive", what);
    if (c->peak_int8_ops < 0 || c->peak_fp8_flops < 0) BAD("%s: peak rates must not be negative", what);
    if (c->clock_hz < 0) BAD("%s: 'clock_ghz' must not be negative", what);
    if (c->vpu_sublanes < 1 || c->vpu_lanes < 1 || c->vpu_alus_per_lane < 1)
        BAD("%s: the vector unit ('vpu_sublanes', 'vpu_lanes', 'vpu_alus_per_lane') must be at least 1", what);
    if (c->hbm_bytes <= 0) BAD("%s: 'hbm_gib' must be positive", what);
    int64_t dev = chp_device_hbm_bytes(c);
    if (c->hbm_reserved_bytes < 0 || c->hbm_reserved_bytes >= dev)
        BAD("%s: 'hbm_reserved_mib' must be at least 0 and less than the HBM of one device (%.2f GiB)", what,
            (double)dev / GiB);
    if (c->hbm_usable_bytes <= 0 || c->hbm_usable_bytes + c->hbm_reserved_bytes > dev)
        BAD("%s: 'hbm_usable_gib' (%.2f GiB) plus 'hbm_reserved_mib' must fit in the HBM of one device "
            "(%.2f GiB = hbm_gib x cores_per_device / cores_per_chip)", what,
            (double)c->hbm_usable_bytes / GiB, (double)dev / GiB);
    if (!(c->hbm_bw > 0)) BAD("%s: 'hbm_gb_s' must be positive", what);
    if (c->vmem_bytes <= 0) BAD("%s: 'vmem_mib' must be positive", what);
    if (c->cmem_bytes < 0 || c->smem_bytes < 0) BAD("%s: 'cmem_mib' and 'smem_kib' must not be negative", what);
    if (c->sparse_cores < 0) BAD("%s: 'sparse_cores' must not be negative", what);
    if (c->ici_links < 0 || c->ici_link_bw < 0) BAD("%s: 'ici_links' and 'ici_link_gb_s' must not be negative", what);
    if (c->ici_links > 0 && !(c->ici_link_bw > 0))
        BAD("%s: 'ici_link_gb_s' must be positive when the chip has ICI links", what);
    if (c->torus_dims != 2 && c->torus_dims != 3) BAD("%s: 'torus' must be \"2d\" or \"3d\"", what);
    if (c->max_pod_chips < 1) BAD("%s: 'max_pod_chips' must be at least 1", what);
    if (c->max_slice_chips < 1 || c->max_slice_chips > c->max_pod_chips)
        BAD("%s: 'max_slice_chips' (%d) must be between 1 and 'max_pod_chips' (%d)", what, c->max_slice_chips,
            c->max_pod_chips);
    if (c->torus_dims == 2) {
        if (c->pod_dims[0] < 1 || c->pod_dims[1] < 1)
            BAD("%s: a 2-D chip needs 'pod_dims' [x, y] (where the torus wraps around)", what);
        if ((int64_t)c->pod_dims[0] * c->pod_dims[1] != c->max_pod_chips)
            BAD("%s: 'pod_dims' %dx%d hold %lld chips but 'max_pod_chips' is %d", what, c->pod_dims[0],
                c->pod_dims[1], (long long)c->pod_dims[0] * c->pod_dims[1], c->max_pod_chips);
    } else if (c->cube < 1) {
        BAD("%s: a 3-D chip needs 'cube' (chips per side of a wrap-capable block, 4 on v4/v5p/v7)", what);
    }
    if (c->chips_per_host < 1 || c->chips_per_host_multi < 1 || c->chips_per_host_multi > c->chips_per_host)
        BAD("%s: 'chips_per_host' and 'chips_per_host_multi' must be at least 1, and multi-host slices cannot "
            "put more chips on a host than single-host ones", what);
    if (c->host_bw < 0) BAD("%s: 'host_gb_s' must not be negative", what);
    if (c->dcn_host_bw < 0) BAD("%s: 'dcn_gb_s_per_host' must not be negative", what);
    if (c->pcie_gen < 0) BAD("%s: 'pcie_gen' must not be negative", what);
    if (c->op_overhead_s < 0 || !isfinite(c->op_overhead_s)) BAD("%s: 'op_overhead_us' must not be negative", what);
    if (c->mxu_efficiency < 0 || c->mxu_efficiency > 1 || !isfinite(c->mxu_efficiency))
        BAD("%s: 'mxu_efficiency' must be between 0 and 1", what);
    return TPU_OK;
#undef BAD
}

/* ---------------------------------------------------------------------------------------------------------
 * Slices
 * ------------------------------------------------------------------------------------------------------- */

/* Most cube-like a <= b <= c with a*b*c == k: smallest c - a, then smallest c. */
static void chp_cube_factor(int k, int out[3])
{
    int best[3] = {1, 1, k};
    for (int a = 1; a * a * a <= k; a++) {
        if (k % a) continue;
        for (int b = a; a * b * b <= k; b++) {
            if ((k / a) % b) continue;
            int c = k / a / b;
            if (c - a < best[2] - best[0] || (c - a == best[2] - best[0] && c < best[2])) {
                best[0] = a;
                best[1] = b;
                best[2] = c;
            }
        }
    }
    memcpy(out, best, sizeof best);
}

static void chp_slice_finish(chp_slice *s)
{
    const chp_chip *c = &s->chip;
    s->chips = 1;
    for (int i = 0; i < s->ndims; i++) s->chips *= s->dims[i];
    s->cores = s->chips * c->cores_per_chip;
    s->devices = s->cores / c->cores_per_device;
    s->hosts = s->chips <= c->chips_per_host ? 1 : (s->chips + c->chips_per_host_multi - 1) / c->chips_per_host_multi;
    for (int i = 0; i < CHP_MAX_DIMS; i++) s->wrap[i] = false;
    if (s->chips == 1) return;
    if (c->torus_dims == 2) {
        /* Links wrap around only along a full side of the pod ([SCALE]: "smaller topologies can be requested
         * without wraps on dims < 16"; "a TPU v5e 8x16 will have a wraparound on the longer axis"). */
        bool square = c->pod_dims[0] == c->pod_dims[1];
        for (int i = 0; i < 2; i++) s->wrap[i] = s->dims[i] == c->pod_dims[square ? 0 : i];
    } else {
        /* Whole 4x4x4 cubes get wraparound links from the optical switches; smaller slices are meshes
         * ([SCALE]; [DOC-v4]: 3-D torus "where each dimension is a multiple of 4"). */
        bool whole = true;
        for (int i = 0; i < 3; i++) whole = whole && s->dims[i] % c->cube == 0;
        for (int i = 0; i < 3; i++) s->wrap[i] = whole;
    }
}

static void chp_slice_set_name(chp_slice *s, bool single_by_name)
{
    const chp_chip *c = &s->chip;
    if (c->builtin && !single_by_name) {
        snprintf(s->name, sizeof s->name, "%s-%d", c->cloud_prefix, c->names_count_cores ? s->cores : s->chips);
    } else if (s->chips == 1) {
        snprintf(s->name, sizeof s->name, "%s", c->name);
    } else if (s->ndims == 2) {
        snprintf(s->name, sizeof s->name, "%s:%dx%d", c->name, s->dims[0], s->dims[1]);
    } else {
        snprintf(s->name, sizeof s->name, "%s:%dx%dx%d", c->name, s->dims[0], s->dims[1], s->dims[2]);
    }
}

tpu_status chp_slice_make_dims(tpu_ctx *ctx, const chp_chip *chip, int ndims, const int *dims, chp_slice *out)
{
    if (ndims != chip->torus_dims)
        return ut_err(ctx, TPU_ERR_INVALID, "%s: a topology needs %d dimensions (the chips form a %d-D torus), "
                      "got %d", chip->name, chip->torus_dims, chip->torus_dims, ndims);
    int64_t n = 1;
    for (int i = 0; i < ndims; i++) {
        if (dims[i] < 1 || dims[i] > 1 << 16)
            return ut_err(ctx, TPU_ERR_INVALID, "%s: topology dimension %d must be a positive chip count, got %d",
                          chip->name, i, dims[i]);
        n *= dims[i];
    }
    if (n > chip->max_slice_chips)
        return ut_err(ctx, TPU_ERR_INVALID, "%s: a topology of %lld chips is larger than the largest slice (%d chips)",
                      chip->name, (long long)n, chip->max_slice_chips);
    if (ndims == 2) {
        int a = UT_MIN(dims[0], dims[1]), b = UT_MAX(dims[0], dims[1]);
        int pa = UT_MIN(chip->pod_dims[0], chip->pod_dims[1]), pb = UT_MAX(chip->pod_dims[0], chip->pod_dims[1]);
        if (a > pa || b > pb)
            return ut_err(ctx, TPU_ERR_INVALID, "%s: topology %dx%d does not fit in the %dx%d pod", chip->name,
                          dims[0], dims[1], chip->pod_dims[0], chip->pod_dims[1]);
    } else {
        bool whole = true, small = true;
        for (int i = 0; i < 3; i++) {
            whole = whole && dims[i] % chip->cube == 0;
            small = small && dims[i] <= chip->cube;
        }
        if (!whole && !small)
            return ut_err(ctx, TPU_ERR_INVALID, "%s: topology %dx%dx%d is neither inside one %dx%dx%d cube nor made "
                          "of whole cubes (each side a multiple of %d)", chip->name, dims[0], dims[1], dims[2],
                          chip->cube, chip->cube, chip->cube, chip->cube);
    }
    memset(out, 0, sizeof *out);
    out->chip = *chip;
    out->ndims = ndims;
    for (int i = 0; i < ndims; i++) out->dims[i] = dims[i];
    chp_slice_finish(out);
    chp_slice_set_name(out, !chip->builtin);
    return TPU_OK;
}

/* The documented topology for `chips` chips of a built-in generation; 0 if that size is not offered. */
static int chp_gen_shape(const chp_gen *g, int chips, int dims[CHP_MAX_DIMS])
{
    for (int i = 0; i < g->nshapes; i++)
        if (g->shapes[i].chips == chips) {
            memcpy(dims, g->shapes[i].dims, sizeof g->shapes[i].dims);
            return 1;
        }
    const chp_chip *c = &g->chip;
    if (c->torus_dims != 3) return 0;
    int cube_chips = c->cube * c->cube * c->cube;
    if (chips < cube_chips || chips % cube_chips || chips > c->max_slice_chips) return 0;
    int f[3];
    chp_cube_factor(chips / cube_chips, f);
    for (int i = 0; i < 3; i++) dims[i] = f[i] * c->cube;
    return 1;
}

/* "8, 32, 64 and 128 cores" or, for 3-D generations, the sub-cube list and the cube rule. */
static void chp_sizes_text(const chp_gen *g, char *buf, size_t size)
{
    const chp_chip *c = &g->chip;
    int unit = c->names_count_cores ? c->cores_per_chip : 1;
    const char *what = c->names_count_cores ? "cores" : "chips";
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < g->nshapes && n < size; i++) {
        const char *sep = i == 0 ? "" : i == g->nshapes - 1 && c->torus_dims == 2 ? " and " : ", ";
        n += (size_t)snprintf(buf + n, size - n, "%s%d", sep, g->shapes[i].chips * unit);
    }
    if (n >= size) return;
    if (c->torus_dims == 2) {
        snprintf(buf + n, size - n, " %s", what);
    } else {
        int cube_chips = c->cube * c->cube * c->cube;
        snprintf(buf + n, size - n, " %s, then whole %dx%dx%d cubes: multiples of %d %s up to %d", what, c->cube,
                 c->cube, c->cube, cube_chips * unit, what, c->max_slice_chips * unit);
    }
}

tpu_status chp_slice_make(tpu_ctx *ctx, const chp_chip *chip, int chips, chp_slice *out)
{
    const chp_gen *g = chp_gen_of(chip);
    int dims[CHP_MAX_DIMS] = {1, 1, 1};
    if (chips == 1) {
        /* one chip, asked for by generation: always allowed */
    } else if (g) {
        if (!chp_gen_shape(g, chips, dims)) {
            char sizes[256];
            chp_sizes_text(g, sizes, sizeof sizes);
            return ut_err(ctx, TPU_ERR_INVALID, "%s: no slice of %d chips; %s slices come in %s", chip->name, chips,
                          chip->name, sizes);
        }
    } else {
        /* a chip file: most square / cube-like factorization within the rules */
        if (chip->torus_dims == 2) {
            int a = 1;
            for (int d = 1; d * d <= chips; d++)
                if (chips % d == 0) a = d;
            dims[0] = a;
            dims[1] = chips / a;
        } else {
            int cube_chips = chip->cube * chip->cube * chip->cube;
            int f[3];
            if (chips % cube_chips == 0) {
                chp_cube_factor(chips / cube_chips, f);
                for (int i = 0; i < 3; i++) dims[i] = f[i] * chip->cube;
            } else {
                chp_cube_factor(chips, f);
                memcpy(dims, f, sizeof f);
            }
        }
    }
    tpu_status st = chp_slice_make_dims(ctx, chip, chip->torus_dims, dims, out);
    if (st) return st;
    chp_slice_set_name(out, chips == 1 || !chip->builtin);
    return TPU_OK;
}

static int chp_is_file_name(const char *name)
{
    size_t n = strlen(name);
    return strchr(name, '/') || (n >= 5 && chp_ieq(name + n - 5, 5, ".json"));
}

/* "NxSLICE": N slices joined over the data-center network (Cloud TPU Multislice). */
static tpu_status chp_multislice_parse(tpu_ctx *ctx, const char *name, const char *x, chp_slice *out)
{
    long n = strtol(name, NULL, 10);
    tpu_status st = chp_slice_parse(ctx, x + 1, out);
    if (st) return st;
    if (n < 1 || n > 4096)
        return ut_err(ctx, TPU_ERR_INVALID, "%s: a multislice joins 1 to 4096 slices, not %ld", name, n);
    if (n > 1 && out->chip.dcn_host_bw <= 0)
        return ut_err(ctx, TPU_ERR_INVALID, "%s: %s slices cannot be joined over the data-center network (Cloud TPU "
                      "Multislice runs on v4 and later)", name, out->chip.name);
    if ((int64_t)out->devices * n > 1 << 20)
        return ut_err(ctx, TPU_ERR_INVALID, "%s: %lld devices are more than tpusim models", name, (long long)out->devices * n);
    out->nslices = (int)n;
    out->chips *= (int)n;
    out->cores *= (int)n;
    out->devices *= (int)n;
    out->hosts *= (int)n;
    if (n > 1) {
        char base[sizeof out->name];
        snprintf(base, sizeof base, "%s", out->name);
        snprintf(out->name, sizeof out->name, "%ldx%s", n, base);
    }
    return TPU_OK;
}

tpu_status chp_slice_parse(tpu_ctx *ctx, const char *name, chp_slice *out)
{
    if (!name || !*name) return ut_err(ctx, TPU_ERR_INVALID, "no chip given: name a generation (v2 ... v7), a "
                                       "slice such as v3-8 or v5litepod-16, or a chip file ending in .json");
    if (chp_is_file_name(name)) return chp_chip_load(ctx, name, out);
    const char *x = name;
    while (isdigit((unsigned char)*x)) x++;
    if (x > name && *x == 'x' && x[1]) return chp_multislice_parse(ctx, name, x, out);
    size_t len = strlen(name);
    const chp_gen *g = chp_gen_lookup(name, len);
    if (g) return chp_slice_make(ctx, &g->chip, 1, out);

    /* GEN-N: N after the last '-', all digits */
    const char *dash = strrchr(name, '-');
    const char *num = dash ? dash + 1 : NULL;
    bool digits = num && *num;
    for (const char *p = num; digits && *p; p++) digits = isdigit((unsigned char)*p);
    if (digits) g = chp_gen_lookup(name, (size_t)(dash - name));
    if (!g) {
        char known[256];
        size_t n = 0;
        for (int i = 0; i < UT_ARRAY_LEN(chp_gens) && n < sizeof known; i++) {
            const chp_chip *c = &chp_gens[i].chip;
            n += (size_t)snprintf(known + n, sizeof known - n, "%s%s", i ? ", " : "", c->name);
            if (n < sizeof known && strcmp(c->name, c->cloud_prefix))
                n += (size_t)snprintf(known + n, sizeof known - n, " (%s)", c->cloud_prefix);
        }
        return ut_err(ctx, TPU_ERR_INVALID, "unknown chip '%s': known generations are %s; slices are named like "
                      "v3-8, v4-64, v5litepod-16, v6e-8, tpu7x-8; or give a chip file ending in .json", name, known);
    }
    const chp_chip *c = &g->chip;
    int unit = c->names_count_cores ? c->cores_per_chip : 1;
    const char *what = c->names_count_cores ? "TensorCores" : "chips";
    char sizes[256];
    chp_sizes_text(g, sizes, sizeof sizes);
    if (num[0] == '0' || strlen(num) > 7)
        return ut_err(ctx, TPU_ERR_INVALID, "%s: '%s' is not a slice size; %s slices come in %s", name, num, c->name,
                      sizes);
    int n = atoi(num);
    if (n % unit)
        return ut_err(ctx, TPU_ERR_INVALID, "%s: %s slice names count %s (%d per chip), so %d is not a whole number "
                      "of chips; %s slices come in %s", name, c->cloud_prefix, what, unit, n, c->name, sizes);
    int chips = n / unit;
    int dims[CHP_MAX_DIMS];
    if (!chp_gen_shape(g, chips, dims) ||
        (chips == 1 && !(g->nshapes && g->shapes[0].chips == 1)))
        return ut_err(ctx, TPU_ERR_INVALID, "%s: %s slices come in %s", name, c->name, sizes);
    tpu_status st = chp_slice_make_dims(ctx, c, c->torus_dims, dims, out);
    if (st) return st;
    chp_slice_set_name(out, false);
    return TPU_OK;
}

const char *chp_device_desc(const chp_chip *c)
{
    if (c->cores_per_device > 1) return "chip (megacore: its TensorCores run one program)";
    if (c->cores_per_chip == 1) return "chip (1 TensorCore)";
    if (c->generation >= 7) return "chiplet (1 TensorCore)";
    return "TensorCore";
}
