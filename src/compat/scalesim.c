/* scalesim.c — SCALE-Sim compatible layer mode: the report writers and tpu_scalesim_run(). */
#include "compat/scalesim.h"
#include "util/util.h"
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Python's float repr: the shortest digits that read back to x; fixed notation when the decimal exponent
 * is in [-4, 16), else d.ddde+XX; a whole number keeps ".0". numpy's str(float64) agrees. */
void ss_format_float(double x, char *buf, size_t size)
{
    if (isnan(x)) { snprintf(buf, size, "nan"); return; }
    if (isinf(x)) { snprintf(buf, size, x < 0 ? "-inf" : "inf"); return; }
    if (x == 0) { snprintf(buf, size, signbit(x) ? "-0.0" : "0.0"); return; }
    char tmp[40];
    int p;
    for (p = 1; p < 17; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, x);
        if (strtod(tmp, NULL) == x) break;
    }
    if (p == 17) snprintf(tmp, sizeof tmp, "%.16e", x);
    /* tmp: [-]d[.ddd]e[+-]XX */
    const char *s = tmp;
    int neg = *s == '-';
    if (neg) s++;
    char digits[24];
    int nd = 0;
    for (; *s && *s != 'e'; s++)
        if (*s != '.') digits[nd++] = *s;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    int e10 = atoi(s + 1), decpt = e10 + 1;
    char out[64];
    int o = 0;
    if (neg) out[o++] = '-';
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = 0; i < -decpt; i++) out[o++] = '0';
            for (int i = 0; i < nd; i++) out[o++] = digits[i];
        } else if (decpt >= nd) {
            for (int i = 0; i < nd; i++) out[o++] = digits[i];
            for (int i = nd; i < decpt; i++) out[o++] = '0';
            out[o++] = '.';
            out[o++] = '0';
        } else {
            for (int i = 0; i < nd; i++) {
                if (i == decpt) out[o++] = '.';
                out[o++] = digits[i];
            }
        }
        out[o] = 0;
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (int i = 1; i < nd; i++) out[o++] = digits[i];
        }
        snprintf(out + o, sizeof out - (size_t)o, "e%c%02d", e10 < 0 ? '-' : '+', e10 < 0 ? -e10 : e10);
    }
    snprintf(buf, size, "%s", out);
}

/* A value SCALE-Sim prints as a numpy float although it is a whole number ("33.0"). */
static void ss_put_cycle(ut_buf *b, int64_t v)
{
    char t[48];
    ss_format_float((double)v, t, sizeof t);
    ut_buf_printf(b, ", %s", t);
}

static void ss_put_float(ut_buf *b, double v)
{
    char t[48];
    ss_format_float(v, t, sizeof t);
    ut_buf_printf(b, ", %s", t);
}

static void ss_put_int(ut_buf *b, int64_t v) { ut_buf_printf(b, ", %lld", (long long)v); }

static tpu_status ss_write_file(tpu_ctx *ctx, const char *dir, const char *name, ut_buf *b)
{
    if (b->failed) return ut_nomem(ctx);
    ut_buf path;
    ut_buf_init(&path);
    ut_buf_printf(&path, "%s/%s", dir, name);
    if (path.failed) return ut_nomem(ctx);
    tpu_status st = ut_write_file(ctx, path.data, b->data, b->len, 0);
    ut_buf_free(&path);
    return st;
}

tpu_status ss_write_reports(tpu_ctx *ctx, const char *dir, const ss_layer_result *res, int n)
{
    ut_buf c, bw, d;
    ut_buf_init(&c);
    ut_buf_init(&bw);
    ut_buf_init(&d);
    /* Headers exactly as simulator.py writes them (spaces and trailing commas included). */
    ut_buf_puts(&c, "LayerID, Total Cycles (incl. prefetch), Total Cycles, Stall Cycles, Overall Util %, "
                    "Mapping Efficiency %, Compute Util %,\n");
    ut_buf_puts(&bw, "LayerID, Avg IFMAP SRAM BW, Avg FILTER SRAM BW, Avg OFMAP SRAM BW, Avg IFMAP DRAM BW, "
                     "Avg FILTER DRAM BW, Avg OFMAP DRAM BW,\n");
    ut_buf_puts(&d, "LayerID, SRAM IFMAP Start Cycle, SRAM IFMAP Stop Cycle, SRAM IFMAP Reads, "
                    "SRAM Filter Start Cycle, SRAM Filter Stop Cycle, SRAM Filter Reads, "
                    "SRAM OFMAP Start Cycle, SRAM OFMAP Stop Cycle, SRAM OFMAP Writes, "
                    "DRAM IFMAP Start Cycle, DRAM IFMAP Stop Cycle, DRAM IFMAP Reads, "
                    "DRAM Filter Start Cycle, DRAM Filter Stop Cycle, DRAM Filter Reads, "
                    "DRAM OFMAP Start Cycle, DRAM OFMAP Stop Cycle, DRAM OFMAP Writes,\n");
    for (int i = 0; i < n; i++) {
        const ss_layer_result *r = &res[i];
        ut_buf_printf(&c, "%d", i);
        ss_put_int(&c, r->overall_cycles);
        ss_put_int(&c, r->total_cycles);
        ss_put_int(&c, r->stall_cycles);
        ss_put_float(&c, r->overall_util);
        ss_put_float(&c, r->mapping_eff);
        ss_put_float(&c, r->compute_util);
        ut_buf_puts(&c, ",\n");

        ut_buf_printf(&bw, "%d", i);
        ss_put_float(&bw, r->ifmap_sram_bw);
        ss_put_float(&bw, r->filter_sram_bw);
        ss_put_float(&bw, r->ofmap_sram_bw);
        ss_put_float(&bw, r->ifmap_dram_bw);
        ss_put_float(&bw, r->filter_dram_bw);
        ss_put_float(&bw, r->ofmap_dram_bw);
        ut_buf_puts(&bw, ",\n");

        ut_buf_printf(&d, "%d", i);
        ss_put_cycle(&d, r->ifmap_sram_start);
        ss_put_cycle(&d, r->ifmap_sram_stop);
        ss_put_int(&d, r->ifmap_sram_reads);
        ss_put_cycle(&d, r->filter_sram_start);
        ss_put_cycle(&d, r->filter_sram_stop);
        ss_put_int(&d, r->filter_sram_reads);
        ss_put_cycle(&d, r->ofmap_sram_start);
        ss_put_cycle(&d, r->ofmap_sram_stop);
        ss_put_int(&d, r->ofmap_sram_writes);
        ss_put_cycle(&d, r->ifmap_dram_start);
        ss_put_cycle(&d, r->ifmap_dram_stop);
        ss_put_int(&d, r->ifmap_dram_reads);
        ss_put_cycle(&d, r->filter_dram_start);
        ss_put_cycle(&d, r->filter_dram_stop);
        ss_put_int(&d, r->filter_dram_reads);
        ss_put_cycle(&d, r->ofmap_dram_start);
        ss_put_cycle(&d, r->ofmap_dram_stop);
        ss_put_int(&d, r->ofmap_dram_writes);
        ut_buf_puts(&d, ",\n");
    }
    tpu_status st = ss_write_file(ctx, dir, "COMPUTE_REPORT.csv", &c);
    if (st == TPU_OK) st = ss_write_file(ctx, dir, "BANDWIDTH_REPORT.csv", &bw);
    if (st == TPU_OK) st = ss_write_file(ctx, dir, "DETAILED_ACCESS_REPORT.csv", &d);
    ut_buf_free(&c);
    ut_buf_free(&bw);
    ut_buf_free(&d);
    return st;
}

tpu_scalesim_opts tpu_scalesim_opts_default(void)
{
    tpu_scalesim_opts o;
    memset(&o, 0, sizeof o);
    o.out_dir = ".";
    return o;
}

/* The config's TopologyCsvLoc is relative to the working directory in SCALE-Sim; we also try the
 * config's directory. */
static char *ss_resolve_topology(const char *cfg_path, const char *topo)
{
    struct stat sb;
    if (topo[0] == '/' || stat(topo, &sb) == 0) return ut_strdup(topo);
    const char *slash = strrchr(cfg_path, '/');
    if (!slash) return ut_strdup(topo);
    ut_buf b;
    ut_buf_init(&b);
    ut_buf_put(&b, cfg_path, (size_t)(slash - cfg_path + 1));
    ut_buf_puts(&b, topo);
    if (!b.failed && stat(b.data, &sb) == 0) return ut_buf_take(&b);
    ut_buf_free(&b);
    return ut_strdup(topo);
}

tpu_status tpu_scalesim_run(tpu_ctx *ctx, const tpu_scalesim_opts *opts, char **report_dir, int *layers)
{
    if (report_dir) *report_dir = NULL;
    if (layers) *layers = 0;
    if (!opts || !opts->config_path) return ut_err(ctx, TPU_ERR_INVALID, "scalesim: no config file given");
    ss_config cfg;
    ss_topology topo;
    memset(&topo, 0, sizeof topo);
    ss_layer_result *res = NULL;
    char *topo_path = NULL;
    ut_buf dir;
    ut_buf_init(&dir);
    tpu_status st = ss_config_load(ctx, opts->config_path, &cfg);
    if (st != TPU_OK) return st;
    if (opts->topology_path) {
        topo_path = ut_strdup(opts->topology_path);
    } else if (cfg.topology_path) {
        topo_path = ss_resolve_topology(opts->config_path, cfg.topology_path);
    } else {
        st = ut_err(ctx, TPU_ERR_INVALID, "scalesim: no topology file given (-t) and %s has no [network_presets] "
                    "TopologyCsvLoc", opts->config_path);
        goto done;
    }
    if (!topo_path) { st = ut_nomem(ctx); goto done; }
    if ((st = ss_topology_load(ctx, topo_path, opts->gemm != 0, &topo)) != TPU_OK) goto done;
    if (topo.n == 0) ut_warn(ctx, "%s: no layers; the reports have only their headers", topo_path);

    res = ut_calloc((size_t)(topo.n ? topo.n : 1), sizeof *res);
    if (!res) { st = ut_nomem(ctx); goto done; }
    for (int i = 0; i < topo.n; i++) {
        double t0 = ut_now();
        st = ss_simulate_layer(ctx, &cfg, &topo.layers[i], &res[i]);
        if (st != TPU_OK) {
            ut_err_prefix(ctx, "%s:%d: layer %d (%s)", topo_path, topo.layers[i].line, i, topo.layers[i].name);
            goto done;
        }
        if (opts->log) {
            fprintf(opts->log, "layer %d %s: %lld cycles, %lld stall, util %.2f%%, %.3f s\n", i, topo.layers[i].name,
                    (long long)res[i].total_cycles, (long long)res[i].stall_cycles, res[i].overall_util,
                    ut_now() - t0);
        }
    }
    ut_buf_printf(&dir, "%s/%s", opts->out_dir && *opts->out_dir ? opts->out_dir : ".", cfg.run_name);
    if (dir.failed) { st = ut_nomem(ctx); goto done; }
    if ((st = tpu_mkdirs(ctx, dir.data, 0777)) != TPU_OK) goto done;
    if ((st = ss_write_reports(ctx, dir.data, res, topo.n)) != TPU_OK) goto done;
    if (layers) *layers = topo.n;
    if (report_dir) {
        *report_dir = ut_buf_take(&dir);
        if (!*report_dir) st = ut_nomem(ctx);
    }
done:
    ut_buf_free(&dir);
    ut_free(res);
    ut_free(topo_path);
    ss_topology_free(&topo);
    ss_config_free(&cfg);
    return st;
}
