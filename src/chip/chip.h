/* chip.h — the TPU chip and slice models as data (design §5, §6, §7). Names start with chp_.
 *
 * A chp_chip describes one chip of a TPU generation: its cores and matrix units, its memories, its links, and
 * the tiling rules its compiler uses for arrays in HBM. A chp_slice is a set of those chips as Cloud TPU
 * rents them ("v3-32", "v5litepod-16", "tpu7x-128"): how many chips, cores and hosts, and the torus they form.
 * The built-in generations live in one table in chip.c, each constant with its public source; hypothetical
 * chips come from JSON files (docs/chips.md). The compiler and the timing model read these structs directly:
 *
 *     chp_slice s;
 *     if (chp_slice_parse(ctx, "v5litepod-16", &s) != TPU_OK) return ...;   // or "v3-8", "v6e", "my.json"
 *     int64_t cap = s.chip.hbm_usable_bytes;                                 // per device, for the OOM check
 *     int64_t b = chp_padded_bytes(&s.chip, TPU_S32, 2, dims, m2m);         // bytes in HBM with tiling
 *
 * Vocabulary. A TensorCore ("core") runs one instruction stream. A "device" is what one compiled program
 * drives: a core on v2, v3 and v7 (TPU7x shows each of its two chiplets as a device), a whole chip on the
 * "megacore" chips v4 and v5p, and the one core of v5e and v6e. Figures below say per chip, per core or per
 * device; bandwidths are bytes per second; sizes are bytes. */
#ifndef TPU_CHIP_H
#define TPU_CHIP_H

#include "util/util.h"
#include <stdbool.h>
#include <stdint.h>

#define CHP_NAME_MAX 48
#define CHP_MAX_DIMS 3

/* ---- tiling of arrays in HBM (design §5) ----
 * One row of the one tiling table (chip.c, chp_tile_rules): how arrays of one element width are tiled on a
 * range of generations. A rank>=2 array is padded so that its second-minor dimension (minor_to_major[1]) is
 * a multiple of `rows` and its minor dimension (minor_to_major[0]) a multiple of `cols`; XLA writes that
 * tile as T(rows,cols), followed by (pack,1) when `pack` narrow elements share one 32-bit word. A rank-1
 * array (and a scalar, which XLA tiles like an array of one element) is padded to a multiple of its 1-D tile:
 * the next power of two of its length, clamped to [min_1d, max_1d]; XLA writes T(n) or T(n)(128)(pack,1). */
typedef struct chp_tile_rule {
    int         first_gen, last_gen;  /* generations (2..7) the row applies to, inclusive */
    int         bits;                 /* element width the row covers: 64 (also wider), 32, 16, 8, 4, 2 */
    int         rows, cols;           /* 2-D tile over (second-minor, minor) */
    int         pack;                 /* elements per 32-bit word inside the tile: the (pack,1) sub-tile */
    int         min_1d, max_1d;       /* 1-D tile bounds in elements */
    const char *source;               /* where the rule comes from */
} chp_tile_rule;

/* ---- the chip ---- */
typedef struct chp_chip {
    /* identity */
    char        name[CHP_NAME_MAX];   /* generation as tpusim spells it ("v2" ... "v7") or a chip file's name */
    char        cloud_prefix[16];     /* accelerator-type prefix Cloud TPU uses: "v2", "v5litepod", "tpu7x" */
    int         generation;           /* 2..7: picks this chip's rows of the tiling table */
    bool        names_count_cores;    /* slice names count TensorCores (v2, v3, v4, v5p, tpu7x), else chips */
    bool        builtin;              /* from the built-in table (false: a chip file) */

    /* compute */
    int         cores_per_chip;       /* TensorCores per chip */
    int         cores_per_device;     /* TensorCores one compiled program drives: 2 on megacore chips, else 1 */
    int         mxus_per_core;        /* matrix units (MXUs) per TensorCore */
    int         mxu_rows, mxu_cols;   /* systolic array shape of one MXU (128x128, or 256x256 from v6e) */
    double      peak_bf16_flops;      /* bf16 FLOP/s per chip (a multiply-add counts 2); the primary figure */
    double      peak_int8_ops;        /* int8 OP/s per chip; 0 = not public or no int8 path */
    double      peak_fp8_flops;       /* fp8 FLOP/s per chip as published; 0 = not published */
    double      clock_hz;             /* MXU clock where public; 0 = unknown (chp_mxu_clock_hz derives one) */
    int         vpu_sublanes;         /* vector unit shape per core: 8 sublanes ... */
    int         vpu_lanes;            /* ... x 128 lanes */
    int         vpu_alus_per_lane;    /* ALU operations per (sublane, lane) per cycle */

    /* memory */
    int64_t     hbm_bytes;            /* HBM per chip */
    int64_t     hbm_usable_bytes;     /* HBM one device's program may use: the "of X hbm" of the OOM report */
    int64_t     hbm_reserved_bytes;   /* per device, held back by the runtime: the report's "reserved" line */
    double      hbm_bw;               /* HBM bandwidth per chip, bytes/s */
    int64_t     vmem_bytes;           /* vector memory per core */
    int64_t     vmem_temp_bytes;      /* VMEM the compiler's memory-space assignment may give a program's
                                       * temporaries, per device (VMEM less the scoped share its kernels keep);
                                       * 0: temporaries stay in HBM (v2-v4) */
    int         mxu_recompute_operands; /* 1: an elementwise value several matmuls read is recomputed in each of
                                       * them (libtpu on v5e); 0: written to HBM once when it combines two or
                                       * more full-size arrays (v3, v4); 2: recomputed only where every reading
                                       * matmul computes at least mxu_cols columns per element (v5p, v6e, v7) */
    int64_t     cmem_bytes;           /* common memory per chip (v4); 0 = none */
    int64_t     smem_bytes;           /* scalar memory per core */
    int         sparse_cores;         /* SparseCores per chip (embedding accelerators); 0 = none */

    /* interconnect and system */
    int         ici_links;            /* inter-chip (ICI) links per chip */
    double      ici_link_bw;          /* bytes/s per link, per direction */
    int         torus_dims;           /* 2: chips form a 2-D torus (pods of v2, v3, v5e, v6e); 3: a 3-D torus */
    int         pod_dims[CHP_MAX_DIMS]; /* 2-D: the pod's shape, links wrap around only along a full side */
    int         cube;                 /* 3-D: side of the optical-switch building block (4: 4x4x4 chips);
                                       * slices made of whole cubes are tori, smaller ones are meshes */
    int         max_pod_chips;        /* chips in a full pod */
    int         max_slice_chips;      /* largest slice one job can get */
    int         chips_per_host;       /* chips on one host (VM) in a single-host slice */
    int         chips_per_host_multi; /* chips per host (VM) in multi-host slices */
    double      host_bw;              /* host <-> device bytes/s per chip, each way; 0 = unknown */
    double      dcn_host_bw;          /* data-center network bytes/s per host, each way (multislice traffic
                                       * between slices); 0 = slices cannot be joined (v2, v3) */
    int         pcie_gen;             /* PCIe generation of that link; 0 = not public */
    double      op_overhead_s;        /* fixed time per launched op (fusion) on top of its roofline time */
    double      mxu_efficiency;       /* share of the MXU's peak XLA's matmul code sustains on large GEMMs (published
                                       * sweeps, docs/timing.md); MXU time is divided by it. 0 means 1 */

    const char *source;               /* the main public documents the figures come from */
    const char *note;                 /* doubts and disagreements between sources, or NULL */
} chp_chip;

/* ---- the slice ---- */
typedef struct chp_slice {
    chp_chip chip;                    /* the chip every member of the slice is (a copy: no lifetime ties) */
    char     name[CHP_NAME_MAX + 16]; /* as Cloud TPU spells it ("v3-32", "v5litepod-16"); a chip's name alone
                                       * for a single chip asked for by generation ("v5e") or by file */
    int      chips;                   /* chips in the slice */
    int      cores;                   /* TensorCores in the slice */
    int      devices;                 /* devices (program instances) in the slice */
    int      hosts;                   /* hosts (Cloud TPU VMs) */
    int      ndims;                   /* 2 or 3 */
    int      dims[CHP_MAX_DIMS];      /* topology in chips, e.g. 4x4 or 2x4x4 */
    bool     wrap[CHP_MAX_DIMS];      /* links wrap around along that dimension (a ring, not a line) */
    int      nslices;                 /* multislice ("2xv5p-256"): that many slices of dims joined over the
                                       * data-center network; chips, cores, devices and hosts count all of
                                       * them (0 or 1: one slice) */
} chp_slice;

/* Slices of a (multi)slice: at least 1. */
static inline int chp_nslices(const chp_slice *s) { return s->nslices > 1 ? s->nslices : 1; }

/* The public handle is a slice (tpusim.h: tpu_chip). */
struct tpu_chip {
    chp_slice s;
};

/* ---- built-in generations ---- */
int             chp_num_generations(void);
const chp_chip *chp_generation_at(int i);              /* 0 .. chp_num_generations()-1, oldest first */
/* By name or alias ("v5e", "v5litepod", "tpu7x", "ironwood", case-insensitive); NULL if unknown. */
const chp_chip *chp_generation_find(const char *name);

/* ---- slices ----
 * Parses "v3-32" (TensorCores), "v5litepod-16" / "v5e-16" / "v6e-8" (chips), "v5p-128", "tpu7x-8" (cores),
 * "NxSLICE" (N slices joined over the data-center network: Cloud TPU Multislice, v4 and later),
 * a bare generation ("v4": one chip), or a chip file ("path/chip.json" or any name ending in .json or
 * holding a '/'). Sizes are checked against what the generation offers; errors name the problem. */
tpu_status chp_slice_parse(tpu_ctx *ctx, const char *name, chp_slice *out);
/* A slice of `chips` chips of `chip` with its documented (or most cube-like) topology. */
tpu_status chp_slice_make(tpu_ctx *ctx, const chp_chip *chip, int chips, chp_slice *out);
/* A slice of the given topology (chips per dimension; ndims must match the chip's torus). */
tpu_status chp_slice_make_dims(tpu_ctx *ctx, const chp_chip *chip, int ndims, const int *dims, chp_slice *out);

/* ---- chip files (docs/chips.md) ----
 * `what` names the text in messages (the file name). */
tpu_status chp_chip_load(tpu_ctx *ctx, const char *path, chp_slice *out);
tpu_status chp_chip_parse_json(tpu_ctx *ctx, const char *text, size_t len, const char *what, chp_slice *out);
/* Checks a chip's figures for sanity (positive, consistent); messages name the field. */
tpu_status chp_chip_validate(tpu_ctx *ctx, const chp_chip *c, const char *what);

/* What one device of the chip is, for reports: "chip (megacore: 2 TensorCores)" on v4 and v5p,
 * "chip (1 TensorCore)" on v5e and v6e, "TensorCore" on v2 and v3, "chiplet (1 TensorCore)" on TPU7x. */
const char *chp_device_desc(const chp_chip *c);

/* ---- derived figures ---- */
/* The MXU clock: clock_hz where public, else peak_bf16 / (2 x rows x cols x MXUs x cores). */
double  chp_mxu_clock_hz(const chp_chip *c);
/* bf16 FLOP/s of one TensorCore and of one device. */
double  chp_core_peak_flops(const chp_chip *c);
double  chp_device_peak_flops(const chp_chip *c);
/* HBM per device (chip HBM shared out over its devices). */
int64_t chp_device_hbm_bytes(const chp_chip *c);
/* Vector unit element operations per second per core (sublanes x lanes x ALUs x clock). */
double  chp_vpu_ops(const chp_chip *c);

/* ---- tiling ----
 * The tile rule for an element type on this chip (NULL chip: the v2..v6e defaults); NULL for non-arrays. */
const chp_tile_rule *chp_tile_rule_for(const chp_chip *c, tpu_dtype dtype);
/* Bytes of an array in HBM with the chip's tiling, and as a dense array. m2m is minor_to_major (NULL: the
 * default rank-1 ... 0). Returns 0 for non-array types, INT64_MAX if the size overflows. */
int64_t chp_padded_bytes(const chp_chip *c, tpu_dtype dtype, int rank, const int64_t *dims, const int *m2m);
int64_t chp_unpadded_bytes(tpu_dtype dtype, int rank, const int64_t *dims);
/* The tiling as XLA prints it inside a layout: "T(8,128)", "T(8,128)(2,1)", "T(1024)", "T(256)(128)(2,1)".
 * Writes "" for non-array types. */
void    chp_tile_str(const chp_chip *c, tpu_dtype dtype, int rank, const int64_t *dims, char *buf, size_t size);
/* Same for an array with its minor_to_major (the tile rows depend on the second-minor dimension's size). */
void    chp_tile_str_m2m(const chp_chip *c, tpu_dtype dtype, int rank, const int64_t *dims, const int *m2m, char *buf,
                         size_t size);

/* ---- printing (tpusim chips) ---- */
void chp_print_table(ut_buf *b, int json);
void chp_print_slice(ut_buf *b, const chp_slice *s, int json);

#endif
