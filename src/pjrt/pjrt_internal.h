/* pjrt_internal.h — tpusim's PJRT plugin: the objects behind the PJRT C API's opaque handles.
 *
 * The plugin is a client of the public API (include/tpusim.h), like the CLI: a framework (jax, PyTorch/XLA)
 * loads libtpusim_pjrt.so, calls GetPjrtApi() and drives a simulated TPU slice through the function table.
 * Names start with pj_.
 *
 *   pjrt_api.c       the function table, errors, events, plugin attributes, argument-size checks
 *   pjrt_client.c    the client: the slice's devices, their descriptions and memories, the topology
 *   pjrt_buffer.c    device buffers: host transfers, HBM accounting per device (memory_stats)
 *   pjrt_compile.c   programs in (StableHLO via jaxlib's converter, HloModuleProto, HLO text), compile
 *                    options, the TPU's compile-time refusals, executables and what the framework asks of them
 *   pjrt_execute.c   execution on one device or on a replicated/partitioned set, donation
 *   pjrt_proto.c     the few protobuf messages the API exchanges (compile options, device assignment)
 *   pjrt_python.c    calls into the Python that hosts the plugin (jaxlib's converter and SPMD partitioner)
 *   pjrt_report.c    what a TPU user sees: the "Found TPU system" line, TPUSIM_PROFILE_DIR, the exit summary
 *   pjrt_dist.c      a slice spread over processes (jax.distributed under mpirun): which devices are this
 *                    process's, and executions whose devices span processes (src/dist/ carries the collectives)
 *   pjrt_remote.c    remote mode (TPU_NAME / TPU_GRPC_URL): compile, buffers and runs on a `tpusim serve` host
 *
 * Every call is synchronous: when a function returns, its work is done, so every event is born ready.
 * Threads: the framework calls from several threads; a client's shared state is under its mutex. */
#ifndef TPU_PJRT_INTERNAL_H
#define TPU_PJRT_INTERNAL_H

#include "tpusim.h"
#include "pjrt_c_api.h"
#include "pjrt_c_api_shardings_extension.h"

#include <pthread.h>
#include <stdarg.h>

#define PJ_PLATFORM "tpu"          /* jax lowers for this platform: the programs are what a TPU user gets */
#define PJ_MAX_USER_DATA 8

/* ---- errors and events (pjrt_api.c) ---- */
/* The API defines PJRT_Error as a vtable pointer; tpusim's errors extend it. */
typedef struct pj_error_obj {
    PJRT_Error      base;
    PJRT_Error_Code code;
    char           *msg;
} pj_error_obj;

/* NULL only when even the error cannot be allocated: then a static out-of-memory error is returned. */
PJRT_Error *pj_error(PJRT_Error_Code code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The message of a failed tpusim call, with a code that fits its status (OOM -> RESOURCE_EXHAUSTED...). */
PJRT_Error *pj_error_tpu(tpu_ctx *ctx, tpu_status st, const char *prefix);
PJRT_Error *pj_error_copy(const PJRT_Error *e);
void        pj_error_free(PJRT_Error *e);

struct PJRT_Event {
    PJRT_Error *error;   /* NULL: succeeded */
    int         set;     /* created by PJRT_Event_Create and not yet set */
};
PJRT_Event *pj_event_ready(const PJRT_Error *error);

/* Arguments shorter than the fields this plugin reads come from an older framework. */
#define PJ_NEED(args, type, last)                                                                              \
    do {                                                                                                       \
        if (!(args)) return pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "%s: no arguments", #type);            \
        if ((args)->struct_size < PJRT_STRUCT_SIZE(type, last)) return pj_args_too_old(#type, (args)->struct_size, PJRT_STRUCT_SIZE(type, last)); \
    } while (0)
PJRT_Error *pj_args_too_old(const char *type, size_t got, size_t want);

/* ---- the client and its devices (pjrt_client.c) ---- */
typedef struct pj_user_data {
    const void *key;
    void       *data;
    void      (*dtor)(void *);
} pj_user_data;

/* The API defines PJRT_Memory as a vtable pointer (the framework keeps its own objects on it through the
 * user-data functions); tpusim's memory spaces extend it: one HBM per device. */
typedef struct pj_memory {
    PJRT_Memory  base;
    PJRT_Device *dev;
    int          id;
    pj_user_data user[PJ_MAX_USER_DATA];
    int          nuser;
    char         str[96];
} pj_memory;
static inline pj_memory *pj_mem(PJRT_Memory *m) { return (pj_memory *)m; }

struct PJRT_DeviceDescription {
    tpu_device_info info;
    int             process;       /* jax's process index of the process that runs it (0 in one process) */
    int             local_id;      /* its index among that process's devices */
    int64_t         coords[3];
    PJRT_NamedValue attrs[6];
    int             nattrs;
    char            to_string[96], debug[160];
};

struct PJRT_Device {
    PJRT_DeviceDescription desc;
    PJRT_Client           *client;
    pj_memory              mem;
    PJRT_Memory           *mem_list[1];
    /* HBM accounting (under the client's mutex) */
    int64_t                in_use, peak, nallocs, largest;
};

struct PJRT_TopologyDescription {
    PJRT_Client             *client;
    PJRT_DeviceDescription **descs;
    PJRT_NamedValue          attrs[4];
    int                      nattrs;
};

typedef struct pj_system_slot {
    int         ndev;
    tpu_system *sys;
} pj_system_slot;

struct PJRT_Client {
    tpu_ctx        *ctx;            /* messages of client-level calls (under mu) */
    tpu_chip       *chip;           /* the simulated slice */
    char            slice[64];
    int             ndev;
    PJRT_Device    *devs;
    PJRT_Device   **dev_list;
    PJRT_Memory   **mem_list;
    int             naddr;          /* this process's devices (all of them in one process) */
    PJRT_Device   **addr_list;
    PJRT_Memory   **addr_mems;
    struct pj_dist *dist;           /* several processes (pjrt_dist.c), or NULL */
    PJRT_TopologyDescription topo;
    tpu_numerics    numerics;
    int             threads;        /* kernel threads of one device's run (0: all cores) */
    int64_t         max_steps;      /* per execution (TPUSIM_MAX_STEPS; 0: none): a program from the framework
                                       whose loop never ends fails instead of hanging the caller */
    double          max_seconds;    /* per execution (TPUSIM_TIMEOUT seconds; 0: none) */
    char            version[160];   /* platform_version: says it is tpusim */
    int             process_index;
    pthread_mutex_t mu;
    pj_system_slot  systems[8];     /* device sets kept for replicated runs, by device count */
    int             nsystems;
    pthread_mutex_t run_mu;         /* one replicated run at a time per client (the systems are shared) */
    /* what the exit summary and the profile directory report (under mu) */
    char           *profile_dir;
    int64_t         executions, compiles;
    double          predicted_s, mxu_weighted_s;
    struct pj_exe_note *notes;      /* one per executable compiled, for the summary and the trace */
    int             nnotes, capnotes;
    int64_t         live_buffers, live_executables;
    int             summarized;     /* the exit summary was written */
    int             announced;      /* the "Found TPU system" line was printed */
    struct pj_remote *remote;       /* remote mode (TPU_NAME / TPU_GRPC_URL): pjrt_remote.c; NULL in-process */
};

/* Environment and slice: TPUSIM_SLICE (default v3-8), TPUSIM_NUMERICS (tpu|exact), TPUSIM_THREADS. */
PJRT_Error *pj_client_new(const PJRT_Client_Create_Args *args, PJRT_Client **out);
void        pj_client_free(PJRT_Client *c);
PJRT_Device *pj_client_device(PJRT_Client *c, int id);   /* NULL if out of range */

/* HBM accounting: reserves bytes on a device, or fails with the TPU runtime's out-of-memory wording. */
PJRT_Error *pj_hbm_alloc(PJRT_Device *d, int64_t bytes, const tpu_tensor *what);   /* what: named on failure */
void        pj_hbm_free(PJRT_Device *d, int64_t bytes);

/* ---- buffers (pjrt_buffer.c) ---- */
struct PJRT_Buffer {
    PJRT_Device *dev;
    tpu_tensor  *t;          /* the value, row-major; NULL once deleted or donated */
    tpu_dtype    dtype;
    int          rank;
    int64_t      dims[TPU_MAX_RANK];
    int64_t      hbm_bytes;  /* what it holds of its device's HBM (tiled, padded) */
    int          deleted;    /* deleted or donated */
    int          donated;
    int          ext_refs;
    int64_t      ext_dims[TPU_MAX_RANK];
    uint64_t     remote;     /* remote mode: the server's handle (t stays NULL); 0 otherwise */
};
static inline int pj_buffer_live(const PJRT_Buffer *b) { return !b->deleted && (b->t || b->remote); }

tpu_dtype        pj_dtype_from_pjrt(PJRT_Buffer_Type t);
PJRT_Buffer_Type pj_dtype_to_pjrt(tpu_dtype t);
/* Wraps a tensor (taken over) as a buffer on d, charging d's HBM. On failure the tensor is freed. */
PJRT_Error *pj_buffer_wrap(PJRT_Device *d, tpu_tensor *t, PJRT_Buffer **out);
void        pj_buffer_release(PJRT_Buffer *b);    /* frees the tensor and its HBM; the handle stays */

/* ---- host transfers: jax's host callbacks (pjrt_execute.c) ----
 * A recv asks the framework's recv callback for data through a stream the framework fills with chunks
 * (possibly from another thread) and destroys when it is done with it: two owners, counted. */
/* An execution's host transfers go to the framework's send/recv callbacks (user: a pj_host); remote mode
 * calls them for the transfers the TPU host streams back. */
typedef struct pj_host {
    const PJRT_ExecuteOptions *o;
    int                        ndev;
} pj_host;
tpu_status pj_host_send(void *user, tpu_ctx *ctx, int device, int64_t ch, const tpu_tensor *v);
tpu_status pj_host_recv(void *user, tpu_ctx *ctx, int device, int64_t ch, tpu_tensor *v);

struct PJRT_CopyToDeviceStream {
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    int             refs;       /* the waiting execution and the framework */
    char           *dst;        /* the recv's array, filled in order */
    int64_t         total, current;
};

/* ---- executables (pjrt_compile.c, pjrt_execute.c) ---- */
typedef struct pj_exe_note {
    char   name[96];
    char  *advice;             /* the advisor's pointers for the program, or NULL */
    double step_s, mxu_util;
    int64_t runs;
    /* the program's predicted profile, kept for the TensorBoard profile written at exit: its own context and
     * copy of the program (parsed from the optimized HLO), since the executable may be gone by then */
    tpu_ctx     *ctx;
    tpu_module  *m;
    tpu_profile *p;
} pj_exe_note;

struct PJRT_Executable {
    PJRT_Client  *client;
    tpu_module   *m;                 /* the per-device program (partitioned where the framework asked) */
    char         *name;
    int           nreplicas, npartitions;
    tpu_numerics  numerics;          /* the client's, or the compiler option tpusim_numerics */
    int          *assignment;        /* device id of (replica r, partition p) at [r * npartitions + p] */
    int           ninputs, noutputs;
    int           ntoken_outputs;    /* token leaves of the result (the executor returns no tensor for them) */
    PJRT_Buffer_Type *out_types;
    int64_t      *out_dims;          /* all outputs' dims, concatenated */
    size_t       *out_ranks;
    const char  **out_kinds;         /* "device" for each output */
    size_t       *out_kind_sizes;
    int          *alias_of;          /* per output: the input it may alias, or -1 */
    /* serialized OpSharding protos from the partitioner (NULL: not partitioned) */
    int           nin_shard, nout_shard;
    char        **in_shard, **out_shard;
    size_t       *in_shard_len, *out_shard_len;
    /* what the framework asks about the program */
    tpu_memory_stats mem;
    int           have_cost;
    double        cost_flops, cost_bytes, cost_seconds, cost_mxu_util, cost_ici_bytes;
    PJRT_NamedValue cost[6];
    char         *fingerprint;
    char         *optimized_hlo;     /* the per-device HLO text */
    char         *optimized_mlir;    /* it as StableHLO bytecode, made on first request (under the client's mutex) */
    size_t        optimized_mlir_len;
    char         *da_bytes;          /* serialized DeviceAssignmentProto */
    size_t        da_len;
    char         *options;           /* the compile options as received */
    size_t        options_len;
    int           note;              /* index in client->notes, or -1 */
    uint64_t      remote;            /* remote mode: the server's executable (0: none) */
    int           refs;              /* the loaded executable and each PJRT_Executable handle given out */
};

struct PJRT_LoadedExecutable {
    PJRT_Executable *exe;
    PJRT_Device    **devices;         /* addressable devices in (replica, partition) order */
    int              ndevices;
    PJRT_LogicalDeviceIds *logical;
    int              deleted;
};

void        pj_executable_unref(PJRT_Executable *e);
PJRT_Error *pj_compile(PJRT_Client *c, const PJRT_Program *prog, const char *opts, size_t opts_len,
                       PJRT_LoadedExecutable **out);
PJRT_Error *pj_execute(PJRT_LoadedExecutable_Execute_Args *args);
/* Predicted cost (tpusim's timing model), computed on first use. */
PJRT_Error *pj_executable_cost(PJRT_Executable *e);

/* ---- protobuf (pjrt_proto.c) ---- */
typedef struct pj_compile_opts {
    int64_t num_replicas, num_partitions;
    int     use_spmd, use_shardy;
    int     have_assignment;
    int     da_replicas, da_computations;
    int    *da;                 /* device of (replica r, computation c) at [r * da_computations + c] */
    int     numerics;           /* compiler option tpusim_numerics: 0 the client's, 1 tpu, 2 exact */
    int     have_matrix_precision;
    int     matrix_precision;   /* PrecisionConfig.Precision asked for every dot: 0 DEFAULT, 1 HIGH, 2 HIGHEST */
} pj_compile_opts;
PJRT_Error *pj_parse_compile_options(const char *buf, size_t len, pj_compile_opts *out);
void        pj_compile_opts_free(pj_compile_opts *o);
/* DeviceAssignmentProto of R replicas x P partitions (ids at [r * P + p]); malloc'ed bytes. */
char       *pj_device_assignment_proto(int R, int P, const int *ids, size_t *len);
/* An OpSharding proto saying "replicated" (for programs that are not partitioned). */
char       *pj_replicated_sharding_proto(size_t *len);

/* ---- Python (pjrt_python.c) ---- */
typedef struct pj_frontend_result {
    char   *hlo;                    /* HLO text of the per-device program */
    int     nin, nout;              /* shardings (serialized OpSharding) when partitioned, else 0 */
    char  **in_shard, **out_shard;
    size_t *in_len, *out_len;
} pj_frontend_result;
/* StableHLO bytes (jax's portable artifact) -> HLO text, partitioned over num_partitions devices when the
 * compile options (a serialized CompileOptionsProto) ask for SPMD, through jaxlib in the hosting Python
 * process. */
PJRT_Error *pj_python_frontend(const char *code, size_t len, const char *format, const char *opts, size_t opts_len,
                               pj_frontend_result *out);
void        pj_frontend_result_free(pj_frontend_result *r);
/* The per-device HLO as StableHLO bytecode (what OptimizedProgram returns as "mlir"), through jaxlib. */
PJRT_Error *pj_python_optimized_program(const char *hlo, char **out, size_t *len);

/* ---- remote mode (pjrt_remote.c): with TPU_NAME or TPU_GRPC_URL set, the client is a session on a
 * `tpusim serve` host: programs are compiled, buffers kept and executions run there; what the framework asks
 * about them (shapes, memory and cost analyses) is answered here from the same program. ---- */
/* Connects when TPU_GRPC_URL / TPU_NAME say so (else leaves c->remote NULL): *slice gets the server's. */
PJRT_Error *pj_remote_open(PJRT_Client *c, const char **slice);
void        pj_remote_close(PJRT_Client *c);
const char *pj_remote_where(const PJRT_Client *c);                 /* " at grpc://HOST:PORT (TPU NAME)", or "" */
PJRT_Error *pj_remote_put(PJRT_Buffer *b, tpu_tensor *t);          /* uploads t to b's device (t is freed) */
PJRT_Error *pj_remote_fetch(const PJRT_Buffer *b, tpu_tensor **out);
void        pj_remote_delete_buffer(PJRT_Buffer *b);
PJRT_Error *pj_remote_compile(PJRT_Client *c, PJRT_Executable *e);   /* the server checks, plans and keeps it */
void        pj_remote_delete_executable(PJRT_Executable *e);
PJRT_Error *pj_remote_execute(PJRT_LoadedExecutable_Execute_Args *a, PJRT_Device *const *devs, int n);

/* ---- what a TPU user sees (pjrt_report.c) ---- */
void        pj_report_found_system(PJRT_Client *c);                      /* at first use */
void        pj_report_executable(PJRT_Client *c, PJRT_Executable *e);   /* TPUSIM_PROFILE_DIR: files per program */
void        pj_report_execution(PJRT_Client *c, PJRT_Executable *e);
void        pj_report_summary(PJRT_Client *c);                           /* at client destruction / exit */
void        pj_report_track(PJRT_Client *c, int alive);                  /* the exit handler's list of clients */

/* ---- several processes (pjrt_dist.c) ---- */
/* After the devices are made: one process of several when jax.distributed says so (create options node_id,
 * num_nodes; the key-value store) or mpirun started this process; then MPI, the process index and this
 * process's devices. One process: every device is addressable. */
PJRT_Error *pj_dist_client_init(PJRT_Client *c, const PJRT_Client_Create_Args *a);
void        pj_dist_client_free(PJRT_Client *c);
/* Keeps only this process's devices in a new loaded executable (with their logical ids). */
void        pj_dist_addressable(PJRT_Client *c, PJRT_LoadedExecutable *le);
/* Does the executable have devices in other processes? */
int         pj_dist_spans(const PJRT_LoadedExecutable *le);
/* Runs it: ins[k] / outs[k] are the k-th addressable device's, as pj_execute passes them. */
PJRT_Error *pj_dist_run(PJRT_LoadedExecutable *le, tpu_tensor ***ins, tpu_tensor ***outs, const PJRT_ExecuteOptions *xo);

/* ---- the entry points implemented by the files above, named pjx_<function> (pjrt_api.c builds the table) ---- */
#define PJ_IMPLEMENTED(X)                                                                                      \
    X(PJRT_Client_Create) X(PJRT_Client_Destroy) X(PJRT_Client_PlatformName) X(PJRT_Client_ProcessIndex)        \
    X(PJRT_Client_PlatformVersion) X(PJRT_Client_Devices) X(PJRT_Client_AddressableDevices)                     \
    X(PJRT_Client_LookupDevice) X(PJRT_Client_LookupAddressableDevice) X(PJRT_Client_AddressableMemories)       \
    X(PJRT_Client_Compile) X(PJRT_Client_DefaultDeviceAssignment) X(PJRT_Client_BufferFromHostBuffer)           \
    X(PJRT_Client_TopologyDescription) X(PJRT_Client_CreateUninitializedBuffer)                                 \
    X(PJRT_DeviceDescription_Id) X(PJRT_DeviceDescription_ProcessIndex) X(PJRT_DeviceDescription_Attributes)   \
    X(PJRT_DeviceDescription_Kind) X(PJRT_DeviceDescription_DebugString) X(PJRT_DeviceDescription_ToString)     \
    X(PJRT_Device_GetDescription) X(PJRT_Device_IsAddressable) X(PJRT_Device_LocalHardwareId)                  \
    X(PJRT_Device_AddressableMemories) X(PJRT_Device_DefaultMemory) X(PJRT_Device_MemoryStats)                 \
    X(PJRT_Device_ClearMemoryStats) X(PJRT_Device_GetAttributes)                                                \
    X(PJRT_Memory_Id) X(PJRT_Memory_Kind) X(PJRT_Memory_Kind_Id) X(PJRT_Memory_DebugString)                    \
    X(PJRT_Memory_ToString) X(PJRT_Memory_AddressableByDevices)                                                \
    X(PJRT_Executable_Destroy) X(PJRT_Executable_Name) X(PJRT_Executable_NumReplicas)                          \
    X(PJRT_Executable_NumPartitions) X(PJRT_Executable_NumOutputs) X(PJRT_Executable_SizeOfGeneratedCodeInBytes) \
    X(PJRT_Executable_GetCostAnalysis) X(PJRT_Executable_OutputMemoryKinds) X(PJRT_Executable_OptimizedProgram)  \
    X(PJRT_Executable_Fingerprint) X(PJRT_Executable_OutputElementTypes) X(PJRT_Executable_OutputDimensions)   \
    X(PJRT_Executable_GetCompiledMemoryStats) X(PJRT_Executable_GetCompileOptions)                              \
    X(PJRT_Executable_ParameterMemoryKinds)                                                                     \
    X(PJRT_LoadedExecutable_Destroy) X(PJRT_LoadedExecutable_GetExecutable)                                    \
    X(PJRT_LoadedExecutable_AddressableDevices) X(PJRT_LoadedExecutable_Delete)                                \
    X(PJRT_LoadedExecutable_IsDeleted) X(PJRT_LoadedExecutable_Execute) X(PJRT_LoadedExecutable_Fingerprint)   \
    X(PJRT_LoadedExecutable_GetDeviceAssignment) X(PJRT_LoadedExecutable_AddressableDeviceLogicalIds)         \
    X(PJRT_Buffer_Destroy) X(PJRT_Buffer_ElementType) X(PJRT_Buffer_Dimensions) X(PJRT_Buffer_UnpaddedDimensions) \
    X(PJRT_Buffer_DynamicDimensionIndices) X(PJRT_Buffer_GetMemoryLayout) X(PJRT_Buffer_OnDeviceSizeInBytes)   \
    X(PJRT_Buffer_Device) X(PJRT_Buffer_Memory) X(PJRT_Buffer_Delete) X(PJRT_Buffer_IsDeleted)                 \
    X(PJRT_Buffer_CopyToDevice) X(PJRT_Buffer_ToHostBuffer) X(PJRT_Buffer_IsOnCpu) X(PJRT_Buffer_ReadyEvent)   \
    X(PJRT_Buffer_IncreaseExternalReferenceCount) X(PJRT_Buffer_DecreaseExternalReferenceCount)               \
    X(PJRT_Buffer_CopyToMemory) X(PJRT_Buffer_CopyRawToHost) X(PJRT_Buffer_UnsafePointer)                       \
    X(PJRT_Buffer_OpaqueDeviceMemoryDataPointer)                                                                \
    X(PJRT_TopologyDescription_Destroy) X(PJRT_TopologyDescription_PlatformName)                               \
    X(PJRT_TopologyDescription_PlatformVersion) X(PJRT_TopologyDescription_GetDeviceDescriptions)             \
    X(PJRT_TopologyDescription_Attributes) X(PJRT_CopyToDeviceStream_Destroy) X(PJRT_CopyToDeviceStream_AddChunk) \
    X(PJRT_CopyToDeviceStream_TotalBytes) X(PJRT_CopyToDeviceStream_GranuleSize)                              \
    X(PJRT_CopyToDeviceStream_CurrentBytes) X(PJRT_Client_UpdateGlobalProcessInfo)

#define PJ_DECLARE(fn) PJRT_Error *pjx_##fn(fn##_Args *a);
PJ_IMPLEMENTED(PJ_DECLARE)
#undef PJ_DECLARE
PJRT_Error *pjx_ParameterShardings(PJRT_Shardings_PJRT_Executable_ParameterShardings_Args *a);
PJRT_Error *pjx_OutputShardings(PJRT_Shardings_PJRT_Executable_OutputShardings_Args *a);

#endif
