/* t_pjrt.c — the PJRT plugin driven the way a framework drives it, through GetPjrtApi() of the shared library
 * (dlopen'ed from TPUSIM_PJRT_LIBRARY, as built by make), without Python: devices like the real slice, HLO
 * compiled and run, buffers and HBM accounting, replicated runs with collectives, donation, and the errors
 * a framework must get instead of a crash (no jaxlib for StableHLO, bad arguments, out of memory, a program
 * the TPU would refuse, an older framework's short argument structs). jax itself drives it in
 * python/tests/test_plugin_*.py. */
#include "test.h"

#include "pjrt_c_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>

static const PJRT_Api *pj_api(void)
{
    static const PJRT_Api *api;
    if (api) return api;
    const char *lib = getenv("TPUSIM_PJRT_LIBRARY");
    void *h = dlopen(lib ? lib : "build/release/libtpusim_pjrt.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "  cannot load the plugin: %s\n", dlerror());
        return NULL;
    }
    const PJRT_Api *(*get)(void) = (const PJRT_Api *(*)(void))dlsym(h, "GetPjrtApi");
    api = get ? get() : NULL;
    return api;
}

/* The error's message (freed), or NULL for success. */
static char *pj_take_error(const PJRT_Api *api, PJRT_Error *e, PJRT_Error_Code *code)
{
    if (!e) return NULL;
    PJRT_Error_Message_Args m = {.struct_size = PJRT_Error_Message_Args_STRUCT_SIZE, .error = e};
    api->PJRT_Error_Message(&m);
    char *s = strndup(m.message, m.message_size);
    PJRT_Error_GetCode_Args g = {.struct_size = PJRT_Error_GetCode_Args_STRUCT_SIZE, .error = e};
    api->PJRT_Error_GetCode(&g);
    if (code) *code = g.code;
    PJRT_Error_Destroy_Args d = {.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE, .error = e};
    api->PJRT_Error_Destroy(&d);
    return s;
}

#define PJ_OK(api, call) do { char *m_ = pj_take_error(api, (call), NULL); \
    if (m_) { test_fail(__FILE__, __LINE__, "%s: %s", #call, m_); free(m_); return; } } while (0)

static PJRT_Client *pj_client(const PJRT_Api *api, const char *slice)
{
    PJRT_NamedValue opt = {.struct_size = PJRT_NamedValue_STRUCT_SIZE, .name = "slice", .name_size = 5,
                           .type = PJRT_NamedValue_kString, .string_value = slice, .value_size = strlen(slice)};
    PJRT_Client_Create_Args a = {.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE, .create_options = &opt,
                                 .num_options = 1};
    char *m = pj_take_error(api, api->PJRT_Client_Create(&a), NULL);
    if (m) {
        test_fail(__FILE__, __LINE__, "client: %s", m);
        free(m);
        return NULL;
    }
    return a.client;
}

static void pj_client_free(const PJRT_Api *api, PJRT_Client *c)
{
    PJRT_Client_Destroy_Args a = {.struct_size = PJRT_Client_Destroy_Args_STRUCT_SIZE, .client = c};
    api->PJRT_Client_Destroy(&a);
}

/* A CompileOptionsProto { executable_build_options { num_replicas: R num_partitions: P } }, by hand. */
static size_t pj_options(unsigned char *buf, int R, int P)
{
    unsigned char inner[8] = {0x20, (unsigned char)R, 0x28, (unsigned char)P};
    buf[0] = 0x1a;
    buf[1] = 4;
    memcpy(buf + 2, inner, 4);
    return 6;
}

static PJRT_Error *pj_compile(const PJRT_Api *api, PJRT_Client *c, const char *text, const char *fmt, int R, int P,
                              PJRT_LoadedExecutable **out)
{
    unsigned char opts[16];
    size_t olen = pj_options(opts, R, P);
    PJRT_Program prog = {.struct_size = PJRT_Program_STRUCT_SIZE, .code = (char *)text, .code_size = strlen(text),
                         .format = fmt, .format_size = strlen(fmt)};
    PJRT_Client_Compile_Args a = {.struct_size = PJRT_Client_Compile_Args_STRUCT_SIZE, .client = c, .program = &prog,
                                  .compile_options = (const char *)opts, .compile_options_size = olen};
    PJRT_Error *e = api->PJRT_Client_Compile(&a);
    *out = a.executable;
    return e;
}

static PJRT_Device *pj_device(const PJRT_Api *api, PJRT_Client *c, int i)
{
    PJRT_Client_Devices_Args a = {.struct_size = PJRT_Client_Devices_Args_STRUCT_SIZE, .client = c};
    api->PJRT_Client_Devices(&a);
    return i < (int)a.num_devices ? a.devices[i] : NULL;
}

static PJRT_Buffer *pj_put(const PJRT_Api *api, PJRT_Client *c, PJRT_Device *d, const float *data, int n)
{
    int64_t dims[1] = {n};
    PJRT_Client_BufferFromHostBuffer_Args a = {.struct_size = PJRT_Client_BufferFromHostBuffer_Args_STRUCT_SIZE,
                                               .client = c, .data = data, .type = PJRT_Buffer_Type_F32, .dims = dims,
                                               .num_dims = 1, .device = d};
    char *m = pj_take_error(api, api->PJRT_Client_BufferFromHostBuffer(&a), NULL);
    if (m) {
        test_fail(__FILE__, __LINE__, "put: %s", m);
        free(m);
        return NULL;
    }
    PJRT_Event_Destroy_Args ed = {.struct_size = PJRT_Event_Destroy_Args_STRUCT_SIZE, .event = a.done_with_host_buffer};
    api->PJRT_Event_Destroy(&ed);
    return a.buffer;
}

static void pj_get(const PJRT_Api *api, PJRT_Buffer *b, float *dst, size_t n)
{
    PJRT_Buffer_ToHostBuffer_Args a = {.struct_size = PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE, .src = b, .dst = dst,
                                       .dst_size = n * sizeof(float)};
    char *m = pj_take_error(api, api->PJRT_Buffer_ToHostBuffer(&a), NULL);
    if (m) {
        test_fail(__FILE__, __LINE__, "get: %s", m);
        free(m);
        return;
    }
    PJRT_Event_Destroy_Args ed = {.struct_size = PJRT_Event_Destroy_Args_STRUCT_SIZE, .event = a.event};
    api->PJRT_Event_Destroy(&ed);
}

static void pj_buf_free(const PJRT_Api *api, PJRT_Buffer *b)
{
    PJRT_Buffer_Destroy_Args a = {.struct_size = PJRT_Buffer_Destroy_Args_STRUCT_SIZE, .buffer = b};
    api->PJRT_Buffer_Destroy(&a);
}

static void pj_exe_free(const PJRT_Api *api, PJRT_LoadedExecutable *e)
{
    PJRT_LoadedExecutable_Destroy_Args a = {.struct_size = PJRT_LoadedExecutable_Destroy_Args_STRUCT_SIZE, .executable = e};
    api->PJRT_LoadedExecutable_Destroy(&a);
}

static int64_t pj_in_use(const PJRT_Api *api, PJRT_Device *d)
{
    PJRT_Device_MemoryStats_Args a = {.struct_size = PJRT_Device_MemoryStats_Args_STRUCT_SIZE, .device = d};
    char *m = pj_take_error(api, api->PJRT_Device_MemoryStats(&a), NULL);
    free(m);
    return a.bytes_in_use;
}

/* Runs exe on ndev devices with one f32 argument each; fills outs[d][0]. */
static PJRT_Error *pj_run(const PJRT_Api *api, PJRT_LoadedExecutable *exe, PJRT_Buffer **args, int ndev,
                          PJRT_Buffer **outs, const int64_t *non_donatable, size_t nnd)
{
    PJRT_Buffer *const *arg_lists[8];
    PJRT_Buffer **out_lists[8];
    for (int d = 0; d < ndev; d++) arg_lists[d] = &args[d], out_lists[d] = &outs[d];
    PJRT_ExecuteOptions o = {.struct_size = PJRT_ExecuteOptions_STRUCT_SIZE, .non_donatable_input_indices = non_donatable,
                             .num_non_donatable_input_indices = nnd};
    PJRT_LoadedExecutable_Execute_Args a = {.struct_size = PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE,
                                            .executable = exe, .options = &o, .argument_lists = arg_lists,
                                            .num_devices = (size_t)ndev, .num_args = 1, .output_lists = out_lists};
    return api->PJRT_LoadedExecutable_Execute(&a);
}

static const char *k_double = "HloModule double\nENTRY e {\n  x = f32[4] parameter(0)\n  ROOT y = f32[4] add(x, x)\n}\n";

TEST(pjrt_plugin_devices_look_like_the_slice)
{
    const PJRT_Api *api = pj_api();
    REQUIRE(api);
    CHECK_EQ_INT(api->pjrt_api_version.major_version, 0);
    CHECK_EQ_INT(api->pjrt_api_version.minor_version, 112);
    PJRT_Client *c = pj_client(api, "v4-8");
    REQUIRE(c);
    PJRT_Client_Devices_Args da = {.struct_size = PJRT_Client_Devices_Args_STRUCT_SIZE, .client = c};
    PJ_OK(api, api->PJRT_Client_Devices(&da));
    CHECK_EQ_INT(da.num_devices, 4);   /* v4 chips are megacore: one device per chip */
    PJRT_Client_PlatformName_Args pn = {.struct_size = PJRT_Client_PlatformName_Args_STRUCT_SIZE, .client = c};
    PJ_OK(api, api->PJRT_Client_PlatformName(&pn));
    CHECK(pn.platform_name_size == 3 && !memcmp(pn.platform_name, "tpu", 3));
    PJRT_Device_GetDescription_Args gd = {.struct_size = PJRT_Device_GetDescription_Args_STRUCT_SIZE, .device = da.devices[3]};
    PJ_OK(api, api->PJRT_Device_GetDescription(&gd));
    PJRT_DeviceDescription_Kind_Args k = {.struct_size = PJRT_DeviceDescription_Kind_Args_STRUCT_SIZE,
                                          .device_description = gd.device_description};
    PJ_OK(api, api->PJRT_DeviceDescription_Kind(&k));
    CHECK(k.device_kind_size == 6 && !memcmp(k.device_kind, "TPU v4", 6));
    PJRT_DeviceDescription_Attributes_Args at = {.struct_size = PJRT_DeviceDescription_Attributes_Args_STRUCT_SIZE,
                                                 .device_description = gd.device_description};
    PJ_OK(api, api->PJRT_DeviceDescription_Attributes(&at));
    int found = 0;
    for (size_t i = 0; i < at.num_attributes; i++)
        if (!strncmp(at.attributes[i].name, "coords", at.attributes[i].name_size)) {
            found = 1;
            CHECK_EQ_INT(at.attributes[i].value_size, 3);
            CHECK_EQ_INT(at.attributes[i].int64_array_value[0], 1);   /* chip 3 of a 2x2x1 slice */
            CHECK_EQ_INT(at.attributes[i].int64_array_value[1], 1);
        }
    CHECK(found);
    PJRT_Device_MemoryStats_Args ms = {.struct_size = PJRT_Device_MemoryStats_Args_STRUCT_SIZE, .device = da.devices[0]};
    PJ_OK(api, api->PJRT_Device_MemoryStats(&ms));
    CHECK(ms.bytes_limit_is_set && ms.bytes_limit > (int64_t)30 << 30);   /* a v4 chip: 32 GiB less the runtime's */
    pj_client_free(api, c);
}

TEST(pjrt_plugin_compiles_runs_and_counts_memory)
{
    const PJRT_Api *api = pj_api();
    REQUIRE(api);
    PJRT_Client *c = pj_client(api, "v3-8");
    REQUIRE(c);
    PJRT_Device *d0 = pj_device(api, c, 0);
    PJRT_LoadedExecutable *exe = NULL;
    PJ_OK(api, pj_compile(api, c, k_double, "hlo", 1, 1, &exe));
    float in[4] = {1, 2, 3, -4}, out[4] = {0};
    PJRT_Buffer *arg = pj_put(api, c, d0, in, 4), *res = NULL;
    REQUIRE(arg);
    CHECK(pj_in_use(api, d0) > 0);
    PJ_OK(api, pj_run(api, exe, &arg, 1, &res, NULL, 0));
    pj_get(api, res, out, 4);
    CHECK(out[0] == 2 && out[1] == 4 && out[2] == 6 && out[3] == -8);
    pj_buf_free(api, arg);
    pj_buf_free(api, res);
    CHECK_EQ_INT(pj_in_use(api, d0), 0);
    pj_exe_free(api, exe);
    pj_client_free(api, c);
}

TEST(pjrt_plugin_replicated_all_reduce_and_donation)
{
    const PJRT_Api *api = pj_api();
    REQUIRE(api);
    PJRT_Client *c = pj_client(api, "v3-8");
    REQUIRE(c);
    const char *prog = "HloModule ar, input_output_alias={ {}: (0, {}, may-alias) }, replica_count=4\n"
                       "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"
                       "ENTRY e {\n  x = f32[2] parameter(0)\n  ROOT r = f32[2] all-reduce(x), replica_groups={}, to_apply=add\n}\n";
    PJRT_LoadedExecutable *exe = NULL;
    PJ_OK(api, pj_compile(api, c, prog, "hlo", 4, 1, &exe));
    PJRT_Buffer *args[4], *outs[4] = {0};
    for (int d = 0; d < 4; d++) {
        float v[2] = {(float)d, 10.0f * (float)d};
        args[d] = pj_put(api, c, pj_device(api, c, d), v, 2);
    }
    int64_t keep[1] = {0};
    PJ_OK(api, pj_run(api, exe, args, 4, outs, keep, 1));   /* not donated this time */
    PJRT_Buffer_IsDeleted_Args del = {.struct_size = PJRT_Buffer_IsDeleted_Args_STRUCT_SIZE, .buffer = args[0]};
    PJ_OK(api, api->PJRT_Buffer_IsDeleted(&del));
    CHECK(!del.is_deleted);
    for (int d = 0; d < 4; d++) {
        float r[2];
        pj_get(api, outs[d], r, 2);
        CHECK(r[0] == 6 && r[1] == 60);
        pj_buf_free(api, outs[d]);
    }
    PJ_OK(api, pj_run(api, exe, args, 4, outs, NULL, 0));   /* donated: the arguments give their buffers up */
    PJ_OK(api, api->PJRT_Buffer_IsDeleted(&del));
    CHECK(del.is_deleted);
    PJRT_Error_Code code = PJRT_Error_Code_OK;
    char *m = pj_take_error(api, pj_run(api, exe, args, 4, outs + 0, NULL, 0), &code);   /* reusing a donated buffer */
    CHECK(m && strstr(m, "donated"));
    CHECK_EQ_INT(code, PJRT_Error_Code_INVALID_ARGUMENT);
    free(m);
    for (int d = 0; d < 4; d++) {
        pj_buf_free(api, args[d]);
        pj_buf_free(api, outs[d]);
        CHECK_EQ_INT(pj_in_use(api, pj_device(api, c, d)), 0);
    }
    pj_exe_free(api, exe);
    pj_client_free(api, c);
}

TEST(pjrt_plugin_errors_never_abort)
{
    const PJRT_Api *api = pj_api();
    REQUIRE(api);
    PJRT_Client *c = pj_client(api, "v3-8");
    REQUIRE(c);
    PJRT_LoadedExecutable *exe = NULL;
    PJRT_Error_Code code = PJRT_Error_Code_OK;
    /* StableHLO needs jaxlib in a Python process: this one has none */
    char *m = pj_take_error(api, pj_compile(api, c, "ML\xefR", "mlir", 1, 1, &exe), &code);
    CHECK(m && strstr(m, "jaxlib") && strstr(m, "Python"));
    CHECK_EQ_INT(code, PJRT_Error_Code_UNIMPLEMENTED);
    free(m);
    /* a program that does not fit a v3 core's 16 GiB of HBM: the TPU compiler's report */
    const char *big = "HloModule big\nENTRY e {\n  z = f32[] constant(0)\n  ROOT b = f32[65536,65536] broadcast(z), dimensions={}\n}\n";
    m = pj_take_error(api, pj_compile(api, c, big, "hlo", 1, 1, &exe), &code);
    CHECK(m && strstr(m, "Ran out of memory in memory space hbm"));
    CHECK_EQ_INT(code, PJRT_Error_Code_RESOURCE_EXHAUSTED);
    free(m);
    /* a program the TPU would refuse: a dynamic shape */
    const char *dyn = "HloModule dyn\nENTRY e {\n  x = f32[?] parameter(0)\n  ROOT n = f32[?] negate(x)\n}\n";
    m = pj_take_error(api, pj_compile(api, c, dyn, "hlo", 1, 1, &exe), &code);
    CHECK(m && (strstr(m, "would not compile") || strstr(m, "dynamic")));
    free(m);
    /* malformed HLO names the line */
    m = pj_take_error(api, pj_compile(api, c, "HloModule x\nENTRY e {\n  ROOT y = f32[4] bogus(\n}\n", "hlo", 1, 1, &exe), &code);
    CHECK(m && strstr(m, "program:"));
    free(m);
    /* more devices than the slice has */
    m = pj_take_error(api, pj_compile(api, c, k_double, "hlo", 16, 1, &exe), &code);
    CHECK(m && strstr(m, "16 devices"));
    free(m);
    /* an argument of the wrong shape, and an argument on the wrong device */
    PJ_OK(api, pj_compile(api, c, k_double, "hlo", 1, 1, &exe));
    float v[8] = {0};
    PJRT_Buffer *wrong = pj_put(api, c, pj_device(api, c, 0), v, 8), *out = NULL;
    m = pj_take_error(api, pj_run(api, exe, &wrong, 1, &out, NULL, 0), &code);
    CHECK(m && strstr(m, "f32[8]") && strstr(m, "f32[4]"));
    CHECK_EQ_INT(code, PJRT_Error_Code_INVALID_ARGUMENT);
    free(m);
    pj_buf_free(api, wrong);
    PJRT_Buffer *elsewhere = pj_put(api, c, pj_device(api, c, 5), v, 4);
    m = pj_take_error(api, pj_run(api, exe, &elsewhere, 1, &out, NULL, 0), &code);
    CHECK(m && strstr(m, "TPU_5"));
    free(m);
    pj_buf_free(api, elsewhere);
    pj_exe_free(api, exe);
    /* an older framework's shorter argument struct */
    PJRT_Client_Devices_Args old = {.struct_size = offsetof(PJRT_Client_Devices_Args, devices), .client = c};
    m = pj_take_error(api, api->PJRT_Client_Devices(&old), &code);
    CHECK(m && strstr(m, "older"));
    free(m);
    /* an unknown slice */
    PJRT_NamedValue opt = {.struct_size = PJRT_NamedValue_STRUCT_SIZE, .name = "slice", .name_size = 5,
                           .type = PJRT_NamedValue_kString, .string_value = "v3-12", .value_size = 5};
    PJRT_Client_Create_Args ca = {.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE, .create_options = &opt, .num_options = 1};
    m = pj_take_error(api, api->PJRT_Client_Create(&ca), &code);
    CHECK(m && strstr(m, "v3-12"));
    free(m);
    CHECK_EQ_INT(pj_in_use(api, pj_device(api, c, 0)), 0);
    pj_client_free(api, c);
}

typedef struct pj_thread_arg {
    const PJRT_Api       *api;
    PJRT_Client          *c;
    PJRT_LoadedExecutable *exe;
    int                   bad;
} pj_thread_arg;

static void *pj_thread(void *p)
{
    pj_thread_arg *t = p;
    for (int i = 0; i < 50; i++) {
        float in[4] = {(float)i, 1, 2, 3}, out[4];
        PJRT_Buffer *arg = pj_put(t->api, t->c, pj_device(t->api, t->c, 0), in, 4), *res = NULL;
        char *m = pj_take_error(t->api, pj_run(t->api, t->exe, &arg, 1, &res, NULL, 0), NULL);
        if (m) t->bad++, free(m);
        else {
            pj_get(t->api, res, out, 4);
            if (out[0] != 2.0f * (float)i) t->bad++;
            pj_buf_free(t->api, res);
        }
        pj_buf_free(t->api, arg);
    }
    return NULL;
}

TEST(pjrt_plugin_executes_from_several_threads)
{
    const PJRT_Api *api = pj_api();
    REQUIRE(api);
    PJRT_Client *c = pj_client(api, "v3-8");
    REQUIRE(c);
    PJRT_LoadedExecutable *exe = NULL;
    PJ_OK(api, pj_compile(api, c, k_double, "hlo", 1, 1, &exe));
    pthread_t th[3];
    pj_thread_arg args[3];
    for (int i = 0; i < 3; i++) {
        args[i] = (pj_thread_arg){api, c, exe, 0};
        pthread_create(&th[i], NULL, pj_thread, &args[i]);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ_INT(args[i].bad, 0);
    }
    CHECK_EQ_INT(pj_in_use(api, pj_device(api, c, 0)), 0);
    pj_exe_free(api, exe);
    pj_client_free(api, c);
}

TEST(pjrt_plugin_hbm_runs_out_like_the_device)
{
    /* a hypothetical v5e with 1 MiB of HBM (a chip file): buffers are charged with their tiled size */
    const PJRT_Api *api = pj_api();
    REQUIRE(api);
    const char *path = "build/t_pjrt_tiny_hbm.json";
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fprintf(f, "{\"name\": \"tiny\", \"base\": \"v5e\", \"hbm_gib\": 0.0009765625, \"hbm_reserved_mib\": 0}\n");
    fclose(f);
    PJRT_Client *c = pj_client(api, path);
    REQUIRE(c);
    PJRT_Device *d = pj_device(api, c, 0);
    PJRT_Device_MemoryStats_Args ms = {.struct_size = PJRT_Device_MemoryStats_Args_STRUCT_SIZE, .device = d};
    PJ_OK(api, api->PJRT_Device_MemoryStats(&ms));
    CHECK(ms.bytes_limit > 0 && ms.bytes_limit <= 1 << 20);
    static float data[96 * 1024];   /* 384 KiB each: the third does not fit */
    int64_t dims[1] = {96 * 1024};
    PJRT_Buffer *b[3] = {NULL, NULL, NULL};
    PJRT_Error_Code code = PJRT_Error_Code_OK;
    char *m = NULL;
    for (int i = 0; i < 3 && !m; i++) {
        PJRT_Client_BufferFromHostBuffer_Args a = {.struct_size = PJRT_Client_BufferFromHostBuffer_Args_STRUCT_SIZE,
                                                   .client = c, .data = data, .type = PJRT_Buffer_Type_F32,
                                                   .dims = dims, .num_dims = 1, .device = d};
        m = pj_take_error(api, api->PJRT_Client_BufferFromHostBuffer(&a), &code);
        if (!m) {
            b[i] = a.buffer;
            PJRT_Event_Destroy_Args ed = {.struct_size = PJRT_Event_Destroy_Args_STRUCT_SIZE, .event = a.done_with_host_buffer};
            api->PJRT_Event_Destroy(&ed);
        }
    }
    CHECK(b[0] && b[1] && !b[2]);
    CHECK(m && strstr(m, "Out of memory") && strstr(m, "f32[98304]"));
    CHECK_EQ_INT(code, PJRT_Error_Code_RESOURCE_EXHAUSTED);
    free(m);
    int64_t used = pj_in_use(api, d);
    CHECK(used >= 768 * 1024 && used <= ms.bytes_limit);
    pj_buf_free(api, b[0]);
    pj_buf_free(api, b[1]);
    CHECK_EQ_INT(pj_in_use(api, d), 0);
    pj_client_free(api, c);
    remove(path);
}

/* ---- host transfers: a framework's send and recv callbacks (jax.pure_callback's protocol) ---- */

typedef struct pj_cb_state {
    const PJRT_Api *api;
    float           got[4];
    int             sends, recvs;
} pj_cb_state;

static PJRT_Error *pj_on_send(PJRT_Chunk *chunk, PJRT_CallbackError *err, size_t total, bool done, void *user)
{
    pj_cb_state *st = user;
    (void)err;
    if (chunk->size == sizeof st->got && total == sizeof st->got && done) memcpy(st->got, chunk->data, sizeof st->got);
    if (chunk->deleter) chunk->deleter(chunk->data, chunk->deleter_arg);
    st->sends++;
    return NULL;
}

static void pj_on_recv(PJRT_CopyToDeviceStream *stream, void *user)
{
    pj_cb_state *st = user;
    const PJRT_Api *api = st->api;
    PJRT_CopyToDeviceStream_TotalBytes_Args tb = {.struct_size = PJRT_CopyToDeviceStream_TotalBytes_Args_STRUCT_SIZE,
                                                  .stream = stream};
    free(pj_take_error(api, api->PJRT_CopyToDeviceStream_TotalBytes(&tb), NULL));
    float *reply = malloc((size_t)tb.total_bytes);
    for (int i = 0; i < tb.total_bytes / 4; i++) reply[i] = st->got[i] * 10;   /* the "host function" */
    for (int half = 0; half < 2; half++) {   /* in two chunks */
        PJRT_Chunk c = {.data = (char *)reply + half * tb.total_bytes / 2, .size = (size_t)tb.total_bytes / 2};
        PJRT_CopyToDeviceStream_AddChunk_Args ac = {.struct_size = PJRT_CopyToDeviceStream_AddChunk_Args_STRUCT_SIZE,
                                                    .stream = stream, .chunk = &c};
        free(pj_take_error(api, api->PJRT_CopyToDeviceStream_AddChunk(&ac), NULL));
        PJRT_Event_Destroy_Args ed = {.struct_size = PJRT_Event_Destroy_Args_STRUCT_SIZE, .event = ac.transfer_complete};
        api->PJRT_Event_Destroy(&ed);
    }
    free(reply);
    PJRT_CopyToDeviceStream_Destroy_Args d = {.struct_size = PJRT_CopyToDeviceStream_Destroy_Args_STRUCT_SIZE, .stream = stream};
    free(pj_take_error(api, api->PJRT_CopyToDeviceStream_Destroy(&d), NULL));
    st->recvs++;
}

TEST(pjrt_plugin_host_transfers_reach_the_frameworks_callbacks)
{
    const PJRT_Api *api = pj_api();
    REQUIRE(api);
    PJRT_Client *c = pj_client(api, "v3-8");
    REQUIRE(c);
    const char *prog =
        "HloModule cb\nENTRY e {\n  x = f32[4] parameter(0)\n  t = token[] after-all()\n"
        "  s = (f32[4], u32[], token[]) send(x, t), channel_id=2, is_host_transfer=true\n"
        "  sd = token[] send-done(s), channel_id=2, is_host_transfer=true\n"
        "  r = (f32[4], u32[], token[]) recv(sd), channel_id=3, is_host_transfer=true\n"
        "  rd = (f32[4], token[]) recv-done(r), channel_id=3, is_host_transfer=true\n"
        "  v = f32[4] get-tuple-element(rd), index=0\n  ROOT y = f32[4] add(v, x)\n}\n";
    PJRT_LoadedExecutable *exe = NULL;
    PJ_OK(api, pj_compile(api, c, prog, "hlo", 1, 1, &exe));
    pj_cb_state st = {.api = api};
    PJRT_SendCallbackInfo sinfo = {.channel_id = 2, .user_arg = &st, .send_callback = pj_on_send};
    PJRT_RecvCallbackInfo rinfo = {.channel_id = 3, .user_arg = &st, .recv_callback = pj_on_recv};
    PJRT_SendCallbackInfo *slist[1] = {&sinfo};
    PJRT_RecvCallbackInfo *rlist[1] = {&rinfo};
    float in[4] = {1, 2, 3, 4}, out[4] = {0};
    PJRT_Buffer *arg = pj_put(api, c, pj_device(api, c, 0), in, 4), *res = NULL;
    PJRT_Buffer *const *al[1] = {&arg};
    PJRT_Buffer **ol[1] = {&res};
    PJRT_ExecuteOptions o = {.struct_size = PJRT_ExecuteOptions_STRUCT_SIZE, .send_callbacks = slist,
                             .recv_callbacks = rlist, .num_send_ops = 1, .num_recv_ops = 1};
    PJRT_LoadedExecutable_Execute_Args a = {.struct_size = PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE,
                                            .executable = exe, .options = &o, .argument_lists = al, .num_devices = 1,
                                            .num_args = 1, .output_lists = ol};
    PJ_OK(api, api->PJRT_LoadedExecutable_Execute(&a));
    pj_get(api, res, out, 4);
    CHECK_EQ_INT(st.sends, 1);
    CHECK_EQ_INT(st.recvs, 1);
    CHECK(out[0] == 11 && out[1] == 22 && out[2] == 33 && out[3] == 44);
    /* without callbacks the transfer is an error, not a hang */
    PJRT_ExecuteOptions none = {.struct_size = PJRT_ExecuteOptions_STRUCT_SIZE};
    a.options = &none;
    PJRT_Buffer *res2 = NULL;
    PJRT_Buffer **ol2[1] = {&res2};
    a.output_lists = ol2;
    char *m = pj_take_error(api, api->PJRT_LoadedExecutable_Execute(&a), NULL);
    CHECK(m && strstr(m, "host"));
    free(m);
    pj_buf_free(api, arg);
    pj_buf_free(api, res);
    pj_exe_free(api, exe);
    pj_client_free(api, c);
}

/* The route PyTorch/XLA takes: format "hlo", a binary HloModuleProto (here one jax 0.10.2 serialized:
 * tests/golden/proto/mlp.pb), compiled and run with random inputs, the same as its HLO text. */
TEST(pjrt_plugin_compiles_binary_hlo_module_protos)
{
    const PJRT_Api *api = pj_api();
    REQUIRE(api);
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_module *m = NULL;
    REQUIRE_OK(ctx, tpu_module_load(ctx, "tests/golden/proto/mlp.pb", &m));
    FILE *f = fopen("tests/golden/proto/mlp.pb", "rb");
    REQUIRE(f);
    static char bytes[1 << 20];
    size_t n = fread(bytes, 1, sizeof bytes, f);
    fclose(f);
    PJRT_Client *c = pj_client(api, "v3-8");
    REQUIRE(c);
    unsigned char opts[16];
    size_t olen = pj_options(opts, 1, 1);
    PJRT_Program prog = {.struct_size = PJRT_Program_STRUCT_SIZE, .code = bytes, .code_size = n, .format = "hlo",
                         .format_size = 3};
    PJRT_Client_Compile_Args ca = {.struct_size = PJRT_Client_Compile_Args_STRUCT_SIZE, .client = c, .program = &prog,
                                   .compile_options = (const char *)opts, .compile_options_size = olen};
    PJ_OK(api, api->PJRT_Client_Compile(&ca));
    PJRT_Executable_NumOutputs_Args no = {.struct_size = PJRT_Executable_NumOutputs_Args_STRUCT_SIZE};
    PJRT_LoadedExecutable_GetExecutable_Args ge = {.struct_size = PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE,
                                                   .loaded_executable = ca.executable};
    PJ_OK(api, api->PJRT_LoadedExecutable_GetExecutable(&ge));
    no.executable = ge.executable;
    PJ_OK(api, api->PJRT_Executable_NumOutputs(&no));
    CHECK_EQ_INT(no.num_outputs, tpu_module_num_outputs(m));
    PJRT_Executable_Destroy_Args ed = {.struct_size = PJRT_Executable_Destroy_Args_STRUCT_SIZE, .executable = ge.executable};
    PJ_OK(api, api->PJRT_Executable_Destroy(&ed));
    /* a damaged proto is an error naming the byte, not a crash */
    PJRT_LoadedExecutable *exe = ca.executable;
    prog.code_size = n / 2;
    PJRT_Error_Code code;
    char *msg = pj_take_error(api, api->PJRT_Client_Compile(&ca), &code);
    CHECK(msg && strstr(msg, "byte"));
    free(msg);
    pj_exe_free(api, exe);
    pj_client_free(api, c);
    tpu_module_free(m);
    tpu_ctx_free(ctx);
}

/* issue 18: a program from the framework cannot hang the caller (TPUSIM_MAX_STEPS, per execution), and one
 * that does not verify is refused, never run */
TEST(pjrt_plugin_limits_and_verification)
{
    const PJRT_Api *api = pj_api();
    REQUIRE(api);
    setenv("TPUSIM_MAX_STEPS", "5000", 1);
    PJRT_Client *c = pj_client(api, "v3-8");
    unsetenv("TPUSIM_MAX_STEPS");
    REQUIRE(c);
    PJRT_Device *d0 = pj_device(api, c, 0);
    static const char *forever =
        "HloModule forever\ncond {\n  p = f32[4] parameter(0)\n  ROOT t = pred[] constant(true)\n}\n"
        "body {\n  p = f32[4] parameter(0)\n  ROOT n = f32[4] negate(p)\n}\n"
        "ENTRY e {\n  x = f32[4] parameter(0)\n  ROOT w = f32[4] while(x), condition=cond, body=body\n}\n";
    PJRT_LoadedExecutable *exe = NULL;
    PJ_OK(api, pj_compile(api, c, forever, "hlo", 1, 1, &exe));
    float in[4] = {1, 2, 3, 4};
    PJRT_Buffer *arg = pj_put(api, c, d0, in, 4), *res = NULL;
    REQUIRE(arg);
    char *m = pj_take_error(api, pj_run(api, exe, &arg, 1, &res, NULL, 0), NULL);
    CHECK_MSG(m && strstr(m, "step limit"), "%s", m ? m : "(ran)");
    free(m);
    if (res) pj_buf_free(api, res);
    pj_exe_free(api, exe);
    /* a result shape its operand does not give: refused at compile or execute, never run */
    static const char *bad = "HloModule bad\nENTRY e {\n  x = f32[4] parameter(0)\n  ROOT y = f32[4000,4000] negate(x)\n}\n";
    exe = NULL;
    m = pj_take_error(api, pj_compile(api, c, bad, "hlo", 1, 1, &exe), NULL);
    if (!m) {
        res = NULL;
        m = pj_take_error(api, pj_run(api, exe, &arg, 1, &res, NULL, 0), NULL);
        if (res) pj_buf_free(api, res);
        pj_exe_free(api, exe);
    }
    CHECK_MSG(m && (strstr(m, "does not verify") || strstr(m, "differs")), "%s", m ? m : "(ran)");
    free(m);
    pj_buf_free(api, arg);
    /* a malformed limit is an error at client creation */
    setenv("TPUSIM_MAX_STEPS", "lots", 1);
    PJRT_NamedValue opt = {.struct_size = PJRT_NamedValue_STRUCT_SIZE, .name = "slice", .name_size = 5,
                           .type = PJRT_NamedValue_kString, .string_value = "v3-8", .value_size = 4};
    PJRT_Client_Create_Args a = {.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE, .create_options = &opt, .num_options = 1};
    m = pj_take_error(api, api->PJRT_Client_Create(&a), NULL);
    unsetenv("TPUSIM_MAX_STEPS");
    CHECK_MSG(m && strstr(m, "TPUSIM_MAX_STEPS=lots"), "%s", m ? m : "(accepted)");
    free(m);
    pj_client_free(api, c);
}
