/*
 * tpusim.h — the one public header of tpusim, a software TPU.
 *
 * tpusim reads the XLA HLO text that JAX, TensorFlow and PyTorch/XLA produce, checks it the way the TPU
 * compiler would, runs it on the CPU with TPU numerics, and models memory and time on each TPU generation.
 *
 * A worked example — parse a program, check it, run it on two .npy inputs, save the results:
 *
 *     tpu_ctx *ctx = tpu_ctx_new();
 *     tpu_module *m = NULL;
 *     if (tpu_module_load(ctx, "mlp.hlo", &m) != TPU_OK) {
 *         fprintf(stderr, "%s\n", tpu_errmsg(ctx));     // "mlp.hlo:12:7: expected ')' ..."
 *         return 2;
 *     }
 *     tpu_tensor *in[2] = {NULL, NULL};
 *     tpu_npy_load(ctx, "x.npy", &in[0]);
 *     tpu_npy_load(ctx, "w.npy", &in[1]);
 *     tpu_run_opts opts = tpu_run_opts_default();     // TPU numerics
 *     tpu_tensor **out = NULL; int nout = 0;
 *     if (tpu_run(ctx, m, &opts, in, 2, &out, &nout) != TPU_OK)
 *         fprintf(stderr, "%s\n", tpu_errmsg(ctx));
 *     for (int i = 0; i < nout; i++) tpu_npy_save(ctx, "out0.npy", out[i]);
 *     tpu_tensors_free(out, nout);
 *     tpu_tensor_free(in[0]); tpu_tensor_free(in[1]);
 *     tpu_module_free(m);
 *     tpu_ctx_free(ctx);
 *
 * Conventions:
 *   - Every handle is opaque and comes with a _new/_free (or _load/_free) pair; _free(NULL) is a no-op.
 *   - Every call that can fail returns a tpu_status; the message lives on the context (tpu_errmsg).
 *   - User input never aborts the process: bad HLO, bad .npy files and bad requests return an error.
 */
#ifndef TPUSIM_H
#define TPUSIM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TPUSIM_VERSION "0.1.0"

/* ---------------------------------------------------------------------------------------------------------
 * Status codes and the context
 * ------------------------------------------------------------------------------------------------------- */

typedef enum tpu_status {
    TPU_OK = 0,
    TPU_ERR_NOMEM,        /* an allocation failed */
    TPU_ERR_IO,           /* a file could not be read or written */
    TPU_ERR_PARSE,        /* text input (HLO, .npy header, config) is malformed; message has file:line:col */
    TPU_ERR_INVALID,      /* an argument or request is wrong (count, shape or dtype of inputs, options) */
    TPU_ERR_SHAPE,        /* the program is inconsistent (shape inference disagrees with the text) */
    TPU_ERR_UNSUPPORTED,  /* valid HLO that tpusim (or a TPU) cannot run */
    TPU_ERR_UNRUNNABLE,   /* analysable but not executable, e.g. constants elided as {...} */
    TPU_ERR_OOM,          /* the program does not fit in the modelled device memory */
    TPU_ERR_INTERNAL,     /* a bug in tpusim; please report it */
    TPU_ERR_LIMIT         /* a limit was reached: an execution's step or time limit (tpu_run_opts), the size
                             limit on inputs (tpu_ctx_set_input_limit) */
} tpu_status;

typedef struct tpu_ctx tpu_ctx;

tpu_ctx    *tpu_ctx_new(void);
void        tpu_ctx_free(tpu_ctx *ctx);
/* The message of the last failed call on this context ("" if none). */
const char *tpu_errmsg(const tpu_ctx *ctx);
const char *tpu_status_name(tpu_status st);
/* Records an error message on the context and returns st: for callbacks the library calls (tpu_host_io) to
 * say why they failed. */
tpu_status  tpu_set_error(tpu_ctx *ctx, tpu_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Warnings (e.g. unknown HLO attributes) collected since the last clear, one per line. */
const char *tpu_warnings(const tpu_ctx *ctx);
void        tpu_warnings_clear(tpu_ctx *ctx);

/* The largest input this context reads into memory: one program or config file, one .npy, one .npz member
 * once inflated (default 4 GiB). A larger one fails with TPU_ERR_LIMIT naming the file, its size and the
 * limit, before anything that size is allocated (tpusim --max-input-size raises it). 0: the default. */
void        tpu_ctx_set_input_limit(tpu_ctx *ctx, uint64_t bytes);

/* One allocator hook for the whole library, so tests can fail allocation number N and check that the
 * failure is reported cleanly. Passing NULLs restores malloc/realloc/free. */
typedef struct tpu_allocator {
    void *(*malloc_fn)(size_t size, void *user);
    void *(*realloc_fn)(void *ptr, size_t size, void *user);
    void  (*free_fn)(void *ptr, void *user);
    void  *user;
} tpu_allocator;
void tpu_set_allocator(const tpu_allocator *a);

/* ---------------------------------------------------------------------------------------------------------
 * Element types. One X-macro drives the enum, the names and the sizes.
 *   X(ENUM, "hlo name", bits, kind)   kind: 'p' pred, 's' signed, 'u' unsigned, 'f' float, 'c' complex,
 *                                           'o' other (token, tuple, opaque: not array elements)
 * ------------------------------------------------------------------------------------------------------- */
#define TPU_DTYPE_LIST(X)                                  \
    X(INVALID,        "invalid",        0,  'o')           \
    X(PRED,           "pred",           8,  'p')           \
    X(S2,             "s2",             2,  's')           \
    X(S4,             "s4",             4,  's')           \
    X(S8,             "s8",             8,  's')           \
    X(S16,            "s16",            16, 's')           \
    X(S32,            "s32",            32, 's')           \
    X(S64,            "s64",            64, 's')           \
    X(U2,             "u2",             2,  'u')           \
    X(U4,             "u4",             4,  'u')           \
    X(U8,             "u8",             8,  'u')           \
    X(U16,            "u16",            16, 'u')           \
    X(U32,            "u32",            32, 'u')           \
    X(U64,            "u64",            64, 'u')           \
    X(F16,            "f16",            16, 'f')           \
    X(BF16,           "bf16",           16, 'f')           \
    X(F32,            "f32",            32, 'f')           \
    X(F64,            "f64",            64, 'f')           \
    X(C64,            "c64",            64, 'c')           \
    X(C128,           "c128",           128,'c')           \
    X(F8E5M2,         "f8e5m2",         8,  'f')           \
    X(F8E4M3FN,       "f8e4m3fn",       8,  'f')           \
    X(F8E4M3B11FNUZ,  "f8e4m3b11fnuz",  8,  'f')           \
    X(F8E5M2FNUZ,     "f8e5m2fnuz",     8,  'f')           \
    X(F8E4M3FNUZ,     "f8e4m3fnuz",     8,  'f')           \
    X(F8E4M3,         "f8e4m3",         8,  'f')           \
    X(F8E3M4,         "f8e3m4",         8,  'f')           \
    X(F4E2M1FN,       "f4e2m1fn",       4,  'f')           \
    X(F8E8M0FNU,      "f8e8m0fnu",      8,  'f')           \
    X(TOKEN,          "token",          0,  'o')           \
    X(TUPLE,          "tuple",          0,  'o')           \
    X(OPAQUE,         "opaque",         0,  'o')

typedef enum tpu_dtype {
#define TPU_DTYPE_ENUM_(e, name, bits, kind) TPU_##e,
    TPU_DTYPE_LIST(TPU_DTYPE_ENUM_)
#undef TPU_DTYPE_ENUM_
    TPU_DTYPE_COUNT
} tpu_dtype;

const char *tpu_dtype_name(tpu_dtype t);
/* Parses an HLO element type name ("f32", "bf16", ...); returns TPU_INVALID if unknown. */
tpu_dtype   tpu_dtype_from_name(const char *name, size_t len);
/* Bits of one element as stored in HLO (pred: 8). */
int         tpu_dtype_bits(tpu_dtype t);
/* Bytes of one element in a tpu_tensor (sub-byte types are stored one per byte). */
size_t      tpu_dtype_size(tpu_dtype t);
/* 'p','s','u','f','c' or 'o' as in TPU_DTYPE_LIST. */
char        tpu_dtype_kind(tpu_dtype t);

/* ---------------------------------------------------------------------------------------------------------
 * Tensors: dense arrays in row-major order (the last dimension varies fastest), whatever the HLO layout.
 * ------------------------------------------------------------------------------------------------------- */

#define TPU_MAX_RANK 12

typedef struct tpu_tensor tpu_tensor;

/* New zero-filled tensor. dims may be NULL when rank is 0. */
tpu_status  tpu_tensor_new(tpu_ctx *ctx, tpu_dtype dtype, int rank, const int64_t *dims, tpu_tensor **out);
void        tpu_tensor_free(tpu_tensor *t);
void        tpu_tensors_free(tpu_tensor **ts, int n);   /* frees each tensor and the array */
tpu_dtype   tpu_tensor_dtype(const tpu_tensor *t);
int         tpu_tensor_rank(const tpu_tensor *t);
const int64_t *tpu_tensor_dims(const tpu_tensor *t);
int64_t     tpu_tensor_count(const tpu_tensor *t);       /* number of elements */
size_t      tpu_tensor_nbytes(const tpu_tensor *t);
void       *tpu_tensor_data(tpu_tensor *t);
const void *tpu_tensor_cdata(const tpu_tensor *t);
/* Element i (row-major) converted to double, for printing and comparison. */
double      tpu_tensor_get_f64(const tpu_tensor *t, int64_t i);
/* "f32[2,3]" */
void        tpu_tensor_shape_str(const tpu_tensor *t, char *buf, size_t size);

/* NumPy files. Loading accepts little- and big-endian, C and Fortran order, and the dtypes tpusim knows
 * (bfloat16 as the 'V2' / ml_dtypes '<V2' with a "bfloat16" descr is read as bf16). */
tpu_status  tpu_npy_load(tpu_ctx *ctx, const char *path, tpu_tensor **out);
tpu_status  tpu_npy_save(tpu_ctx *ctx, const char *path, const tpu_tensor *t);
tpu_status  tpu_npy_load_mem(tpu_ctx *ctx, const void *buf, size_t len, const char *what, tpu_tensor **out);
/* .npz archives (stored or deflated members). Names are the member names without ".npy". */
tpu_status  tpu_npz_load(tpu_ctx *ctx, const char *path, tpu_tensor ***tensors, char ***names, int *count);
tpu_status  tpu_npz_save(tpu_ctx *ctx, const char *path, tpu_tensor *const *tensors, const char *const *names,
                         int count, int compress);
void        tpu_names_free(char **names, int count);
/* tpu_npz_load that first shows each member's header (its name without ".npy", position, dtype and shape) to
 * `filter` before the member is inflated or allocated: a filter that returns nonzero refuses the archive, and
 * tpu_npz_load_filtered fails with TPU_ERR_INVALID and the sentence the filter wrote into why ("x.npz: member
 * 'w': <why>"). So an archive whose small members inflate to gigabytes is refused by its headers. */
typedef int (*tpu_npz_filter)(void *user, const char *name, int index, tpu_dtype dtype, int rank, const int64_t *dims,
                              char *why, size_t why_size);
tpu_status  tpu_npz_load_filtered(tpu_ctx *ctx, const char *path, tpu_npz_filter filter, void *user,
                                  tpu_tensor ***tensors, char ***names, int *count);

/* ---------------------------------------------------------------------------------------------------------
 * HLO modules
 * ------------------------------------------------------------------------------------------------------- */

typedef struct tpu_module tpu_module;

/* Parses one HLO module. `filename` is used in messages ("file:line:col: ..."). The text may be HLO text or an
 * HloModuleProto in protobuf text format (`hlo_module { name: ... computations { ... } }`, told apart by its
 * first token) or in binary wire format (see tpu_module_parse_proto; a file named *.pb is always read as one).
 * Result shapes the text leaves out (XLA allows that for elementwise, shape-changing and control-flow ops) are
 * inferred, so the module is complete; one that cannot be inferred is TPU_ERR_SHAPE. Unknown attributes are
 * kept, ignored and reported by tpu_warnings(). */
tpu_status  tpu_module_parse(tpu_ctx *ctx, const char *text, size_t len, const char *filename, tpu_module **out);
tpu_status  tpu_module_load(tpu_ctx *ctx, const char *path, tpu_module **out);
/* Reads a serialized binary xla.HloModuleProto (what PyTorch/XLA hands a PJRT plugin), or an HloProto or
 * HloSnapshot as XLA dumps them (`*.hlo.pb`), told apart from the bytes. `what` names the input in messages,
 * which give the byte offset and field path ("prog.pb: byte 1234: computations[2].instructions[7].shape:
 * ..."); instructions of such a module report line 1, column = byte offset + 1. tpu_module_parse and
 * tpu_module_load accept binary protos too (told from text by its control bytes), and StableHLO through the
 * context's converter (tpu_ctx_set_converter). tpu_module_load reads standard input for the path "-". */
tpu_status  tpu_module_parse_proto(tpu_ctx *ctx, const void *bytes, size_t len, const char *what, tpu_module **out);
/* The format of a program's bytes, from the bytes alone: "hlo" (HLO text), "hlo-proto-text", "hlo-proto"
 * (binary HloModuleProto, HloProto, HloSnapshot), "stablehlo" (MLIR text: jax's lowered.as_text(), .mlir),
 * "stablehlo-bytecode" (MLIR bytecode: .mlirbc, jax's portable artifact) or "jax-export" (jax.export's
 * Exported.serialize()). */
const char *tpu_program_format(const void *bytes, size_t len);
/* StableHLO (the three formats above) is read as jaxlib converts it to HLO, the route the PJRT plugin takes.
 * tpusim does not link jaxlib: the loaders hand the StableHLO (MLIR text or bytecode; a jax export's module
 * taken out of it) to the context's converter, which returns HLO text or a binary HloModuleProto in *out
 * (malloc'ed; tpusim frees it with free()) or an error on ctx (tpu_set_error). Without a converter, StableHLO
 * is TPU_ERR_UNSUPPORTED with a message saying so. `fn` NULL removes it. */
typedef tpu_status (*tpu_converter)(void *user, tpu_ctx *ctx, const void *stablehlo, size_t len, const char *what,
                                    char **out, size_t *out_len);
void        tpu_ctx_set_converter(tpu_ctx *ctx, tpu_converter fn, void *user);
/* The converter the tpusim command uses: runs Python (`user`: its path, else $TPUSIM_PYTHON, else python3)
 * with jaxlib's converter in a child process. Without jaxlib the error names the pip command. */
tpu_status  tpu_convert_with_python(void *user, tpu_ctx *ctx, const void *stablehlo, size_t len, const char *what,
                                    char **out, size_t *out_len);
/* Parses a file holding several modules separated by lines "// -----" (XLA's -split-input-file test
 * convention). Line numbers in messages are those of the whole file. */
tpu_status  tpu_module_load_split(tpu_ctx *ctx, const char *path, tpu_module ***out, int *count);
void        tpu_module_free(tpu_module *m);
void        tpu_modules_free(tpu_module **ms, int n);
/* Prints the module as HLO text that parses back to the same module. */
tpu_status  tpu_module_print(tpu_ctx *ctx, const tpu_module *m, FILE *f);
/* Same, into a malloc'ed NUL-terminated string (free with tpu_free). */
tpu_status  tpu_module_to_string(tpu_ctx *ctx, const tpu_module *m, char **out);
const char *tpu_module_name(const tpu_module *m);
int         tpu_module_num_params(const tpu_module *m);
int         tpu_module_num_instructions(const tpu_module *m);  /* all computations */
/* The name of entry parameter i as the program writes it ("x.1", "Arg_0.1"), NULL if out of range. */
const char *tpu_module_param_name(const tpu_module *m, int i);
/* Parameter shape of the entry computation, e.g. "f32[2,3]{1,0}". */
tpu_status  tpu_module_param_info(const tpu_module *m, int i, tpu_dtype *dtype, int *rank, int64_t *dims);
/* The entry computation's inputs and outputs as arrays: tuple-shaped parameters and results are flattened
 * depth-first (the order tpu_run takes and returns tensors). Token leaves count as rank-0 TPU_TOKEN. */
int         tpu_module_num_inputs(const tpu_module *m);
int         tpu_module_num_outputs(const tpu_module *m);
tpu_status  tpu_module_input_info(const tpu_module *m, int i, tpu_dtype *dtype, int *rank, int64_t *dims);
tpu_status  tpu_module_output_info(const tpu_module *m, int i, tpu_dtype *dtype, int *rank, int64_t *dims);
/* The input (flattened index) that output i may share its buffer with, per the module's input_output_alias
 * (jax's donate_argnums), or -1. *must (if not NULL) is 1 for must-alias. */
int         tpu_module_output_alias(const tpu_module *m, int i, int *must);
void        tpu_free(void *p);
/* mkdir -p: the folder dir and its missing parents, new ones with permissions `mode`. On failure errno says
 * why and ctx (if not NULL) has "PATH: cannot create directory: REASON". */
tpu_status  tpu_mkdirs(tpu_ctx *ctx, const char *dir, unsigned mode);

/* ---------------------------------------------------------------------------------------------------------
 * Compatibility check (what the TPU compiler would refuse)
 * ------------------------------------------------------------------------------------------------------- */

typedef struct tpu_report tpu_report;

/* Verifies the module's shapes and signatures: TPU_OK, or TPU_ERR_SHAPE with the first errors, each at
 * file:line:col. Everything that executes or plans a program (tpu_run, tpu_system_run, tpu_random_inputs,
 * the trainer, memory, profile) verifies it first and refuses it the same way; the verdict is kept on the
 * module. tpu_check adds the TPU's own rules on top. */
tpu_status  tpu_module_verify(tpu_ctx *ctx, const tpu_module *m);

/* Verifies shapes and the TPU's rules. Returns TPU_OK when the check ran (whatever it found); the report
 * says whether the program is compatible. `chip` may be NULL (generic TPU rules). */
tpu_status  tpu_check(tpu_ctx *ctx, const tpu_module *m, const char *chip, tpu_report **out);
int         tpu_report_compatible(const tpu_report *r);
/* Errors and warnings (notes, e.g. "constant elided as {...}", are not counted). */
int         tpu_report_num_problems(const tpu_report *r);
/* The whole report as text: problems grouped by severity and kind, each with file:line:col, the instruction,
 * its op_name and source line when the metadata has them, and a one-line fix; then a one-line verdict. */
const char *tpu_report_text(const tpu_report *r);
/* The same as one JSON object: {"module", "chip", "compatible", "errors", "warnings", "notes", "complete",
 * "problems": [{"severity", "category", "where", "instruction", "opcode", "op_name", "source", "message",
 * "hint"}], "verdict"}. Absent strings are null. */
const char *tpu_report_json(const tpu_report *r);
/* The one-line verdict, e.g. "NOT COMPATIBLE with TPU v5e: 2 errors, 0 warnings, 1 note". */
const char *tpu_report_verdict(const tpu_report *r);
void        tpu_report_free(tpu_report *r);

/* ---------------------------------------------------------------------------------------------------------
 * Functional execution
 * ------------------------------------------------------------------------------------------------------- */

typedef enum tpu_numerics {
    TPU_NUMERICS_TPU = 0,   /* bf16 MXU passes per operand_precision, bf16 subnormals flushed (design §4) */
    TPU_NUMERICS_EXACT      /* every dot/conv at full f32, like XLA:CPU at HIGHEST precision */
} tpu_numerics;

/* Host transfers: send and recv instructions with is_host_transfer=true, which jax writes for host callbacks
 * (jax.debug.print, jax.pure_callback, io_callback) on a TPU. The executor hands each send's array to send()
 * and fills each recv's array from recv(), on the thread that runs the device; `device` is the device of a
 * replicated run (replica * partitions + partition; 0 for tpu_run). A non-OK status (message on ctx) fails
 * the run. Without a tpu_host_io such programs fail when they reach the transfer. */
typedef struct tpu_host_io {
    void      *user;
    tpu_status (*send)(void *user, tpu_ctx *ctx, int device, int64_t channel_id, const tpu_tensor *value);
    tpu_status (*recv)(void *user, tpu_ctx *ctx, int device, int64_t channel_id, tpu_tensor *value);
} tpu_host_io;

typedef struct tpu_run_opts {
    tpu_numerics numerics;
    int          threads;      /* 0: all cores */
    int          replica_id;   /* for replica-id when running one replica alone */
    int          verbose;
    const tpu_host_io *host;   /* host transfers (NULL: none) */
    /* Limits, so a program from elsewhere (a while loop whose condition stays true) cannot run forever. The
     * run stops with TPU_ERR_LIMIT, naming the instruction it reached, after executing max_steps instructions
     * (every instruction of every computation run, each loop iteration's included) or max_seconds of wall
     * time (checked between instructions). 0: no limit. Each device of a tpu_system counts its own. */
    int64_t      max_steps;
    double       max_seconds;
} tpu_run_opts;

tpu_run_opts tpu_run_opts_default(void);

/* Runs the entry computation on `inputs` (one per parameter, shapes must match). On success *outputs
 * receives the results (a tuple result flattened in order, nested tuples depth-first); free them with
 * tpu_tensors_free. A thread that runs programs keeps the buffers of results it frees (up to TPUSIM_POOL_MB)
 * for its next runs' results, and the module keeps its execution plans until tpu_module_free. Several threads
 * may run one module at once. */
tpu_status  tpu_run(tpu_ctx *ctx, const tpu_module *m, const tpu_run_opts *opts, tpu_tensor *const *inputs,
                    int ninputs, tpu_tensor ***outputs, int *noutputs);

/* Whether the executor can run every instruction of the module (a cheap scan, no data touched): TPU_OK, or
 * TPU_ERR_UNSUPPORTED / TPU_ERR_UNRUNNABLE naming the first instruction it cannot run (file:line:col, why),
 * e.g. a host callback or a custom-call without a kernel, or a constant elided as {...}. */
tpu_status  tpu_module_runnable(tpu_ctx *ctx, const tpu_module *m);

/* Deterministic random inputs for every entry parameter: floats uniform in [-1,1), integers in [0,8),
 * pred random. The generator (splitmix64 per parameter index and seed) is documented so scripts can
 * produce the same values. */
tpu_status  tpu_random_inputs(tpu_ctx *ctx, const tpu_module *m, uint64_t seed, tpu_tensor ***inputs, int *count);

/* ---------------------------------------------------------------------------------------------------------
 * SCALE-Sim compatible layer mode (docs/scalesim.md): SCALE-Sim's .cfg (v2/v3) and topology .csv in, its
 * COMPUTE_REPORT.csv, BANDWIDTH_REPORT.csv and DETAILED_ACCESS_REPORT.csv out, with the numbers SCALE-Sim
 * 3.0.0 computes (CALC and USER bandwidth modes; os, ws, is dataflows).
 * ------------------------------------------------------------------------------------------------------- */

typedef struct tpu_scalesim_opts {
    const char *config_path;    /* the .cfg file (required) */
    const char *topology_path;  /* the topology .csv; NULL: the config's [network_presets] TopologyCsvLoc */
    int         gemm;           /* 1: rows are "name, M, N, K" (SCALE-Sim -i gemm); 0: conv rows (-i conv) */
    const char *out_dir;        /* reports go to out_dir/<run_name>/ (created as needed); NULL: "." */
    FILE       *log;            /* one summary line per layer, or NULL for none */
} tpu_scalesim_opts;

tpu_scalesim_opts tpu_scalesim_opts_default(void);

/* Simulates every layer of the topology and writes the three reports. On success *report_dir (if not
 * NULL) receives the report directory (free with tpu_free) and *layers (if not NULL) the layer count. */
tpu_status  tpu_scalesim_run(tpu_ctx *ctx, const tpu_scalesim_opts *opts, char **report_dir, int *layers);

/* ---------------------------------------------------------------------------------------------------------
 * Chips and slices (docs/chips.md)
 *
 * A tpu_chip is a TPU generation's chip model together with the slice of those chips a program runs on.
 * Names are spelled the way Cloud TPU spells accelerator types:
 *   "v2-8", "v3-32", "v4-64", "v5p-128", "tpu7x-8"   count TensorCores (v4-64 is 32 chips, 2x4x4)
 *   "v5litepod-16" (or "v5e-16"), "v6e-8"          count chips
 *   "v5e", "v4", "v7", ...                          a bare generation: one chip
 *   "my-chip.json" (any name ending in .json or holding a '/')   a hypothetical chip from a file
 * Sizes a generation does not offer are errors that list the sizes it does ("v3-12: v3 slices come in ...").
 *
 *     tpu_chip *c = NULL;
 *     if (tpu_chip_get(ctx, "v5litepod-16", &c) == TPU_OK)
 *         printf("%d chips, %.0f TFLOP/s\n", tpu_chip_num_chips(c), tpu_chip_peak_flops(c) / 1e12);
 *     tpu_chip_free(c);
 * ------------------------------------------------------------------------------------------------------- */

typedef struct tpu_chip tpu_chip;

tpu_status  tpu_chip_get(tpu_ctx *ctx, const char *name, tpu_chip **out);
void        tpu_chip_free(tpu_chip *chip);
/* The slice as Cloud TPU spells it ("v5litepod-16"), or the chip's name for one chip ("v5e"). */
const char *tpu_chip_name(const tpu_chip *chip);
/* The generation ("v5e"), or a chip file's "name". */
const char *tpu_chip_generation(const tpu_chip *chip);
int         tpu_chip_num_chips(const tpu_chip *chip);
int         tpu_chip_num_cores(const tpu_chip *chip);     /* TensorCores in the slice */
int         tpu_chip_num_hosts(const tpu_chip *chip);
double      tpu_chip_peak_flops(const tpu_chip *chip);    /* bf16 FLOP/s of the whole slice */
int64_t     tpu_chip_hbm_bytes(const tpu_chip *chip);     /* HBM of the whole slice */
/* HBM one device's program may use (the capacity an out-of-memory report compares against). */
int64_t     tpu_chip_hbm_usable_bytes(const tpu_chip *chip);
/* Describes the chip and slice with derived figures (json != 0: one JSON object). */
tpu_status  tpu_chip_print(tpu_ctx *ctx, const tpu_chip *chip, FILE *f, int json);
/* The table of built-in generations (json != 0: a JSON array). */
tpu_status  tpu_chips_print(tpu_ctx *ctx, FILE *f, int json);
/* Built-in generations by index, oldest first ("v2" ... "v7"); NULL past the end. */
int         tpu_chips_count(void);
const char *tpu_chips_name(int i);

/* The devices of a slice as a framework sees them (what jax.devices() lists on the real slice): a TensorCore
 * on v2, v3 and TPU7x (two per chip), a whole chip on the megacore chips v4 and v5p and on v5e/v6e. */
int         tpu_chip_num_devices(const tpu_chip *chip);
typedef struct tpu_device_info {
    int     id;             /* 0 .. num_devices-1, chips in topology order, cores of a chip adjacent */
    int     chip;           /* index of its chip in the slice */
    int     core_on_chip;   /* 0 or 1 where a chip shows two devices, else 0 */
    int     coords[3];      /* the chip's position in the slice's torus (x, y, z) */
    int     host;           /* the host (Cloud TPU VM) its chip hangs off */
    int     cores;          /* TensorCores the device drives (2 on megacore chips) */
    int64_t hbm_bytes;      /* HBM its programs and buffers may use: the memory_stats() bytes_limit */
    char    kind[32];       /* device_kind as the TPU runtime spells it: "TPU v3", "TPU v5 lite", "TPU7x" */
    int     slice;          /* its slice in a multislice ("2xv5p-256"), else 0 */
} tpu_device_info;
tpu_status  tpu_chip_device(tpu_ctx *ctx, const tpu_chip *chip, int d, tpu_device_info *out);
/* Bytes an array takes in this chip's HBM with its tiling and padding (default row-major layout), or -1 if
 * the size overflows. */
int64_t     tpu_chip_array_bytes(const tpu_chip *chip, tpu_dtype dtype, int rank, const int64_t *dims);

/* ---------------------------------------------------------------------------------------------------------
 * Memory: will it fit? (design §5; docs/memory.md)
 *
 * Compiles the program for a chip the way the TPU compiler lays it out — layouts, (8,128) tiling and padding,
 * fusion, a schedule, buffer assignment by liveness with aliasing — and reports the HBM a core needs, in the
 * shape of the TPU's own out-of-memory report when it does not fit.
 * ------------------------------------------------------------------------------------------------------- */

typedef struct tpu_memory tpu_memory;

typedef struct tpu_memory_opts {
    const char *chip;      /* slice ("v3-8", "v5litepod-16"), generation ("v5e") or chip file (.json) */
    const char *policy;    /* NULL or "float32": as written; "mixed_bfloat16": Keras' mixed policy */
    int         top;       /* largest allocations listed (0: 10) */
} tpu_memory_opts;

/* The default chip, as written, the 10 largest allocations. */
tpu_memory_opts tpu_memory_opts_default(void);

tpu_status  tpu_memory_plan(tpu_ctx *ctx, const tpu_module *m, const tpu_memory_opts *opts, tpu_memory **out);
void        tpu_memory_free(tpu_memory *mem);
int         tpu_memory_fits(const tpu_memory *mem);
/* HBM the program uses on one device: program (temporaries, outputs, constants) + arguments. */
int64_t     tpu_memory_peak_bytes(const tpu_memory *mem);
int64_t     tpu_memory_capacity_bytes(const tpu_memory *mem);
/* The report as text ("Ran out of memory in memory space hbm. ..." when it does not fit). */
const char *tpu_memory_report(const tpu_memory *mem);
/* The report as a JSON object: peak_bytes, hbm_capacity_bytes, padded_bytes, unpadded_bytes, fits,
 * largest[{shape, padded_bytes, unpadded_bytes, op_name, ...}], and more. NULL if out of memory. */
const char *tpu_memory_json(const tpu_memory *mem);
/* The plan's figures in the terms of XLA's CompiledMemoryStats (bytes on one device, padded). */
typedef struct tpu_memory_stats {
    int64_t argument_bytes;   /* parameters */
    int64_t output_bytes;     /* results (including those that alias parameters) */
    int64_t alias_bytes;      /* results that share a parameter's buffer (input_output_alias) */
    int64_t temp_bytes;       /* heap peak of temporaries, outputs and constants: the program's own share */
    int64_t peak_bytes;       /* program + arguments: what must fit (tpu_memory_peak_bytes) */
    int64_t unpadded_bytes;   /* everything live at the peak, without tiling padding */
    int64_t capacity_bytes;   /* HBM one device's program may use */
    int64_t reserved_bytes;   /* HBM the runtime keeps */
} tpu_memory_stats;
void        tpu_memory_get_stats(const tpu_memory *mem, tpu_memory_stats *out);
/* The memory viewer: an SVG picture, or an HTML page that embeds it with the report. */
tpu_status  tpu_memory_write_svg(tpu_ctx *ctx, const tpu_memory *mem, const char *path);
tpu_status  tpu_memory_write_html(tpu_ctx *ctx, const tpu_memory *mem, const char *path);

/* A copy of the module rewritten for a precision policy ("float32", "mixed_bfloat16"). */
tpu_status  tpu_module_apply_policy(tpu_ctx *ctx, const tpu_module *m, const char *policy, tpu_module **out);

/* ---------------------------------------------------------------------------------------------------------
 * Time: how fast would it run? (design §6; docs/timing.md)
 *
 * The timing model on the compiled program: per op the larger of MXU, vector-unit, HBM and interconnect time
 * plus a fixed launch cost; per step the ops in schedule order (loops times their trip counts) plus the host's
 * share. Shapes only: programs far too large to run are profiled in well under a second.
 * ------------------------------------------------------------------------------------------------------- */

typedef struct tpu_profile tpu_profile;

typedef struct tpu_profile_opts {
    const char *chip;            /* slice, generation or chip file */
    const char *policy;          /* NULL/"float32" or "mixed_bfloat16" */
    int         steps;           /* steps in the trace and totals (default 1) */
    int         steps_per_exec;  /* steps per host round trip, like Keras steps_per_execution (default 1) */
    double      input_rate;      /* samples per second the host input pipeline delivers (0: unlimited) */
    int64_t     batch;           /* samples per step (0: guessed from the largest non-state argument) */
    double      price_per_chip_hour;  /* for cost estimates (0: none) */
    int         span_slice;      /* collectives whose group is every device the program was written for (its
                                  * replica_count x num_partitions, else the highest id its groups name + 1)
                                  * span the whole slice: a data-parallel step written for 8 devices timed on
                                  * v3-256. Empty groups always span the slice. */
} tpu_profile_opts;

/* The default chip, as written, one step per step and per host call, no input limit, batch guessed, no price. */
tpu_profile_opts tpu_profile_opts_default(void);

tpu_status  tpu_profile_program(tpu_ctx *ctx, const tpu_module *m, const tpu_profile_opts *opts, tpu_profile **out);
void        tpu_profile_free(tpu_profile *p);
/* What-if (tpusim profile --compare): the program m profiled with options o on each slice of `slices`
 * ("v5e-8,v6e-8"), as a text table beside base (o->chip's profile, marked "(this)"): chips, devices, step
 * time, speed-up over base, MXU utilization, bound, fits, samples/s and, with `prices` (dollars per
 * chip-hour: "1.20", or "v4=3.22,v5e=1.20,v3-8=2.00" where a slice's name wins over its generation), the cost
 * of 1000 steps. *table (free with tpu_free) has a row for every slice that profiles; when some do not, the
 * error names each ("v9-8: ...; v10-8: ...") and *table still holds the others. */
tpu_status  tpu_profile_compare(tpu_ctx *ctx, const tpu_module *m, const tpu_profile_opts *o, const tpu_profile *base,
                                const char *slices, const char *prices, char **table);
double      tpu_profile_step_time(const tpu_profile *p);
/* "compute", "vector", "memory", "collective", "overhead", "host" or "idle": what dominates the step. */
const char *tpu_profile_bound(const tpu_profile *p);
double      tpu_profile_mxu_utilization(const tpu_profile *p);
/* Samples per step (the --batch given, or the leading dimension of the largest non-state input), and
 * whether the program fits in the device's HBM. */
int64_t     tpu_profile_batch(const tpu_profile *p);
int         tpu_profile_fits(const tpu_profile *p);
/* Devices (program instances) of the slice the profile is for. */
int         tpu_profile_devices(const tpu_profile *p);
/* Per step on one device: floating-point operations (a multiply-add counts 2), HBM bytes moved (padded),
 * ICI bytes sent, and the device's busy time without the host's share. */
double      tpu_profile_flops(const tpu_profile *p);
double      tpu_profile_hbm_bytes(const tpu_profile *p);
double      tpu_profile_ici_bytes(const tpu_profile *p);
double      tpu_profile_device_time(const tpu_profile *p);
/* Text summary with the `top` most expensive ops (0: 15). */
const char *tpu_profile_summary(tpu_profile *p, int top);
/* JSON: step_time_s, flops, mxu_utilization, hbm_bytes, bound, ops[{name, time_s, bound, ...}], ... */
const char *tpu_profile_json(tpu_profile *p);
/* The advisor's pointers, each with its evidence and predicted gain. */
const char *tpu_profile_advice(tpu_profile *p);
/* Chrome trace-event JSON (opens in Perfetto and chrome://tracing), and the HTML report with charts. */
tpu_status  tpu_profile_write_trace(tpu_ctx *ctx, const tpu_profile *p, const char *path);
tpu_status  tpu_profile_write_html(tpu_ctx *ctx, const tpu_profile *p, const char *path);
/* TensorBoard: the profile as an XSpace, the XLA profiler's protobuf (an XPlane per device with its "Steps",
 * "XLA Modules" and "XLA Ops" lines and each op's FLOPs, bytes and HLO category), which TensorBoard's profile
 * plugin shows in its trace viewer, op profile and overview. _write_tensorboard writes it where the plugin
 * looks: LOGDIR/plugins/profile/RUN/HOST.xplane.pb (RUN NULL: the time, as the profiler names runs), creating
 * directories as needed; *written (if not NULL) gets the file's path (free with tpu_free). The profile's steps
 * are laid end to end. */
tpu_status  tpu_profile_write_xplane(tpu_ctx *ctx, const tpu_profile *p, const char *path);
tpu_status  tpu_profile_write_tensorboard(tpu_ctx *ctx, const tpu_profile *p, const char *logdir, const char *run,
                                          char **written);
/* Several programs in one TensorBoard profile (the PJRT plugin: every executable and its executions): each
 * added profile's `runs` executions are laid end to end after the previous one's. The profiles must stay
 * alive until the space is written or freed. */
typedef struct tpu_xspace tpu_xspace;
tpu_status  tpu_xspace_new(tpu_ctx *ctx, tpu_xspace **out);
void        tpu_xspace_free(tpu_xspace *xs);
tpu_status  tpu_xspace_add(tpu_ctx *ctx, tpu_xspace *xs, const tpu_profile *p, int64_t runs);
tpu_status  tpu_xspace_write(tpu_ctx *ctx, const tpu_xspace *xs, const char *path);
tpu_status  tpu_xspace_write_tensorboard(tpu_ctx *ctx, const tpu_xspace *xs, const char *logdir, const char *run,
                                         char **written);

/* ---------------------------------------------------------------------------------------------------------
 * Scaling: one per-device program on slices of several sizes (tpusim scale, docs/pods.md)
 *
 * For each slice the timing model's step with the program's collectives spanning that slice (its torus,
 * hosts, multislice), then samples/s, speed-up and efficiency against the smallest slice, time to train and
 * cost; beside them the same program on N GPUs of one server (a roofline per op from published peaks).
 * ------------------------------------------------------------------------------------------------------- */

typedef struct tpu_scale tpu_scale;

typedef struct tpu_scale_opts {
    const char *program;         /* HLO file of one device's step; "{b}" in it is replaced by the per-device batch */
    const char *slices;          /* "v2-8,v2-32,v2-128,v2-256,v2-512" */
    int64_t     per_core_batch;  /* weak scaling: samples per device per step (0: the program's own) */
    int64_t     global_batch;    /* strong scaling: samples per step over the whole slice (0: weak) */
    double      dataset_size;    /* samples per epoch, with epochs: time to train (0: not shown) */
    double      epochs;
    const char *prices;          /* "v2=1.50,v3-512=2.00,V100=2.48": dollars per chip- or GPU-hour (NULL: no cost) */
    const char *gpus;            /* GPUs to compare: "V100,A100,H100" (NULL: those three), "none" */
    int         gpu_count;       /* GPUs in one server (0: 8) */
    int         span_slice;      /* -1: collectives keep their groups; else they span each slice (tpu_profile_opts) */
} tpu_scale_opts;

tpu_status  tpu_scale_run(tpu_ctx *ctx, const tpu_scale_opts *opts, tpu_scale **out);
void        tpu_scale_free(tpu_scale *s);
const char *tpu_scale_table(tpu_scale *s);      /* the text table */
const char *tpu_scale_json(tpu_scale *s);       /* {"rows": [{"name", "step_time_s", "samples_per_s", ...}]} */
/* The chart (throughput against chips on log axes with the linear ideal; efficiency per slice) as SVG, or an
 * HTML page with the chart and the table. */
tpu_status  tpu_scale_write_svg(tpu_ctx *ctx, tpu_scale *s, const char *path);
tpu_status  tpu_scale_write_html(tpu_ctx *ctx, tpu_scale *s, const char *path);

/* ---------------------------------------------------------------------------------------------------------
 * Replicas: a system of devices running one program together, with collectives (docs/runtime.md)
 *
 * A tpu_system is N devices (replicas x partitions), each a thread that keeps running between calls. A run
 * gives every device its own inputs, runs the module on all of them at once (replica-id, partition-id and
 * every collective — all-reduce, all-gather, reduce-scatter, all-to-all, collective-permute,
 * collective-broadcast and their async forms — behave as on a TPU slice) and returns every device's outputs:
 *
 *     tpu_system *sys = NULL;
 *     tpu_system_new(ctx, "v4-8", &sys);                    // 4 devices; or "8" for eight devices
 *     tpu_tensor **in[4] = {mine0, mine1, mine2, mine3};    // per device, k inputs each (NULL: in[0])
 *     tpu_tensor **out[4]; int nout;
 *     if (tpu_system_run(ctx, sys, m, NULL, in, k, out, &nout) != TPU_OK)
 *         fprintf(stderr, "%s\n", tpu_errmsg(ctx));          // "device 2 (replica 2, partition 0): ..."
 *     tpu_system_outputs_free(out, 4, nout);
 *     tpu_system_free(sys);
 *
 * How the devices split into replicas and partitions: the module's replica_count / num_partitions when it
 * names them (their product must be the device count); else tpu_system_set_split; else all partitions when
 * the program reads partition-id or has collectives with a channel_id (SPMD programs, as jax.jit writes
 * them), otherwise all replicas. Device d is replica d / P, partition d % P.
 * A device whose program fails stops the others at their next collective; the error names the device.
 * ------------------------------------------------------------------------------------------------------- */

typedef struct tpu_system tpu_system;

/* `devices`: "N" (N devices, links modelled on v4 chips), a slice ("v3-8": its devices), a generation or chip
 * file (one chip's devices), or "N:CHIP" (N devices with the links of CHIP, for the collectives' time). */
tpu_status  tpu_system_new(tpu_ctx *ctx, const char *devices, tpu_system **out);
void        tpu_system_free(tpu_system *sys);
int         tpu_system_num_devices(const tpu_system *sys);
/* The chip or slice whose links model the collectives' time ("v4-8"). */
const char *tpu_system_chip(const tpu_system *sys);
/* Replicas x partitions for modules that name neither count (0, 0: automatic, as above). */
tpu_status  tpu_system_set_split(tpu_ctx *ctx, tpu_system *sys, int replicas, int partitions);

/* Runs m on every device. inputs[d] holds device d's `ninputs` tensors (as tpu_run takes them; a NULL
 * inputs[d] means inputs[0], and the same array may be given to every device); inputs may be NULL when
 * ninputs is 0. outputs must have room for one entry per device: outputs[d] receives device d's results
 * (*noutputs each; free with tpu_system_outputs_free). opts: as tpu_run (NULL: defaults); with more than one
 * device each device runs its kernels on one thread. One run at a time per system; the threads stay for the
 * next run, so a training loop can feed outputs[d] back as inputs[d]. */
tpu_status  tpu_system_run(tpu_ctx *ctx, tpu_system *sys, const tpu_module *m, const tpu_run_opts *opts,
                           tpu_tensor **const *inputs, int ninputs, tpu_tensor ***outputs, int *noutputs);
void        tpu_system_outputs_free(tpu_tensor ***outputs, int ndevices, int noutputs);

/* What the last run did. Collectives are counted on the device with the most modelled ICI time. */
typedef struct tpu_system_stats {
    int     devices, replicas, partitions;
    int64_t collectives;            /* collective executions on that device */
    int64_t all_reduce, all_gather, reduce_scatter, all_to_all, collective_permute, collective_broadcast;
    int64_t ici_bytes;              /* bytes it sends over ICI in the model */
    double  ici_s;                  /* modelled ICI time of its collectives (the timing model's cost) */
    double  run_s;                  /* wall-clock seconds of the run on this host */
} tpu_system_stats;
void        tpu_system_last_stats(const tpu_system *sys, tpu_system_stats *out);

/* The module's replica_count and num_partitions (1 when it does not name them). */
int64_t     tpu_module_replica_count(const tpu_module *m);
/* A 64-bit hash of the module as printed (the same program text gives the same value), computed once. */
uint64_t    tpu_module_fingerprint(const tpu_module *m);
int64_t     tpu_module_num_partitions(const tpu_module *m);

/* ---------------------------------------------------------------------------------------------------------
 * Several processes: a slice spread over hosts with MPI (docs/pods.md)
 *
 * As on a real pod, a multi-host slice runs one process per host: started by `mpirun -np H`, each process
 * runs its own devices (threads) and the collectives whose groups span processes travel over MPI, with the
 * same reduction order as in one process, so the results are the same bit for bit.
 *
 *     tpu_dist *d = NULL;
 *     if (tpu_dist_launched() && tpu_dist_new(ctx, &d) != TPU_OK) ...;   // MPI_Init (a thread of its own)
 *     tpu_system *sys = NULL;
 *     tpu_system_new_dist(ctx, "v3-32", d, NULL, &sys);     // this process's 8 of the 32 devices
 *     ... tpu_system_run(ctx, sys, m, NULL, in, k, out, &nout) with in[g] / out[g] for the local devices g
 *     tpu_system_free(sys);
 *     tpu_dist_free(d, status);                              // MPI_Finalize, or MPI_Abort after a failure
 *
 * A process that fails tells the others, whose runs then fail naming it; one that waits longer than the
 * timeout (TPUSIM_DIST_TIMEOUT seconds, default 300) for another fails naming the one it waits for; a
 * process that dies is reported by mpirun, which stops the job. After a failure the tpu_dist is unusable.
 * ------------------------------------------------------------------------------------------------------- */

typedef struct tpu_dist tpu_dist;

/* Was this process started by an MPI launcher with more than one process (Open MPI, MPICH, PMI)? */
int         tpu_dist_launched(void);
/* Starts MPI (MPI_Init on the transport's own thread, or the caller's MPI when already initialized). */
tpu_status  tpu_dist_new(tpu_ctx *ctx, tpu_dist **out);
int         tpu_dist_rank(const tpu_dist *d);
int         tpu_dist_size(const tpu_dist *d);
/* Every process gives `len` bytes (the same len everywhere); all[] gets them in rank order. */
tpu_status  tpu_dist_allgather(tpu_ctx *ctx, tpu_dist *d, const void *mine, size_t len, void *all);
/* Every process must give the same value (of what `what` names); otherwise an error naming the first process
 * that differs and both values. */
tpu_status  tpu_dist_agree(tpu_ctx *ctx, tpu_dist *d, const char *what, const char *value);
/* This process failed (msg says why): the others' waits end with it. */
void        tpu_dist_fail(tpu_dist *d, const char *msg);
/* 1 after a failure here or elsewhere (the message, if msg is not NULL). */
int         tpu_dist_failed(tpu_dist *d, const char **msg);
/* Ends MPI: MPI_Finalize when every process got this far cleanly (status 0); MPI_Abort, which ends every
 * process of the job, this one included, when status is not 0 (the job's exit status) or a process failed
 * (status 1). NULL: no-op. */
void        tpu_dist_free(tpu_dist *d, int status);

/* This process's part of a system of `devices` (as tpu_system_new): the devices owner[g] == tpu_dist_rank(d)
 * of the global ids g, or with owner NULL the rank's block of hosts (the slice's hosts must split evenly
 * over the processes: v3-32 has 4 hosts of 8 devices, so 1, 2 or 4 processes). d NULL: tpu_system_new.
 * tpu_system_run then takes inputs[g] and fills outputs[g] for the local devices only (NULL elsewhere). */
tpu_status  tpu_system_new_dist(tpu_ctx *ctx, const char *devices, tpu_dist *d, const int *owner, tpu_system **out);
/* Is global device g run by this process? */
int         tpu_system_is_local(const tpu_system *sys, int g);

/* ---------------------------------------------------------------------------------------------------------
 * Training: a STEP_DIR (docs/step_dir.md: train-step HLO, signature.json, initial state, datasets) trained
 * data-parallel on a simulated slice, as xm.optimizer_step does it: every replica runs grad.hlo on its shard
 * of the global batch, an all-reduce executed by the replicated runtime averages the gradients (timed by
 * the ICI model), and apply.hlo updates the state, which stays on the device from step to step. A prefetch
 * thread feeds batches from .npz shards or the cached .tpuds format; its measured rate goes into the
 * timing model, so the report says when training is input-bound.
 *
 *     tpu_train_opts o = tpu_train_opts_default();
 *     o.slice = "v3-8"; o.steps = 165; o.model_dir = "run"; o.log = stderr;
 *     tpu_trainer *tr = NULL;
 *     if (tpu_trainer_new(ctx, "examples/digits_mlp", &o, &tr) != TPU_OK ||
 *         tpu_trainer_train(ctx, tr, 0) != TPU_OK)                      // evaluates and saves at the end
 *         fprintf(stderr, "%s\n", tpu_errmsg(ctx));
 *     tpu_train_result res;
 *     tpu_trainer_finish(ctx, tr, &res);       // predicted step time, profile.html, trace.json, memory.html
 *     tpu_trainer_free(tr);
 * ------------------------------------------------------------------------------------------------------- */

typedef struct tpu_trainer tpu_trainer;

typedef struct tpu_train_opts {
    const char  *slice;          /* "v3-8" (default): a slice whose devices are the replicas */
    int          cores;          /* 0: every device of the slice; 1: one (a board trains on 1 or all) */
    const char  *data;           /* training set; NULL: the signature's data.train (data.cached.train if cached) */
    const char  *eval_data;      /* eval set; NULL: data.eval (data.cached.eval if cached); "none": none */
    int          cached;         /* take the signature's data.cached hints */
    int64_t      steps;          /* train until the step count reaches this; one_cycle's total without one */
    int          steps_per_exec; /* K steps per host call: metrics of the K reported together (default 1) */
    const char  *model_dir;      /* state.npz, progress.json, metrics.jsonl, profile; NULL: nothing written */
    int          resume;         /* continue from model_dir's checkpoint */
    int64_t      seed;           /* data order; -1: the signature's data.seed */
    int64_t      eval_every;     /* evaluate every E steps (0: only at the end) */
    int64_t      save_every;     /* checkpoint every C steps (0: only at the end) */
    int64_t      log_every;      /* a progress line every L steps (0: about 20 per run) */
    tpu_numerics numerics;       /* TPU numerics (default) or exact */
    int          prefetch;       /* input queue depth in steps (0: 8) */
    double       input_delay_s;  /* extra host seconds per global batch: emulates a slow input pipeline */
    double       input_rate;     /* > 0: samples/s for the timing model instead of the measured rate */
    FILE        *log;            /* progress and messages (NULL: quiet) */
    int          progress_bar;   /* 1: one line redrawn in place (a terminal); 0: a plain line per interval */
    int          overwrite;      /* start over in a model_dir that holds a checkpoint, replacing it; without it
                                    (or resume) tpu_trainer_new refuses such a model_dir */
    tpu_dist    *dist;           /* a slice spread over processes (mpirun): this process's share of the replicas;
                                  * process 0 writes model_dir; NULL: one process */
} tpu_train_opts;

tpu_train_opts tpu_train_opts_default(void);

/* Reads and checks the STEP_DIR (signature, programs, state, datasets; errors name the file and the key),
 * starts the devices, and loads init_state.npz or, with opts->resume, model_dir's checkpoint. */
tpu_status  tpu_trainer_new(tpu_ctx *ctx, const char *step_dir, const tpu_train_opts *opts, tpu_trainer **out);
void        tpu_trainer_free(tpu_trainer *tr);
/* Trains until the step count reaches `until` (0: opts->steps), evaluating and checkpointing on the way;
 * reaching opts->steps evaluates and checkpoints once more. */
tpu_status  tpu_trainer_train(tpu_ctx *ctx, tpu_trainer *tr, int64_t until);
/* Runs eval.hlo over the whole eval set (a padded, masked last batch); tpu_trainer_eval_value reads it. */
tpu_status  tpu_trainer_evaluate(tpu_ctx *ctx, tpu_trainer *tr);
/* Writes model_dir/state.npz and progress.json atomically (temporary file, fsync, rename). */
tpu_status  tpu_trainer_save(tpu_ctx *ctx, tpu_trainer *tr);
int64_t     tpu_trainer_step(const tpu_trainer *tr);          /* optimizer steps done */
int         tpu_trainer_replicas(const tpu_trainer *tr);
int         tpu_trainer_num_state(const tpu_trainer *tr);
/* State entry i (signature order) as it is now, and its name. */
const tpu_tensor *tpu_trainer_state(const tpu_trainer *tr, int i, const char **name);
/* The last logged value of training metric `name` (mean of the steps since the previous log), NAN if none. */
double      tpu_trainer_metric(const tpu_trainer *tr, const char *name);
/* The last evaluation's report entry `name` ("accuracy", "loss"), NAN if none. */
double      tpu_trainer_eval_value(const tpu_trainer *tr, const char *name);
/* The last evaluation's entry i (eval.report order): 1 with its name and value, 0 past the end or before
 * any evaluation. */
int         tpu_trainer_eval_result(const tpu_trainer *tr, int i, const char **name, double *value);

typedef struct tpu_train_result {
    int64_t     steps;               /* optimizer steps done */
    int         replicas;
    int64_t     global_batch;
    double      loss;                /* last logged training loss */
    double      wall_s;              /* host seconds spent in training steps in this process */
    double      steps_per_s;         /* real steps per second on this host */
    double      sim_step_s;          /* predicted time of one training step on the slice */
    double      sim_program_s;       /* of which the device program (step.hlo) with its launch share */
    double      sim_allreduce_s;     /* of which the gradient all-reduce over ICI (runtime, ICI model) */
    double      mxu_utilization;
    const char *bound;               /* what bounds the step ("overhead", "compute", "idle"=input, ...) */
    double      input_samples_per_s; /* the host input pipeline's measured rate (all replicas) */
    int         input_bound;         /* the devices would wait for input */
    const char *advice;              /* the advisor's pointers (valid until tpu_trainer_free) */
    const char *profile_html, *trace_json, *memory_html, *metrics_jsonl;   /* written files, or NULL */
} tpu_train_result;

/* Profiles step.hlo on the slice with the measured input rate and steps per execution, adds the runtime's
 * all-reduce time, and writes profile.html, trace.json and memory.html into model_dir; *res gets the
 * predicted step time, MXU utilization, the advisor's pointers and the files written. */
tpu_status  tpu_trainer_finish(tpu_ctx *ctx, tpu_trainer *tr, tpu_train_result *res);

/* The learning-rate range test (docs/step_dir.md section 8) from init_state: opts->steps steps (default
 * 100) with the rate growing from lr_min to lr_max geometrically, stopping when the loss diverges. Writes
 * out_json ({"hyper", "replicas", "per_replica_batch", "points": [{step, lr, loss}]}), beside it a .jsonl
 * (one point a line) and an .svg plot; *suggestion (if not NULL) gets the rate where the smoothed loss falls
 * fastest (0 if none). */
tpu_status  tpu_train_lr_find(tpu_ctx *ctx, const char *step_dir, const tpu_train_opts *opts, double lr_min,
                              double lr_max, const char *out_json, double *suggestion);

#ifdef __cplusplus
}
#endif
#endif /* TPUSIM_H */
