/* chip_file.c — hypothetical chips from JSON files (docs/chips.md): either complete, or "base": "v5e" plus
 * the fields that differ. Unknown keys, wrong types and out-of-range values are errors that name the key. */
#include "chip.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define KiB ((int64_t)1 << 10)
#define MiB ((int64_t)1 << 20)
#define GiB ((int64_t)1 << 30)

typedef enum chp_key_kind {
    CHP_K_INT,     /* int field */
    CHP_K_NUM,     /* double field = value x scale */
    CHP_K_BYTES,   /* int64_t field = value x scale, rounded */
    CHP_K_SPECIAL  /* handled by name below */
} chp_key_kind;

enum {
    CHP_F_REQ = 1,      /* required when there is no "base" */
    CHP_F_COMPUTE = 2,  /* changes the MXU arithmetic: peak rates follow unless given */
    CHP_F_HBM = 4,      /* changes the HBM of a device: the usable capacity follows unless given */
};

typedef struct chp_key {
    const char  *key;
    chp_key_kind kind;
    size_t       off;
    double       scale;
    double       lo, hi;   /* allowed range of the value as written */
    int          flags;
    const char  *unit;     /* for messages */
} chp_key;

#define F(field) offsetof(chp_chip, field)
static const chp_key chp_keys[] = {
    {"name", CHP_K_SPECIAL, 0, 0, 0, 0, CHP_F_REQ, "a short name"},
    {"base", CHP_K_SPECIAL, 0, 0, 0, 0, 0, "a generation"},
    {"description", CHP_K_SPECIAL, 0, 0, 0, 0, 0, "free text"},
    {"tiling", CHP_K_SPECIAL, 0, 0, 0, 0, 0, "a generation"},
    {"torus", CHP_K_SPECIAL, 0, 0, 0, 0, CHP_F_REQ, "\"2d\" or \"3d\""},
    {"pod_dims", CHP_K_SPECIAL, 0, 0, 0, 0, 0, "[x, y]"},
    {"topology", CHP_K_SPECIAL, 0, 0, 0, 0, 0, "[x, y] or [x, y, z]"},
    {"cores_per_chip", CHP_K_INT, F(cores_per_chip), 1, 1, 64, CHP_F_REQ | CHP_F_COMPUTE | CHP_F_HBM, ""},
    {"cores_per_device", CHP_K_INT, F(cores_per_device), 1, 1, 64, CHP_F_HBM, ""},
    {"mxus_per_core", CHP_K_INT, F(mxus_per_core), 1, 1, 64, CHP_F_REQ | CHP_F_COMPUTE, ""},
    {"mxu_rows", CHP_K_INT, F(mxu_rows), 1, 1, 4096, CHP_F_REQ | CHP_F_COMPUTE, ""},
    {"mxu_cols", CHP_K_INT, F(mxu_cols), 1, 1, 4096, CHP_F_REQ | CHP_F_COMPUTE, ""},
    {"peak_bf16_tflops", CHP_K_NUM, F(peak_bf16_flops), 1e12, 1e-3, 1e6, 0, "TFLOP/s per chip"},
    {"peak_int8_tops", CHP_K_NUM, F(peak_int8_ops), 1e12, 0, 1e6, 0, "TOP/s per chip"},
    {"peak_fp8_tflops", CHP_K_NUM, F(peak_fp8_flops), 1e12, 0, 1e6, 0, "TFLOP/s per chip"},
    {"clock_ghz", CHP_K_NUM, F(clock_hz), 1e9, 0, 20, CHP_F_COMPUTE, "GHz"},
    {"vpu_sublanes", CHP_K_INT, F(vpu_sublanes), 1, 1, 1024, 0, ""},
    {"vpu_lanes", CHP_K_INT, F(vpu_lanes), 1, 1, 4096, 0, ""},
    {"vpu_alus_per_lane", CHP_K_INT, F(vpu_alus_per_lane), 1, 1, 64, 0, ""},
    {"hbm_gib", CHP_K_BYTES, F(hbm_bytes), (double)GiB, 1.0 / 1024, 1 << 20, CHP_F_REQ | CHP_F_HBM, "GiB per chip"},
    {"hbm_usable_gib", CHP_K_BYTES, F(hbm_usable_bytes), (double)GiB, 1.0 / 1024, 1 << 20, 0, "GiB per device"},
    {"hbm_reserved_mib", CHP_K_BYTES, F(hbm_reserved_bytes), (double)MiB, 0, 1 << 30, CHP_F_HBM, "MiB per device"},
    {"hbm_gb_s", CHP_K_NUM, F(hbm_bw), 1e9, 1e-3, 1e7, CHP_F_REQ, "GB/s per chip"},
    {"vmem_mib", CHP_K_BYTES, F(vmem_bytes), (double)MiB, 1.0 / 1024, 1 << 20, CHP_F_REQ, "MiB per core"},
    {"vmem_temp_mib", CHP_K_BYTES, F(vmem_temp_bytes), (double)MiB, 0, 1 << 20, 0, "MiB per device"},
    {"mxu_recompute_operands", CHP_K_INT, F(mxu_recompute_operands), 1, 0, 2, 0, "0 never, 1 always, 2 for wide matmuls"},
    {"cmem_mib", CHP_K_BYTES, F(cmem_bytes), (double)MiB, 0, 1 << 24, 0, "MiB per chip"},
    {"smem_kib", CHP_K_BYTES, F(smem_bytes), (double)KiB, 0, 1 << 24, 0, "KiB per core"},
    {"sparse_cores", CHP_K_INT, F(sparse_cores), 1, 0, 64, 0, ""},
    {"ici_links", CHP_K_INT, F(ici_links), 1, 0, 64, CHP_F_REQ, "per chip"},
    {"ici_link_gb_s", CHP_K_NUM, F(ici_link_bw), 1e9, 0, 1e6, CHP_F_REQ, "GB/s per link per direction"},
    {"cube", CHP_K_INT, F(cube), 1, 1, 64, 0, "chips per side"},
    {"max_pod_chips", CHP_K_INT, F(max_pod_chips), 1, 1, 1 << 20, CHP_F_REQ, "chips"},
    {"max_slice_chips", CHP_K_INT, F(max_slice_chips), 1, 1, 1 << 20, 0, "chips"},
    {"chips_per_host", CHP_K_INT, F(chips_per_host), 1, 1, 1024, 0, ""},
    {"chips_per_host_multi", CHP_K_INT, F(chips_per_host_multi), 1, 1, 1024, 0, ""},
    {"host_gb_s", CHP_K_NUM, F(host_bw), 1e9, 0, 1e5, 0, "GB/s per chip"},
    {"dcn_gb_s_per_host", CHP_K_NUM, F(dcn_host_bw), 1e9, 0, 1e5, 0, "GB/s per host (multislice)"},
    {"pcie_gen", CHP_K_INT, F(pcie_gen), 1, 0, 16, 0, ""},
    {"op_overhead_us", CHP_K_NUM, F(op_overhead_s), 1e-6, 0, 1e6, 0, "microseconds"},
    {"mxu_efficiency", CHP_K_NUM, F(mxu_efficiency), 1, 0, 1, 0, "share of the MXU peak on large GEMMs"},
};
#undef F

static const chp_key *chp_key_find(const char *k)
{
    for (int i = 0; i < UT_ARRAY_LEN(chp_keys); i++)
        if (!strcmp(chp_keys[i].key, k)) return &chp_keys[i];
    return NULL;
}

/* Edit distance, for "did you mean". Keys are short; bounded at 32 characters. */
static int chp_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 32 || lb > 32) return 99;
    int d[33][33];
    for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            c = UT_MIN(c, d[i - 1][j] + 1);
            d[i][j] = UT_MIN(c, d[i][j - 1] + 1);
        }
    return d[la][lb];
}

static tpu_status chp_unknown_key(tpu_ctx *ctx, const char *what, const char *k)
{
    const char *best = NULL;
    int bd = 4;
    for (int i = 0; i < UT_ARRAY_LEN(chp_keys); i++) {
        int dd = chp_edit_distance(k, chp_keys[i].key);
        if (dd < bd) bd = dd, best = chp_keys[i].key;
    }
    if (best) return ut_err(ctx, TPU_ERR_PARSE, "%s: unknown key '%s' (did you mean '%s'? see docs/chips.md)", what, k, best);
    return ut_err(ctx, TPU_ERR_PARSE, "%s: unknown key '%s' (the keys are listed in docs/chips.md)", what, k);
}

/* The JSON type of an item, for messages. */
static const char *chp_json_type(const cJSON *v)
{
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "something else";
}

static tpu_status chp_get_string(tpu_ctx *ctx, const char *what, const cJSON *v, const char **out)
{
    if (!cJSON_IsString(v) || !v->valuestring)
        return ut_err(ctx, TPU_ERR_INVALID, "%s: '%s' must be a string, got %s", what, v->string, chp_json_type(v));
    *out = v->valuestring;
    return TPU_OK;
}

/* [a, b] or [a, b, c] of positive whole numbers. */
static tpu_status chp_get_dims(tpu_ctx *ctx, const char *what, const cJSON *v, int *n, int dims[CHP_MAX_DIMS])
{
    int k = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (k != 2 && k != 3)
        return ut_err(ctx, TPU_ERR_INVALID, "%s: '%s' must be an array of 2 or 3 chip counts, such as [4, 4]", what,
                      v->string);
    for (int i = 0; i < k; i++) {
        const cJSON *e = cJSON_GetArrayItem(v, i);
        double d = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (!(d >= 1 && d <= 65536) || d != floor(d))
            return ut_err(ctx, TPU_ERR_INVALID, "%s: '%s' entry %d must be a whole number of chips from 1 to 65536",
                          what, v->string, i);
        dims[i] = (int)d;
    }
    *n = k;
    return TPU_OK;
}

static void chp_defaults(chp_chip *c)
{
    memset(c, 0, sizeof *c);
    c->generation = 6;   /* tiling rules of v2..v6e unless "tiling" says otherwise */
    c->cores_per_device = 1;
    c->vpu_sublanes = 8;
    c->vpu_lanes = 128;
    c->vpu_alus_per_lane = 2;
    c->smem_bytes = 1 * MiB;
    c->cube = 4;
    c->op_overhead_s = 1e-6;
    c->mxu_efficiency = 1;
}

static void chp_line_col(const char *text, const char *at, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (const char *p = text; p < at && *p; p++) {
        if (*p == '\n') {
            ++*line;
            *col = 1;
        } else {
            ++*col;
        }
    }
}

/* cJSON allocates through the library's hook; a failed allocation is remembered because cJSON reports it
 * like a syntax error. */
static _Thread_local int chp_cjson_oom;
static void *chp_cjson_malloc(size_t n)
{
    void *p = ut_malloc(n);
    if (!p) chp_cjson_oom = 1;
    return p;
}
static void chp_cjson_free(void *p) { ut_free(p); }

/* Applies the object's keys to c; `given` marks the keys written (by index into chp_keys). */
static tpu_status chp_apply(tpu_ctx *ctx, const char *what, const cJSON *root, chp_chip *c, bool *given,
                            int *topo_n, int topo[CHP_MAX_DIMS])
{
    tpu_status st;
    for (const cJSON *v = root->child; v; v = v->next) {
        const chp_key *k = chp_key_find(v->string);
        if (!k) return chp_unknown_key(ctx, what, v->string);
        int ki = (int)(k - chp_keys);
        if (given[ki]) return ut_err(ctx, TPU_ERR_INVALID, "%s: key '%s' appears twice", what, v->string);
        given[ki] = true;
        if (k->kind == CHP_K_SPECIAL) {
            const char *s = NULL;
            if (!strcmp(k->key, "name")) {
                if ((st = chp_get_string(ctx, what, v, &s))) return st;
                size_t n = strlen(s);
                if (n == 0 || n >= CHP_NAME_MAX)
                    return ut_err(ctx, TPU_ERR_INVALID, "%s: 'name' must have 1 to %d characters", what, CHP_NAME_MAX - 1);
                for (size_t i = 0; i < n; i++)
                    if (!(s[i] == '-' || s[i] == '_' || s[i] == '.' || (s[i] >= '0' && s[i] <= '9') ||
                          (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z')))
                        return ut_err(ctx, TPU_ERR_INVALID, "%s: 'name' may hold only letters, digits, '-', '_' and "
                                      "'.', got \"%s\"", what, s);
                memcpy(c->name, s, n + 1);
            } else if (!strcmp(k->key, "base") || !strcmp(k->key, "description")) {
                if ((st = chp_get_string(ctx, what, v, &s))) return st;   /* base was applied first */
            } else if (!strcmp(k->key, "tiling")) {
                if ((st = chp_get_string(ctx, what, v, &s))) return st;
                const chp_chip *g = chp_generation_find(s);
                if (!g) return ut_err(ctx, TPU_ERR_INVALID, "%s: 'tiling' must name a generation whose HBM tiling "
                                      "rules apply (v2 ... v7), got \"%s\"", what, s);
                c->generation = g->generation;
            } else if (!strcmp(k->key, "torus")) {
                int t = 0;
                if (cJSON_IsString(v) && v->valuestring) {
                    if (!strcmp(v->valuestring, "2d") || !strcmp(v->valuestring, "2D")) t = 2;
                    if (!strcmp(v->valuestring, "3d") || !strcmp(v->valuestring, "3D")) t = 3;
                } else if (cJSON_IsNumber(v) && (v->valuedouble == 2 || v->valuedouble == 3)) {
                    t = (int)v->valuedouble;
                }
                if (!t) return ut_err(ctx, TPU_ERR_INVALID, "%s: 'torus' must be \"2d\" or \"3d\"", what);
                c->torus_dims = t;
            } else if (!strcmp(k->key, "pod_dims")) {
                int n, d[CHP_MAX_DIMS] = {0, 0, 0};
                if ((st = chp_get_dims(ctx, what, v, &n, d))) return st;
                memcpy(c->pod_dims, d, sizeof d);
            } else if (!strcmp(k->key, "topology")) {
                if ((st = chp_get_dims(ctx, what, v, topo_n, topo))) return st;
            }
            continue;
        }
        if (!cJSON_IsNumber(v))
            return ut_err(ctx, TPU_ERR_INVALID, "%s: '%s' must be a number%s%s, got %s", what, k->key,
                          *k->unit ? " of " : "", k->unit, chp_json_type(v));
        double x = v->valuedouble;
        if (!(x >= k->lo && x <= k->hi))
            return ut_err(ctx, TPU_ERR_INVALID, "%s: '%s' must be from %g to %g%s%s, got %g", what, k->key, k->lo,
                          k->hi, *k->unit ? " " : "", k->unit, x);
        char *field = (char *)c + k->off;
        switch (k->kind) {
        case CHP_K_INT:
            if (x != floor(x)) return ut_err(ctx, TPU_ERR_INVALID, "%s: '%s' must be a whole number, got %g", what, k->key, x);
            *(int *)field = (int)x;
            break;
        case CHP_K_NUM: *(double *)field = x * k->scale; break;
        case CHP_K_BYTES: *(int64_t *)field = (int64_t)llround(x * k->scale); break;
        default: break;
        }
    }
    return TPU_OK;
}

static bool chp_given(const bool *given, const char *key)
{
    const chp_key *k = chp_key_find(key);
    return k && given[k - chp_keys];
}

tpu_status chp_chip_parse_json(tpu_ctx *ctx, const char *text, size_t len, const char *what, chp_slice *out)
{
    if (!what) what = "chip file";
    cJSON_Hooks hooks = {chp_cjson_malloc, chp_cjson_free};
    cJSON_InitHooks(&hooks);
    const char *end = NULL;
    chp_cjson_oom = 0;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        if (chp_cjson_oom || !at || at < text || at > text + len) return ut_nomem(ctx);
        int line, col;
        chp_line_col(text, at, &line, &col);
        return ut_err(ctx, TPU_ERR_PARSE, "%s:%d:%d: not valid JSON here", what, line, col);
    }
    tpu_status st = TPU_OK;
    bool given[UT_ARRAY_LEN(chp_keys)];
    memset(given, 0, sizeof given);
    int topo_n = 0, topo[CHP_MAX_DIMS] = {1, 1, 1};
    chp_chip c, base;
    chp_defaults(&c);
    if (!cJSON_IsObject(root)) {
        st = ut_err(ctx, TPU_ERR_PARSE, "%s: a chip file holds one JSON object ({...}), got %s", what,
                    chp_json_type(root));
        goto done;
    }
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(root, "base");
    if (b) {
        const char *bs = NULL;
        if ((st = chp_get_string(ctx, what, b, &bs))) goto done;
        const chp_chip *g = chp_generation_find(bs);
        if (!g) {
            st = ut_err(ctx, TPU_ERR_INVALID, "%s: 'base' must name a built-in generation (v2, v3, v4, v5e, v5p, v6e, "
                        "v7), got \"%s\"", what, bs);
            goto done;
        }
        c = *g;
        c.builtin = false;
        c.note = NULL;
    }
    base = c;
    if ((st = chp_apply(ctx, what, root, &c, given, &topo_n, topo))) goto done;
    if (!b) {
        for (int i = 0; i < UT_ARRAY_LEN(chp_keys); i++)
            if ((chp_keys[i].flags & CHP_F_REQ) && !given[i]) {
                st = ut_err(ctx, TPU_ERR_INVALID, "%s: missing key '%s' (a chip without \"base\" must give it)", what,
                            chp_keys[i].key);
                goto done;
            }
        if (!chp_given(given, "peak_bf16_tflops") && !chp_given(given, "clock_ghz")) {
            st = ut_err(ctx, TPU_ERR_INVALID, "%s: give 'peak_bf16_tflops' or 'clock_ghz' (or both)", what);
            goto done;
        }
        if (c.torus_dims == 2 && !chp_given(given, "pod_dims")) {
            st = ut_err(ctx, TPU_ERR_INVALID, "%s: missing key 'pod_dims' (a 2-D chip's full pod, e.g. [16, 16])", what);
            goto done;
        }
    } else if (!chp_given(given, "name")) {
        st = ut_err(ctx, TPU_ERR_INVALID, "%s: missing key 'name' (what reports call this chip)", what);
        goto done;
    }
    c.cloud_prefix[0] = 0;
    c.source = "chip file";

    /* Figures that follow from others unless written: peak rates from the MXU arithmetic, the usable HBM
     * from the device's HBM, host counts and slice bounds from their companions. */
    bool compute_changed = false, hbm_changed = false;
    for (int i = 0; i < UT_ARRAY_LEN(chp_keys); i++)
        if (given[i]) {
            compute_changed |= (chp_keys[i].flags & CHP_F_COMPUTE) != 0;
            hbm_changed |= (chp_keys[i].flags & CHP_F_HBM) != 0;
        }
    double units = 2.0 * c.mxu_rows * c.mxu_cols * c.mxus_per_core * c.cores_per_chip;
    if (!chp_given(given, "peak_bf16_tflops") && (compute_changed || !b)) {
        double clk = c.clock_hz > 0 ? c.clock_hz : b ? chp_mxu_clock_hz(&base) : 0;
        double old = c.peak_bf16_flops;
        c.peak_bf16_flops = units * clk;
        double r = old > 0 ? c.peak_bf16_flops / old : 0;
        if (!chp_given(given, "peak_int8_tops")) c.peak_int8_ops *= r;
        if (!chp_given(given, "peak_fp8_tflops")) c.peak_fp8_flops *= r;
    } else if (chp_given(given, "peak_bf16_tflops") && !chp_given(given, "clock_ghz") && b && compute_changed) {
        c.clock_hz = 0;   /* the base's clock no longer explains the new arithmetic */
    }
    if (c.clock_hz > 0 && c.peak_bf16_flops > 0) {
        double implied = units * c.clock_hz;
        if (fabs(implied - c.peak_bf16_flops) > 0.05 * c.peak_bf16_flops)
            ut_warn(ctx, "%s: 'peak_bf16_tflops' %.1f disagrees with 2 x %dx%d x %d MXUs x %d cores x %.3g GHz = %.1f "
                    "TFLOP/s", what, c.peak_bf16_flops / 1e12, c.mxu_rows, c.mxu_cols, c.mxus_per_core,
                    c.cores_per_chip, c.clock_hz / 1e9, implied / 1e12);
    }
    if (!chp_given(given, "cores_per_device") && c.cores_per_device > c.cores_per_chip) c.cores_per_device = 1;
    if (!chp_given(given, "hbm_usable_gib") && (hbm_changed || !b))
        c.hbm_usable_bytes = chp_device_hbm_bytes(&c) - c.hbm_reserved_bytes;
    if (!chp_given(given, "max_slice_chips") && (chp_given(given, "max_pod_chips") || !b))
        c.max_slice_chips = c.max_pod_chips;
    if (!chp_given(given, "chips_per_host") && !b) c.chips_per_host = 4;
    if (!chp_given(given, "chips_per_host_multi") && (chp_given(given, "chips_per_host") || !b))
        c.chips_per_host_multi = c.chips_per_host;
    if (!chp_given(given, "pod_dims") && c.torus_dims == 3) memset(c.pod_dims, 0, sizeof c.pod_dims);

    if ((st = chp_chip_validate(ctx, &c, what))) goto done;
    if (topo_n) {
        if ((st = chp_slice_make_dims(ctx, &c, topo_n, topo, out))) {
            ut_err_prefix(ctx, "%s: 'topology'", what);
            goto done;
        }
    } else {
        int one[CHP_MAX_DIMS] = {1, 1, 1};
        if ((st = chp_slice_make_dims(ctx, &c, c.torus_dims, one, out))) goto done;
    }
done:
    cJSON_Delete(root);
    return st;
}

tpu_status chp_chip_load(tpu_ctx *ctx, const char *path, chp_slice *out)
{
    char *text;
    size_t len;
    tpu_status st = ut_read_text(ctx, path, &text, &len);
    if (st) return st;
    st = chp_chip_parse_json(ctx, text, len, path, out);
    ut_free(text);
    return st;
}
