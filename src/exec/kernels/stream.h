/* stream.h — stores that bypass the caches (stream.c), for results far larger than the last-level cache: a
 * plain store first reads the line it writes (the whole result crosses the memory bus twice), a streaming one
 * does not. Same bytes either way; only where the lines end up differs. */
#ifndef TPU_EXE_STREAM_H
#define TPU_EXE_STREAM_H

#include <stddef.h>

/* A result at least this large is written with streaming stores (measured on a 32 MiB-L3 EPYC: a 128 MiB
 * scale-and-store runs in 8.5 ms streamed against 11.5 ms plain). */
#define EXE_STREAM_MIN_BYTES ((size_t)16 << 20)

/* Whether this CPU has the 256- or 512-bit streaming stores exe_stream_copy uses (else it is a memcpy). */
int  exe_stream_ok(void);
/* dst[0..n) = src[0..n): the 64-byte-aligned middle of dst with streaming stores, the ends with memcpy. */
void exe_stream_copy(void *dst, const void *src, size_t n);
/* Orders this thread's streaming stores before whatever it does next (a thread that streamed part of a
 * result calls it before the result is handed on). */
void exe_stream_fence(void);

#endif
