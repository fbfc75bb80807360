/* t_tensorboard.c — the profile as TensorBoard reads it (src/profile/xplane.c). First the XSpace itself,
 * decoded here with a small protobuf reader: device planes, their three lines, the op events adding up to the
 * predicted device time, and the stats the profile plugin reads. Then the real thing: TensorBoard with the
 * profile plugin from PyPI (build/tb-venv, `make tensorboard-venv`) started on 127.0.0.1 over a LOGDIR that
 * `tpusim profile --tensorboard` wrote, its pages loaded in headless Chromium: the overview names the chip,
 * the op profile lists tpusim's ops and the trace viewer's data holds them on the "XLA Ops" line. That test
 * skips, saying why, without TensorBoard or Chromium, and stops every process it starts. */
#include "test.h"
#include "test_browser.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *tb_hlo =
    "HloModule tb_mlp\n"
    "ENTRY main {\n"
    "  x = bf16[1024,512]{1,0} parameter(0)\n"
    "  w1 = bf16[512,2048]{1,0} parameter(1)\n"
    "  w2 = bf16[2048,256]{1,0} parameter(2)\n"
    "  h = bf16[1024,2048]{1,0} dot(x, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, "
    "metadata={op_type=\"dot_general\" op_name=\"jit(mlp)/dense1/dot_general\"}\n"
    "  e = bf16[1024,2048]{1,0} exponential(h), metadata={op_name=\"jit(mlp)/act/exp\"}\n"
    "  ROOT y = bf16[1024,256]{1,0} dot(e, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}, "
    "metadata={op_type=\"dot_general\" op_name=\"jit(mlp)/dense2/dot_general\"}\n"
    "}\n";

/* ---- a protobuf reader, enough to walk an XSpace ---- */

typedef struct pbr {
    const unsigned char *p, *end;
} pbr;

static int pb_varint(pbr *r, uint64_t *v)
{
    *v = 0;
    for (int s = 0; s < 64 && r->p < r->end; s += 7) {
        unsigned char c = *r->p++;
        *v |= (uint64_t)(c & 0x7f) << s;
        if (!(c & 0x80)) return 1;
    }
    return 0;
}

/* The next field: its number, wire type, and a varint/fixed value or a sub-range. 0 at the end or on bad input. */
static int pb_next(pbr *r, int *field, int *wire, uint64_t *v, pbr *sub)
{
    uint64_t key;
    if (r->p >= r->end || !pb_varint(r, &key)) return 0;
    *field = (int)(key >> 3), *wire = (int)(key & 7);
    if (*wire == 0) return pb_varint(r, v);
    if (*wire == 1 || *wire == 5) {
        size_t n = *wire == 1 ? 8 : 4;
        if ((size_t)(r->end - r->p) < n) return 0;
        *v = 0;
        for (size_t i = 0; i < n; i++) *v |= (uint64_t)r->p[i] << (8 * i);
        r->p += n;
        return 1;
    }
    if (*wire != 2 || !pb_varint(r, v) || *v > (uint64_t)(r->end - r->p)) return 0;
    sub->p = r->p, sub->end = r->p + *v;
    r->p += *v;
    return 1;
}

static int pb_is(const pbr *s, const char *str) { return (size_t)(s->end - s->p) == strlen(str) && !memcmp(s->p, str, strlen(str)); }

/* What the test looks at in one plane. */
typedef struct tb_plane {
    int    is_tpu, has_ops_line, has_steps_line, has_modules_line, op_events, meta_named_y, stat_names;
    double op_ps;            /* summed durations of the XLA Ops events */
    int    has_device_type;  /* plane stat device_type_string */
} tb_plane;

static void tb_line(pbr line, tb_plane *pl)
{
    int f, w, is_ops = 0;
    uint64_t v;
    pbr s;
    double sum = 0;
    int events = 0;
    while (pb_next(&line, &f, &w, &v, &s)) {
        if (f == 2 && w == 2) {
            if (pb_is(&s, "XLA Ops")) is_ops = 1, pl->has_ops_line = 1;
            if (pb_is(&s, "Steps")) pl->has_steps_line = 1;
            if (pb_is(&s, "XLA Modules")) pl->has_modules_line = 1;
        } else if (f == 4 && w == 2) {
            int f2, w2;
            uint64_t v2;
            pbr s2;
            events++;
            while (pb_next(&s, &f2, &w2, &v2, &s2))
                if (f2 == 3 && w2 == 0) sum += (double)v2;
        }
    }
    if (is_ops) pl->op_events = events, pl->op_ps = sum;
}

static void tb_plane_read(pbr plane, tb_plane *pl)
{
    int f, w;
    uint64_t v;
    pbr s;
    while (pb_next(&plane, &f, &w, &v, &s)) {
        if (f == 2 && w == 2 && s.end - s.p > 12 && !memcmp(s.p, "/device:TPU:", 12)) pl->is_tpu = 1;
        if (f == 3 && w == 2) tb_line(s, pl);
        if ((f == 4 || f == 5) && w == 2) {   /* map entries: key 1, value 2 (the metadata, its name in field 2) */
            int f2, w2, f3, w3;
            uint64_t v2, v3;
            pbr s2, s3;
            while (pb_next(&s, &f2, &w2, &v2, &s2))
                if (f2 == 2 && w2 == 2)
                    while (pb_next(&s2, &f3, &w3, &v3, &s3))
                        if (f3 == 2 && w3 == 2) {
                            if (f == 4 && pb_is(&s3, "y")) pl->meta_named_y = 1;
                            if (f == 5 && (pb_is(&s3, "program_id") || pb_is(&s3, "flops") || pb_is(&s3, "hlo_category") ||
                                           pb_is(&s3, "tf_op") || pb_is(&s3, "device_type_string")))
                                pl->stat_names++;
                        }
        }
        if (f == 6 && w == 2) pl->has_device_type = 1;
    }
}

static tpu_profile *tb_profile(tpu_ctx *ctx, const char *chip, int steps, tpu_module **mo)
{
    tpu_module *m = NULL;
    if (tpu_module_parse(ctx, tb_hlo, strlen(tb_hlo), "tb.hlo", &m) != TPU_OK) {
        test_fail(__FILE__, __LINE__, "parse: %s", tpu_errmsg(ctx));
        return NULL;
    }
    tpu_profile_opts o = {0};
    o.chip = chip;
    o.steps = steps;
    tpu_profile *p = NULL;
    if (tpu_profile_program(ctx, m, &o, &p) != TPU_OK) {
        test_fail(__FILE__, __LINE__, "profile: %s", tpu_errmsg(ctx));
        tpu_module_free(m);
        return NULL;
    }
    *mo = m;
    return p;
}

TEST(xplane_holds_the_predicted_timeline)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    tpu_profile *p = tb_profile(ctx, "v4-8", 3, &m);
    REQUIRE(p);
    char path[256];
    test_tmp_path(path, sizeof path, "space.xplane.pb");
    REQUIRE_OK(ctx, tpu_profile_write_xplane(ctx, p, path));
    size_t n = 0;
    char *data = test_slurp(path, &n);
    REQUIRE(data && n > 100);
    pbr r = {(const unsigned char *)data, (const unsigned char *)data + n};
    int f, w, planes = 0, hosts = 0, bad = 0;
    uint64_t v;
    pbr s;
    while (pb_next(&r, &f, &w, &v, &s)) {
        if (f == 1 && w == 2) {
            tb_plane pl = {0};
            tb_plane_read(s, &pl);
            planes++;
            CHECK(pl.is_tpu && pl.has_ops_line && pl.has_steps_line && pl.has_modules_line);
            CHECK_MSG(pl.meta_named_y, "no event metadata named after the instruction 'y'");
            CHECK_EQ_INT(pl.stat_names, 5);
            CHECK(pl.has_device_type);
            /* three steps of two ops: the first dot with its exp epilogue (fusion e), the second dot (y) */
            CHECK_EQ_INT(pl.op_events, 6);
            CHECK_NEAR(pl.op_ps * 1e-12, 3 * tpu_profile_device_time(p), 1e-9 + 1e-6 * tpu_profile_device_time(p));
        } else if (f == 4 && w == 2) {
            hosts++;
        }
    }
    bad = r.p != r.end;
    CHECK_MSG(!bad, "the XSpace does not decode to its end");
    CHECK_EQ_INT(planes, 4);   /* v4-8: four devices (megacore chips) */
    CHECK_EQ_INT(hosts, 1);
    free(data);
    remove(path);
    /* where TensorBoard looks, and refusals */
    char dir[256], *written = NULL;
    test_tmp_path(dir, sizeof dir, "logdir");
    REQUIRE_OK(ctx, tpu_profile_write_tensorboard(ctx, p, dir, "run1", &written));
    REQUIRE(written);
    CHECK(strstr(written, "/plugins/profile/run1/") && strstr(written, ".xplane.pb"));
    struct stat st;
    CHECK(stat(written, &st) == 0 && st.st_size > 100);
    tpu_free(written);
    CHECK(tpu_profile_write_tensorboard(ctx, p, dir, "../escape", NULL) == TPU_ERR_INVALID);
    CHECK(tpu_profile_write_tensorboard(ctx, p, "/proc/version", NULL, NULL) == TPU_ERR_IO);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    tpu_profile_free(p);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

TEST(xspace_of_several_programs)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m1 = NULL, *m2 = NULL;
    tpu_profile *p1 = tb_profile(ctx, "v5e", 1, &m1), *p2 = tb_profile(ctx, "v5e", 1, &m2);
    REQUIRE(p1 && p2);
    tpu_xspace *xs = NULL;
    REQUIRE_OK(ctx, tpu_xspace_new(ctx, &xs));
    CHECK(tpu_xspace_add(ctx, xs, p1, 0) == TPU_ERR_INVALID);
    REQUIRE_OK(ctx, tpu_xspace_add(ctx, xs, p1, 2));
    REQUIRE_OK(ctx, tpu_xspace_add(ctx, xs, p2, 5));
    char path[256];
    test_tmp_path(path, sizeof path, "multi.xplane.pb");
    REQUIRE_OK(ctx, tpu_xspace_write(ctx, xs, path));
    size_t n = 0;
    char *data = test_slurp(path, &n);
    REQUIRE(data);
    pbr r = {(const unsigned char *)data, (const unsigned char *)data + n}, s;
    int f, w, planes = 0;
    uint64_t v;
    while (pb_next(&r, &f, &w, &v, &s))
        if (f == 1 && w == 2) {
            tb_plane pl = {0};
            tb_plane_read(s, &pl);
            planes++;
            CHECK_NEAR(pl.op_ps * 1e-12, 7 * tpu_profile_device_time(p1), 1e-6 * tpu_profile_device_time(p1));
        }
    CHECK_EQ_INT(planes, 1);
    free(data);
    remove(path);
    tpu_xspace_free(xs);
    tpu_xspace_free(NULL);
    tpu_profile_free(p1);
    tpu_profile_free(p2);
    tpu_module_free(m1);
    tpu_module_free(m2);
    tpu_ctx_free(ctx);
}

/* ---- TensorBoard in headless Chromium ---- */

static const char *tb_find_tensorboard(void)
{
    static char path[512];
    const char *env = getenv("TPUSIM_TENSORBOARD");
    if (env && *env) return access(env, X_OK) == 0 ? env : NULL;
    snprintf(path, sizeof path, "build/tb-venv/bin/tensorboard");
    return access(path, X_OK) == 0 ? path : NULL;
}

/* Starts TensorBoard on 127.0.0.1 (a free port) in its own process group; its output goes to `log`. */
static pid_t tb_start(const char *tb, const char *logdir, const char *log)
{
    pid_t pid = fork();
    if (pid != 0) return pid;
    setpgid(0, 0);
    if (!freopen(log, "w", stdout) || !freopen(log, "a", stderr)) _exit(127);
    execl(tb, tb, "--logdir", logdir, "--host", "127.0.0.1", "--port", "0", (char *)NULL);
    _exit(127);
}

/* The port TensorBoard says it serves on ("TensorBoard 2.21.0 at http://127.0.0.1:PORT/"), waiting while the
 * process lives and has not said (a bounded number of polls; no timing is checked). 0 if it never does. */
static int tb_port(pid_t pid, const char *log)
{
    for (int i = 0; i < 1200; i++) {
        char *s = test_slurp(log, NULL);
        const char *at = s ? strstr(s, "http://127.0.0.1:") : NULL;
        int port = at ? atoi(at + 17) : 0;
        free(s);
        if (port > 0) return port;
        if (waitpid(pid, NULL, WNOHANG) == pid) return 0;
        struct timespec ts = {0, 250000000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static void tb_stop(pid_t pid)
{
    kill(-pid, SIGTERM);
    for (int i = 0; i < 100; i++) {
        if (waitpid(pid, NULL, WNOHANG) == pid) return;
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL);
    }
    kill(-pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* The DOM Chromium builds for `url` (after the page's scripts ran), or NULL. */
static char *tb_dom(const char *chrome, const char *prof, const char *url, const char *out)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "timeout 120 '%s' --headless --no-sandbox --disable-gpu --no-first-run --no-default-browser-check "
             "--disable-extensions --disable-dev-shm-usage --user-data-dir='%s' --virtual-time-budget=30000 "
             "--dump-dom '%s' > '%s' 2>/dev/null", chrome, prof, url, out);
    int rc = system(cmd);
    char *d = test_slurp(out, NULL);
    if (rc != 0 || !d) test_fail(__FILE__, __LINE__, "chromium --dump-dom %s failed (%d)", url, rc);
    return rc == 0 ? d : (free(d), NULL);
}

TEST(tensorboard_shows_the_profile_in_chromium)
{
    const char *chrome = test_find_chromium(), *tb = tb_find_tensorboard();
    if (!chrome || !tb) {
        test_skip("%s", !chrome ? "no chromium on PATH (scripts/deps.sh installs it)"
                                : "no TensorBoard (make tensorboard-venv, or set TPUSIM_TENSORBOARD)");
        return;
    }
    char dir[256], log[256], dom[256], prof[256], hlo[256], cmd[2048], url[512];
    test_tmp_path(dir, sizeof dir, "tb-logdir");
    test_tmp_path(log, sizeof log, "tb.log");
    test_tmp_path(dom, sizeof dom, "tb-dom.html");
    test_tmp_path(prof, sizeof prof, "tb-chrome");
    test_tmp_path(hlo, sizeof hlo, "tb.hlo");
    FILE *f = fopen(hlo, "w");
    REQUIRE(f);
    fputs(tb_hlo, f);
    fclose(f);
    /* written the way a user writes it: the CLI */
    snprintf(cmd, sizeof cmd, "'%s' profile '%s' --chip v4-8 --tensorboard '%s' --run tpusim_run >/dev/null 2>&1", test_bin(), hlo, dir);
    REQUIRE(system(cmd) == 0);
    pid_t pid = tb_start(tb, dir, log);
    REQUIRE(pid > 0);
    int port = tb_port(pid, log);
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    if (!port) {
        char *l = test_slurp(log, NULL);
        test_fail(__FILE__, __LINE__, "TensorBoard did not start: %.2000s", l ? l : "(no output)");
        free(l);
    }
    /* the trace viewer's data: the ops on the XLA Ops line of each TPU device */
    snprintf(url, sizeof url, "http://127.0.0.1:%d/data/plugin/profile/data?run=tpusim_run&tag=trace_viewer@&host=%s", port, host);
    char *d = port ? tb_dom(chrome, prof, url, dom) : NULL;
    if (d) {
        CHECK_MSG(strstr(d, "/device:TPU:0") && strstr(d, "XLA Ops"), "trace lacks the TPU device or its XLA Ops line");
        /* e (exponential) fuses into its producer h, so the trace holds the two dots */
        CHECK_MSG(strstr(d, "\"name\":\"h\"") && strstr(d, "\"name\":\"y\""), "trace lacks the ops h and y");
        free(d);
    }
    /* the overview page, rendered: the chip */
    snprintf(url, sizeof url, "http://127.0.0.1:%d/data/plugin/profile/index.html?run=tpusim_run&tool=overview_page&host=%s", port, host);
    d = port ? tb_dom(chrome, prof, url, dom) : NULL;
    if (d) {
        CHECK_MSG(strstr(d, "TPU v4") != NULL, "the overview page does not name the TPU v4");
        CHECK(strstr(d, "tpusim_run") != NULL);
        free(d);
    }
    /* the op profile, rendered: tpusim's ops by category, with their framework op names */
    snprintf(url, sizeof url, "http://127.0.0.1:%d/data/plugin/profile/index.html?run=tpusim_run&tool=op_profile&host=%s", port, host);
    d = port ? tb_dom(chrome, prof, url, dom) : NULL;
    if (d) {
        CHECK_MSG(strstr(d, "convolution fusion") != NULL, "the op profile lacks the category of the dots");
        CHECK_MSG(strstr(d, "> y <") || strstr(d, ">y<"), "the op profile lacks the op y");
        free(d);
    }
    tb_stop(pid);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s' '%s' '%s' '%s'", dir, log, dom, prof, hlo);
    CHECK(system(cmd) == 0);
}
