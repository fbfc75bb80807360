/* scalesim_parse.c — SCALE-Sim's input files: the .cfg (Python configparser syntax, v2 and v3 keys) and the
 * topology .csv (conv rows or GEMM M,N,K rows). Errors name the file and line. We accept everything
 * SCALE-Sim 3.0.0 accepts and interpret it the same way; a few files it crashes on are accepted too
 * (docs/scalesim.md, "Inputs"). */
#include "compat/scalesim.h"
#include "util/util.h"
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------------------
 * Small text helpers
 * ------------------------------------------------------------------------------------------------------- */

typedef struct ss_str {
    const char *p;
    size_t      n;
} ss_str;

static ss_str ss_strip(const char *p, size_t n)
{
    while (n && isspace((unsigned char)*p)) { p++; n--; }
    while (n && isspace((unsigned char)p[n - 1])) n--;
    ss_str s = {p, n};
    return s;
}

static bool ss_eq_ci(ss_str s, const char *lit)
{
    size_t n = strlen(lit);
    if (s.n != n) return false;
    for (size_t i = 0; i < n; i++)
        if (tolower((unsigned char)s.p[i]) != tolower((unsigned char)lit[i])) return false;
    return true;
}

static bool ss_same_ci(ss_str a, ss_str b)
{
    if (a.n != b.n) return false;
    for (size_t i = 0; i < a.n; i++)
        if (tolower((unsigned char)a.p[i]) != tolower((unsigned char)b.p[i])) return false;
    return true;
}

static bool ss_eq(ss_str s, const char *lit) { return s.n == strlen(lit) && !memcmp(s.p, lit, s.n); }

/* Python int(): optional sign, digits with single underscores between them. Range +-2^62. */
static bool ss_parse_int(ss_str s, int64_t *out)
{
    size_t i = 0;
    int neg = 0;
    if (s.n && (s.p[0] == '+' || s.p[0] == '-')) { neg = s.p[0] == '-'; i++; }
    if (i >= s.n || !isdigit((unsigned char)s.p[i])) return false;
    int64_t v = 0;
    for (; i < s.n; i++) {
        char c = s.p[i];
        if (c == '_' && i + 1 < s.n && isdigit((unsigned char)s.p[i + 1]) && isdigit((unsigned char)s.p[i - 1]))
            continue;
        if (!isdigit((unsigned char)c)) return false;
        if (v > (((int64_t)1 << 62) - 9) / 10) return false;
        v = v * 10 + (c - '0');
    }
    *out = neg ? -v : v;
    return true;
}

/* Iterates lines; *line counts from 1. Returns false at the end. Handles \n, \r\n and lone \r. */
static bool ss_next_line(const char *text, size_t len, size_t *pos, ss_str *line, int *lineno)
{
    if (*pos >= len) return false;
    size_t b = *pos, e = b;
    while (e < len && text[e] != '\n' && text[e] != '\r') e++;
    line->p = text + b;
    line->n = e - b;
    if (e < len && text[e] == '\r' && e + 1 < len && text[e + 1] == '\n') e++;
    *pos = e < len ? e + 1 : e;
    (*lineno)++;
    return true;
}

/* ---------------------------------------------------------------------------------------------------------
 * .cfg
 * ------------------------------------------------------------------------------------------------------- */

void ss_config_init(ss_config *c)
{
    memset(c, 0, sizeof *c);
    /* scale_config.__init__ defaults */
    c->array_rows = c->array_cols = 4;
    c->ifmap_kb = c->filter_kb = 256;
    c->ofmap_kb = 128;
    c->df = TIM_DF_WS;
    c->ifmap_offset = 0;
    c->filter_offset = 10000000;
    c->ofmap_offset = 20000000;
    c->read_req_buf = c->write_req_buf = 60;
    c->ifmap_bank_bw = c->filter_bank_bw = 10;
    c->ifmap_bank_num = c->filter_bank_num = 10;
    c->ifmap_bank_port = c->filter_bank_port = 2;
}

void ss_config_free(ss_config *c)
{
    if (!c) return;
    ut_free(c->run_name);
    ut_free(c->topology_path);
    c->run_name = c->topology_path = NULL;
}

typedef struct ss_kv {
    ss_str section, key, value;
    int    line;
    bool   used;
} ss_kv;

typedef struct ss_cfgdoc {
    ss_kv      *kv;
    int         n, cap;
    const char *file;
    tpu_ctx    *ctx;
} ss_cfgdoc;

static const ss_kv *ss_cfg_find(ss_cfgdoc *d, const char *section, const char *key)
{
    for (int i = 0; i < d->n; i++)
        if (ss_eq_ci(d->kv[i].section, section) && ss_eq_ci(d->kv[i].key, key)) {
            d->kv[i].used = true;
            return &d->kv[i];
        }
    return NULL;
}

static bool ss_cfg_has_section(const ss_cfgdoc *d, const char *section, const ss_str *sections, int nsec)
{
    (void)d;
    for (int i = 0; i < nsec; i++)
        if (ss_eq_ci(sections[i], section)) return true;
    return false;
}

/* Integer key; `required` makes a missing key an error. lo..hi is the accepted range. */
static tpu_status ss_cfg_int(ss_cfgdoc *d, const char *section, const char *key, bool required, int64_t lo,
                             int64_t hi, int64_t *out)
{
    const ss_kv *kv = ss_cfg_find(d, section, key);
    if (!kv) {
        if (required) return ut_err(d->ctx, TPU_ERR_PARSE, "%s: [%s] has no %s", d->file, section, key);
        return TPU_OK;
    }
    int64_t v;
    if (!ss_parse_int(kv->value, &v))
        return ut_err(d->ctx, TPU_ERR_PARSE, "%s:%d: %s = '%.*s' is not an integer", d->file, kv->line, key,
                      (int)kv->value.n, kv->value.p);
    if (v < lo || v > hi)
        return ut_err(d->ctx, TPU_ERR_PARSE, "%s:%d: %s = %lld is out of range [%lld, %lld]", d->file, kv->line,
                      key, (long long)v, (long long)lo, (long long)hi);
    *out = v;
    return TPU_OK;
}

/* configparser.getboolean() */
static tpu_status ss_cfg_bool(ss_cfgdoc *d, const char *section, const char *key, bool *out)
{
    const ss_kv *kv = ss_cfg_find(d, section, key);
    if (!kv) return TPU_OK;
    static const char *yes[] = {"1", "yes", "true", "on"}, *no[] = {"0", "no", "false", "off"};
    for (int i = 0; i < 4; i++) {
        if (ss_eq_ci(kv->value, yes[i])) { *out = true; return TPU_OK; }
        if (ss_eq_ci(kv->value, no[i])) { *out = false; return TPU_OK; }
    }
    return ut_err(d->ctx, TPU_ERR_PARSE, "%s:%d: %s = '%.*s' is not a boolean (True or False)", d->file, kv->line,
                  key, (int)kv->value.n, kv->value.p);
}

static tpu_status ss_cfg_tokenize(ss_cfgdoc *d, const char *text, size_t len, ss_str *sections, int *nsec,
                                  int maxsec)
{
    size_t pos = 0;
    int lineno = 0;
    ss_str line, section = {NULL, 0};
    bool in_section = false;
    if (len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) pos = 3;   /* UTF-8 byte order mark */
    while (ss_next_line(text, len, &pos, &line, &lineno)) {
        ss_str s = ss_strip(line.p, line.n);
        if (!s.n || s.p[0] == '#' || s.p[0] == ';') continue;
        if (memchr(s.p, 0, s.n)) return ut_err(d->ctx, TPU_ERR_PARSE, "%s:%d: NUL byte in config", d->file, lineno);
        if (s.p[0] == '[') {
            if (s.p[s.n - 1] != ']')
                return ut_err(d->ctx, TPU_ERR_PARSE, "%s:%d: section header without ']': %.*s", d->file, lineno,
                              (int)s.n, s.p);
            section = ss_strip(s.p + 1, s.n - 2);
            if (!section.n) return ut_err(d->ctx, TPU_ERR_PARSE, "%s:%d: empty section name", d->file, lineno);
            for (int i = 0; i < *nsec; i++)
                if (ss_same_ci(sections[i], section))
                    return ut_err(d->ctx, TPU_ERR_PARSE, "%s:%d: section [%.*s] appears twice", d->file, lineno,
                                  (int)section.n, section.p);
            if (*nsec >= maxsec) return ut_err(d->ctx, TPU_ERR_PARSE, "%s:%d: too many sections", d->file, lineno);
            sections[(*nsec)++] = section;
            in_section = true;
            continue;
        }
        /* key = value or key: value; the first '=' or ':' splits */
        size_t k = 0;
        while (k < s.n && s.p[k] != '=' && s.p[k] != ':') k++;
        if (k == s.n)
            return ut_err(d->ctx, TPU_ERR_PARSE, "%s:%d: expected 'key = value' or 'key: value', got '%.*s'", d->file,
                          lineno, (int)(s.n > 60 ? 60 : s.n), s.p);
        if (!in_section)
            return ut_err(d->ctx, TPU_ERR_PARSE, "%s:%d: '%.*s' comes before any [section] header", d->file, lineno,
                          (int)(s.n > 60 ? 60 : s.n), s.p);
        ss_str key = ss_strip(s.p, k), value = ss_strip(s.p + k + 1, s.n - k - 1);
        if (!key.n) return ut_err(d->ctx, TPU_ERR_PARSE, "%s:%d: empty key", d->file, lineno);
        /* Inline comments (" # ..." or " ; ...") are dropped: configparser keeps them, SCALE-Sim then fails. */
        for (size_t i = 1; i < value.n; i++)
            if ((value.p[i] == '#' || value.p[i] == ';') && isspace((unsigned char)value.p[i - 1])) {
                value = ss_strip(value.p, i);
                break;
            }
        for (int i = 0; i < d->n; i++)
            if (ss_same_ci(d->kv[i].section, section) && ss_same_ci(d->kv[i].key, key))
                return ut_err(d->ctx, TPU_ERR_PARSE, "%s:%d: %.*s is set twice in [%.*s] (first on line %d)", d->file,
                              lineno, (int)key.n, key.p, (int)section.n, section.p, d->kv[i].line);
        ss_kv *nk = ut_grow(d->kv, sizeof *nk, d->n, &d->cap, 32);
        if (!nk) return ut_nomem(d->ctx);
        d->kv = nk;
        ss_kv e = {section, key, value, lineno, false};
        d->kv[d->n++] = e;
    }
    return TPU_OK;
}

static tpu_status ss_cfg_string(ss_cfgdoc *d, const char *section, const char *key, char **out)
{
    const ss_kv *kv = ss_cfg_find(d, section, key);
    if (!kv) return TPU_OK;
    ss_str v = kv->value;
    if (v.n >= 2 && (v.p[0] == '"' || v.p[0] == '\'') && v.p[v.n - 1] == v.p[0]) { v.p++; v.n -= 2; }
    ut_free(*out);
    *out = ut_strndup(v.p, v.n);
    return *out ? TPU_OK : ut_nomem(d->ctx);
}

tpu_status ss_config_parse(tpu_ctx *ctx, const char *text, size_t len, const char *filename, ss_config *out)
{
    ss_config_init(out);
    ss_cfgdoc d = {NULL, 0, 0, filename ? filename : "<config>", ctx};
    ss_str sections[64];
    int nsec = 0;
    tpu_status st = ss_cfg_tokenize(&d, text, len, sections, &nsec, 64);
    const ss_kv *kv;
    const int64_t big = (int64_t)1 << 40;
    if (st != TPU_OK) goto done;

    /* [general] */
    if (!(kv = ss_cfg_find(&d, "general", "run_name"))) {
        st = ut_err(ctx, TPU_ERR_PARSE, "%s: [general] has no run_name", d.file);
        goto done;
    }
    if (!kv->value.n || memchr(kv->value.p, '/', kv->value.n) || memchr(kv->value.p, '\\', kv->value.n) ||
        ss_eq(kv->value, ".") || ss_eq(kv->value, "..")) {
        st = ut_err(ctx, TPU_ERR_PARSE, "%s:%d: run_name '%.*s' must be a plain directory name", d.file, kv->line,
                    (int)kv->value.n, kv->value.p);
        goto done;
    }
    if (!(out->run_name = ut_strndup(kv->value.p, kv->value.n))) { st = ut_nomem(ctx); goto done; }

    /* [run_presets] */
    if (!(kv = ss_cfg_find(&d, "run_presets", "InterfaceBandwidth"))) {
        st = ut_err(ctx, TPU_ERR_PARSE, "%s: [run_presets] has no InterfaceBandwidth (USER or CALC)", d.file);
        goto done;
    }
    if (ss_eq_ci(kv->value, "USER")) out->user_bw = true;
    else if (ss_eq_ci(kv->value, "CALC")) out->user_bw = false;
    else {
        st = ut_err(ctx, TPU_ERR_PARSE, "%s:%d: InterfaceBandwidth = '%.*s': use USER or CALC", d.file, kv->line,
                    (int)kv->value.n, kv->value.p);
        goto done;
    }
    /* SCALE-Sim tests the exact string 'True'. */
    if ((kv = ss_cfg_find(&d, "run_presets", "UseRamulatorTrace"))) out->ramulator = ss_eq(kv->value, "True");

    /* [architecture_presets] */
    const char *ap = "architecture_presets";
    if ((st = ss_cfg_int(&d, ap, "ArrayHeight", true, 1, 1 << 20, &out->array_rows)) ||
        (st = ss_cfg_int(&d, ap, "ArrayWidth", true, 1, 1 << 20, &out->array_cols)) ||
        (st = ss_cfg_int(&d, ap, "IfmapSramSzkB", true, 1, (int64_t)1 << 30, &out->ifmap_kb)) ||
        (st = ss_cfg_int(&d, ap, "FilterSramSzkB", true, 1, (int64_t)1 << 30, &out->filter_kb)) ||
        (st = ss_cfg_int(&d, ap, "OfmapSramSzkB", true, 1, (int64_t)1 << 30, &out->ofmap_kb)) ||
        (st = ss_cfg_int(&d, ap, "IfmapOffset", true, 0, big, &out->ifmap_offset)) ||
        (st = ss_cfg_int(&d, ap, "FilterOffset", true, 0, big, &out->filter_offset)) ||
        (st = ss_cfg_int(&d, ap, "OfmapOffset", true, 0, big, &out->ofmap_offset)) ||
        (st = ss_cfg_int(&d, ap, "ReadRequestBuffer", false, 0, big, &out->read_req_buf)) ||
        (st = ss_cfg_int(&d, ap, "WriteRequestBuffer", false, 0, big, &out->write_req_buf)))
        goto done;
    if (!(kv = ss_cfg_find(&d, ap, "Dataflow"))) {
        st = ut_err(ctx, TPU_ERR_PARSE, "%s: [%s] has no Dataflow (os, ws or is)", d.file, ap);
        goto done;
    }
    if (ss_eq(kv->value, "os")) out->df = TIM_DF_OS;
    else if (ss_eq(kv->value, "ws")) out->df = TIM_DF_WS;
    else if (ss_eq(kv->value, "is")) out->df = TIM_DF_IS;
    else {
        /* SCALE-Sim only warns here and then silently simulates os; we refuse instead. */
        st = ut_err(ctx, TPU_ERR_PARSE, "%s:%d: Dataflow = '%.*s': use os, ws or is (lower case)", d.file, kv->line,
                    (int)kv->value.n, kv->value.p);
        goto done;
    }
    if ((kv = ss_cfg_find(&d, ap, "Bandwidth"))) {
        ss_str v = kv->value;
        size_t b = 0;
        while (b <= v.n) {
            size_t e = b;
            while (e < v.n && v.p[e] != ',') e++;
            int64_t x;
            if (!ss_parse_int(ss_strip(v.p + b, e - b), &x) || x < 1 || x > (1 << 30)) {
                st = ut_err(ctx, TPU_ERR_PARSE, "%s:%d: Bandwidth = '%.*s': expected positive integers separated by commas",
                            d.file, kv->line, (int)v.n, v.p);
                goto done;
            }
            if (out->nbandwidth == SS_MAX_BANDWIDTHS) {
                st = ut_err(ctx, TPU_ERR_PARSE, "%s:%d: more than %d Bandwidth values", d.file, kv->line, SS_MAX_BANDWIDTHS);
                goto done;
            }
            out->bandwidth[out->nbandwidth++] = x;
            b = e + 1;
        }
    } else if (out->user_bw) {
        st = ut_err(ctx, TPU_ERR_PARSE, "%s: InterfaceBandwidth is USER but [%s] has no Bandwidth", d.file, ap);
        goto done;
    }

    /* [layout] (v3). Without it (a v2 file) the SRAM fill bandwidth is Bandwidth, as in SCALE-Sim v2. */
    out->has_layout = ss_cfg_has_section(&d, "layout", sections, nsec);
    if (out->has_layout) {
        const char *ly = "layout";
        if ((st = ss_cfg_bool(&d, ly, "IfmapCustomLayout", &out->ifmap_custom_layout)) ||
            (st = ss_cfg_bool(&d, ly, "FilterCustomLayout", &out->filter_custom_layout)) ||
            (st = ss_cfg_int(&d, ly, "IfmapSRAMBankBandwidth", false, 1, 1 << 30, &out->ifmap_bank_bw)) ||
            (st = ss_cfg_int(&d, ly, "IfmapSRAMBankNum", false, 1, 1 << 30, &out->ifmap_bank_num)) ||
            (st = ss_cfg_int(&d, ly, "IfmapSRAMBankPort", false, 1, 1 << 30, &out->ifmap_bank_port)) ||
            (st = ss_cfg_int(&d, ly, "FilterSRAMBankBandwidth", false, 1, 1 << 30, &out->filter_bank_bw)) ||
            (st = ss_cfg_int(&d, ly, "FilterSRAMBankNum", false, 1, 1 << 30, &out->filter_bank_num)) ||
            (st = ss_cfg_int(&d, ly, "FilterSRAMBankPort", false, 1, 1 << 30, &out->filter_bank_port)))
            goto done;
    } else {
        if (out->nbandwidth) out->ifmap_bank_bw = out->filter_bank_bw = out->bandwidth[0];
        out->ifmap_bank_num = out->filter_bank_num = 1;
    }

    /* [sparsity] (v3): SCALE-Sim compares lower-cased text with 'true'. */
    if ((kv = ss_cfg_find(&d, "sparsity", "SparsitySupport"))) out->sparsity = ss_eq_ci(kv->value, "true");

    /* [network_presets] (v1/v2): the topology when none is given on the command line. */
    if ((st = ss_cfg_string(&d, "network_presets", "TopologyCsvLoc", &out->topology_path))) goto done;

done:
    ut_free(d.kv);
    if (st != TPU_OK) ss_config_free(out);
    return st;
}

tpu_status ss_config_load(tpu_ctx *ctx, const char *path, ss_config *out)
{
    char *text = NULL;
    size_t len = 0;
    ss_config_init(out);
    tpu_status st = ut_read_text(ctx, path, &text, &len);
    if (st != TPU_OK) return st;
    st = ss_config_parse(ctx, text, len, path, out);
    ut_free(text);
    return st;
}

/* ---------------------------------------------------------------------------------------------------------
 * Topology .csv
 * ------------------------------------------------------------------------------------------------------- */

#define SS_MAX_FIELDS 64

static tpu_status ss_topo_push(tpu_ctx *ctx, ss_topology *t, const ss_layer *l)
{
    ss_layer *nl = ut_grow(t->layers, sizeof *nl, t->n, &t->cap, 16);
    if (!nl) return ut_nomem(ctx);
    t->layers = nl;
    t->layers[t->n++] = *l;
    return TPU_OK;
}

void ss_topology_free(ss_topology *t)
{
    if (!t) return;
    for (int i = 0; i < t->n; i++) ut_free(t->layers[i].name);
    ut_free(t->layers);
    memset(t, 0, sizeof *t);
}

static const char *ss_conv_cols[] = {"layer name", "IFMAP height", "IFMAP width", "filter height", "filter width",
                                     "channels", "num filters", "stride"};
static const char *ss_gemm_cols[] = {"layer name", "M", "N", "K"};

/* A ratio field "N:M" (SCALE-Sim's optional sparsity column). */
static bool ss_is_ratio(ss_str s)
{
    const char *c = memchr(s.p, ':', s.n);
    int64_t a, b;
    return c && ss_parse_int(ss_strip(s.p, (size_t)(c - s.p)), &a) &&
           ss_parse_int(ss_strip(c + 1, s.n - (size_t)(c - s.p) - 1), &b);
}

tpu_status ss_topology_parse(tpu_ctx *ctx, const char *text, size_t len, const char *filename, bool gemm,
                             ss_topology *out)
{
    const char *file = filename ? filename : "<topology>";
    memset(out, 0, sizeof *out);
    size_t pos = 0;
    int lineno = 0;
    ss_str line;
    bool first = true, warned_extra = false;
    const int ncols = gemm ? 4 : 8;
    const char **colnames = gemm ? ss_gemm_cols : ss_conv_cols;
    tpu_status st = TPU_OK;
    if (len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) pos = 3;
    while (ss_next_line(text, len, &pos, &line, &lineno)) {
        if (first) { first = false; continue; }   /* SCALE-Sim always skips the first line (the header) */
        ss_str s = ss_strip(line.p, line.n);
        if (!s.n) continue;
        if (memchr(s.p, 0, s.n)) { st = ut_err(ctx, TPU_ERR_PARSE, "%s:%d: NUL byte in topology", file, lineno); goto fail; }
        ss_str f[SS_MAX_FIELDS];
        int nf = 0;
        size_t b = 0;
        for (;;) {
            size_t e = b;
            while (e < s.n && s.p[e] != ',') e++;
            if (nf == SS_MAX_FIELDS) { st = ut_err(ctx, TPU_ERR_PARSE, "%s:%d: more than %d columns", file, lineno, SS_MAX_FIELDS); goto fail; }
            f[nf++] = ss_strip(s.p + b, e - b);
            if (e >= s.n) break;
            b = e + 1;
        }
        /* Trailing commas (SCALE-Sim's files end every row with one) and empty trailing columns. */
        while (nf && !f[nf - 1].n) nf--;
        if (!nf) continue;   /* a row of commas (Resnet50.csv's second line) */
        if (nf < ncols) {
            st = ut_err(ctx, TPU_ERR_PARSE, "%s:%d: expected %d values (%s), got %d%s", file, lineno, ncols,
                        gemm ? "name, M, N, K" : "name, IFMAP height, IFMAP width, filter height, filter width, "
                                                 "channels, num filters, stride",
                        nf, !gemm && nf == 4 ? "; a GEMM topology needs -i gemm" : "");
            goto fail;
        }
        int64_t v[8];
        for (int i = 1; i < ncols; i++) {
            if (!ss_parse_int(f[i], &v[i])) {
                st = ut_err(ctx, TPU_ERR_PARSE, "%s:%d: column %d (%s) = '%.*s' is not an integer%s", file, lineno,
                            i + 1, colnames[i], (int)(f[i].n > 40 ? 40 : f[i].n), f[i].p,
                            gemm && nf >= 8 ? "; a conv topology needs -i conv" : "");
                goto fail;
            }
            if (v[i] < 1 || v[i] > TIM_SYSTOLIC_MAX_DIM) {
                st = ut_err(ctx, TPU_ERR_PARSE, "%s:%d: column %d (%s) = %lld must be between 1 and %lld", file, lineno,
                            i + 1, colnames[i], (long long)v[i], (long long)TIM_SYSTOLIC_MAX_DIM);
                goto fail;
            }
        }
        int extra = nf - ncols;
        if (extra > 0 && ss_is_ratio(f[ncols])) extra--;   /* N:M sparsity ratio: read, not used */
        for (int i = nf - extra; i < nf && !warned_extra; i++)
            if (f[i].n) {
                ut_warn(ctx, "%s:%d: extra columns after %s are ignored", file, lineno, colnames[ncols - 1]);
                warned_extra = true;
            }
        ss_layer l;
        memset(&l, 0, sizeof l);
        l.line = lineno;
        if (gemm) {
            /* SCALE-Sim's mapping: ifmap M x K, filter 1 x K, 1 channel, N filters, stride 1. */
            l.ifmap_h = v[1]; l.ifmap_w = v[3]; l.filter_h = 1; l.filter_w = v[3];
            l.channels = 1; l.filters = v[2]; l.stride_h = l.stride_w = 1;
        } else {
            l.ifmap_h = v[1]; l.ifmap_w = v[2]; l.filter_h = v[3]; l.filter_w = v[4];
            l.channels = v[5]; l.filters = v[6]; l.stride_h = l.stride_w = v[7];
            if (l.filter_h > l.ifmap_h || l.filter_w > l.ifmap_w) {
                st = ut_err(ctx, TPU_ERR_PARSE, "%s:%d: the %lldx%lld filter is larger than the %lldx%lld IFMAP", file,
                            lineno, (long long)l.filter_h, (long long)l.filter_w, (long long)l.ifmap_h,
                            (long long)l.ifmap_w);
                goto fail;
            }
        }
        int64_t M, N, K;
        tim_conv cv = {l.ifmap_h, l.ifmap_w, l.filter_h, l.filter_w, l.channels, l.filters, l.stride_h, l.stride_w};
        if (tim_conv_to_gemm(&cv, &M, &N, &K) != TPU_OK) {
            st = ut_err(ctx, TPU_ERR_PARSE, "%s:%d: layer too large (its GEMM dimensions exceed %lld)", file, lineno,
                        (long long)TIM_SYSTOLIC_MAX_DIM);
            goto fail;
        }
        /* Depth-wise layers: SCALE-Sim runs one single-channel layer per channel, named <name>Channel_<i>. */
        bool dp = false;
        for (size_t i = 0; !gemm && i + 1 < f[0].n; i++)
            if (f[0].p[i] == 'D' && f[0].p[i + 1] == 'P') dp = true;
        int64_t copies = dp ? l.channels : 1;
        if (dp) {
            if (copies > 100000) {
                st = ut_err(ctx, TPU_ERR_PARSE, "%s:%d: depth-wise layer with %lld channels (limit 100000)", file,
                            lineno, (long long)copies);
                goto fail;
            }
            l.channels = 1;
        }
        for (int64_t c = 0; c < copies; c++) {
            ss_layer x = l;
            ut_buf nb;
            ut_buf_init(&nb);
            ut_buf_put(&nb, f[0].p, f[0].n);
            if (dp) ut_buf_printf(&nb, "Channel_%lld", (long long)c);
            x.name = ut_buf_take(&nb);
            if (!x.name) { st = ut_nomem(ctx); goto fail; }
            if ((st = ss_topo_push(ctx, out, &x)) != TPU_OK) { ut_free(x.name); goto fail; }
        }
    }
    return TPU_OK;
fail:
    ss_topology_free(out);
    return st;
}

tpu_status ss_topology_load(tpu_ctx *ctx, const char *path, bool gemm, ss_topology *out)
{
    char *text = NULL;
    size_t len = 0;
    memset(out, 0, sizeof *out);
    tpu_status st = ut_read_text(ctx, path, &text, &len);
    if (st != TPU_OK) return st;
    st = ss_topology_parse(ctx, text, len, path, gemm, out);
    ut_free(text);
    return st;
}
