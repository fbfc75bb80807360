/* exec.h — the functional executor: runtime values, the interpreter's state, the kernel interface and the
 * scalar-computation evaluator used by reducers, comparators and scatter combiners. Names start with exe_.
 *
 * A kernel computes one instruction: it reads its operands' values, allocates its result and returns a
 * status. Kernels live in src/exec/kernels/<family>.c; each fast kernel keeps a naive reference kernel beside
 * it (suffix _ref) that tests compare against.
 */
#ifndef TPU_EXEC_H
#define TPU_EXEC_H

#include "hlo/hlo.h"
#include "util/tensor.h"

/* A runtime value: an array (t != NULL) or a tuple of values. Reference counted: tuples share elements. */
typedef struct exe_value {
    int                refs;
    int                borrowed;  /* t belongs to the caller (an input) or is a view: never freed or written here */
    tpu_tensor        *t;        /* array value, or NULL for a tuple */
    int                ntuple;
    struct exe_value **elems;    /* tuple elements (an element moved out by get-tuple-element is NULL) */
    struct exe_value  *base;     /* a view: t is a header of its own over base's data (reshape); holds a ref */
#define EXE_TUPLE_INLINE 8
    struct exe_value  *inl[EXE_TUPLE_INLINE];   /* elems of a tuple of at most EXE_TUPLE_INLINE elements */
    tpu_tensor         hdr;      /* a view's t (no malloc per view) */
} exe_value;

exe_value *exe_value_array(tpu_tensor *t);                      /* takes ownership of t; NULL on no memory */
exe_value *exe_value_tuple(exe_value **elems, int n);          /* takes one reference of each element */
exe_value *exe_value_ref(exe_value *v);
void       exe_value_unref(exe_value *v);
/* Deep copy (arrays copied), for in-place updates of shared values. */
exe_value *exe_value_clone(const exe_value *v);
/* A value whose array is `base`'s data seen with shape (dtype, rank, dims) (same byte size); holds a reference
 * of base. NULL on no memory. */
exe_value *exe_value_view(exe_value *base, tpu_dtype dtype, int rank, const int64_t *dims);
/* Same, over base's bytes from `offset` on (a contiguous block of it: a leading-dimension slice). */
exe_value *exe_value_view_at(exe_value *base, size_t offset, tpu_dtype dtype, int rank, const int64_t *dims);

/* Per-computation plan (last uses, fused groups, steps...): made by the first call of the computation and
 * kept in the module (hlo_module.exec_plans) for later runs; read-only once made, shared by all threads. */
typedef struct exe_comp_info exe_comp_info;
struct exe_state;

/* Collectives across devices (replicas x partitions), provided by the runtime (src/runtime/). The executor
 * calls run() for every collective instruction (all-reduce, all-gather, reduce-scatter, all-to-all,
 * collective-permute, collective-broadcast and their -start forms) when the group has more than one device;
 * it blocks until every device of the group has arrived and returns this device's result. */
typedef struct exe_collectives {
    void *user;
    int   num_replicas, num_partitions;
    tpu_status (*run)(void *user, struct exe_state *S, const hlo_instr *in, struct exe_value *const *ops,
                      struct exe_value **out);
} exe_collectives;
typedef struct exe_scalar_fn exe_scalar_fn;
typedef struct exe_prof exe_prof;   /* TPUSIM_EXEC_PROFILE counters (exe_interp.c) */

typedef struct exe_state {
    tpu_ctx          *ctx;
    const hlo_module *m;
    tpu_numerics      numerics;
    int               threads;
    int64_t           replica_id, partition_id;
    const exe_comp_info **comp_info;   /* by computation id: the plans this run has looked up */
    struct exe_value ***consts;     /* by computation id: its constants' values, made on first use in this run */
    exe_scalar_fn   **scalar_fns;   /* by computation id, built on demand */
    int               depth;        /* call nesting, to stop runaway recursion */
    int               verbose;
    uint64_t          rng_calls;    /* rng instructions run so far in this run (rng.c seeds each from it) */
    const exe_collectives *coll;    /* NULL: one device (collectives over one device are identities) */
    const tpu_host_io *host;        /* host transfers (jax's host callbacks), or NULL */
    int64_t          *trip_counts;  /* if not NULL: while iterations observed, by global instruction index */
    /* the instruction being run by exe_call, for exe_take_operand */
    struct exe_value **cur_vals;    /* its computation's value slots */
    const hlo_instr  *cur_in;
    uint32_t          cur_dies;     /* bit k: operand k's value is dropped after this instruction (last use) */
    /* set while a dot runs whose only user is a transpose to (batch, rhs free, lhs free): the dot writes that
     * transpose's result directly (this shape), as the swapped product rhs^T . lhs^T, and the transpose passes
     * it on (XLA:CPU folds the same transposes into its dots) */
    const hlo_shape  *cur_dot_out;
    /* the caller's limits (tpu_run_opts.max_steps, max_seconds): instructions run so far, and when to stop */
    int64_t           steps, max_steps;
    double            deadline;     /* ut_now() past which the run stops; 0: none */
    unsigned          ref;          /* EXE_REF_* and EXE_NO_FUSION bits of this run (exe_run_cfg.ref) */
    exe_prof         *prof;         /* this run's TPUSIM_EXEC_PROFILE counters, or NULL (not profiling) */
    struct exe_hoist *hoist;        /* for the next exe_call only: the loop-invariant values of a while's
                                     * body or condition (exe_interp.c), computed by its first iteration */
    int64_t           hoisted;      /* values taken from such a table so far */
    int64_t           counted;      /* counted-loop conditions evaluated on the state so far (exe_counted) */
    int               loop_depth;   /* while loops running (dot.c keeps plans and packed weights inside them) */
    struct exe_dot_cache *dot_cache; /* dot.c's: loop dots' plans, and a loop's packed weights until it ends */
} exe_state;

typedef tpu_status (*exe_kernel)(exe_state *S, const hlo_instr *in, exe_value *const *ops, exe_value **out);

/* Per-run switches (exe_run_cfg.ref, copied to exe_state.ref). Tests set the EXE_REF_* bits to run a whole
 * program both ways and compare; TPUSIM_NO_FUSION=1 in the environment sets EXE_NO_FUSION. */
enum {
    EXE_REF_KERNELS     = 1,   /* the kernels of kernels/ref.h run their naive references */
    EXE_REF_ELEMENTWISE = 2,   /* the elementwise kernels skip every fast path (per-element reference loops);
                                * fused groups run without their one-block path and broadcast tables */
    EXE_NO_FUSION       = 4,   /* no fused elementwise groups (exe_fuse_plan) */
    EXE_NO_INLINE       = 8,   /* run the module as written: calls inside loops stay calls (exe_inlined) */
    EXE_NO_HOIST        = 16,  /* loop-invariant values are computed again every iteration (exe_hoist_plan) */
    EXE_NO_COUNTED      = 32,  /* a counted loop's condition runs as a computation (exe_counted) */
};

/* One device's run of a module: what tpu_run does, with the device identity and collectives given (the
 * replicated runtime runs one of these per device, each in its own thread). cfg may be NULL. */
typedef struct exe_run_cfg {
    int64_t                replica_id, partition_id;
    const exe_collectives *coll;
    int64_t               *trip_counts;   /* optional: filled with observed while trip counts */
    unsigned               ref;           /* EXE_REF_* bits: tests compare fast paths with their references */
    int64_t               *hoisted;       /* optional: set to the loop-invariant values taken instead of
                                           * computed again (tests: EXE_NO_HOIST) */
    int64_t               *counted;       /* optional: set to the loop conditions evaluated without a call
                                           * (tests: EXE_NO_COUNTED) */
} exe_run_cfg;
tpu_status exe_run(tpu_ctx *ctx, const hlo_module *m, const tpu_run_opts *opts, const exe_run_cfg *cfg,
                   tpu_tensor *const *inputs, int ninputs, tpu_tensor ***outputs, int *noutputs);

/* How many computation plans module m keeps for later runs (tests: plans are made once per computation and
 * fusion setting). */
int exe_plans_count(const hlo_module *m);

/* Runs computation c on args (one per parameter). */
tpu_status exe_call(exe_state *S, const hlo_comp *c, exe_value *const *args, int nargs, exe_value **out);
/* Same; args whose bit is set in `owned` hand their reference to the callee (which drops it), so a value
 * nobody else holds can be updated in place inside. */
tpu_status exe_call_owned(exe_state *S, const hlo_comp *c, exe_value *const *args, int nargs, uint64_t owned,
                          exe_value **out);

/* Buffer reuse (XLA updates dead buffers in place; so do we). For the current instruction's operand k:
 * exe_take_operand returns the value with the reference its computation held when this instruction is the
 * value's last use (the caller now owns that reference), else NULL. exe_take_unique does the same only for an
 * array value that nobody else holds, whose buffer the caller may then overwrite. */
exe_value *exe_take_operand(exe_state *S, int k);
exe_value *exe_take_unique(exe_state *S, int k);
/* Drops a result tensor: its buffer goes back to the run's pool (exe_alloc takes from it) or is freed. */
void       exe_tensor_release(tpu_tensor *t);
/* Marks a result handed to the caller: when the caller frees it (tpu_tensor_free), its buffer goes to the
 * freeing thread's pool (kept between runs) rather than back to the system. */
void       exe_output_mark(tpu_tensor *t);
/* The calling thread's pool of freed result buffers: exe_pool_push starts one (returns the previous, to give
 * to exe_pool_pop, which restores it). An outermost pool is kept by the thread for its next run (freed when
 * the thread exits, or at exit); TPUSIM_POOL_MB caps the bytes it holds (default min(2 GiB, RAM/8)). */
typedef struct exe_pool exe_pool;
/* Kernel workspace from the same pool (64-byte aligned; NULL on no memory); give the handle back with
 * exe_scratch_free. Any thread may call them (threads without a pool use malloc). */
void      *exe_scratch_alloc(size_t bytes, tpu_tensor **handle);
void       exe_scratch_free(tpu_tensor *handle);
exe_pool  *exe_pool_push(void);
void       exe_pool_pop(exe_pool *prev);

/* Allocates the (array) result tensor for instruction `in` — uninitialised — and reports errors on ctx. */
tpu_status exe_alloc(exe_state *S, const hlo_instr *in, tpu_tensor **t);
/* Same for an explicit array shape. */
tpu_status exe_alloc_shape(exe_state *S, const hlo_shape *s, tpu_tensor **t);
/* Wraps a freshly allocated result tensor in *out (frees t on failure). */
tpu_status exe_out_array(exe_state *S, tpu_tensor *t, exe_value **out);
/* Error helper: "file:line:col: instruction 'x' (opcode): message". Returns st. */
tpu_status exe_fail(exe_state *S, const hlo_instr *in, tpu_status st, const char *fmt, ...) UT_PRINTF(4, 5);

/* Drops the weights dot.c packed inside loops deeper than `depth` (with their references): a while loop's
 * end passes the depth outside it; -1 (the run's end) also frees the dot plans and the cache itself. */
void exe_dot_cache_drop(exe_state *S, int depth);

/* Row-major strides of a tensor (in elements). */
void exe_strides(const tpu_tensor *t, int64_t *strides);

/* Hot loops: compiled for AVX-512, AVX2+FMA and baseline x86-64 (picked at load time) and vectorised (GCC's
 * -O2 cost model vectorises almost no loop with an unknown trip count). -std=c11 keeps floating-point
 * contraction off in every clone, so all clones compute the same values. (src/exec is compiled with
 * -fno-math-errno, see the Makefile: sqrt becomes the vector instruction, the same correctly rounded value.) */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define EXE_VEC __attribute__((target_clones("avx512f", "arch=x86-64-v3", "default"), optimize("vect-cost-model=dynamic", "no-trapping-math")))
#else
#define EXE_VEC
#endif

/* ---- numerics (design §4) ---- */

/* How many bf16 MXU passes a dot/convolution operand pair gets in TPU mode: 1 (DEFAULT: operands rounded to
 * bf16), 3 (HIGH: bf16x3 split), 6 or 0 (HIGHEST / f32 algorithms: full f32 accuracy). Returns 0 for "compute
 * in full f32" (always in exact mode, and for non-float or f64 operands). Reads operand_precision and
 * algorithm attributes. */
int exe_mxu_passes(const exe_state *S, const hlo_instr *in);

/* Rounds a float result to its dtype's storage the way the mode wants: bf16 with subnormals flushed in TPU
 * mode, plain RNE in exact mode. Stores element i of dtype t. */
void exe_store_float(const exe_state *S, tpu_dtype t, void *base, int64_t i, double v);

/* ---- scalar computations: reducers (add, max...), comparators, combiners, map functions ---- */

/* One scalar: floats in f (exact for every float type up to f64), integers in i (unsigned as bit pattern),
 * pred in i (0/1). */
typedef struct exe_scalar {
    double  f;
    int64_t i;
    double  im;   /* imaginary part of complex (c64, c128) values */
} exe_scalar;

void       exe_scalar_fn_free(exe_scalar_fn *fn);
/* Compiles (once, cached on S) a computation whose parameters and result are scalars or tuples of scalars. */
tpu_status exe_scalar_fn_get(exe_state *S, const hlo_comp *c, const exe_scalar_fn **fn);
/* If the computation is just `ROOT op(p0, p1)` (or op(p1, p0) for commutative ops) returns that opcode
 * (HLO_ADD, HLO_MAXIMUM, HLO_MINIMUM, HLO_MULTIPLY, HLO_AND, HLO_OR, HLO_XOR...) so kernels can use a fast
 * loop; otherwise HLO_OP_COUNT. */
hlo_op     exe_scalar_fn_binop(const exe_scalar_fn *fn);
int        exe_scalar_fn_nparams(const exe_scalar_fn *fn);
int        exe_scalar_fn_nresults(const exe_scalar_fn *fn);          /* 1, or the tuple size */
tpu_dtype  exe_scalar_fn_param_dtype(const exe_scalar_fn *fn, int i);
/* Evaluates: args[nparams] in, results[nresults] out. Each intermediate is rounded to its dtype. */
void       exe_scalar_fn_eval(const exe_scalar_fn *fn, const exe_scalar *args, exe_scalar *results);

/* Element access as exe_scalar (float kinds use f, others i). */
exe_scalar exe_scalar_load(tpu_dtype t, const void *base, int64_t i);
void       exe_scalar_store(const exe_state *S, tpu_dtype t, void *base, int64_t i, exe_scalar v);
/* The HLO binary op on two scalars of dtype t (what exe_scalar_fn_eval does for one instruction). */
exe_scalar exe_scalar_binop(const exe_state *S, hlo_op op, tpu_dtype t, exe_scalar a, exe_scalar b);
/* compare with direction (EQ NE LT LE GT GE) and type (FLOAT, TOTALORDER, SIGNED, UNSIGNED) */
int        exe_scalar_compare(tpu_dtype t, exe_scalar a, exe_scalar b, const char *direction, const char *type);

/* ---- kernels (src/exec/kernels/) ---- */
#define EXE_KERNEL(name) tpu_status name(exe_state *S, const hlo_instr *in, exe_value *const *ops, exe_value **out)

/* elementwise.c */
EXE_KERNEL(exe_k_unary);
EXE_KERNEL(exe_k_binary);
EXE_KERNEL(exe_k_compare);
EXE_KERNEL(exe_k_select);
EXE_KERNEL(exe_k_clamp);
EXE_KERNEL(exe_k_convert);
EXE_KERNEL(exe_k_bitcast_convert);
EXE_KERNEL(exe_k_reduce_precision);
EXE_KERNEL(exe_k_map);
/* data.c */
EXE_KERNEL(exe_k_broadcast);
EXE_KERNEL(exe_k_reshape);
EXE_KERNEL(exe_k_bitcast);
EXE_KERNEL(exe_k_transpose);
EXE_KERNEL(exe_k_slice);
EXE_KERNEL(exe_k_concatenate);
EXE_KERNEL(exe_k_pad);
EXE_KERNEL(exe_k_reverse);
EXE_KERNEL(exe_k_iota);
EXE_KERNEL(exe_k_dynamic_slice);
EXE_KERNEL(exe_k_dynamic_update_slice);
/* reduce.c */
EXE_KERNEL(exe_k_reduce);

/* Strided N-d copy of elements of `esize` bytes: for every index i of dims[rank],
 * dst[sum i*dst_strides] = src[sum i*src_strides] (strides in elements, may be 0 or negative). */
/* The result of `in` as the concatenation of its operands along dimension d (concatenate, ConcatBitcast). */
tpu_status exe_concat_dim(exe_state *S, const hlo_instr *in, exe_value *const *ops, int d, exe_value **out);
void exe_nd_copy(void *dst, const int64_t *dst_strides, const void *src, const int64_t *src_strides,
                 const int64_t *dims, int rank, size_t esize);
/* Reads an integer index operand (any integer dtype, scalar) as int64. */
int64_t exe_index_value(const tpu_tensor *t, int64_t i);

/* dot.c / conv.c (the _ref kernels: naive loops from the definition, same numerics, for tests) */
EXE_KERNEL(exe_k_dot);
EXE_KERNEL(exe_k_dot_ref);
EXE_KERNEL(exe_k_convolution);
EXE_KERNEL(exe_k_convolution_ref);
EXE_KERNEL(exe_k_convolution_gemm);   /* conv.c's general path alone (tests compare the fast paths with it) */
/* gather_scatter.c */
EXE_KERNEL(exe_k_gather);
EXE_KERNEL(exe_k_scatter);
/* window.c */
EXE_KERNEL(exe_k_reduce_window);
EXE_KERNEL(exe_k_select_and_scatter);
/* sort.c */
EXE_KERNEL(exe_k_sort);
EXE_KERNEL(exe_k_topk);
/* rng.c */
EXE_KERNEL(exe_k_rng_bit_generator);
EXE_KERNEL(exe_k_rng);
/* linalg.c */
EXE_KERNEL(exe_k_cholesky);
/* linalg_tpu.c: the TPU linear-algebra custom-calls (LuDecomposition, Qr,
 * ProductOfElementaryHouseholderReflectors, Eigh), dispatched by custom_call_target */
EXE_KERNEL(exe_k_lu);
EXE_KERNEL(exe_k_qr);
EXE_KERNEL(exe_k_householder_product);
EXE_KERNEL(exe_k_eigh);
EXE_KERNEL(exe_k_triangular_solve);
/* batchnorm.c */
EXE_KERNEL(exe_k_batch_norm_training);
EXE_KERNEL(exe_k_batch_norm_inference);
EXE_KERNEL(exe_k_batch_norm_grad);
/* fft.c */
EXE_KERNEL(exe_k_fft);

#endif
