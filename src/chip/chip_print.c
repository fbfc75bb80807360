/* chip_print.c — the chip table and one chip's description (text and JSON) for `tpusim chips`, and the
 * public tpu_chip_* functions over chp_slice. */
#include "chip.h"

#include <stdio.h>
#include <string.h>

#define MiB ((int64_t)1 << 20)
#define GiB ((int64_t)1 << 30)

/* ---- JSON helpers ---- */

static void chp_json_key(ut_buf *b, const char *k, int *first)
{
    ut_buf_puts(b, *first ? "" : ", ");
    *first = 0;
    ut_buf_json_str(b, k);
    ut_buf_puts(b, ": ");
}

#define JI(k, v) (chp_json_key(b, k, &first), ut_buf_printf(b, "%lld", (long long)(v)))
#define JD(k, v) (chp_json_key(b, k, &first), ut_buf_printf(b, "%.10g", (double)(v)))
#define JS(k, v) (chp_json_key(b, k, &first), ut_buf_json_str(b, v))
#define JB(k, v) (chp_json_key(b, k, &first), ut_buf_puts(b, (v) ? "true" : "false"))

static void chp_json_dims(ut_buf *b, int n, const int *d)
{
    ut_buf_putc(b, '[');
    for (int i = 0; i < n; i++) ut_buf_printf(b, "%s%d", i ? ", " : "", d[i]);
    ut_buf_putc(b, ']');
}

static void chp_json_chip(ut_buf *b, const chp_chip *c)
{
    int first = 1;
    ut_buf_putc(b, '{');
    JS("name", c->name);
    JS("cloud_prefix", c->cloud_prefix[0] ? c->cloud_prefix : NULL);
    JI("generation", c->generation);
    JB("names_count_cores", c->names_count_cores);
    JB("builtin", c->builtin);
    JI("cores_per_chip", c->cores_per_chip);
    JI("cores_per_device", c->cores_per_device);
    JI("mxus_per_core", c->mxus_per_core);
    JI("mxu_rows", c->mxu_rows);
    JI("mxu_cols", c->mxu_cols);
    JD("peak_bf16_flops", c->peak_bf16_flops);
    JD("peak_int8_ops", c->peak_int8_ops);
    JD("peak_fp8_flops", c->peak_fp8_flops);
    JD("clock_hz", c->clock_hz);
    JD("mxu_clock_hz", chp_mxu_clock_hz(c));
    JI("vpu_sublanes", c->vpu_sublanes);
    JI("vpu_lanes", c->vpu_lanes);
    JI("vpu_alus_per_lane", c->vpu_alus_per_lane);
    JI("hbm_bytes", c->hbm_bytes);
    JI("hbm_usable_bytes", c->hbm_usable_bytes);
    JI("hbm_reserved_bytes", c->hbm_reserved_bytes);
    JD("hbm_bw", c->hbm_bw);
    JI("vmem_bytes", c->vmem_bytes);
    JI("vmem_temp_bytes", c->vmem_temp_bytes);
    JD("mxu_efficiency", c->mxu_efficiency > 0 ? c->mxu_efficiency : 1);
    JI("cmem_bytes", c->cmem_bytes);
    JI("smem_bytes", c->smem_bytes);
    JI("sparse_cores", c->sparse_cores);
    JI("ici_links", c->ici_links);
    JD("ici_link_bw", c->ici_link_bw);
    JI("torus_dims", c->torus_dims);
    chp_json_key(b, "pod_dims", &first);
    chp_json_dims(b, c->pod_dims[0] ? c->torus_dims : 0, c->pod_dims);
    JI("cube", c->torus_dims == 3 ? c->cube : 0);
    JI("max_pod_chips", c->max_pod_chips);
    JI("max_slice_chips", c->max_slice_chips);
    JI("chips_per_host", c->chips_per_host);
    JI("chips_per_host_multi", c->chips_per_host_multi);
    JD("host_bw", c->host_bw);
    JD("dcn_host_bw", c->dcn_host_bw);
    JI("pcie_gen", c->pcie_gen);
    JD("op_overhead_s", c->op_overhead_s);
    JS("source", c->source);
    JS("note", c->note);
    ut_buf_putc(b, '}');
}

/* ---- text helpers ---- */

static const char *chp_bytes_str(int64_t n, char *buf, size_t size)
{
    if (n >= GiB && n % (GiB / 4) == 0) snprintf(buf, size, "%g GiB", (double)n / GiB);
    else if (n >= GiB) snprintf(buf, size, "%.2f GiB", (double)n / GiB);
    else if (n >= MiB) snprintf(buf, size, "%g MiB", (double)n / MiB);
    else if (n >= 1024) snprintf(buf, size, "%g KiB", (double)n / 1024);
    else snprintf(buf, size, "%lld B", (long long)n);
    return buf;
}

static const char *chp_rate_str(double v, const char *unit, char *buf, size_t size)
{
    static const char *pre[] = {"", "K", "M", "G", "T", "P", "E"};
    int i = 0;
    while (v >= 1000 && i < 6) {
        v /= 1000;
        i++;
    }
    snprintf(buf, size, "%.4g %s%s", v, pre[i], unit);
    return buf;
}

/* ---- the table ---- */

void chp_print_table(ut_buf *b, int json)
{
    int n = chp_num_generations();
    if (json) {
        ut_buf_puts(b, "[\n");
        for (int i = 0; i < n; i++) {
            ut_buf_puts(b, "  ");
            chp_json_chip(b, chp_generation_at(i));
            ut_buf_puts(b, i + 1 < n ? ",\n" : "\n");
        }
        ut_buf_puts(b, "]\n");
        return;
    }
    ut_buf_printf(b, "%-4s %-19s %5s %4s %-7s %9s %7s %8s %7s %-15s %5s %5s\n", "gen", "slice names", "cores", "MXUs",
                  "MXU", "bf16 TF/s", "HBM GiB", "HBM GB/s", "VMEM", "ICI (GB/s/dir)", "chips", "pod");
    for (int i = 0; i < n; i++) {
        const chp_chip *c = chp_generation_at(i);
        char names[48], mxu[32], vmem[32], ici[48];
        snprintf(names, sizeof names, "%s-N (%s)", c->cloud_prefix, c->names_count_cores ? "cores" : "chips");
        snprintf(mxu, sizeof mxu, "%dx%d", c->mxu_rows, c->mxu_cols);
        snprintf(vmem, sizeof vmem, "%lld MiB", (long long)(c->vmem_bytes / MiB));
        snprintf(ici, sizeof ici, "%d x %g, %dD", c->ici_links, c->ici_link_bw / 1e9, c->torus_dims);
        ut_buf_printf(b, "%-4s %-19s %5d %4d %-7s %9.0f %7g %8.0f %7s %-15s %5d %5d\n", c->name, names,
                      c->cores_per_chip, c->mxus_per_core, mxu, c->peak_bf16_flops / 1e12, (double)c->hbm_bytes / GiB,
                      c->hbm_bw / 1e9, vmem, ici, c->chips_per_host, c->max_pod_chips);
    }
    ut_buf_puts(b, "\ncores: TensorCores per chip; MXUs per core; bf16, HBM and HBM GB/s per chip; VMEM per core;\n"
                   "ICI: links per chip x GB/s per link per direction, torus; chips: per host. `tpusim chips NAME`\n"
                   "describes one generation or slice (v3-32, v5litepod-16, tpu7x-8, file.json) with its sources.\n");
}

/* ---- one chip and slice ---- */

static void chp_text_chip(ut_buf *b, const chp_chip *c)
{
    char x[64], y[64], z[64];
    if (c->builtin)
        ut_buf_printf(b, "chip %s (Cloud TPU accelerator types %s-N count %s)\n", c->name, c->cloud_prefix,
                      c->names_count_cores ? "TensorCores" : "chips");
    else
        ut_buf_printf(b, "chip %s (from a chip file; HBM tiling rules of generation %d)\n", c->name, c->generation);
    ut_buf_printf(b, "  %-18s %d per chip; %d per device (%s)\n", "TensorCores", c->cores_per_chip,
                  c->cores_per_device,
                  c->cores_per_device > 1 ? "megacore: one program drives the whole chip" : "one program per core");
    ut_buf_printf(b, "  %-18s %d per core, %dx%d\n", "MXUs", c->mxus_per_core, c->mxu_rows, c->mxu_cols);
    ut_buf_printf(b, "  %-18s %s bf16", "peak per chip", chp_rate_str(c->peak_bf16_flops, "FLOP/s", x, sizeof x));
    if (c->peak_int8_ops > 0) ut_buf_printf(b, ", %s int8", chp_rate_str(c->peak_int8_ops, "OP/s", x, sizeof x));
    if (c->peak_fp8_flops > 0) ut_buf_printf(b, ", %s fp8", chp_rate_str(c->peak_fp8_flops, "FLOP/s", x, sizeof x));
    ut_buf_putc(b, '\n');
    if (c->clock_hz > 0)
        ut_buf_printf(b, "  %-18s %.3g GHz\n", "clock", c->clock_hz / 1e9);
    else
        ut_buf_printf(b, "  %-18s not public (peak FLOP/s implies %.3g GHz for these MXUs)\n", "clock",
                      chp_mxu_clock_hz(c) / 1e9);
    ut_buf_printf(b, "  %-18s %d sublanes x %d lanes, %d ALUs each: %s per core\n", "vector unit", c->vpu_sublanes,
                  c->vpu_lanes, c->vpu_alus_per_lane, chp_rate_str(chp_vpu_ops(c), "op/s", x, sizeof x));
    ut_buf_printf(b, "  %-18s %s per chip, %s/s\n", "HBM", chp_bytes_str(c->hbm_bytes, x, sizeof x),
                  chp_rate_str(c->hbm_bw, "B", y, sizeof y));
    ut_buf_printf(b, "  %-18s %s of %s per device (%s reserved)\n", "usable HBM",
                  chp_bytes_str(c->hbm_usable_bytes, x, sizeof x), chp_bytes_str(chp_device_hbm_bytes(c), y, sizeof y),
                  chp_bytes_str(c->hbm_reserved_bytes, z, sizeof z));
    ut_buf_printf(b, "  %-18s %s per core\n", "VMEM", chp_bytes_str(c->vmem_bytes, x, sizeof x));
    if (c->vmem_temp_bytes > 0)
        ut_buf_printf(b, "  %-18s %s of VMEM per device for the compiler's temporaries\n", "VMEM temporaries",
                      chp_bytes_str(c->vmem_temp_bytes, x, sizeof x));
    if (c->cmem_bytes > 0) ut_buf_printf(b, "  %-18s %s per chip\n", "CMEM", chp_bytes_str(c->cmem_bytes, x, sizeof x));
    ut_buf_printf(b, "  %-18s %s per core\n", "SMEM", chp_bytes_str(c->smem_bytes, x, sizeof x));
    if (c->sparse_cores > 0) ut_buf_printf(b, "  %-18s %d per chip\n", "SparseCores", c->sparse_cores);
    ut_buf_printf(b, "  %-18s %d links x %s/s per direction; %d-D torus", "ICI", c->ici_links,
                  chp_rate_str(c->ici_link_bw, "B", x, sizeof x), c->torus_dims);
    if (c->torus_dims == 2)
        ut_buf_printf(b, ", pod %dx%d (links wrap around along a full side)\n", c->pod_dims[0], c->pod_dims[1]);
    else
        ut_buf_printf(b, " of %dx%dx%d cubes (whole cubes wrap around, smaller slices do not)\n", c->cube, c->cube,
                      c->cube);
    ut_buf_printf(b, "  %-18s %d chips; largest slice %d chips\n", "pod", c->max_pod_chips, c->max_slice_chips);
    ut_buf_printf(b, "  %-18s %d chips per host (%d in multi-host slices)\n", "hosts", c->chips_per_host,
                  c->chips_per_host_multi);
    if (c->host_bw > 0) {
        ut_buf_printf(b, "  %-18s %s/s per chip each way", "host link", chp_rate_str(c->host_bw, "B", x, sizeof x));
        if (c->pcie_gen) ut_buf_printf(b, " (PCIe Gen%d)", c->pcie_gen);
        ut_buf_putc(b, '\n');
    }
    if (c->dcn_host_bw > 0)
        ut_buf_printf(b, "  %-18s %s/s per host each way (slices joined into a multislice)\n", "data-center net",
                      chp_rate_str(c->dcn_host_bw, "B", x, sizeof x));
    ut_buf_printf(b, "  %-18s %.3g us per op\n", "op overhead", c->op_overhead_s * 1e6);
    int64_t d2[2] = {1024, 1024};
    chp_tile_str(c, TPU_F32, 2, d2, x, sizeof x);
    chp_tile_str(c, TPU_BF16, 2, d2, y, sizeof y);
    chp_tile_str(c, TPU_S8, 2, d2, z, sizeof z);
    ut_buf_printf(b, "  %-18s f32 %s, bf16 %s, s8 %s\n", "HBM tiling", x, y, z);
    if (c->source) ut_buf_printf(b, "  %-18s %s\n", "sources", c->source);
    if (c->note) ut_buf_printf(b, "  %-18s %s\n", "note", c->note);
}

static void chp_topo_str(const chp_slice *s, char *buf, size_t size)
{
    if (s->ndims == 2) snprintf(buf, size, "%dx%d", s->dims[0], s->dims[1]);
    else snprintf(buf, size, "%dx%dx%d", s->dims[0], s->dims[1], s->dims[2]);
}

void chp_print_slice(ut_buf *b, const chp_slice *s, int json)
{
    const chp_chip *c = &s->chip;
    double peak = c->peak_bf16_flops * s->chips;
    int64_t hbm = c->hbm_bytes * s->chips;
    double bw = c->hbm_bw * s->chips;
    if (json) {
        int first = 1;
        ut_buf_putc(b, '{');
        JS("name", s->name);
        JS("generation", c->name);
        JI("chips", s->chips);
        JI("cores", s->cores);
        JI("devices", s->devices);
        JI("hosts", s->hosts);
        JI("slices", chp_nslices(s));
        chp_json_key(b, "topology", &first);
        chp_json_dims(b, s->ndims, s->dims);
        chp_json_key(b, "wraparound", &first);
        ut_buf_putc(b, '[');
        for (int i = 0; i < s->ndims; i++) ut_buf_printf(b, "%s%s", i ? ", " : "", s->wrap[i] ? "true" : "false");
        ut_buf_putc(b, ']');
        JD("peak_bf16_flops", peak);
        JI("hbm_bytes", hbm);
        JD("hbm_bw", bw);
        JD("ici_bw_per_chip", (double)c->ici_links * c->ici_link_bw * 2);
        chp_json_key(b, "chip", &first);
        chp_json_chip(b, c);
        ut_buf_puts(b, "}\n");
        return;
    }
    char topo[48], x[64], y[64];
    chp_topo_str(s, topo, sizeof topo);
    const char *wrap = "none";
    int nw = 0;
    for (int i = 0; i < s->ndims; i++) nw += s->wrap[i];
    if (nw == s->ndims) wrap = "every dimension (a torus)";
    else if (nw) wrap = s->wrap[0] ? "first dimension only" : s->ndims == 2 ? "second dimension only" : "some dimensions";
    char topos[64];
    if (chp_nslices(s) > 1) snprintf(topos, sizeof topos, "%d slices of %s", chp_nslices(s), topo);
    else snprintf(topos, sizeof topos, "%s", topo);
    ut_buf_printf(b, "%s: %d %s chip%s, %d TensorCore%s, %d device%s, %d host%s, topology %s\n\n", s->name, s->chips,
                  c->name, s->chips == 1 ? "" : "s", s->cores, s->cores == 1 ? "" : "s", s->devices,
                  s->devices == 1 ? "" : "s", s->hosts, s->hosts == 1 ? "" : "s", topos);
    chp_text_chip(b, c);
    ut_buf_printf(b, "\nslice %s\n", s->name);
    ut_buf_printf(b, "  %-18s %d chip%s (%s), %d TensorCore%s, %d device%s, %d host%s\n", "size", s->chips,
                  s->chips == 1 ? "" : "s", topo, s->cores, s->cores == 1 ? "" : "s", s->devices,
                  s->devices == 1 ? "" : "s", s->hosts, s->hosts == 1 ? "" : "s");
    ut_buf_printf(b, "  %-18s %s\n", "wraparound links", s->chips == 1 ? "none (one chip)" : wrap);
    if (chp_nslices(s) > 1)
        ut_buf_printf(b, "  %-18s %d slices of %s, joined over the data-center network (%s/s per host)\n", "multislice",
                      chp_nslices(s), topo, chp_rate_str(c->dcn_host_bw, "B", y, sizeof y));
    ut_buf_printf(b, "  %-18s %s bf16\n", "peak", chp_rate_str(peak, "FLOP/s", x, sizeof x));
    ut_buf_printf(b, "  %-18s %s, %s/s\n", "HBM", chp_bytes_str(hbm, x, sizeof x), chp_rate_str(bw, "B", y, sizeof y));
}

/* ---- the public API ---- */

tpu_status tpu_chip_get(tpu_ctx *ctx, const char *name, tpu_chip **out)
{
    *out = NULL;
    tpu_chip *c = ut_calloc(1, sizeof *c);
    if (!c) return ut_nomem(ctx);
    tpu_status st = chp_slice_parse(ctx, name, &c->s);
    if (st) {
        ut_free(c);
        return st;
    }
    *out = c;
    return TPU_OK;
}

void tpu_chip_free(tpu_chip *chip) { ut_free(chip); }
const char *tpu_chip_name(const tpu_chip *chip) { return chip->s.name; }
const char *tpu_chip_generation(const tpu_chip *chip) { return chip->s.chip.name; }
int tpu_chip_num_chips(const tpu_chip *chip) { return chip->s.chips; }
int tpu_chip_num_cores(const tpu_chip *chip) { return chip->s.cores; }
int tpu_chip_num_hosts(const tpu_chip *chip) { return chip->s.hosts; }
double tpu_chip_peak_flops(const tpu_chip *chip) { return chip->s.chip.peak_bf16_flops * chip->s.chips; }
int64_t tpu_chip_hbm_bytes(const tpu_chip *chip) { return chip->s.chip.hbm_bytes * chip->s.chips; }
int64_t tpu_chip_hbm_usable_bytes(const tpu_chip *chip) { return chip->s.chip.hbm_usable_bytes; }
int tpu_chips_count(void) { return chp_num_generations(); }

const char *tpu_chips_name(int i)
{
    const chp_chip *c = chp_generation_at(i);
    return c ? c->name : NULL;
}

static tpu_status chp_write(tpu_ctx *ctx, ut_buf *b, FILE *f)
{
    if (b->failed) {
        ut_buf_free(b);
        return ut_nomem(ctx);
    }
    int bad = b->len && fwrite(b->data, 1, b->len, f) != b->len;
    ut_buf_free(b);
    return bad ? ut_err(ctx, TPU_ERR_IO, "write error while printing the chip table") : TPU_OK;
}

tpu_status tpu_chip_print(tpu_ctx *ctx, const tpu_chip *chip, FILE *f, int json)
{
    ut_buf b;
    ut_buf_init(&b);
    chp_print_slice(&b, &chip->s, json);
    return chp_write(ctx, &b, f);
}

tpu_status tpu_chips_print(tpu_ctx *ctx, FILE *f, int json)
{
    ut_buf b;
    ut_buf_init(&b);
    chp_print_table(&b, json);
    return chp_write(ctx, &b, f);
}

/* ---- the devices a framework sees ---- */

int tpu_chip_num_devices(const tpu_chip *chip) { return chip->s.devices; }

/* device_kind as libtpu reports it (and jax's mesh_utils and Pallas expect it) per generation. */
static const char *chp_device_kind(const chp_chip *c)
{
    static const struct { const char *gen, *kind; } kinds[] = {
        {"v2", "TPU v2"}, {"v3", "TPU v3"}, {"v4", "TPU v4"}, {"v5e", "TPU v5 lite"},
        {"v5p", "TPU v5"}, {"v6e", "TPU v6 lite"}, {"v7", "TPU7x"},
    };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (c->builtin && !strcmp(c->name, kinds[i].gen)) return kinds[i].kind;
    return NULL;
}

tpu_status tpu_chip_device(tpu_ctx *ctx, const tpu_chip *chip, int d, tpu_device_info *out)
{
    const chp_slice *s = &chip->s;
    if (d < 0 || d >= s->devices)
        return ut_err(ctx, TPU_ERR_INVALID, "device %d: %s has devices 0..%d", d, s->name, s->devices - 1);
    memset(out, 0, sizeof *out);
    int per_chip = s->devices / (s->chips > 0 ? s->chips : 1);
    if (per_chip < 1) per_chip = 1;
    out->id = d;
    out->chip = d / per_chip;
    out->core_on_chip = d % per_chip;
    int x = s->ndims > 0 && s->dims[0] > 0 ? s->dims[0] : 1, y = s->ndims > 1 && s->dims[1] > 0 ? s->dims[1] : 1;
    int per_slice = s->chips / chp_nslices(s), c = out->chip % (per_slice > 0 ? per_slice : 1);
    out->slice = out->chip / (per_slice > 0 ? per_slice : 1);
    out->coords[0] = c % x;
    out->coords[1] = (c / x) % y;
    out->coords[2] = c / (x * y);
    int per_host = s->hosts > 1 ? s->chip.chips_per_host_multi : s->chip.chips_per_host;
    out->host = per_host > 0 ? out->chip / per_host : 0;
    out->cores = s->chip.cores_per_device;
    out->hbm_bytes = s->chip.hbm_usable_bytes;
    const char *k = chp_device_kind(&s->chip);
    if (k) snprintf(out->kind, sizeof out->kind, "%s", k);
    else snprintf(out->kind, sizeof out->kind, "TPU %s", s->chip.name);
    return TPU_OK;
}

int64_t tpu_chip_array_bytes(const tpu_chip *chip, tpu_dtype dtype, int rank, const int64_t *dims)
{
    int64_t b = chp_padded_bytes(&chip->s.chip, dtype, rank, dims, NULL);
    return b == INT64_MAX ? -1 : b;
}
