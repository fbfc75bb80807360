/* ver_stablehlo.c — programs in the formats jax writes by default: StableHLO as MLIR text (lowered.as_text(),
 * .mlir), as MLIR bytecode (.mlirbc, the portable artifact jax hands a PJRT plugin) and inside a jax.export
 * serialization. tpusim reads them the way its PJRT plugin does: jaxlib's converter makes HLO of them. The
 * library does not link jaxlib; the context's converter does the work (tpu_ctx_set_converter), and
 * tpu_convert_with_python is the one the CLI uses: a child Python process with jaxlib. */
#include "verify.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static const char ver_mlir_magic[4] = {'M', 'L', (char)0xef, 'R'};

/* A jax.export serialization is a FlatBuffer (no file identifier) whose module is a byte vector holding MLIR
 * bytecode: a 32-bit length, then "ML\xefR...". Finds that vector; 0 if there is none. A FlatBuffer's root
 * offset is a multiple of 4, which a binary HloModuleProto's first bytes (0x0a, 0x12 or 0x1a: 2 mod 4) never
 * are, so the two cannot be confused. */
static int ver_jax_export_module(const char *b, size_t n, size_t *off, size_t *len)
{
    if (n < 16) return 0;
    uint32_t root = (uint32_t)(unsigned char)b[0] | (uint32_t)(unsigned char)b[1] << 8 | (uint32_t)(unsigned char)b[2] << 16 |
                    (uint32_t)(unsigned char)b[3] << 24;
    if (root < 8 || root >= n || root % 4) return 0;
    for (size_t k = 8; k + 4 <= n; k++) {
        const char *hit = memchr(b + k, 'M', n - k);
        if (!hit) return 0;
        k = (size_t)(hit - b);
        if (k + 4 > n || memcmp(hit, ver_mlir_magic, 4)) continue;
        const unsigned char *l = (const unsigned char *)hit - 4;
        size_t vl = (size_t)l[0] | (size_t)l[1] << 8 | (size_t)l[2] << 16 | (size_t)l[3] << 24;
        if ((size_t)(hit - b) % 4 == 0 && vl >= 4 && vl <= n - k) {
            *off = k, *len = vl;
            return 1;
        }
    }
    return 0;
}

/* MLIR text: the first word after blank lines and comments opens a module or a function, or is an attribute
 * alias (#loc = ...) in a text that holds StableHLO or func ops. */
static int ver_is_mlir_text(const char *b, size_t n)
{
    const char *p = b, *e = b + n;
    for (;;) {
        while (p < e && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) p++;
        if (e - p >= 2 && p[0] == '/' && p[1] == '/') {
            const char *nl = memchr(p, '\n', (size_t)(e - p));
            if (!nl) return 0;
            p = nl + 1;
            continue;
        }
        break;
    }
    size_t left = (size_t)(e - p);
    if (left >= 7 && !memcmp(p, "module", 6) && (p[6] == ' ' || p[6] == '@' || p[6] == '{' || p[6] == '\n')) return 1;
    if (left >= 10 && !memcmp(p, "func.func ", 10)) return 1;
    if (left >= 15 && !memcmp(p, "builtin.module ", 15)) return 1;
    if (left >= 2 && p[0] == '#') {
        /* "#loc1 = loc(...)": look for the ops (bounded: the aliases come first, the module right after) */
        size_t scan = left < (1 << 20) ? left : (1 << 20);
        for (const char *q = p; q + 10 < p + scan; q++)
            if (*q == '\n' && (!strncmp(q + 1, "module", 6) || !strncmp(q + 1, "func.func", 9))) return 1;
    }
    return 0;
}

const char *tpu_program_format(const void *bytes, size_t len)
{
    const char *b = bytes ? bytes : "";
    size_t off, n;
    if (len >= 4 && !memcmp(b, ver_mlir_magic, 4)) return "stablehlo-bytecode";
    if (ver_jax_export_module(b, len, &off, &n)) return "jax-export";
    if (hlo_is_proto_bin(b, len)) return "hlo-proto";
    if (ver_is_mlir_text(b, len)) return "stablehlo";
    if (hlo_is_proto_text(b, len)) return "hlo-proto-text";
    return "hlo";
}

void tpu_ctx_set_converter(tpu_ctx *ctx, tpu_converter fn, void *user)
{
    if (!ctx) return;
    ctx->convert = fn;
    ctx->convert_user = user;
}

int ver_head_is_stablehlo(const char *head, size_t n)
{
    size_t off, len;
    return (n >= 4 && !memcmp(head, ver_mlir_magic, 4)) || ver_jax_export_module(head, n, &off, &len);
}

/* The StableHLO the converter gets (for a jax export: the module inside it), or 0 if b is not StableHLO. */
int ver_stablehlo_payload(const char *b, size_t n, const char **kind, size_t *off, size_t *len)
{
    *off = 0, *len = n;
    if (n >= 4 && !memcmp(b, ver_mlir_magic, 4)) return *kind = "MLIR bytecode", 1;
    if (ver_jax_export_module(b, n, off, len)) return *kind = "a jax.export serialization", 1;
    if (!hlo_is_proto_bin(b, n) && ver_is_mlir_text(b, n)) return *kind = "MLIR text", 1;
    return 0;
}

tpu_status ver_convert(tpu_ctx *ctx, const char *b, size_t n, const char *file, char **out, size_t *out_len)
{
    const char *kind;
    size_t off, len;
    *out = NULL, *out_len = 0;
    if (!ver_stablehlo_payload(b, n, &kind, &off, &len)) return ut_err(ctx, TPU_ERR_INTERNAL, "not StableHLO");
    const char *what = file ? file : "<program>";
    if (!ctx->convert)
        return ut_err(ctx, TPU_ERR_UNSUPPORTED,
                      "%s: StableHLO (%s): tpusim reads it through jaxlib's converter, and this program has set none "
                      "(tpu_ctx_set_converter; the tpusim command and the Python API do, with jaxlib: "
                      "pip install jax==0.10.2 jaxlib==0.10.2)", what, kind);
    tpu_status st = ctx->convert(ctx->convert_user, ctx, b + off, len, what, out, out_len);
    if (st == TPU_OK && !*out) st = ut_err(ctx, TPU_ERR_INTERNAL, "%s: the StableHLO converter returned nothing", what);
    return st;
}

/* ---- the CLI's converter: a child Python with jaxlib ---- */

/* Exit 3: jaxlib is missing; 4: it could not read the program (message on stderr). */
static const char *const ver_py_script =
    "import sys\n"
    "try:\n"
    "    from jax._src.lib import _jax\n"
    "    conv = _jax.mlir.mlir_module_to_xla_computation\n"
    "except Exception as e:\n"
    "    sys.stderr.write('%s: %s' % (type(e).__name__, e)); sys.exit(3)\n"
    "data = open(sys.argv[1], 'rb').read()\n"
    "try:\n"
    "    comp = conv(data, use_tuple_args=False, return_tuple=False)\n"
    "except Exception as e:\n"
    "    sys.stderr.write(str(e).strip()[:4000]); sys.exit(4)\n"
    "open(sys.argv[2], 'w').write(comp.as_hlo_text(print_large_constants=True))\n";

static int ver_tmpfile(char *path, size_t n, const char *tag)
{
    const char *d = getenv("TMPDIR");
    snprintf(path, n, "%s/tpusim-%s.XXXXXX", d && *d ? d : "/tmp", tag);
    return mkstemp(path);
}

/* The child's stderr, trimmed, for messages. */
static void ver_slurp_msg(const char *path, char *buf, size_t n)
{
    buf[0] = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return;
    size_t r = fread(buf, 1, n - 1, f);
    fclose(f);
    buf[r] = 0;
    while (r && (buf[r - 1] == '\n' || buf[r - 1] == ' ')) buf[--r] = 0;
}

/* Runs `python -c script in out` with stderr to errpath; the exit status, or -1 with errno set. */
static int ver_run_python(const char *python, const char *in, const char *out, const char *errpath)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, errpath, O_WRONLY | O_TRUNC, 0600);
    char *argv[] = {(char *)python, "-c", (char *)ver_py_script, (char *)in, (char *)out, NULL};
    pid_t pid;
    int rc = posix_spawnp(&pid, python, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc) {
        errno = rc;
        return -1;
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

tpu_status tpu_convert_with_python(void *user, tpu_ctx *ctx, const void *stablehlo, size_t len, const char *what,
                                   char **out, size_t *out_len)
{
    const char *python = user ? (const char *)user : getenv("TPUSIM_PYTHON");
    if (!python || !*python) python = "python3";
    char in[512], outp[512], errp[512], msg[4096];
    int fi = ver_tmpfile(in, sizeof in, "in"), fo = ver_tmpfile(outp, sizeof outp, "out"), fe = ver_tmpfile(errp, sizeof errp, "err");
    tpu_status st = TPU_OK;
    if (fi < 0 || fo < 0 || fe < 0) st = ut_err(ctx, TPU_ERR_IO, "%s: cannot create a temporary file: %s", what, strerror(errno));
    if (!st && write(fi, stablehlo, len) != (ssize_t)len) st = ut_err(ctx, TPU_ERR_IO, "%s: cannot write a temporary file: %s", what, strerror(errno));
    int rc = st ? 0 : ver_run_python(python, in, outp, errp);
    if (!st) {
        ver_slurp_msg(errp, msg, sizeof msg);
        if (rc == -1 || rc == 127)
            st = ut_err(ctx, TPU_ERR_UNSUPPORTED, "%s: StableHLO is read through jaxlib's converter, but Python ('%s') "
                        "cannot be run (%s): install Python 3 and pip install jax==0.10.2 jaxlib==0.10.2, or set "
                        "TPUSIM_PYTHON", what, python, rc == -1 ? strerror(errno) : "not found");
        else if (rc == 3)
            st = ut_err(ctx, TPU_ERR_UNSUPPORTED, "%s: StableHLO is read through jaxlib's converter, which %s lacks "
                        "(%s): pip install jax==0.10.2 jaxlib==0.10.2, or set TPUSIM_PYTHON to a Python that has it",
                        what, python, msg);
        else if (rc == 4)
            st = ut_err(ctx, TPU_ERR_PARSE, "%s: jaxlib could not read the StableHLO: %s", what, msg);
        else if (rc != 0)
            st = ut_err(ctx, TPU_ERR_INTERNAL, "%s: the StableHLO converter (%s) failed with status %d: %s", what, python, rc, msg);
    }
    if (!st) {
        char *text = NULL;
        size_t n = 0;
        st = ut_read_file(ctx, outp, &text, &n);
        /* the caller frees with free(): hand over a malloc'ed copy */
        if (!st && !(*out = malloc(n + 1))) st = ut_nomem(ctx);
        if (!st) memcpy(*out, text, n + 1), *out_len = n;
        ut_free(text);
    }
    if (fi >= 0) close(fi), unlink(in);
    if (fo >= 0) close(fo), unlink(outp);
    if (fe >= 0) close(fe), unlink(errp);
    return st;
}
