/* pjrt_api.c — GetPjrtApi: the PJRT C API function table, errors, events and the plugin's attributes.
 *
 * The table is PJRT C API 0.112 (the version jax/jaxlib 0.10.2 speaks). A framework built against an older
 * header passes shorter argument structs: every entry point checks struct_size before reading a field
 * (PJ_NEED) and answers a clear error instead of reading past the caller's struct. Functions the simulator
 * has no use for answer UNIMPLEMENTED with their name; none aborts. */
#include "pjrt_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors ---- */

static pj_error_obj pj_nomem_error;

static void pj_vt_destroy(PJRT_Error *e)
{
    if (!e || e == &pj_nomem_error.base) return;
    free(((pj_error_obj *)e)->msg);
    free(e);
}
static void pj_vt_message(const PJRT_Error *e, const char **m, size_t *n)
{
    *m = e && ((const pj_error_obj *)e)->msg ? ((const pj_error_obj *)e)->msg : "";
    *n = strlen(*m);
}
static PJRT_Error_Code pj_vt_code(const PJRT_Error *e) { return e ? ((const pj_error_obj *)e)->code : PJRT_Error_Code_OK; }
static void pj_vt_payload(const PJRT_Error *e, PJRT_Error_PayloadVisitor v, void *user)
{
    (void)e, (void)v, (void)user;   /* no payloads */
}

static const PJRT_Error_FunctionTable pj_error_vtable = {
    PJRT_Error_FunctionTable_STRUCT_SIZE, PJRT_Error_STRUCT_SIZE, NULL,
    pj_vt_destroy, pj_vt_message, pj_vt_code, pj_vt_payload,
};

/* Returned when an error cannot even be allocated; destroying it is a no-op. */
static char pj_nomem_text[] = "tpusim: out of host memory";
static pj_error_obj pj_nomem_error = {{&pj_error_vtable}, PJRT_Error_Code_RESOURCE_EXHAUSTED, pj_nomem_text};

static PJRT_Error *pj_error_v(PJRT_Error_Code code, const char *fmt, va_list ap)
{
    pj_error_obj *e = calloc(1, sizeof *e);
    if (!e) return &pj_nomem_error.base;
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    e->msg = malloc(n > 0 ? (size_t)n + 1 : 1);
    if (!e->msg) {
        free(e);
        return &pj_nomem_error.base;
    }
    vsnprintf(e->msg, (size_t)n + 1, fmt, ap);
    e->base.vtable = &pj_error_vtable;
    e->code = code;
    return &e->base;
}

PJRT_Error *pj_error(PJRT_Error_Code code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PJRT_Error *e = pj_error_v(code, fmt, ap);
    va_end(ap);
    return e;
}

void pj_error_free(PJRT_Error *e) { pj_vt_destroy(e); }

PJRT_Error *pj_error_copy(const PJRT_Error *e)
{
    if (!e) return NULL;
    const pj_error_obj *o = (const pj_error_obj *)e;
    return pj_error(o->code, "%s", o->msg);
}

PJRT_Error *pj_error_tpu(tpu_ctx *ctx, tpu_status st, const char *prefix)
{
    PJRT_Error_Code code;
    switch (st) {
    case TPU_ERR_NOMEM: case TPU_ERR_OOM: code = PJRT_Error_Code_RESOURCE_EXHAUSTED; break;
    case TPU_ERR_UNSUPPORTED: case TPU_ERR_UNRUNNABLE: code = PJRT_Error_Code_UNIMPLEMENTED; break;
    case TPU_ERR_INTERNAL: code = PJRT_Error_Code_INTERNAL; break;
    case TPU_ERR_IO: code = PJRT_Error_Code_UNAVAILABLE; break;
    default: code = PJRT_Error_Code_INVALID_ARGUMENT; break;
    }
    const char *m = ctx ? tpu_errmsg(ctx) : "";
    return pj_error(code, "%s%s%s", prefix ? prefix : "", prefix && *m ? ": " : "", m);
}

PJRT_Error *pj_args_too_old(const char *type, size_t got, size_t want)
{
    return pj_error(PJRT_Error_Code_FAILED_PRECONDITION,
                    "tpusim's PJRT plugin speaks PJRT C API %d.%d (jax/jaxlib 0.10.2); the framework passed %s of "
                    "%zu bytes where this plugin needs %zu: the framework is older than the plugin supports",
                    PJRT_API_MAJOR, PJRT_API_MINOR, type, got, want);
}

static void pj_Error_Destroy(PJRT_Error_Destroy_Args *a)
{
    if (a && a->error) pj_vt_destroy(a->error);
}

static void pj_Error_Message(PJRT_Error_Message_Args *a)
{
    if (!a) return;
    pj_vt_message(a->error, &a->message, &a->message_size);
}

static PJRT_Error *pj_Error_GetCode(PJRT_Error_GetCode_Args *a)
{
    PJ_NEED(a, PJRT_Error_GetCode_Args, code);
    a->code = pj_vt_code(a->error);
    return NULL;
}

/* Must succeed: a framework that gets an error here asks again about that error, forever. */
static PJRT_Error *pj_Error_ForEachPayload(PJRT_Error_ForEachPayload_Args *a)
{
    (void)a;
    return NULL;
}

/* ---- events: every operation is done when its call returns ---- */

PJRT_Event *pj_event_ready(const PJRT_Error *error)
{
    PJRT_Event *ev = calloc(1, sizeof *ev);
    if (ev) ev->error = pj_error_copy(error);
    return ev;
}

static PJRT_Error *pj_Event_Destroy(PJRT_Event_Destroy_Args *a)
{
    PJ_NEED(a, PJRT_Event_Destroy_Args, event);
    if (a->event) {
        pj_vt_destroy(a->event->error);
        free(a->event);
    }
    return NULL;
}

static PJRT_Error *pj_Event_IsReady(PJRT_Event_IsReady_Args *a)
{
    PJ_NEED(a, PJRT_Event_IsReady_Args, is_ready);
    a->is_ready = a->event && !a->event->set;
    return NULL;
}

static PJRT_Error *pj_Event_Error(PJRT_Event_Error_Args *a)
{
    PJ_NEED(a, PJRT_Event_Error_Args, event);
    return a->event ? pj_error_copy(a->event->error) : NULL;
}

static PJRT_Error *pj_Event_Await(PJRT_Event_Await_Args *a)
{
    PJ_NEED(a, PJRT_Event_Await_Args, event);
    if (a->event && a->event->set)
        return pj_error(PJRT_Error_Code_FAILED_PRECONDITION,
                        "tpusim: awaiting an event made by PJRT_Event_Create that was never set (it would never be ready)");
    return a->event ? pj_error_copy(a->event->error) : NULL;
}

static PJRT_Error *pj_Event_OnReady(PJRT_Event_OnReady_Args *a)
{
    PJ_NEED(a, PJRT_Event_OnReady_Args, user_arg);
    if (!a->event || !a->callback) return pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "PJRT_Event_OnReady: no event or callback");
    if (a->event->set)
        return pj_error(PJRT_Error_Code_UNIMPLEMENTED, "tpusim: OnReady on an event made by PJRT_Event_Create");
    /* the callback owns the error it is given */
    a->callback(pj_error_copy(a->event->error), a->user_arg);
    return NULL;
}

static PJRT_Error *pj_Event_Create(PJRT_Event_Create_Args *a)
{
    PJ_NEED(a, PJRT_Event_Create_Args, event);
    a->event = calloc(1, sizeof *a->event);
    if (!a->event) return pj_error(PJRT_Error_Code_RESOURCE_EXHAUSTED, "tpusim: out of host memory");
    a->event->set = 1;
    return NULL;
}

static PJRT_Error *pj_Event_Set(PJRT_Event_Set_Args *a)
{
    PJ_NEED(a, PJRT_Event_Set_Args, error_message_size);
    if (!a->event) return pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "PJRT_Event_Set: no event");
    if (a->error_code != PJRT_Error_Code_OK)
        a->event->error = pj_error(a->error_code, "%.*s", (int)a->error_message_size, a->error_message ? a->error_message : "");
    a->event->set = 0;
    return NULL;
}

/* ---- plugin ---- */

static PJRT_Error *pj_Plugin_Initialize(PJRT_Plugin_Initialize_Args *a)
{
    (void)a;
    return NULL;
}

static int64_t pj_shlo_version[3];
static PJRT_NamedValue pj_plugin_attrs[3];

static PJRT_Error *pj_Plugin_Attributes(PJRT_Plugin_Attributes_Args *a)
{
    PJ_NEED(a, PJRT_Plugin_Attributes_Args, num_attributes);
    /* The StableHLO version jax serializes for: the one jaxlib's own converter (our front end) reads. The
     * Python package reads it from jaxlib when it registers the plugin (python/tpusim/plugin). */
    static const char *xla_version = "tpusim " TPUSIM_VERSION;
    size_t n = 0;
    pj_plugin_attrs[n] = (PJRT_NamedValue){.struct_size = PJRT_NamedValue_STRUCT_SIZE, .name = "xla_version",
                                           .name_size = strlen("xla_version"), .type = PJRT_NamedValue_kString,
                                           .string_value = xla_version, .value_size = strlen(xla_version)};
    n++;
    const char *v = getenv("TPUSIM_STABLEHLO_VERSION");   /* set by the Python package from jaxlib */
    if (v && sscanf(v, "%ld.%ld.%ld", (long *)&pj_shlo_version[0], (long *)&pj_shlo_version[1],
                    (long *)&pj_shlo_version[2]) == 3) {
        pj_plugin_attrs[n] = (PJRT_NamedValue){.struct_size = PJRT_NamedValue_STRUCT_SIZE,
                                               .name = "stablehlo_current_version",
                                               .name_size = strlen("stablehlo_current_version"),
                                               .type = PJRT_NamedValue_kInt64List,
                                               .int64_array_value = pj_shlo_version, .value_size = 3};
        n++;
    }
    a->attributes = pj_plugin_attrs;
    a->num_attributes = n;
    return NULL;
}

/* ---- the table ---- */

/* What a simulated TPU has no use for: answered UNIMPLEMENTED with the function's name. */
#define PJ_NOT_IMPLEMENTED(X)                                                                                  \
    X(PJRT_Client_CreateViewOfDeviceBuffer) X(PJRT_Client_CreateBuffersForAsyncHostToDevice)                   \
    X(PJRT_Client_DmaMap) X(PJRT_Client_DmaUnmap)                                                             \
    X(PJRT_Client_CreateAliasBuffer) X(PJRT_Client_FulfillAliasBuffer) X(PJRT_Client_CreateErrorBuffer)        \
    X(PJRT_Client_Load) X(PJRT_Executable_DeserializeAndLoad) X(PJRT_Executable_Serialize)                     \
    X(PJRT_Buffer_CopyRawToHostFuture) \
    X(PJRT_Buffer_DonateWithControlDependency) X(PJRT_Buffer_Bitcast)                                         \
    X(PJRT_TopologyDescription_Create) X(PJRT_TopologyDescription_Serialize)                                  \
    X(PJRT_TopologyDescription_Deserialize) X(PJRT_TopologyDescription_Fingerprint)                           \
    X(PJRT_TopologyDescription_GetMemorySpaceKindIds) X(PJRT_Compile)                                         \
    X(PJRT_ExecuteContext_Create) X(PJRT_ExecuteContext_Destroy)                                               \
    X(PJRT_AsyncHostToDeviceTransferManager_Destroy) X(PJRT_AsyncHostToDeviceTransferManager_TransferData)     \
    X(PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer) X(PJRT_AsyncHostToDeviceTransferManager_Device)    \
    X(PJRT_AsyncHostToDeviceTransferManager_BufferCount) X(PJRT_AsyncHostToDeviceTransferManager_BufferSize)   \
    X(PJRT_AsyncHostToDeviceTransferManager_SetBufferError) X(PJRT_AsyncHostToDeviceTransferManager_AddMetadata) \
    X(PJRT_AsyncHostToDeviceTransferManager_TransferLiteral)                                                   \
    X(PJRT_Device_PoisonExecution) X(PJRT_Device_CreateAsyncTrackingEvent) X(PJRT_AsyncTrackingEvent_Destroy)


#define PJ_STUB(fn)                                                                                            \
    static PJRT_Error *pjx_##fn(fn##_Args *a)                                                                  \
    {                                                                                                          \
        (void)a;                                                                                               \
        return pj_error(PJRT_Error_Code_UNIMPLEMENTED, "tpusim's simulated TPU does not implement " #fn);      \
    }
PJ_NOT_IMPLEMENTED(PJ_STUB)

/* The shardings extension: jax asks it for the parameter and output shardings the partitioner chose. */
static PJRT_Shardings_Extension pj_shardings_ext = {
    .base = {PJRT_Shardings_Extension_STRUCT_SIZE, PJRT_Extension_Type_Shardings, NULL},
    .PJRT_Shardings_PJRT_Executable_ParameterShardings = pjx_ParameterShardings,
    .PJRT_Shardings_PJRT_Executable_OutputShardings = pjx_OutputShardings,
};

static PJRT_Api pj_api;
static pthread_once_t pj_api_once = PTHREAD_ONCE_INIT;

static void pj_build_api(void)
{
    PJRT_Api *a = &pj_api;
    memset(a, 0, sizeof *a);
    a->struct_size = PJRT_Api_STRUCT_SIZE;
    a->extension_start = &pj_shardings_ext.base;
    a->pjrt_api_version.struct_size = PJRT_Api_Version_STRUCT_SIZE;
    a->pjrt_api_version.major_version = PJRT_API_MAJOR;
    a->pjrt_api_version.minor_version = PJRT_API_MINOR;
    a->PJRT_Error_Destroy = pj_Error_Destroy;
    a->PJRT_Error_Message = pj_Error_Message;
    a->PJRT_Error_GetCode = pj_Error_GetCode;
    a->PJRT_Error_ForEachPayload = pj_Error_ForEachPayload;
    a->PJRT_Plugin_Initialize = pj_Plugin_Initialize;
    a->PJRT_Plugin_Attributes = pj_Plugin_Attributes;
    a->PJRT_Event_Destroy = pj_Event_Destroy;
    a->PJRT_Event_IsReady = pj_Event_IsReady;
    a->PJRT_Event_Error = pj_Event_Error;
    a->PJRT_Event_Await = pj_Event_Await;
    a->PJRT_Event_OnReady = pj_Event_OnReady;
    a->PJRT_Event_Create = pj_Event_Create;
    a->PJRT_Event_Set = pj_Event_Set;
#define PJ_SET(fn) a->fn = pjx_##fn;
    PJ_IMPLEMENTED(PJ_SET)
    PJ_NOT_IMPLEMENTED(PJ_SET)
#undef PJ_SET
}

/* The one exported symbol. */
const PJRT_Api *GetPjrtApi(void);
const PJRT_Api *GetPjrtApi(void)
{
    pthread_once(&pj_api_once, pj_build_api);
    return &pj_api;
}
