/* pjrt_client.c — the client: a simulated TPU slice's devices as the framework sees them on the real slice
 * (count, kind, coords, core_on_chip, HBM), their memories, the topology, and the HBM accounting behind
 * memory_stats(). */
#include "pjrt_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *pj_env(const char *name, const char *dflt)
{
    const char *v = getenv(name);
    return v && *v ? v : dflt;
}

/* ---- memories: one HBM space per device, kind "device" as on a TPU ---- */

static void *pj_mem_get_user(PJRT_Memory *mm, const void *key)
{
    pj_memory *m = pj_mem(mm);
    for (int i = 0; i < m->nuser; i++)
        if (m->user[i].key == key) return m->user[i].data;
    return NULL;
}

static void pj_mem_set_user(PJRT_Memory *mm, const void *key, void *data, void (*dtor)(void *))
{
    pj_memory *m = pj_mem(mm);
    for (int i = 0; i < m->nuser; i++)
        if (m->user[i].key == key) {
            if (m->user[i].dtor) m->user[i].dtor(m->user[i].data);
            m->user[i].data = data;
            m->user[i].dtor = dtor;
            return;
        }
    if (m->nuser < PJ_MAX_USER_DATA) m->user[m->nuser++] = (pj_user_data){key, data, dtor};
}

static const PJRT_Memory_FunctionTable pj_memory_vtable = {
    PJRT_Memory_FunctionTable_STRUCT_SIZE, NULL, PJRT_Memory_STRUCT_SIZE, pj_mem_get_user, pj_mem_set_user,
};

/* ---- the client ---- */

static PJRT_NamedValue pj_nv_int(const char *name, int64_t v)
{
    return (PJRT_NamedValue){.struct_size = PJRT_NamedValue_STRUCT_SIZE, .name = name, .name_size = strlen(name),
                             .type = PJRT_NamedValue_kInt64, .int64_value = v, .value_size = 1};
}

static PJRT_NamedValue pj_nv_ints(const char *name, const int64_t *v, size_t n)
{
    return (PJRT_NamedValue){.struct_size = PJRT_NamedValue_STRUCT_SIZE, .name = name, .name_size = strlen(name),
                             .type = PJRT_NamedValue_kInt64List, .int64_array_value = v, .value_size = n};
}

static PJRT_NamedValue pj_nv_str(const char *name, const char *v)
{
    return (PJRT_NamedValue){.struct_size = PJRT_NamedValue_STRUCT_SIZE, .name = name, .name_size = strlen(name),
                             .type = PJRT_NamedValue_kString, .string_value = v, .value_size = strlen(v)};
}

/* The attributes jax reads on real TPU devices (device.coords, device.core_on_chip, device.num_cores...). */
static void pj_describe(PJRT_DeviceDescription *d, const char *slice)
{
    const tpu_device_info *in = &d->info;
    for (int k = 0; k < 3; k++) d->coords[k] = in->coords[k];
    int n = 0;
    d->attrs[n++] = pj_nv_ints("coords", d->coords, 3);
    d->attrs[n++] = pj_nv_int("core_on_chip", in->core_on_chip);
    d->attrs[n++] = pj_nv_int("num_cores", in->cores);
    d->attrs[n++] = pj_nv_int("slice_index", 0);
    d->attrs[n++] = pj_nv_str("simulator", "tpusim");
    d->nattrs = n;
    snprintf(d->to_string, sizeof d->to_string, "TpuDevice(id=%d, process_index=%d, coords=(%d,%d,%d), core_on_chip=%d)",
             in->id, d->process, in->coords[0], in->coords[1], in->coords[2], in->core_on_chip);
    snprintf(d->debug, sizeof d->debug, "TPU_%d(host=%d,(%d,%d,%d,%d)) simulated by tpusim on %s", in->id, in->host,
             in->coords[0], in->coords[1], in->coords[2], in->core_on_chip, slice);
}

static PJRT_Error *pj_client_devices(PJRT_Client *c)
{
    c->ndev = tpu_chip_num_devices(c->chip);
    c->devs = calloc((size_t)c->ndev, sizeof *c->devs);
    c->dev_list = calloc((size_t)c->ndev, sizeof *c->dev_list);
    c->mem_list = calloc((size_t)c->ndev, sizeof *c->mem_list);
    c->topo.descs = calloc((size_t)c->ndev, sizeof *c->topo.descs);
    if (!c->devs || !c->dev_list || !c->mem_list || !c->topo.descs)
        return pj_error(PJRT_Error_Code_RESOURCE_EXHAUSTED, "tpusim: out of host memory");
    for (int i = 0; i < c->ndev; i++) {
        PJRT_Device *d = &c->devs[i];
        tpu_status st = tpu_chip_device(c->ctx, c->chip, i, &d->desc.info);
        if (st) return pj_error_tpu(c->ctx, st, "tpusim");
        d->desc.local_id = i;
        pj_describe(&d->desc, c->slice);
        d->client = c;
        d->mem.base.vtable = &pj_memory_vtable;
        d->mem.dev = d;
        d->mem.id = i;
        snprintf(d->mem.str, sizeof d->mem.str, "MEMORY_SPACE_%d(device, TPU_%d HBM)", i, i);
        d->mem_list[0] = &d->mem.base;
        c->dev_list[i] = d;
        c->mem_list[i] = &d->mem.base;
        c->topo.descs[i] = &d->desc;
    }
    c->naddr = c->ndev;
    c->addr_list = c->dev_list;
    c->addr_mems = c->mem_list;
    c->topo.client = c;
    c->topo.attrs[0] = pj_nv_str("slice", c->slice);
    c->topo.nattrs = 1;
    return NULL;
}

/* Options from the framework (jax's register_plugin(options=...)) override the environment. */
static const char *pj_option(const PJRT_Client_Create_Args *a, const char *name)
{
    for (size_t i = 0; a->create_options && i < a->num_options; i++) {
        const PJRT_NamedValue *v = &a->create_options[i];
        if (v->type == PJRT_NamedValue_kString && v->name_size == strlen(name) && !memcmp(v->name, name, v->name_size))
            return v->string_value;
    }
    return NULL;
}

PJRT_Error *pj_client_new(const PJRT_Client_Create_Args *a, PJRT_Client **out)
{
    *out = NULL;
    PJRT_Client *c = calloc(1, sizeof *c);
    if (!c) return pj_error(PJRT_Error_Code_RESOURCE_EXHAUSTED, "tpusim: out of host memory");
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->run_mu, NULL);
    c->ctx = tpu_ctx_new();
    const char *slice = pj_option(a, "slice");
    if (!slice) slice = pj_env("TPUSIM_SLICE", "v3-8");
    const char *num = pj_option(a, "numerics");
    if (!num) num = pj_env("TPUSIM_NUMERICS", "tpu");
    PJRT_Error *err = NULL;
    if (!c->ctx) err = pj_error(PJRT_Error_Code_RESOURCE_EXHAUSTED, "tpusim: out of host memory");
    else if (!strcmp(num, "tpu")) c->numerics = TPU_NUMERICS_TPU;
    else if (!strcmp(num, "exact")) c->numerics = TPU_NUMERICS_EXACT;
    else err = pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "TPUSIM_NUMERICS=%s: expected tpu or exact", num);
    if (!err) err = pj_remote_open(c, &slice);   /* TPU_NAME / TPU_GRPC_URL: the TPU host's slice */
    if (!err) {
        tpu_status st = tpu_chip_get(c->ctx, slice, &c->chip);
        if (st) err = pj_error_tpu(c->ctx, st, "TPUSIM_SLICE");
    }
    if (!err) {
        snprintf(c->slice, sizeof c->slice, "%s", tpu_chip_name(c->chip));
        /* per-execution limits (tpu_run_opts.max_steps / max_seconds) and threads: whole numbers, nothing else */
        const char *th = pj_env("TPUSIM_THREADS", "0");
        const char *ms = pj_env("TPUSIM_MAX_STEPS", "0"), *to = pj_env("TPUSIM_TIMEOUT", "0");
        char *e0 = NULL, *e1 = NULL, *e2 = NULL;
        long nth = strtol(th, &e0, 10);
        c->threads = (int)nth;
        c->max_steps = strtoll(ms, &e1, 10);
        c->max_seconds = strtod(to, &e2);
        if (*e0 || nth < 0 || nth > 4096)
            err = pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "TPUSIM_THREADS=%s: expected a thread count (0: all cores)", th);
        else if (*e1 || c->max_steps < 0)
            err = pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "TPUSIM_MAX_STEPS=%s: expected a count of instructions (0: no limit)", ms);
        else if (*e2 || !(c->max_seconds >= 0) || c->max_seconds > 1e9)
            err = pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "TPUSIM_TIMEOUT=%s: expected seconds (0: no limit)", to);
        snprintf(c->version, sizeof c->version, "tpusim %s: simulated TPU %s (%s numerics)", TPUSIM_VERSION, c->slice,
                 c->numerics == TPU_NUMERICS_TPU ? "TPU" : "exact f32");
        if (!err) err = pj_client_devices(c);
    }
    if (!err) err = pj_dist_client_init(c, a);
    if (!err) {
        const char *pd = getenv("TPUSIM_PROFILE_DIR");
        if (pd && *pd && !(c->profile_dir = strdup(pd))) err = pj_error(PJRT_Error_Code_RESOURCE_EXHAUSTED, "tpusim: out of host memory");
    }
    if (err) {
        pj_client_free(c);
        return err;
    }
    pj_report_track(c, 1);
    *out = c;
    return NULL;
}

void pj_client_free(PJRT_Client *c)
{
    if (!c) return;
    pj_report_track(c, 0);
    if (c->devs) pj_report_summary(c);
    pj_remote_close(c);
    for (int i = 0; i < c->nsystems; i++) tpu_system_free(c->systems[i].sys);
    pj_dist_client_free(c);
    for (int i = 0; c->devs && i < c->ndev; i++)
        for (int k = 0; k < c->devs[i].mem.nuser; k++)
            if (c->devs[i].mem.user[k].dtor) c->devs[i].mem.user[k].dtor(c->devs[i].mem.user[k].data);
    for (int i = 0; i < c->nnotes; i++) {
        free(c->notes[i].advice);
        tpu_profile_free(c->notes[i].p);
        tpu_module_free(c->notes[i].m);
        tpu_ctx_free(c->notes[i].ctx);
    }
    free(c->notes);
    free(c->devs);
    free(c->dev_list);
    free(c->mem_list);
    free(c->topo.descs);
    free(c->profile_dir);
    tpu_chip_free(c->chip);
    tpu_ctx_free(c->ctx);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->run_mu);
    free(c);
}

PJRT_Device *pj_client_device(PJRT_Client *c, int id) { return id >= 0 && id < c->ndev ? &c->devs[id] : NULL; }

/* ---- HBM accounting ---- */

static void pj_fmt_bytes(char *buf, size_t n, int64_t b)
{
    double v = (double)b;
    if (v >= 1024.0 * 1024 * 1024) snprintf(buf, n, "%.2fG", v / (1024.0 * 1024 * 1024));
    else if (v >= 1024.0 * 1024) snprintf(buf, n, "%.2fM", v / (1024.0 * 1024));
    else if (v >= 1024.0) snprintf(buf, n, "%.2fK", v / 1024.0);
    else snprintf(buf, n, "%lldB", (long long)b);
}

PJRT_Error *pj_hbm_alloc(PJRT_Device *d, int64_t bytes, const tpu_tensor *what)
{
    PJRT_Client *c = d->client;
    pthread_mutex_lock(&c->mu);
    int64_t limit = d->desc.info.hbm_bytes;
    if (bytes < 0 || d->in_use + bytes > limit) {
        int64_t in_use = d->in_use;
        pthread_mutex_unlock(&c->mu);
        char want[32], used[32], cap[32], shape[128] = "an array";
        if (what) tpu_tensor_shape_str(what, shape, sizeof shape);
        pj_fmt_bytes(want, sizeof want, bytes);
        pj_fmt_bytes(used, sizeof used, in_use);
        pj_fmt_bytes(cap, sizeof cap, limit);
        return pj_error(PJRT_Error_Code_RESOURCE_EXHAUSTED,
                        "Out of memory while trying to allocate %s for %s on TPU_%d (%s, %s): %s of %s HBM in use",
                        bytes < 0 ? "an overflowing size" : want, shape, d->desc.info.id, d->desc.info.kind, c->slice,
                        used, cap);
    }
    d->in_use += bytes;
    if (d->in_use > d->peak) d->peak = d->in_use;
    if (bytes > d->largest) d->largest = bytes;
    d->nallocs++;
    c->live_buffers++;
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

void pj_hbm_free(PJRT_Device *d, int64_t bytes)
{
    pthread_mutex_lock(&d->client->mu);
    d->in_use -= bytes;
    d->client->live_buffers--;
    pthread_mutex_unlock(&d->client->mu);
}

/* ---- PJRT_Client_* ---- */

PJRT_Error *pjx_PJRT_Client_Create(PJRT_Client_Create_Args *a)
{
    PJ_NEED(a, PJRT_Client_Create_Args, client);
    return pj_client_new(a, &a->client);
}

PJRT_Error *pjx_PJRT_Client_Destroy(PJRT_Client_Destroy_Args *a)
{
    PJ_NEED(a, PJRT_Client_Destroy_Args, client);
    pj_client_free(a->client);
    return NULL;
}

PJRT_Error *pjx_PJRT_Client_PlatformName(PJRT_Client_PlatformName_Args *a)
{
    PJ_NEED(a, PJRT_Client_PlatformName_Args, platform_name_size);
    a->platform_name = PJ_PLATFORM;
    a->platform_name_size = strlen(PJ_PLATFORM);
    return NULL;
}

PJRT_Error *pjx_PJRT_Client_ProcessIndex(PJRT_Client_ProcessIndex_Args *a)
{
    PJ_NEED(a, PJRT_Client_ProcessIndex_Args, process_index);
    a->process_index = a->client->process_index;
    return NULL;
}

PJRT_Error *pjx_PJRT_Client_PlatformVersion(PJRT_Client_PlatformVersion_Args *a)
{
    PJ_NEED(a, PJRT_Client_PlatformVersion_Args, platform_version_size);
    a->platform_version = a->client->version;
    a->platform_version_size = strlen(a->client->version);
    return NULL;
}

PJRT_Error *pjx_PJRT_Client_Devices(PJRT_Client_Devices_Args *a)
{
    PJ_NEED(a, PJRT_Client_Devices_Args, num_devices);
    a->devices = a->client->dev_list;
    a->num_devices = (size_t)a->client->ndev;
    return NULL;
}

PJRT_Error *pjx_PJRT_Client_AddressableDevices(PJRT_Client_AddressableDevices_Args *a)
{
    PJ_NEED(a, PJRT_Client_AddressableDevices_Args, num_addressable_devices);
    a->addressable_devices = a->client->addr_list;
    a->num_addressable_devices = (size_t)a->client->naddr;
    return NULL;
}

PJRT_Error *pjx_PJRT_Client_LookupDevice(PJRT_Client_LookupDevice_Args *a)
{
    PJ_NEED(a, PJRT_Client_LookupDevice_Args, device);
    a->device = pj_client_device(a->client, a->id);
    if (!a->device)
        return pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "no device %d: the simulated %s has devices 0..%d", a->id,
                        a->client->slice, a->client->ndev - 1);
    return NULL;
}

PJRT_Error *pjx_PJRT_Client_LookupAddressableDevice(PJRT_Client_LookupAddressableDevice_Args *a)
{
    PJ_NEED(a, PJRT_Client_LookupAddressableDevice_Args, addressable_device);
    int id = a->local_hardware_id;
    a->addressable_device = id >= 0 && id < a->client->naddr ? a->client->addr_list[id] : NULL;
    if (!a->addressable_device)
        return pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "no addressable device with local hardware id %d (the simulated %s has 0..%d)",
                        a->local_hardware_id, a->client->slice, a->client->naddr - 1);
    return NULL;
}

PJRT_Error *pjx_PJRT_Client_AddressableMemories(PJRT_Client_AddressableMemories_Args *a)
{
    PJ_NEED(a, PJRT_Client_AddressableMemories_Args, num_addressable_memories);
    a->addressable_memories = a->client->addr_mems;
    a->num_addressable_memories = (size_t)a->client->naddr;
    return NULL;
}

PJRT_Error *pjx_PJRT_Client_DefaultDeviceAssignment(PJRT_Client_DefaultDeviceAssignment_Args *a)
{
    PJ_NEED(a, PJRT_Client_DefaultDeviceAssignment_Args, default_assignment);
    int64_t n = (int64_t)a->num_replicas * a->num_partitions;
    if (a->num_replicas < 1 || a->num_partitions < 1 || n > a->client->ndev)
        return pj_error(PJRT_Error_Code_INVALID_ARGUMENT,
                        "%d replicas x %d partitions need %lld devices; the simulated %s has %d", a->num_replicas,
                        a->num_partitions, (long long)n, a->client->slice, a->client->ndev);
    if ((int64_t)a->default_assignment_size < n)
        return pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "default_assignment has room for %zu devices, not %lld",
                        a->default_assignment_size, (long long)n);
    for (int64_t i = 0; i < n; i++) a->default_assignment[i] = (int)i;
    return NULL;
}

PJRT_Error *pjx_PJRT_Client_TopologyDescription(PJRT_Client_TopologyDescription_Args *a)
{
    PJ_NEED(a, PJRT_Client_TopologyDescription_Args, topology);
    a->topology = &a->client->topo;
    return NULL;
}

/* ---- devices and their descriptions ---- */

PJRT_Error *pjx_PJRT_DeviceDescription_Id(PJRT_DeviceDescription_Id_Args *a)
{
    PJ_NEED(a, PJRT_DeviceDescription_Id_Args, id);
    a->id = a->device_description->info.id;
    return NULL;
}

PJRT_Error *pjx_PJRT_DeviceDescription_ProcessIndex(PJRT_DeviceDescription_ProcessIndex_Args *a)
{
    PJ_NEED(a, PJRT_DeviceDescription_ProcessIndex_Args, process_index);
    a->process_index = a->device_description->process;
    return NULL;
}

PJRT_Error *pjx_PJRT_DeviceDescription_Attributes(PJRT_DeviceDescription_Attributes_Args *a)
{
    PJ_NEED(a, PJRT_DeviceDescription_Attributes_Args, attributes);
    a->attributes = a->device_description->attrs;
    a->num_attributes = (size_t)a->device_description->nattrs;
    return NULL;
}

PJRT_Error *pjx_PJRT_DeviceDescription_Kind(PJRT_DeviceDescription_Kind_Args *a)
{
    PJ_NEED(a, PJRT_DeviceDescription_Kind_Args, device_kind_size);
    a->device_kind = a->device_description->info.kind;
    a->device_kind_size = strlen(a->device_kind);
    return NULL;
}

PJRT_Error *pjx_PJRT_DeviceDescription_DebugString(PJRT_DeviceDescription_DebugString_Args *a)
{
    PJ_NEED(a, PJRT_DeviceDescription_DebugString_Args, debug_string_size);
    a->debug_string = a->device_description->debug;
    a->debug_string_size = strlen(a->debug_string);
    return NULL;
}

PJRT_Error *pjx_PJRT_DeviceDescription_ToString(PJRT_DeviceDescription_ToString_Args *a)
{
    PJ_NEED(a, PJRT_DeviceDescription_ToString_Args, to_string_size);
    a->to_string = a->device_description->to_string;
    a->to_string_size = strlen(a->to_string);
    return NULL;
}

PJRT_Error *pjx_PJRT_Device_GetDescription(PJRT_Device_GetDescription_Args *a)
{
    PJ_NEED(a, PJRT_Device_GetDescription_Args, device_description);
    a->device_description = &a->device->desc;
    return NULL;
}

PJRT_Error *pjx_PJRT_Device_IsAddressable(PJRT_Device_IsAddressable_Args *a)
{
    PJ_NEED(a, PJRT_Device_IsAddressable_Args, is_addressable);
    a->is_addressable = a->device->desc.process == a->device->client->process_index;
    return NULL;
}

PJRT_Error *pjx_PJRT_Device_LocalHardwareId(PJRT_Device_LocalHardwareId_Args *a)
{
    PJ_NEED(a, PJRT_Device_LocalHardwareId_Args, local_hardware_id);
    a->local_hardware_id = a->device->desc.local_id;
    return NULL;
}

PJRT_Error *pjx_PJRT_Device_AddressableMemories(PJRT_Device_AddressableMemories_Args *a)
{
    PJ_NEED(a, PJRT_Device_AddressableMemories_Args, num_memories);
    a->memories = a->device->mem_list;
    a->num_memories = 1;
    return NULL;
}

PJRT_Error *pjx_PJRT_Device_DefaultMemory(PJRT_Device_DefaultMemory_Args *a)
{
    PJ_NEED(a, PJRT_Device_DefaultMemory_Args, memory);
    a->memory = &a->device->mem.base;
    return NULL;
}

PJRT_Error *pjx_PJRT_Device_MemoryStats(PJRT_Device_MemoryStats_Args *a)
{
    PJ_NEED(a, PJRT_Device_MemoryStats_Args, bytes_limit_is_set);
    PJRT_Device *d = a->device;
    pthread_mutex_lock(&d->client->mu);
    a->bytes_in_use = d->in_use;
    a->peak_bytes_in_use = d->peak;
    a->peak_bytes_in_use_is_set = true;
    a->num_allocs = d->nallocs;
    a->num_allocs_is_set = true;
    a->largest_alloc_size = d->largest;
    a->largest_alloc_size_is_set = true;
    a->bytes_limit = d->desc.info.hbm_bytes;
    a->bytes_limit_is_set = true;
    pthread_mutex_unlock(&d->client->mu);
    if (a->struct_size >= PJRT_STRUCT_SIZE(PJRT_Device_MemoryStats_Args, peak_pool_bytes_is_set)) {
        /* one contiguous heap per device in the model: what is not in use is one free block */
        a->largest_free_block_bytes = a->bytes_limit - a->bytes_in_use;
        a->largest_free_block_bytes_is_set = true;
        a->bytes_reserved_is_set = a->peak_bytes_reserved_is_set = a->bytes_reservable_limit_is_set = false;
        a->pool_bytes_is_set = a->peak_pool_bytes_is_set = false;
    }
    return NULL;
}

PJRT_Error *pjx_PJRT_Device_ClearMemoryStats(PJRT_Device_ClearMemoryStats_Args *a)
{
    PJ_NEED(a, PJRT_Device_ClearMemoryStats_Args, device);
    PJRT_Device *d = a->device;
    pthread_mutex_lock(&d->client->mu);
    d->peak = d->in_use;
    d->largest = 0;
    d->nallocs = 0;
    pthread_mutex_unlock(&d->client->mu);
    return NULL;
}

/* The attributes live as long as the device: nothing to delete, but the framework insists on a deleter. */
static void pj_attrs_keep(PJRT_Device_Attributes *attrs) { (void)attrs; }

PJRT_Error *pjx_PJRT_Device_GetAttributes(PJRT_Device_GetAttributes_Args *a)
{
    PJ_NEED(a, PJRT_Device_GetAttributes_Args, attributes_deleter);
    a->attributes = a->device->desc.attrs;
    a->num_attributes = (size_t)a->device->desc.nattrs;
    a->device_attributes = NULL;
    a->attributes_deleter = pj_attrs_keep;
    return NULL;
}

/* ---- memories ---- */

PJRT_Error *pjx_PJRT_Memory_Id(PJRT_Memory_Id_Args *a)
{
    PJ_NEED(a, PJRT_Memory_Id_Args, id);
    a->id = pj_mem(a->memory)->id;
    return NULL;
}

PJRT_Error *pjx_PJRT_Memory_Kind(PJRT_Memory_Kind_Args *a)
{
    PJ_NEED(a, PJRT_Memory_Kind_Args, kind_size);
    a->kind = "device";
    a->kind_size = 6;
    return NULL;
}

PJRT_Error *pjx_PJRT_Memory_Kind_Id(PJRT_Memory_Kind_Id_Args *a)
{
    PJ_NEED(a, PJRT_Memory_Kind_Id_Args, kind_id);
    a->kind_id = 0;
    return NULL;
}

PJRT_Error *pjx_PJRT_Memory_DebugString(PJRT_Memory_DebugString_Args *a)
{
    PJ_NEED(a, PJRT_Memory_DebugString_Args, debug_string_size);
    a->debug_string = pj_mem(a->memory)->str;
    a->debug_string_size = strlen(a->debug_string);
    return NULL;
}

PJRT_Error *pjx_PJRT_Memory_ToString(PJRT_Memory_ToString_Args *a)
{
    PJ_NEED(a, PJRT_Memory_ToString_Args, to_string_size);
    a->to_string = pj_mem(a->memory)->str;
    a->to_string_size = strlen(a->to_string);
    return NULL;
}

PJRT_Error *pjx_PJRT_Memory_AddressableByDevices(PJRT_Memory_AddressableByDevices_Args *a)
{
    PJ_NEED(a, PJRT_Memory_AddressableByDevices_Args, num_devices);
    PJRT_Device *d = pj_mem(a->memory)->dev;
    a->devices = &d->client->dev_list[d->desc.info.id];
    a->num_devices = 1;
    return NULL;
}

/* ---- topology ---- */

PJRT_Error *pjx_PJRT_TopologyDescription_Destroy(PJRT_TopologyDescription_Destroy_Args *a)
{
    PJ_NEED(a, PJRT_TopologyDescription_Destroy_Args, topology);
    return NULL;   /* owned by its client */
}

PJRT_Error *pjx_PJRT_TopologyDescription_PlatformName(PJRT_TopologyDescription_PlatformName_Args *a)
{
    PJ_NEED(a, PJRT_TopologyDescription_PlatformName_Args, platform_name_size);
    a->platform_name = PJ_PLATFORM;
    a->platform_name_size = strlen(PJ_PLATFORM);
    return NULL;
}

PJRT_Error *pjx_PJRT_TopologyDescription_PlatformVersion(PJRT_TopologyDescription_PlatformVersion_Args *a)
{
    PJ_NEED(a, PJRT_TopologyDescription_PlatformVersion_Args, platform_version_size);
    a->platform_version = a->topology->client->version;
    a->platform_version_size = strlen(a->platform_version);
    return NULL;
}

PJRT_Error *pjx_PJRT_TopologyDescription_GetDeviceDescriptions(PJRT_TopologyDescription_GetDeviceDescriptions_Args *a)
{
    PJ_NEED(a, PJRT_TopologyDescription_GetDeviceDescriptions_Args, num_descriptions);
    a->descriptions = a->topology->descs;
    a->num_descriptions = (size_t)a->topology->client->ndev;
    return NULL;
}

PJRT_Error *pjx_PJRT_TopologyDescription_Attributes(PJRT_TopologyDescription_Attributes_Args *a)
{
    PJ_NEED(a, PJRT_TopologyDescription_Attributes_Args, num_attributes);
    a->attributes = a->topology->attrs;
    a->num_attributes = (size_t)a->topology->nattrs;
    return NULL;
}
