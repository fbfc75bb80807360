/* t_fuzz_regress.c — replays every file under fuzz/regress/ through the reader it once crashed, in the normal
 * build, so `make test` keeps covering them: fuzz/regress/hlo/ (HLO and HloModuleProto text: parse, and when
 * it parses, print -> parse -> equal), fuzz/regress/hlo_proto/ (binary HloModuleProto, the same checks),
 * fuzz/regress/npy/ (.npy and .npz readers). Other directories are replayed through every reader. */
#include "test.h"
#include "hlo/hlo.h"

#include <dirent.h>
#include <stdlib.h>

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t k = fread(buf + n, 1, cap - n, f);
        n += k;
        if (n < cap) break;
        char *nb = realloc(buf, cap * 2 + 1);
        if (!nb) { free(buf); buf = NULL; break; }
        buf = nb;
        cap *= 2;
    }
    fclose(f);
    if (buf) buf[n] = 0;
    *len = n;
    return buf;
}

static void replay_hlo(tpu_ctx *ctx, const char *path, const char *data, size_t len, int binary)
{
    tpu_module *m = NULL;
    tpu_status st0 = binary ? tpu_module_parse_proto(ctx, data, len, path, &m)
                            : tpu_module_parse(ctx, data, len, path, &m);
    if (st0 != TPU_OK) return;   /* an error is fine; a crash is not */
    char *s1 = NULL, *s2 = NULL;
    tpu_module *m2 = NULL;
    REQUIRE_OK(ctx, tpu_module_to_string(ctx, m, &s1));
    tpu_status st = tpu_module_parse(ctx, s1, strlen(s1), "printed", &m2);
    CHECK_MSG(st == TPU_OK, "%s: the printed module does not parse: %s", path, tpu_errmsg(ctx));
    if (st == TPU_OK) {
        char why[256] = "";
        CHECK_MSG(hlo_module_equal(m, m2, why, sizeof why), "%s: printed module differs: %s", path, why);
        if (tpu_module_to_string(ctx, m2, &s2) == TPU_OK) CHECK_MSG(!strcmp(s1, s2), "%s: second print differs", path);
    }
    tpu_report *r = NULL;
    if (tpu_check(ctx, m, NULL, &r) == TPU_OK) CHECK(tpu_report_text(r)[0] != 0);
    tpu_report_free(r);
    tpu_free(s1);
    tpu_free(s2);
    tpu_module_free(m);
    tpu_module_free(m2);
}

static void replay_npy(tpu_ctx *ctx, const char *path, const char *data, size_t len)
{
    tpu_tensor *t = NULL;
    if (tpu_npy_load_mem(ctx, data, len, path, &t) == TPU_OK) {
        volatile double sink = 0;
        for (int64_t i = 0; i < tpu_tensor_count(t); i++) sink += tpu_tensor_get_f64(t, i);
        (void)sink;
    }
    tpu_tensor_free(t);
    tpu_tensor **ts = NULL;
    char **names = NULL;
    int n = 0;
    if (tpu_npz_load(ctx, path, &ts, &names, &n) == TPU_OK) {
        tpu_tensors_free(ts, n);
        tpu_names_free(names, n);
    }
}

TEST(fuzz_regress_files)
{
    DIR *top = opendir("fuzz/regress");
    REQUIRE(top != NULL);   /* run from the repository root */
    tpu_ctx *ctx = tpu_ctx_new();
    int files = 0;
    struct dirent *e;
    while ((e = readdir(top))) {
        if (e->d_name[0] == '.') continue;
        char dir[512];
        snprintf(dir, sizeof dir, "fuzz/regress/%.200s", e->d_name);
        DIR *d = opendir(dir);
        if (!d) continue;
        struct dirent *f;
        int here = 0;
        while ((f = readdir(d))) {
            if (f->d_name[0] == '.') continue;
            char path[1024];
            snprintf(path, sizeof path, "%s/%.300s", dir, f->d_name);
            size_t len;
            char *data = read_all(path, &len);
            if (!data) continue;
            int is_hlo = !strcmp(e->d_name, "hlo"), is_npy = !strcmp(e->d_name, "npy");
            int is_pb = !strcmp(e->d_name, "hlo_proto");
            if (is_pb) replay_hlo(ctx, path, data, len, 1);
            else if (is_hlo || !is_npy) replay_hlo(ctx, path, data, len, 0);
            if (!is_pb && (is_npy || !is_hlo)) replay_npy(ctx, path, data, len);
            free(data);
            files++;
            here++;
        }
        closedir(d);
        CHECK_MSG(here > 0, "%s: no regression files to replay", dir);
    }
    closedir(top);
    tpu_ctx_free(ctx);
    fprintf(stderr, "  %d regression files replayed\n", files);
    CHECK_MSG(files > 0, "fuzz/regress: no regression files to replay");
}
