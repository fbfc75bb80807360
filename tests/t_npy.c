/* t_npy.c — .npy/.npz: files written by numpy/ml_dtypes (tests/golden/make_npy_golden.py), round trips,
 * byte-identical output, malformed inputs, and allocation failure. */
#include "test.h"
#include "io/io.h"

#include <stdlib.h>
#include <unistd.h>
#include <zlib.h>

#define GOLD "tests/golden/npy/"

static char *npy_t_read(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    size_t r;
    while ((r = fread(b + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) b = realloc(b, cap *= 2);
    }
    fclose(f);
    *len = n;
    return b;
}

static char npy_t_dir[64];
static void npy_t_rmdir(void) { rmdir(npy_t_dir); }

/* A private directory for this run's files (removed at exit; the tests unlink what they write). */
static const char *npy_t_tmpdir(void)
{
    if (!npy_t_dir[0]) {
        snprintf(npy_t_dir, sizeof npy_t_dir, "/tmp/tpusim-npy-XXXXXX");
        if (mkdtemp(npy_t_dir)) atexit(npy_t_rmdir);
        else snprintf(npy_t_dir, sizeof npy_t_dir, "/tmp");
    }
    return npy_t_dir;
}

static const char *npy_t_tmp(const char *name)
{
    static char buf[4][256];
    static int slot;
    char *b = buf[slot++ % 4];
    snprintf(b, 256, "%s/%s", npy_t_tmpdir(), name);
    return b;
}

/* Finds member `name` of an npz (NULL if absent). */
static tpu_tensor *npy_t_member(tpu_tensor **ts, char **ns, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(ns[i], name) == 0) return ts[i];
    return NULL;
}

/* Checks one MANIFEST array line against the loaded tensor. */
static void npy_t_check_line(const char *file, tpu_tensor *t, char *rest)
{
    char *tok = strtok(rest, " ");
    CHECK_MSG(tok && strcmp(tok, tpu_dtype_name(tpu_tensor_dtype(t))) == 0, "%s: dtype %s, want %s", file,
              tpu_dtype_name(tpu_tensor_dtype(t)), tok ? tok : "?");
    int rank = atoi(strtok(NULL, " "));
    CHECK_MSG(rank == tpu_tensor_rank(t), "%s: rank %d, want %d", file, tpu_tensor_rank(t), rank);
    for (int i = 0; i < rank; i++) {
        long long d = atoll(strtok(NULL, " "));
        if (i < tpu_tensor_rank(t)) CHECK_MSG(d == tpu_tensor_dims(t)[i], "%s: dim %d", file, i);
    }
    strtok(NULL, " ");   /* ":" */
    tpu_dtype dt = tpu_tensor_dtype(t);
    int cplx = tpu_dtype_kind(dt) == 'c';
    int64_t n = tpu_tensor_count(t) * (cplx ? 2 : 1), k = 0;
    for (char *v; (v = strtok(NULL, " \n")); k++) {
        double want = strtod(v, NULL), got;
        if (k >= n) break;
        if (dt == TPU_C64) got = ((const float *)tpu_tensor_cdata(t))[k];
        else if (dt == TPU_C128) got = ((const double *)tpu_tensor_cdata(t))[k];
        else got = tpu_tensor_get_f64(t, k);
        CHECK_MSG(got == want, "%s: element %lld is %.17g, want %.17g", file, (long long)k, got, want);
    }
    CHECK_MSG(k == n, "%s: %lld values listed, tensor has %lld", file, (long long)k, (long long)n);
}

TEST(npy_golden_files_from_numpy)
{
    size_t len;
    char *man = npy_t_read(GOLD "MANIFEST.txt", &len);
    REQUIRE(man);
    man = realloc(man, len + 1);
    man[len] = 0;
    tpu_ctx *ctx = tpu_ctx_new();
    int lines = 0;
    char *save = NULL;
    for (char *line = strtok_r(man, "\n", &save); line; line = strtok_r(NULL, "\n", &save), lines++) {
        char path[512], file[256];
        if (strncmp(line, "error ", 6) == 0) {
            char *sp = strchr(line + 6, ' ');
            snprintf(file, sizeof file, "%.*s", (int)(sp - line - 6), line + 6);
            snprintf(path, sizeof path, GOLD "%s", file);
            tpu_status st;
            if (strstr(file, ".npz")) {
                tpu_tensor **ts;
                char **ns;
                int n;
                st = tpu_npz_load(ctx, path, &ts, &ns, &n);
                CHECK(ts == NULL && ns == NULL && n == 0);
            } else {
                tpu_tensor *t = (tpu_tensor *)1;
                st = tpu_npy_load(ctx, path, &t);
                CHECK(t == NULL);
            }
            CHECK_MSG(st != TPU_OK, "%s loaded", file);
            CHECK_MSG(strstr(tpu_errmsg(ctx), sp + 1) && strstr(tpu_errmsg(ctx), path), "%s: message \"%s\"", file,
                      tpu_errmsg(ctx));
            continue;
        }
        if (strncmp(line, "order ", 6) == 0) {
            char *names = line + 6, *sp = strchr(names, ' ');
            snprintf(file, sizeof file, "%.*s", sp ? (int)(sp - names) : (int)strlen(names), names);
            snprintf(path, sizeof path, GOLD "%s", file);
            tpu_tensor **ts = NULL;
            char **ns = NULL;
            int n = -1;
            CHECK_OK(ctx, tpu_npz_load(ctx, path, &ts, &ns, &n));
            int k = 0;
            for (char *p = sp; p && *p; k++) {
                p++;
                char *e = strchr(p, ' ');
                size_t l = e ? (size_t)(e - p) : strlen(p);
                CHECK_MSG(k < n && strlen(ns[k]) == l && memcmp(ns[k], p, l) == 0, "%s: member %d is '%s'", file, k,
                          k < n ? ns[k] : "(none)");
                p = e;
            }
            CHECK_MSG(k == n, "%s: %d members, want %d", file, n, k);
            if (strcmp(file, "big.npz") == 0 && n == 1) {
                CHECK_EQ_INT(tpu_tensor_count(ts[0]), 70000);
                for (int64_t i = 0; i < 70000; i++)
                    if (((const int32_t *)tpu_tensor_cdata(ts[0]))[i] != i % 1000) {
                        CHECK_MSG(0, "big.npz element %lld", (long long)i);
                        break;
                    }
            }
            tpu_tensors_free(ts, n);
            tpu_names_free(ns, n);
            continue;
        }
        char *sp = strchr(line, ' ');
        REQUIRE(sp);
        *sp = 0;
        snprintf(file, sizeof file, "%s", line);
        char *hash = strchr(file, '#');
        if (hash) *hash = 0;
        snprintf(path, sizeof path, GOLD "%s", file);
        if (hash) {
            tpu_tensor **ts = NULL;
            char **ns = NULL;
            int n = 0;
            REQUIRE_OK(ctx, tpu_npz_load(ctx, path, &ts, &ns, &n));
            tpu_tensor *t = npy_t_member(ts, ns, n, hash + 1);
            CHECK_MSG(t != NULL, "%s: no member %s", file, hash + 1);
            if (t) npy_t_check_line(line, t, sp + 1);
            tpu_tensors_free(ts, n);
            tpu_names_free(ns, n);
        } else {
            tpu_tensor *t = NULL;
            CHECK_OK(ctx, tpu_npy_load(ctx, path, &t));
            if (t) npy_t_check_line(file, t, sp + 1);
            tpu_tensor_free(t);
        }
    }
    CHECK(lines > 60);
    free(man);
    tpu_ctx_free(ctx);
}

/* tpusim writes the same bytes numpy does for C-order little-endian arrays (bf16 and the named 1-byte
 * types included), so numpy reads tpusim's files as it reads its own. */
TEST(npy_save_is_byte_identical_to_numpy)
{
    static const char *files[] = {"pred.npy", "s8.npy", "s16.npy", "s32.npy", "s64.npy", "u8.npy", "u16.npy",
                                  "u32.npy", "u64.npy", "f16.npy", "f32.npy", "f64.npy", "c64.npy", "c128.npy",
                                  "bf16.npy", "bf16_special.npy", "f8e4m3fn.npy", "f8e5m2.npy", "f8e4m3b11fnuz.npy",
                                  "f8e5m2fnuz.npy", "f8e4m3fnuz.npy", "f8e4m3.npy", "f8e3m4.npy", "f4e2m1fn.npy",
                                  "f8e8m0fnu.npy", "s4.npy", "u4.npy", "s2.npy", "u2.npy", "scalar_f64.npy",
                                  "empty_f32.npy", "empty2_s32.npy", "vec_u8.npy"};
    tpu_ctx *ctx = tpu_ctx_new();
    for (int i = 0; i < (int)(sizeof files / sizeof files[0]); i++) {
        char path[256];
        snprintf(path, sizeof path, GOLD "%s", files[i]);
        tpu_tensor *t = NULL;
        REQUIRE_OK(ctx, tpu_npy_load(ctx, path, &t));
        const char *out = npy_t_tmp("same.npy");
        CHECK_OK(ctx, tpu_npy_save(ctx, out, t));
        size_t la, lb;
        char *a = npy_t_read(path, &la), *b = npy_t_read(out, &lb);
        CHECK_MSG(a && b && la == lb && memcmp(a, b, la) == 0, "%s: tpusim's bytes differ from numpy's", files[i]);
        /* and the in-memory loader agrees with the file loader */
        tpu_tensor *m = NULL;
        CHECK_OK(ctx, tpu_npy_load_mem(ctx, a, la, files[i], &m));
        CHECK(m && tpu_tensor_nbytes(m) == tpu_tensor_nbytes(t) &&
              memcmp(tpu_tensor_cdata(m), tpu_tensor_cdata(t), tpu_tensor_nbytes(t)) == 0);
        tpu_tensor_free(m);
        free(a);
        free(b);
        tpu_tensor_free(t);
        unlink(out);
    }
    tpu_ctx_free(ctx);
}

/* A tensor of every array dtype with varied bit patterns, through .npy and both kinds of .npz. */
TEST(npy_npz_roundtrip_every_dtype)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_tensor *ts[TPU_DTYPE_COUNT];
    char names[TPU_DTYPE_COUNT][32];
    const char *nameps[TPU_DTYPE_COUNT];
    int n = 0;
    for (int d = 1; d < TPU_DTYPE_COUNT; d++) {
        if (tpu_dtype_kind((tpu_dtype)d) == 'o') continue;
        int64_t dims[3] = {3, 1, 5};
        tpu_tensor *t = NULL;
        REQUIRE_OK(ctx, tpu_tensor_new(ctx, (tpu_dtype)d, 3, dims, &t));
        uint8_t *p = tpu_tensor_data(t);
        for (size_t i = 0; i < tpu_tensor_nbytes(t); i++) p[i] = (uint8_t)(i * 37 + d);
        /* sub-byte types and pred keep only their bits */
        for (int64_t i = 0; i < tpu_tensor_count(t); i++) ten_store_i64((tpu_dtype)d, p, i, ten_load_i64((tpu_dtype)d, p, i));
        if (d == TPU_F4E2M1FN) for (int64_t i = 0; i < 15; i++) p[i] &= 15;
        char path[64];
        snprintf(path, sizeof path, "rt_%s.npy", tpu_dtype_name((tpu_dtype)d));
        CHECK_OK(ctx, tpu_npy_save(ctx, npy_t_tmp(path), t));
        tpu_tensor *b = NULL;
        CHECK_OK(ctx, tpu_npy_load(ctx, npy_t_tmp(path), &b));
        CHECK_MSG(b && (int)tpu_tensor_dtype(b) == d && tpu_tensor_rank(b) == 3 && tpu_tensor_dims(b)[2] == 5 &&
                  memcmp(tpu_tensor_cdata(b), p, tpu_tensor_nbytes(t)) == 0, "%s does not round-trip",
                  tpu_dtype_name((tpu_dtype)d));
        tpu_tensor_free(b);
        unlink(npy_t_tmp(path));
        snprintf(names[n], sizeof names[n], "t_%s", tpu_dtype_name((tpu_dtype)d));
        nameps[n] = names[n];
        ts[n++] = t;
    }
    for (int compress = 0; compress < 2; compress++) {
        const char *path = npy_t_tmp(compress ? "rt_c.npz" : "rt_s.npz");
        REQUIRE_OK(ctx, tpu_npz_save(ctx, path, ts, nameps, n, compress));
        tpu_tensor **back = NULL;
        char **bn = NULL;
        int m = 0;
        REQUIRE_OK(ctx, tpu_npz_load(ctx, path, &back, &bn, &m));
        CHECK_EQ_INT(m, n);
        for (int i = 0; i < m && i < n; i++) {
            CHECK_EQ_STR(bn[i], names[i]);
            CHECK(tpu_tensor_dtype(back[i]) == tpu_tensor_dtype(ts[i]) &&
                  memcmp(tpu_tensor_cdata(back[i]), tpu_tensor_cdata(ts[i]), tpu_tensor_nbytes(ts[i])) == 0);
        }
        /* the same archive from memory */
        size_t len;
        char *buf = npy_t_read(path, &len);
        tpu_tensor **mt = NULL;
        char **mn = NULL;
        int mc = 0;
        CHECK_OK(ctx, io_npz_load_mem(ctx, buf, len, "mem.npz", NULL, NULL, &mt, &mn, &mc));
        CHECK_EQ_INT(mc, n);
        tpu_tensors_free(mt, mc);
        tpu_names_free(mn, mc);
        free(buf);
        tpu_tensors_free(back, m);
        tpu_names_free(bn, m);
        unlink(path);
    }
    /* zip64 records everywhere, as an archive past 4 GiB has them */
    io_npz_force_zip64(1);
    const char *p64 = npy_t_tmp("z64.npz");
    CHECK_OK(ctx, tpu_npz_save(ctx, p64, ts, nameps, n, 1));
    io_npz_force_zip64(0);
    tpu_tensor **z64 = NULL;
    char **z64n = NULL;
    int z64c = 0;
    CHECK_OK(ctx, tpu_npz_load(ctx, p64, &z64, &z64n, &z64c));
    CHECK_EQ_INT(z64c, n);
    for (int i = 0; i < z64c && i < n; i++)
        CHECK(memcmp(tpu_tensor_cdata(z64[i]), tpu_tensor_cdata(ts[i]), tpu_tensor_nbytes(ts[i])) == 0);
    tpu_tensors_free(z64, z64c);
    tpu_names_free(z64n, z64c);
    unlink(p64);
    /* default names and an empty archive */
    const char *path = npy_t_tmp("noname.npz");
    CHECK_OK(ctx, tpu_npz_save(ctx, path, ts, NULL, 2, 1));
    tpu_tensor **back = NULL;
    char **bn = NULL;
    int m = 0;
    CHECK_OK(ctx, tpu_npz_load(ctx, path, &back, &bn, &m));
    CHECK(m == 2 && strcmp(bn[0], "arr_0") == 0 && strcmp(bn[1], "arr_1") == 0);
    tpu_tensors_free(back, m);
    tpu_names_free(bn, m);
    CHECK_OK(ctx, tpu_npz_save(ctx, path, NULL, NULL, 0, 0));
    CHECK_OK(ctx, tpu_npz_load(ctx, path, &back, &bn, &m));
    CHECK_EQ_INT(m, 0);
    tpu_tensors_free(back, m);
    tpu_names_free(bn, m);
    unlink(path);
    for (int i = 0; i < n; i++) tpu_tensor_free(ts[i]);
    tpu_ctx_free(ctx);
}

TEST(npz_save_errors)
{
    tpu_ctx *ctx = tpu_ctx_new();
    int64_t d = 2;
    tpu_tensor *t = NULL;
    REQUIRE_OK(ctx, tpu_tensor_new(ctx, TPU_F32, 1, &d, &t));
    tpu_tensor *two[2] = {t, t};
    const char *same[2] = {"x", "x"};
    CHECK_EQ_INT(tpu_npz_save(ctx, npy_t_tmp("dup.npz"), two, same, 2, 0), TPU_ERR_INVALID);
    CHECK(strstr(tpu_errmsg(ctx), "two tensors are named 'x'") != NULL);
    CHECK(access(npy_t_tmp("dup.npz"), F_OK) != 0);
    tpu_tensor *none[1] = {NULL};
    CHECK_EQ_INT(tpu_npz_save(ctx, npy_t_tmp("null.npz"), none, NULL, 1, 0), TPU_ERR_INVALID);
    CHECK_EQ_INT(tpu_npz_save(ctx, "/nonexistent-dir/x.npz", two, NULL, 1, 0), TPU_ERR_IO);
    CHECK(strstr(tpu_errmsg(ctx), "/nonexistent-dir/x.npz: cannot create") != NULL);
    CHECK_EQ_INT(tpu_npy_save(ctx, "/nonexistent-dir/x.npy", t), TPU_ERR_IO);
    CHECK_EQ_INT(tpu_npy_load(ctx, "/nonexistent-dir/x.npy", &t), TPU_ERR_IO);
    CHECK(t == NULL);
    CHECK(strstr(tpu_errmsg(ctx), "/nonexistent-dir/x.npy: cannot open") != NULL);
    tpu_tensor_free(two[0]);
    tpu_ctx_free(ctx);
}

/* A bare '|V1' says nothing about which 1-byte type it holds; the caller can say. */
TEST(npy_bare_void1_with_a_hint)
{
    tpu_ctx *ctx = tpu_ctx_new();
    io_npy_opts o = {TPU_F8E4M3FN, NULL, NULL, NULL, 0};
    tpu_tensor *t = NULL;
    REQUIRE_OK(ctx, io_npy_load_opts(ctx, GOLD "bare_v1.npy", &o, &t));
    CHECK(tpu_tensor_dtype(t) == TPU_F8E4M3FN && tpu_tensor_count(t) == 2);
    CHECK(tpu_tensor_get_f64(t, 0) == 1.0 && tpu_tensor_get_f64(t, 1) == 2.0);
    tpu_tensor_free(t);
    o.void1_as = TPU_F32;   /* not a 1-byte type: still refused */
    CHECK_EQ_INT(io_npy_load_opts(ctx, GOLD "bare_v1.npy", &o, &t), TPU_ERR_UNSUPPORTED);
    tpu_ctx_free(ctx);
}

/* Builds a .npy in memory from a header dict and n data bytes. */
static size_t npy_t_make(char *buf, const char *dict, size_t ndata)
{
    size_t hl = strlen(dict);
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (char)(hl & 0xFF);
    buf[9] = (char)(hl >> 8);
    memcpy(buf + 10, dict, hl);
    memset(buf + 10 + hl, 0x3F, ndata);
    return 10 + hl + ndata;
}

static void npy_t_expect_err(tpu_ctx *ctx, const char *dict, size_t ndata, tpu_status want, const char *text)
{
    char buf[1024];
    size_t n = npy_t_make(buf, dict, ndata);
    tpu_tensor *t = (tpu_tensor *)1;
    tpu_status st = tpu_npy_load_mem(ctx, buf, n, "bad.npy", &t);
    CHECK_MSG(st == want && t == NULL, "%s: status %s, want %s (%s)", dict, tpu_status_name(st),
              tpu_status_name(want), tpu_errmsg(ctx));
    CHECK_MSG(strstr(tpu_errmsg(ctx), text) && strncmp(tpu_errmsg(ctx), "bad.npy: ", 9) == 0,
              "%s: message \"%s\" lacks \"%s\"", dict, tpu_errmsg(ctx), text);
}

TEST(npy_malformed_headers_give_clean_errors)
{
    tpu_ctx *ctx = tpu_ctx_new();
    const tpu_status P = TPU_ERR_PARSE, U = TPU_ERR_UNSUPPORTED;
    npy_t_expect_err(ctx, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 7, P, "needs 8 bytes of data, 7");
    npy_t_expect_err(ctx, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 9, P, "1 bytes follow the data");
    npy_t_expect_err(ctx, "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", 0, P, "non-negative integer");
    npy_t_expect_err(ctx, "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }", 0, P,
                     "too large");
    npy_t_expect_err(ctx, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 0, P,
                     "dimension too large");
    npy_t_expect_err(ctx, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1,1,1,1,1), }", 4, U,
                     "more than 12 dimensions");
    npy_t_expect_err(ctx, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", 8, P,
                     "unexpected key 'x'");
    npy_t_expect_err(ctx, "{'descr': '<f4', 'shape': (2,), }", 8, P, "missing key 'fortran_order'");
    npy_t_expect_err(ctx, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 8, P,
                     "given twice");
    npy_t_expect_err(ctx, "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,)}", 8, P, "True or False");
    npy_t_expect_err(ctx, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} junk", 8, P, "after the header");
    npy_t_expect_err(ctx, "{'descr': '<f4, 'fortran_order': False, 'shape': (2,)}", 8, P, "offset");
    npy_t_expect_err(ctx, "{'descr': '<U3', 'fortran_order': False, 'shape': (2,)}", 24, U, "unsupported dtype '<U3'");
    npy_t_expect_err(ctx, "{'descr': '|O', 'fortran_order': False, 'shape': (2,)}", 16, U, "unsupported dtype '|O'");
    npy_t_expect_err(ctx, "{'descr': '<M8[ns]', 'fortran_order': False, 'shape': (2,)}", 16, U, "'<M8[ns]'");
    npy_t_expect_err(ctx, "{'descr': [('a', '<f4'), ('b', '<f4')], 'fortran_order': False, 'shape': (2,)}", 16, U,
                     "2 fields");
    npy_t_expect_err(ctx, "{'descr': [('float8_e4m3fn', '|V2')], 'fortran_order': False, 'shape': (2,)}", 4, U,
                     "1-byte void");
    npy_t_expect_err(ctx, "{'descr': [('mystery', '|V1')], 'fortran_order': False, 'shape': (2,)}", 2, U,
                     "unsupported structured dtype");
    npy_t_expect_err(ctx, "{'descr': [('a', '<f4', (2,))], 'fortran_order': False, 'shape': (2,)}", 16, U,
                     "has a shape");
    npy_t_expect_err(ctx, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,", 0, P, "expected");
    npy_t_expect_err(ctx, "", 0, P, "expected '{'");

    /* preamble problems */
    tpu_tensor *t = NULL;
    CHECK_EQ_INT(tpu_npy_load_mem(ctx, "PK\3\4", 4, "x.npy", &t), P);
    CHECK(strstr(tpu_errmsg(ctx), "x.npy: not a .npy file") != NULL);
    CHECK_EQ_INT(tpu_npy_load_mem(ctx, "\x93NUMPY\x04\x00\x10\x00", 10, "x.npy", &t), U);
    CHECK(strstr(tpu_errmsg(ctx), "version 4.0") != NULL);
    CHECK_EQ_INT(tpu_npy_load_mem(ctx, "\x93NUMPY\x02\x00\xff\xff\xff\x7f", 12, "x.npy", &t), P);
    CHECK(strstr(tpu_errmsg(ctx), "absurd") != NULL);
    CHECK_EQ_INT(tpu_npy_load_mem(ctx, "\x93NUMPY\x01\x00\xff\x00{", 11, "x.npy", &t), P);
    CHECK(strstr(tpu_errmsg(ctx), "truncated") != NULL);
    CHECK_EQ_INT(tpu_npy_load_mem(ctx, NULL, 0, "x.npy", &t), P);
    CHECK(t == NULL);

    /* a source of unknown size (a pipe): trailing bytes are still noticed */
    char buf[256];
    size_t n = npy_t_make(buf, "{'descr': '<i2', 'fortran_order': False, 'shape': (3,), }", 7);
    io_src s;
    memset(&s, 0, sizeof s);
    s.ctx = ctx, s.what = "pipe", s.mem = (const uint8_t *)buf, s.len = n;
    CHECK_EQ_INT(io_npy_read(&s, UINT64_MAX, NULL, &t), P);
    CHECK(strstr(tpu_errmsg(ctx), "more bytes follow") != NULL);
    memset(&s, 0, sizeof s);
    s.ctx = ctx, s.what = "pipe", s.mem = (const uint8_t *)buf, s.len = n - 1;
    CHECK_OK(ctx, io_npy_read(&s, UINT64_MAX, NULL, &t));
    CHECK(t && tpu_tensor_count(t) == 3);
    tpu_tensor_free(t);
    memset(&s, 0, sizeof s);
    s.ctx = ctx, s.what = "pipe", s.mem = (const uint8_t *)buf, s.len = n - 2;
    CHECK_EQ_INT(io_npy_read(&s, UINT64_MAX, NULL, &t), P);
    CHECK(strstr(tpu_errmsg(ctx), "pipe: truncated") != NULL);
    tpu_ctx_free(ctx);
}

/* Every prefix of a good file is an error, never a crash; so is every single flipped byte (or, where the
 * flip lands in a field nobody checks, a clean load). */
TEST(npy_npz_truncated_and_corrupted_inputs)
{
    static const char *files[] = {"f32.npy", "fortran_be_s64.npy", "v2_s32.npy", "v3_s32.npy", "f8e4m3fn.npy",
                                  "stored.npz", "deflated.npz", "descriptor.npz", "positional.npz"};
    tpu_ctx *ctx = tpu_ctx_new();
    for (int f = 0; f < (int)(sizeof files / sizeof files[0]); f++) {
        char path[256];
        snprintf(path, sizeof path, GOLD "%s", files[f]);
        size_t len;
        char *full = npy_t_read(path, &len);
        REQUIRE(full);
        int npz = strstr(files[f], ".npz") != NULL;
        for (int flip = 0; flip < 2; flip++) {
            size_t steps = flip ? len : len + 1;
            for (size_t k = 0; k < steps; k++) {
                size_t n = flip ? len : k;
                char *b = malloc(n ? n : 1);   /* exact size, so ASan sees any overread */
                memcpy(b, full, n);
                if (flip) b[k] ^= 0x5A;
                tpu_status st;
                if (npz) {
                    tpu_tensor **ts;
                    char **ns;
                    int c;
                    st = io_npz_load_mem(ctx, b, n, files[f], NULL, NULL, &ts, &ns, &c);
                    if (st == TPU_OK) {
                        tpu_tensors_free(ts, c);
                        tpu_names_free(ns, c);
                    }
                } else {
                    tpu_tensor *t;
                    st = tpu_npy_load_mem(ctx, b, n, files[f], &t);
                    tpu_tensor_free(t);
                }
                if (!flip && n < len)
                    CHECK_MSG(st != TPU_OK && strstr(tpu_errmsg(ctx), files[f]),
                              "%s cut to %zu bytes: %s \"%s\"", files[f], n, tpu_status_name(st), tpu_errmsg(ctx));
                if (!flip && n == len) CHECK_MSG(st == TPU_OK, "%s: %s", files[f], tpu_errmsg(ctx));
                free(b);
            }
        }
        free(full);
    }
    tpu_ctx_free(ctx);
}

/* Hand-made archive damage that a byte flip rarely produces. */
TEST(npz_bad_offsets_sizes_and_crc)
{
    tpu_ctx *ctx = tpu_ctx_new();
    size_t len;
    char *good = npy_t_read(GOLD "stored.npz", &len);
    REQUIRE(good);
    /* find the central directory from the end record */
    size_t eocd = len - 22;
    REQUIRE((uint8_t)good[eocd] == 'P' && good[eocd + 1] == 'K' && good[eocd + 2] == 5);
    uint32_t cd_off = (uint8_t)good[eocd + 16] | (uint8_t)good[eocd + 17] << 8 | (uint8_t)good[eocd + 18] << 16;
    char *b = malloc(len);
    tpu_tensor **ts;
    char **ns;
    int c;
    struct { size_t at; uint8_t v; const char *msg; } cases[] = {
        {eocd + 16, 0xF0, "central directory"},    /* directory offset past the end */
        {eocd + 10, 0x7F, "entries cannot fit"},   /* absurd entry count */
        {cd_off + 45, 0x7F, "lies outside"},       /* local header offset past the end */
        {cd_off + 10, 12, "compression method 12"},
        {cd_off + 8, 1, "encrypted"},
        {cd_off + 16, 0xFF, "CRC-32 mismatch"},
        {cd_off + 24, 0x01, "different sizes"},
    };
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        memcpy(b, good, len);
        b[cases[i].at] = (char)(b[cases[i].at] ^ cases[i].v);
        if (cases[i].v == 12 || cases[i].v == 1) b[cases[i].at] = (char)cases[i].v;
        CHECK_MSG(io_npz_load_mem(ctx, b, len, "x.npz", NULL, NULL, &ts, &ns, &c) != TPU_OK, "case %d loaded", i);
        CHECK_MSG(strstr(tpu_errmsg(ctx), cases[i].msg) && strncmp(tpu_errmsg(ctx), "x.npz", 5) == 0,
                  "case %d: \"%s\"", i, tpu_errmsg(ctx));
    }
    /* the second entry pointing at the first member's bytes */
    memcpy(b, good, len);
    size_t e1 = cd_off + 46 + (uint8_t)b[cd_off + 28] + (uint8_t)b[cd_off + 30] + (uint8_t)b[cd_off + 32];
    REQUIRE(b[e1] == 'P' && b[e1 + 1] == 'K');
    memcpy(b + e1 + 42, b + cd_off + 42, 4);
    CHECK(io_npz_load_mem(ctx, b, len, "x.npz", NULL, NULL, &ts, &ns, &c) == TPU_ERR_PARSE);
    CHECK(strstr(tpu_errmsg(ctx), "overlap") != NULL);
    CHECK_EQ_INT(io_npz_load_mem(ctx, "not a zip at all, just text that goes on", 40, "t.npz", NULL, NULL, &ts, &ns, &c),
                 TPU_ERR_PARSE);
    CHECK(strstr(tpu_errmsg(ctx), "t.npz: not a zip archive") != NULL);
    free(b);
    free(good);

    /* a deflated member whose compressed data are cut short, and one claiming an impossible size */
    good = npy_t_read(GOLD "big.npz", &len);
    REQUIRE(good);
    b = malloc(len);
    memcpy(b, good, len);
    eocd = len - 22;
    cd_off = (uint8_t)b[eocd + 16] | (uint8_t)b[eocd + 17] << 8 | (uint8_t)b[eocd + 18] << 16;
    b[cd_off + 20] = 10, b[cd_off + 21] = 0, b[cd_off + 22] = 0, b[cd_off + 23] = 0;   /* csize 10 */
    CHECK(io_npz_load_mem(ctx, b, len, "b.npz", NULL, NULL, &ts, &ns, &c) != TPU_OK);
    CHECK(strstr(tpu_errmsg(ctx), "claims") != NULL);
    memcpy(b, good, len);
    b[200] ^= 0x55;   /* inside the deflate stream */
    CHECK(io_npz_load_mem(ctx, b, len, "b.npz", NULL, NULL, &ts, &ns, &c) != TPU_OK);
    CHECK(strstr(tpu_errmsg(ctx), "b.npz: member 'big.npy'") != NULL);
    free(b);
    free(good);
    tpu_ctx_free(ctx);
}

/* ---- allocation failure ---- */

static int npy_t_fail_at, npy_t_calls;
static void *npy_t_malloc(size_t n, void *u)
{
    (void)u;
    return ++npy_t_calls == npy_t_fail_at ? NULL : malloc(n);
}
static void *npy_t_realloc(void *p, size_t n, void *u)
{
    (void)u;
    return ++npy_t_calls == npy_t_fail_at ? NULL : realloc(p, n);
}
static void npy_t_free(void *p, void *u)
{
    (void)u;
    free(p);
}

/* Fails allocation 1, 2, 3, ... of an npz load (and save) in turn: each must report TPU_ERR_NOMEM and leak
 * nothing (ASan's leak checker runs at exit). */
TEST(npz_load_fails_each_allocation_cleanly)
{
    tpu_allocator a = {npy_t_malloc, npy_t_realloc, npy_t_free, NULL};
    tpu_ctx *ctx = tpu_ctx_new();
    const char *files[] = {GOLD "deflated.npz", GOLD "stored.npz"};
    for (int f = 0; f < 2; f++) {
        int ok = 0;
        for (npy_t_fail_at = 1; npy_t_fail_at < 500 && !ok; npy_t_fail_at++) {
            npy_t_calls = 0;
            tpu_tensor **ts = NULL;
            char **ns = NULL;
            int c = 0;
            tpu_set_allocator(&a);
            tpu_status st = tpu_npz_load(ctx, files[f], &ts, &ns, &c);
            tpu_set_allocator(NULL);
            if (st == TPU_OK) {
                ok = 1;
                CHECK_EQ_INT(c, 5);
                tpu_tensors_free(ts, c);
                tpu_names_free(ns, c);
            } else {
                CHECK_MSG(st == TPU_ERR_NOMEM, "%s, failing allocation %d: %s (%s)", files[f], npy_t_fail_at,
                          tpu_status_name(st), tpu_errmsg(ctx));
                CHECK(ts == NULL && ns == NULL && c == 0);
            }
        }
        CHECK_MSG(ok && npy_t_fail_at > 10, "%s: loaded after %d allocations", files[f], npy_t_fail_at);
    }
    /* saving too */
    tpu_tensor **ts = NULL;
    char **ns = NULL;
    int c = 0;
    REQUIRE_OK(ctx, tpu_npz_load(ctx, GOLD "deflated.npz", &ts, &ns, &c));
    const char *out = npy_t_tmp("nomem.npz");
    int ok = 0;
    for (npy_t_fail_at = 1; npy_t_fail_at < 500 && !ok; npy_t_fail_at++) {
        npy_t_calls = 0;
        tpu_set_allocator(&a);
        tpu_status st = tpu_npz_save(ctx, out, ts, (const char *const *)ns, c, 1);
        tpu_set_allocator(NULL);
        if (st == TPU_OK) ok = 1;
        else CHECK_MSG(st == TPU_ERR_NOMEM, "save, failing allocation %d: %s", npy_t_fail_at, tpu_errmsg(ctx));
    }
    CHECK(ok);
    unlink(out);
    tpu_tensors_free(ts, c);
    tpu_names_free(ns, c);
    tpu_ctx_free(ctx);
}
