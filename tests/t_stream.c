/* t_stream.c — streaming stores (src/exec/kernels/stream.c) for results larger than the caches: the copy is
 * memcpy's bytes at every alignment and length, and programs whose results take the streamed paths (fused
 * outputs in f32 and bf16, a non-last fused output, the unfused bf16 <-> f32 converts) give byte for byte what
 * the plain stores of the reference kernels give, in both numerics modes. */
#include "test.h"
#include "exec/exec.h"
#include "exec/kernels/stream.h"

#include <stdlib.h>

TEST(stream_copy_is_memcpy)
{
    enum { N = 8192 };
    unsigned char *src = malloc(N), *a = aligned_alloc(64, N + 256), *b = aligned_alloc(64, N + 256);
    REQUIRE(src && a && b);
    for (int i = 0; i < N; i++) src[i] = (unsigned char)(i * 131 + 7);
    static const size_t lens[] = {0, 1, 31, 63, 64, 65, 127, 128, 129, 1000, 4096, 4097, 8000};
    int bad = 0;
    for (size_t off = 0; off < 70; off += 3)
        for (size_t l = 0; l < sizeof lens / sizeof *lens; l++) {
            memset(a, 0xAB, N + 256);
            memset(b, 0xAB, N + 256);
            exe_stream_copy(a + off, src + (off & 7), lens[l]);
            exe_stream_fence();
            memcpy(b + off, src + (off & 7), lens[l]);
            if (memcmp(a, b, N + 256) && bad++ < 5)
                test_fail(__FILE__, __LINE__, "offset %zu length %zu: streamed bytes differ from memcpy's", off, lens[l]);
        }
    CHECK_EQ_INT(bad, 0);
    free(src);
    free(a);
    free(b);
}

/* f32[4099,2047] and bf16[4099,2047] results are 32 and 16 MiB: at EXE_STREAM_MIN_BYTES and above */
static const char *st_hlo =
    "HloModule st\nENTRY main {\n"
    "  x = f32[4099,2047] parameter(0)\n  h = bf16[4099,2047] parameter(1)\n"
    "  c = f32[] constant(1.5)\n  b = f32[4099,2047] broadcast(c), dimensions={}\n"
    "  m = f32[4099,2047] multiply(x, b)\n  e = f32[4099,2047] exponential(m)\n  a = f32[4099,2047] add(e, x)\n"
    "  r = bf16[4099,2047] convert(a)\n"
    "  hw = f32[4099,2047] convert(h)\n  z = f32[] constant(0)\n"
    "  s = f32[4099] reduce(hw, z), dimensions={1}, to_apply=add\n"
    "  xn = bf16[4099,2047] convert(x)\n"
    "  ROOT t = (f32[4099,2047], bf16[4099,2047], f32[4099,2047], f32[4099], bf16[4099,2047]) tuple(m, r, hw, s, xn)\n}\n"
    "add {\n  p = f32[] parameter(0)\n  q = f32[] parameter(1)\n  ROOT s = f32[] add(p, q)\n}\n";

TEST(streamed_results_match_reference)
{
    CHECK(EXE_STREAM_MIN_BYTES <= ((size_t)16 << 20));   /* else the program above takes no streamed path */
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    REQUIRE_OK(ctx, tpu_module_parse(ctx, st_hlo, strlen(st_hlo), "st.hlo", &m));
    tpu_tensor **ins = NULL;
    int nin = 0;
    REQUIRE_OK(ctx, tpu_random_inputs(ctx, m, 17, &ins, &nin));
    for (int mode = 0; mode < 2; mode++) {
        tpu_run_opts o = tpu_run_opts_default();
        o.numerics = mode ? TPU_NUMERICS_EXACT : TPU_NUMERICS_TPU;
        /* fused and streamed; unfused fast kernels (streamed converts); the per-element references */
        exe_run_cfg fast = {0}, unfused = {.ref = EXE_NO_FUSION}, ref = {.ref = EXE_NO_FUSION | EXE_REF_ELEMENTWISE};
        const exe_run_cfg *cfgs[2] = {&fast, &unfused};
        tpu_tensor **want = NULL;
        int nwant = 0;
        REQUIRE_OK(ctx, exe_run(ctx, m, &o, &ref, ins, nin, &want, &nwant));
        for (int c = 0; c < 2; c++) {
            tpu_tensor **got = NULL;
            int ngot = 0;
            CHECK_OK(ctx, exe_run(ctx, m, &o, cfgs[c], ins, nin, &got, &ngot));
            CHECK_EQ_INT(ngot, nwant);
            for (int k = 0; k < ngot && k < nwant; k++)
                CHECK_MSG(tpu_tensor_nbytes(got[k]) == tpu_tensor_nbytes(want[k]) &&
                              !memcmp(tpu_tensor_cdata(got[k]), tpu_tensor_cdata(want[k]), tpu_tensor_nbytes(want[k])),
                          "%s mode, %s run: output %d differs from the reference", mode ? "exact" : "tpu",
                          c ? "unfused" : "fused", k);
            tpu_tensors_free(got, ngot);
        }
        tpu_tensors_free(want, nwant);
    }
    tpu_tensors_free(ins, nin);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}
