/* stream.c — streaming (non-temporal) stores: see stream.h. */
#include "stream.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ST_X86 1
#endif

enum { ST_NONE = 0, ST_256 = 1, ST_512 = 2 };

#ifdef ST_X86
__attribute__((target("avx512f"))) static void st_copy512(char *d, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i += 64) _mm512_stream_si512((void *)(d + i), _mm512_loadu_si512((const void *)(s + i)));
}

__attribute__((target("avx"))) static void st_copy256(char *d, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i += 32)
        _mm256_stream_si256((__m256i *)(d + i), _mm256_loadu_si256((const __m256i *)(s + i)));
}
#endif

/* the CPU's kind, asked once (a property of the machine, like gemm.c's kernel choice) */
static int st_kind(void)
{
    static _Atomic int kind = -1;
    int k = atomic_load_explicit(&kind, memory_order_relaxed);
    if (k >= 0) return k;
    k = ST_NONE;
#ifdef ST_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) k = ST_512;
    else if (__builtin_cpu_supports("avx")) k = ST_256;
#endif
    atomic_store_explicit(&kind, k, memory_order_relaxed);
    return k;
}

int exe_stream_ok(void) { return st_kind() != ST_NONE; }

void exe_stream_copy(void *dst, const void *src, size_t n)
{
    int k = st_kind();
    char *d = dst;
    const char *s = src;
    size_t head = (size_t)(-(uintptr_t)d & 63);
    if (k == ST_NONE || n < head + 64) {
        memcpy(d, s, n);
        return;
    }
    memcpy(d, s, head);
    size_t body = (n - head) & ~(size_t)63;
#ifdef ST_X86
    if (k == ST_512) st_copy512(d + head, s + head, body);
    else st_copy256(d + head, s + head, body);
#endif
    memcpy(d + head + body, s + head + body, n - head - body);
}

void exe_stream_fence(void)
{
#ifdef ST_X86
    _mm_sfence();
#endif
}
