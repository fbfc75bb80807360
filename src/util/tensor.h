/* tensor.h — the tensor struct behind the public tpu_tensor handle, and element access by dtype.
 * Data are dense and row-major. Sub-byte types (s2, s4, u2, u4, f4e2m1fn) and pred take one byte each. */
#ifndef TPU_TENSOR_H
#define TPU_TENSOR_H

#include "util.h"

struct tpu_tensor {
    tpu_dtype dtype;
    int       rank;
    int64_t   dims[TPU_MAX_RANK];
    int64_t   count;    /* product of dims */
    size_t    nbytes;   /* count * tpu_dtype_size(dtype) */
    void     *data;     /* 64-byte aligned */
    /* set on a result the executor hands out: tpu_tensor_free passes the tensor to it (its buffer goes back to
     * the freeing thread's pool for the next run's results) instead of freeing it */
    void    (*release)(tpu_tensor *t);
};

/* Allocates without a context (returns NULL on failure or on a size overflow); data are zeroed. */
tpu_tensor *ten_alloc(tpu_dtype dtype, int rank, const int64_t *dims);
/* Same, but data left uninitialised (for outputs that are fully written). */
tpu_tensor *ten_alloc_uninit(tpu_dtype dtype, int rank, const int64_t *dims);
tpu_tensor *ten_clone(const tpu_tensor *t);
/* Product of dims, or -1 on overflow past 2^62. */
int64_t     ten_count(int rank, const int64_t *dims);
/* The largest tensor ten_alloc makes: the machine's physical memory (larger requests fail as out of memory). */
uint64_t    ten_max_bytes(void);

/* Element access, converting through double / int64 / uint64. Slow paths for generic and reference code. */
double   ten_load_f64(tpu_dtype t, const void *base, int64_t i);
void     ten_store_f64(tpu_dtype t, void *base, int64_t i, double v);
int64_t  ten_load_i64(tpu_dtype t, const void *base, int64_t i);
void     ten_store_i64(tpu_dtype t, void *base, int64_t i, int64_t v);

#endif
