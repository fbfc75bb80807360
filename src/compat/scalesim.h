/* scalesim.h — SCALE-Sim compatible layer mode, internal interface (ss_*). docs/scalesim.md is the user's
 * guide and lists every SCALE-Sim 3.0.0 behaviour we reproduce on purpose.
 *
 *   scalesim_parse.c   .cfg (v2 and v3) and topology .csv (conv and GEMM) readers
 *   scalesim_mem.c     the layer simulation: SCALE-Sim's demand streams (from timing/systolic.h) served by
 *                      its double-buffered SRAM model, CALC and USER bandwidth modes, stall accounting
 *   scalesim.c         report writers (Python float formatting) and tpu_scalesim_run()
 */
#ifndef TPU_COMPAT_SCALESIM_H
#define TPU_COMPAT_SCALESIM_H

#include "tpusim.h"
#include "timing/systolic.h"
#include <stdbool.h>

#define SS_MAX_BANDWIDTHS 16

typedef struct ss_config {
    char    *run_name;          /* [general] run_name: the report directory's name */
    int64_t  array_rows, array_cols;
    int64_t  ifmap_kb, filter_kb, ofmap_kb;     /* SRAM sizes in kB (1 word = 1 byte) */
    int64_t  ifmap_offset, filter_offset, ofmap_offset;
    tim_dataflow df;
    bool     user_bw;           /* [run_presets] InterfaceBandwidth: USER (true) or CALC */
    int64_t  bandwidth[SS_MAX_BANDWIDTHS];      /* [architecture_presets] Bandwidth (words/cycle) */
    int      nbandwidth;
    int64_t  read_req_buf, write_req_buf;       /* read and kept; only Ramulator runs use them */
    bool     ramulator;         /* UseRamulatorTrace */
    bool     has_layout;        /* a [layout] section was present (a v3 file) */
    bool     ifmap_custom_layout, filter_custom_layout;
    int64_t  ifmap_bank_bw, ifmap_bank_num, ifmap_bank_port;
    int64_t  filter_bank_bw, filter_bank_num, filter_bank_port;
    bool     sparsity;          /* [sparsity] SparsitySupport */
    char    *topology_path;     /* [network_presets] TopologyCsvLoc, or NULL */
} ss_config;

void       ss_config_init(ss_config *c);     /* SCALE-Sim's defaults */
void       ss_config_free(ss_config *c);
/* Parses config text; `filename` is used in messages ("scale.cfg:12: ..."). */
tpu_status ss_config_parse(tpu_ctx *ctx, const char *text, size_t len, const char *filename, ss_config *out);
tpu_status ss_config_load(tpu_ctx *ctx, const char *path, ss_config *out);

typedef struct ss_layer {
    char   *name;
    int     line;               /* line in the topology file */
    int64_t ifmap_h, ifmap_w, filter_h, filter_w, channels, filters, stride_h, stride_w;
} ss_layer;

typedef struct ss_topology {
    ss_layer *layers;
    int       n, cap;
} ss_topology;

/* gemm: rows are "name, M, N, K" (SCALE-Sim -i gemm), mapped as SCALE-Sim does to a conv with an
 * M x K ifmap, a 1 x K filter, one channel and N filters. Otherwise conv rows. Depth-wise layers (a name
 * containing "DP") expand into one layer per channel, as in SCALE-Sim. */
tpu_status ss_topology_parse(tpu_ctx *ctx, const char *text, size_t len, const char *filename, bool gemm,
                             ss_topology *out);
tpu_status ss_topology_load(tpu_ctx *ctx, const char *path, bool gemm, ss_topology *out);
void       ss_topology_free(ss_topology *t);

/* One layer's report items, with SCALE-Sim's names and units. Cycle values SCALE-Sim prints as floats are
 * kept as integers (they are whole numbers) and printed with ".0". */
typedef struct ss_layer_result {
    /* COMPUTE_REPORT.csv */
    int64_t overall_cycles;     /* Total Cycles (incl. prefetch) */
    int64_t total_cycles;       /* Total Cycles */
    int64_t stall_cycles;       /* Stall Cycles */
    double  overall_util;       /* Overall Util % */
    double  mapping_eff;        /* Mapping Efficiency % */
    double  compute_util;       /* Compute Util % */
    /* BANDWIDTH_REPORT.csv (words/cycle) */
    double  ifmap_sram_bw, filter_sram_bw, ofmap_sram_bw;
    double  ifmap_dram_bw, filter_dram_bw, ofmap_dram_bw;
    /* DETAILED_ACCESS_REPORT.csv */
    int64_t ifmap_sram_start, ifmap_sram_stop, ifmap_sram_reads;
    int64_t filter_sram_start, filter_sram_stop, filter_sram_reads;
    int64_t ofmap_sram_start, ofmap_sram_stop, ofmap_sram_writes;
    int64_t ifmap_dram_start, ifmap_dram_stop, ifmap_dram_reads;
    int64_t filter_dram_start, filter_dram_stop, filter_dram_reads;
    int64_t ofmap_dram_start, ofmap_dram_stop, ofmap_dram_writes;
    /* extra (not in SCALE-Sim's reports) */
    tim_systolic_result sys;    /* the closed-form model of this layer */
} ss_layer_result;

/* Simulates one layer the way SCALE-Sim 3.0.0 does. */
tpu_status ss_simulate_layer(tpu_ctx *ctx, const ss_config *cfg, const ss_layer *layer, ss_layer_result *out);

/* Python's repr() of a double ("5.886", "100.0", "1e-05"): SCALE-Sim writes str(float). buf >= 32. */
void ss_format_float(double x, char *buf, size_t size);

/* Writes COMPUTE_REPORT.csv, BANDWIDTH_REPORT.csv and DETAILED_ACCESS_REPORT.csv into dir. */
tpu_status ss_write_reports(tpu_ctx *ctx, const char *dir, const ss_layer_result *res, int n);

#endif
