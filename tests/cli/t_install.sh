# make install PREFIX=DIR, then a small C program built against the installed copy with pkg-config, linked
# to libtpusim.so, runs a program through the public API. Sourced by tests/cli/run.sh ($BIN, ok, bad, skip).
# Only for the release build: a sanitizer build's library needs the sanitizer runtime in the program too.
case "$BIN" in
  build/release/tpusim)
    inst=$(mktemp -d /tmp/tpusim-install.XXXXXX)
    if make --no-print-directory -s install PREFIX="$inst/usr" >"$inst/log" 2>&1; then ok; else bad "make install PREFIX=$inst/usr"; sed 's/^/    /' "$inst/log" | tail -20 >&2; fi
    for f in bin/tpusim lib/libtpusim.a lib/libtpusim.so lib/pkgconfig/tpusim.pc include/tpusim.h; do
      if [ -e "$inst/usr/$f" ]; then ok; else bad "make install did not install $f"; fi
    done
    if "$inst/usr/bin/tpusim" --version | grep -q '^tpusim [0-9]'; then ok; else bad "the installed tpusim does not run"; fi
    cat > "$inst/prog.c" <<'C'
#include <stdio.h>
#include <string.h>
#include <tpusim.h>
int main(void)
{
    const char *hlo = "HloModule add\nENTRY main {\n  a = f32[3] parameter(0)\n  ROOT s = f32[3] add(a, a)\n}\n";
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    if (tpu_module_parse(ctx, hlo, strlen(hlo), "add.hlo", &m) != TPU_OK) return fprintf(stderr, "%s\n", tpu_errmsg(ctx)), 1;
    int64_t dims[1] = {3};
    tpu_tensor *in = NULL, **out = NULL;
    int nout = 0;
    tpu_tensor_new(ctx, TPU_F32, 1, dims, &in);
    float *x = tpu_tensor_data(in);
    x[0] = 1, x[1] = 2, x[2] = 3.5f;
    tpu_run_opts o = tpu_run_opts_default();
    if (tpu_run(ctx, m, &o, &in, 1, &out, &nout) != TPU_OK) return fprintf(stderr, "%s\n", tpu_errmsg(ctx)), 1;
    printf("tpusim %s: %g %g %g\n", TPUSIM_VERSION, tpu_tensor_get_f64(out[0], 0), tpu_tensor_get_f64(out[0], 1),
           tpu_tensor_get_f64(out[0], 2));
    tpu_module *bad = NULL;
    if (tpu_module_parse(ctx, "HloModule x\nENTRY {", 18, "bad.hlo", &bad) == TPU_OK) return 1;
    printf("error: %s\n", tpu_errmsg(ctx));
    tpu_tensors_free(out, nout);
    tpu_tensor_free(in);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
    return 0;
}
C
    export PKG_CONFIG_PATH="$inst/usr/lib/pkgconfig"
    if cc -std=c11 -Wall -Werror "$inst/prog.c" -o "$inst/prog" $(pkg-config --cflags --libs tpusim) >"$inst/log" 2>&1; then ok
    else bad "cc prog.c \$(pkg-config --cflags --libs tpusim)"; sed 's/^/    /' "$inst/log" | head -20 >&2; fi
    if LD_LIBRARY_PATH="$inst/usr/lib" "$inst/prog" >"$inst/out" 2>&1 && grep -q ': 2 4 7$' "$inst/out" && grep -q 'error: bad.hlo:' "$inst/out"; then ok
    else bad "the program linked against the installed libtpusim.so"; sed 's/^/    /' "$inst/out" | head >&2; fi
    # linked to the installed shared library, not to anything in the build tree
    if LD_LIBRARY_PATH="$inst/usr/lib" ldd "$inst/prog" | grep -q "$inst/usr/lib/libtpusim.so.0"; then ok; else bad "prog does not load the installed libtpusim.so.0"; fi
    # the static library with the private dependencies pkg-config lists
    if cc -std=c11 "$inst/prog.c" -o "$inst/prog_static" $(pkg-config --cflags tpusim) "$inst/usr/lib/libtpusim.a" \
         $(pkg-config --static --libs-only-l tpusim | sed 's/-ltpusim//') -fopenmp >"$inst/log" 2>&1 && "$inst/prog_static" | grep -q ': 2 4 7$'; then ok
    else bad "prog linked with libtpusim.a"; sed 's/^/    /' "$inst/log" | head -20 >&2; fi
    unset PKG_CONFIG_PATH
    rm -rf "$inst"
    ;;
  *) skip "make install: release build only (this run tests $BIN)" ;;
esac
