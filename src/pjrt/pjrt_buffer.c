/* pjrt_buffer.c — device buffers. A buffer holds a tpu_tensor (row-major, one element per byte for sub-byte
 * types, as the framework's host arrays hold them) and charges its device's HBM with the bytes the array
 * takes there with the TPU's tiling, so memory_stats() and out-of-memory errors match the device's view. */
#include "pjrt_internal.h"

#include <stdlib.h>
#include <string.h>

static const struct { PJRT_Buffer_Type p; tpu_dtype t; } pj_types[] = {
    {PJRT_Buffer_Type_PRED, TPU_PRED}, {PJRT_Buffer_Type_S8, TPU_S8}, {PJRT_Buffer_Type_S16, TPU_S16},
    {PJRT_Buffer_Type_S32, TPU_S32}, {PJRT_Buffer_Type_S64, TPU_S64}, {PJRT_Buffer_Type_U8, TPU_U8},
    {PJRT_Buffer_Type_U16, TPU_U16}, {PJRT_Buffer_Type_U32, TPU_U32}, {PJRT_Buffer_Type_U64, TPU_U64},
    {PJRT_Buffer_Type_F16, TPU_F16}, {PJRT_Buffer_Type_F32, TPU_F32}, {PJRT_Buffer_Type_F64, TPU_F64},
    {PJRT_Buffer_Type_BF16, TPU_BF16}, {PJRT_Buffer_Type_C64, TPU_C64}, {PJRT_Buffer_Type_C128, TPU_C128},
    {PJRT_Buffer_Type_F8E5M2, TPU_F8E5M2}, {PJRT_Buffer_Type_F8E4M3FN, TPU_F8E4M3FN},
    {PJRT_Buffer_Type_F8E4M3B11FNUZ, TPU_F8E4M3B11FNUZ}, {PJRT_Buffer_Type_F8E5M2FNUZ, TPU_F8E5M2FNUZ},
    {PJRT_Buffer_Type_F8E4M3FNUZ, TPU_F8E4M3FNUZ}, {PJRT_Buffer_Type_S4, TPU_S4}, {PJRT_Buffer_Type_U4, TPU_U4},
    {PJRT_Buffer_Type_TOKEN, TPU_TOKEN}, {PJRT_Buffer_Type_S2, TPU_S2}, {PJRT_Buffer_Type_U2, TPU_U2},
    {PJRT_Buffer_Type_F8E4M3, TPU_F8E4M3}, {PJRT_Buffer_Type_F8E3M4, TPU_F8E3M4},
    {PJRT_Buffer_Type_F8E8M0FNU, TPU_F8E8M0FNU}, {PJRT_Buffer_Type_F4E2M1FN, TPU_F4E2M1FN},
};

tpu_dtype pj_dtype_from_pjrt(PJRT_Buffer_Type t)
{
    for (size_t i = 0; i < sizeof pj_types / sizeof pj_types[0]; i++)
        if (pj_types[i].p == t) return pj_types[i].t;
    return TPU_INVALID;
}

PJRT_Buffer_Type pj_dtype_to_pjrt(tpu_dtype t)
{
    for (size_t i = 0; i < sizeof pj_types / sizeof pj_types[0]; i++)
        if (pj_types[i].t == t) return pj_types[i].p;
    return PJRT_Buffer_Type_INVALID;
}

static PJRT_Error *pj_nomem(void) { return pj_error(PJRT_Error_Code_RESOURCE_EXHAUSTED, "tpusim: out of host memory"); }

PJRT_Error *pj_buffer_wrap(PJRT_Device *d, tpu_tensor *t, PJRT_Buffer **out)
{
    *out = NULL;
    PJRT_Buffer *b = calloc(1, sizeof *b);
    if (!b) {
        tpu_tensor_free(t);
        return pj_nomem();
    }
    b->dev = d;
    b->t = t;
    b->dtype = tpu_tensor_dtype(t);
    b->rank = tpu_tensor_rank(t);
    memcpy(b->dims, tpu_tensor_dims(t), (size_t)b->rank * sizeof b->dims[0]);
    int64_t bytes = b->dtype == TPU_TOKEN ? 0 : tpu_chip_array_bytes(d->client->chip, b->dtype, b->rank, b->dims);
    PJRT_Error *e = pj_hbm_alloc(d, bytes, t);
    if (e) {
        tpu_tensor_free(t);
        free(b);
        return e;
    }
    if (d->client->remote) {   /* remote mode: the array goes to the TPU host (t is freed either way) */
        b->t = NULL;
        if ((e = pj_remote_put(b, t))) {
            pj_hbm_free(d, bytes);
            free(b);
            return e;
        }
    }
    b->hbm_bytes = bytes;
    *out = b;
    return NULL;
}

void pj_buffer_release(PJRT_Buffer *b)
{
    if (!b->t && !b->remote) return;
    if (b->remote) pj_remote_delete_buffer(b);
    tpu_tensor_free(b->t);
    b->t = NULL;
    b->remote = 0;
    pj_hbm_free(b->dev, b->hbm_bytes);
}

/* The buffer's bytes on this host: its tensor, or in remote mode a copy fetched into *tmp (free it). */
static PJRT_Error *pj_host_view(const PJRT_Buffer *b, tpu_tensor **tmp, const tpu_tensor **view)
{
    *tmp = NULL;
    *view = b->t;
    if (b->t || !b->remote) return NULL;
    PJRT_Error *err = pj_remote_fetch(b, tmp);
    *view = *tmp;
    return err;
}

static PJRT_Error *pj_deleted_error(const PJRT_Buffer *b, const char *what)
{
    return pj_error(PJRT_Error_Code_FAILED_PRECONDITION, "%s: the buffer on TPU_%d was %s", what, b->dev->desc.info.id,
                    b->donated ? "donated to an executable (its memory was reused)" : "deleted");
}

/* Copies between a dense row-major array and strided memory (byte strides per dimension). to_strided: dense
 * src -> strided dst. Works one innermost run at a time. */
static void pj_copy_strided(char *dense, char *strided, int rank, const int64_t *dims, const int64_t *strides,
                            size_t esz, int to_strided)
{
    int64_t count = 1;
    for (int k = 0; k < rank; k++) count *= dims[k];
    if (count == 0) return;
    int64_t idx[TPU_MAX_RANK] = {0};
    for (int64_t i = 0; i < count; i++) {
        int64_t off = 0;
        for (int k = 0; k < rank; k++) off += idx[k] * strides[k];
        if (to_strided) memcpy(strided + off, dense + i * (int64_t)esz, esz);
        else memcpy(dense + i * (int64_t)esz, strided + off, esz);
        for (int k = rank - 1; k >= 0; k--) {
            if (++idx[k] < dims[k]) break;
            idx[k] = 0;
        }
    }
}

/* Byte strides of a host layout given as minor_to_major (a permutation of the dimensions). */
static int pj_strides_from_m2m(const int64_t *m2m, size_t n, int rank, const int64_t *dims, size_t esz, int64_t *strides)
{
    if ((int)n != rank) return 0;
    int seen[TPU_MAX_RANK] = {0};
    int64_t s = (int64_t)esz;
    for (int k = 0; k < rank; k++) {
        int64_t d = m2m[k];
        if (d < 0 || d >= rank || seen[d]) return 0;
        seen[d] = 1;
        strides[d] = s;
        s *= dims[d];
    }
    return 1;
}

static int pj_dense_strides(int rank, const int64_t *dims, size_t esz, const int64_t *strides)
{
    int64_t s = (int64_t)esz;
    for (int k = rank - 1; k >= 0; k--) {
        if (dims[k] > 1 && strides[k] != s) return 0;
        s *= dims[k];
    }
    return 1;
}

PJRT_Error *pjx_PJRT_Client_BufferFromHostBuffer(PJRT_Client_BufferFromHostBuffer_Args *a)
{
    PJ_NEED(a, PJRT_Client_BufferFromHostBuffer_Args, buffer);
    PJRT_Device *d = a->device ? a->device : a->memory ? pj_mem(a->memory)->dev : NULL;
    if (!d) return pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "BufferFromHostBuffer: neither a device nor a memory given");
    pj_report_found_system(d->client);
    tpu_dtype t = pj_dtype_from_pjrt(a->type);
    if (t == TPU_INVALID || t == TPU_TOKEN)
        return pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "BufferFromHostBuffer: element type %d has no array form on a TPU", (int)a->type);
    if (a->num_dims > TPU_MAX_RANK)
        return pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "BufferFromHostBuffer: rank %zu (at most %d)", a->num_dims, TPU_MAX_RANK);
    for (size_t k = 0; k < a->num_dims; k++)
        if (a->dims[k] < 0) return pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "BufferFromHostBuffer: dimension %zu is %lld", k, (long long)a->dims[k]);
    if (a->byte_strides && a->num_byte_strides != a->num_dims)
        return pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "BufferFromHostBuffer: %zu byte strides for %zu dimensions",
                        a->num_byte_strides, a->num_dims);
    tpu_tensor *tt = NULL;
    tpu_ctx *ctx = tpu_ctx_new();
    if (!ctx) return pj_nomem();
    tpu_status st = tpu_tensor_new(ctx, t, (int)a->num_dims, a->dims, &tt);
    PJRT_Error *err = st ? pj_error_tpu(ctx, st, "BufferFromHostBuffer") : NULL;
    tpu_ctx_free(ctx);
    if (err) return err;
    size_t esz = tpu_dtype_size(t), nbytes = tpu_tensor_nbytes(tt);
    if (nbytes && !a->data) {
        tpu_tensor_free(tt);
        return pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "BufferFromHostBuffer: no host data for %zu bytes", nbytes);
    }
    if (!a->byte_strides || pj_dense_strides((int)a->num_dims, a->dims, esz, a->byte_strides))
        memcpy(tpu_tensor_data(tt), a->data, nbytes);
    else
        pj_copy_strided(tpu_tensor_data(tt), (char *)a->data, (int)a->num_dims, a->dims, a->byte_strides, esz, 0);
    err = pj_buffer_wrap(d, tt, &a->buffer);
    if (err) return err;
    a->done_with_host_buffer = pj_event_ready(NULL);
    return NULL;
}

PJRT_Error *pjx_PJRT_Client_CreateUninitializedBuffer(PJRT_Client_CreateUninitializedBuffer_Args *a)
{
    PJ_NEED(a, PJRT_Client_CreateUninitializedBuffer_Args, buffer);
    PJRT_Device *d = a->device ? a->device : a->memory ? pj_mem(a->memory)->dev : NULL;
    tpu_dtype t = pj_dtype_from_pjrt(a->shape_element_type);
    if (!d || t == TPU_INVALID || a->shape_num_dims > TPU_MAX_RANK)
        return pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "CreateUninitializedBuffer: bad device, element type or rank");
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_tensor *tt = NULL;
    tpu_status st = ctx ? tpu_tensor_new(ctx, t, (int)a->shape_num_dims, a->shape_dims, &tt) : TPU_ERR_NOMEM;
    PJRT_Error *err = st ? pj_error_tpu(ctx, st, "CreateUninitializedBuffer") : NULL;
    tpu_ctx_free(ctx);
    return err ? err : pj_buffer_wrap(d, tt, &a->buffer);
}

PJRT_Error *pjx_PJRT_Buffer_Destroy(PJRT_Buffer_Destroy_Args *a)
{
    PJ_NEED(a, PJRT_Buffer_Destroy_Args, buffer);
    if (a->buffer) {
        pj_buffer_release(a->buffer);
        free(a->buffer);
    }
    return NULL;
}

PJRT_Error *pjx_PJRT_Buffer_ElementType(PJRT_Buffer_ElementType_Args *a)
{
    PJ_NEED(a, PJRT_Buffer_ElementType_Args, type);
    a->type = pj_dtype_to_pjrt(a->buffer->dtype);
    return NULL;
}

PJRT_Error *pjx_PJRT_Buffer_Dimensions(PJRT_Buffer_Dimensions_Args *a)
{
    PJ_NEED(a, PJRT_Buffer_Dimensions_Args, num_dims);
    a->dims = a->buffer->dims;
    a->num_dims = (size_t)a->buffer->rank;
    return NULL;
}

PJRT_Error *pjx_PJRT_Buffer_UnpaddedDimensions(PJRT_Buffer_UnpaddedDimensions_Args *a)
{
    PJ_NEED(a, PJRT_Buffer_UnpaddedDimensions_Args, num_dims);
    a->unpadded_dims = a->buffer->dims;
    a->num_dims = (size_t)a->buffer->rank;
    return NULL;
}

PJRT_Error *pjx_PJRT_Buffer_DynamicDimensionIndices(PJRT_Buffer_DynamicDimensionIndices_Args *a)
{
    PJ_NEED(a, PJRT_Buffer_DynamicDimensionIndices_Args, num_dynamic_dims);
    a->dynamic_dim_indices = NULL;
    a->num_dynamic_dims = 0;   /* a TPU has static shapes */
    return NULL;
}

PJRT_Error *pjx_PJRT_Buffer_GetMemoryLayout(PJRT_Buffer_GetMemoryLayout_Args *a)
{
    PJ_NEED(a, PJRT_Buffer_GetMemoryLayout_Args, layout);
    PJRT_Buffer *b = a->buffer;
    for (int k = 0; k < b->rank; k++) b->ext_dims[k] = b->rank - 1 - k;   /* row-major: minor_to_major n-1..0 */
    memset(&a->layout, 0, sizeof a->layout);
    a->layout.struct_size = PJRT_Buffer_MemoryLayout_STRUCT_SIZE;
    a->layout.type = PJRT_Buffer_MemoryLayout_Type_Tiled;
    a->layout.tiled.struct_size = PJRT_Buffer_MemoryLayout_Tiled_STRUCT_SIZE;
    a->layout.tiled.minor_to_major = b->ext_dims;
    a->layout.tiled.minor_to_major_size = (size_t)b->rank;
    a->layout.tiled.num_tiles = 0;
    return NULL;
}

PJRT_Error *pjx_PJRT_Buffer_OnDeviceSizeInBytes(PJRT_Buffer_OnDeviceSizeInBytes_Args *a)
{
    PJ_NEED(a, PJRT_Buffer_OnDeviceSizeInBytes_Args, on_device_size_in_bytes);
    a->on_device_size_in_bytes = (size_t)a->buffer->hbm_bytes;
    return NULL;
}

PJRT_Error *pjx_PJRT_Buffer_Device(PJRT_Buffer_Device_Args *a)
{
    PJ_NEED(a, PJRT_Buffer_Device_Args, device);
    a->device = a->buffer->dev;
    return NULL;
}

PJRT_Error *pjx_PJRT_Buffer_Memory(PJRT_Buffer_Memory_Args *a)
{
    PJ_NEED(a, PJRT_Buffer_Memory_Args, memory);
    a->memory = &a->buffer->dev->mem.base;
    return NULL;
}

PJRT_Error *pjx_PJRT_Buffer_Delete(PJRT_Buffer_Delete_Args *a)
{
    PJ_NEED(a, PJRT_Buffer_Delete_Args, buffer);
    pj_buffer_release(a->buffer);
    a->buffer->deleted = 1;
    return NULL;
}

PJRT_Error *pjx_PJRT_Buffer_IsDeleted(PJRT_Buffer_IsDeleted_Args *a)
{
    PJ_NEED(a, PJRT_Buffer_IsDeleted_Args, is_deleted);
    a->is_deleted = a->buffer->deleted;
    return NULL;
}

static PJRT_Error *pj_copy_to(PJRT_Buffer *src, PJRT_Device *dst, PJRT_Buffer **out)
{
    if (!pj_buffer_live(src)) return pj_deleted_error(src, "copy to another device");
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_tensor *t = NULL, *tmp = NULL;
    const tpu_tensor *view = NULL;
    tpu_status st = ctx ? tpu_tensor_new(ctx, src->dtype, src->rank, src->dims, &t) : TPU_ERR_NOMEM;
    PJRT_Error *err = st ? pj_error_tpu(ctx, st, "copy to device") : pj_host_view(src, &tmp, &view);
    tpu_ctx_free(ctx);
    if (!err) memcpy(tpu_tensor_data(t), tpu_tensor_cdata(view), tpu_tensor_nbytes(t));
    tpu_tensor_free(tmp);
    if (err) {
        tpu_tensor_free(t);
        return err;
    }
    return pj_buffer_wrap(dst, t, out);
}

PJRT_Error *pjx_PJRT_Buffer_CopyToDevice(PJRT_Buffer_CopyToDevice_Args *a)
{
    PJ_NEED(a, PJRT_Buffer_CopyToDevice_Args, dst_buffer);
    if (!a->dst_device) return pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "CopyToDevice: no destination device");
    return pj_copy_to(a->buffer, a->dst_device, &a->dst_buffer);
}

PJRT_Error *pjx_PJRT_Buffer_CopyToMemory(PJRT_Buffer_CopyToMemory_Args *a)
{
    PJ_NEED(a, PJRT_Buffer_CopyToMemory_Args, dst_buffer);
    if (!a->dst_memory) return pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "CopyToMemory: no destination memory");
    return pj_copy_to(a->buffer, pj_mem(a->dst_memory)->dev, &a->dst_buffer);
}

PJRT_Error *pjx_PJRT_Buffer_ToHostBuffer(PJRT_Buffer_ToHostBuffer_Args *a)
{
    PJ_NEED(a, PJRT_Buffer_ToHostBuffer_Args, event);
    PJRT_Buffer *b = a->src;
    if (!pj_buffer_live(b)) return pj_deleted_error(b, "ToHostBuffer");
    size_t esz = tpu_dtype_size(b->dtype), n = esz;
    for (int k = 0; k < b->rank; k++) n *= (size_t)b->dims[k];
    int64_t strides[TPU_MAX_RANK];
    int strided = 0;
    const PJRT_Buffer_MemoryLayout *hl = a->host_layout;
    if (hl) {
        if (hl->type == PJRT_Buffer_MemoryLayout_Type_Strides) {
            if ((int)hl->strides.num_byte_strides != b->rank)
                return pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "ToHostBuffer: %zu byte strides for rank %d",
                                hl->strides.num_byte_strides, b->rank);
            memcpy(strides, hl->strides.byte_strides, (size_t)b->rank * sizeof strides[0]);
        } else if (hl->tiled.num_tiles > 0) {
            return pj_error(PJRT_Error_Code_UNIMPLEMENTED, "ToHostBuffer: tiled host layouts are not supported");
        } else if (!pj_strides_from_m2m(hl->tiled.minor_to_major, hl->tiled.minor_to_major_size, b->rank, b->dims, esz, strides)) {
            return pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "ToHostBuffer: the host layout's minor_to_major is not a permutation of %d dimensions", b->rank);
        }
        strided = !pj_dense_strides(b->rank, b->dims, esz, strides);
    }
    if (!a->dst) {
        a->dst_size = n;   /* the caller asks how much room to make */
        return NULL;
    }
    if (a->dst_size < n)
        return pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "ToHostBuffer: destination has %zu bytes, the array needs %zu", a->dst_size, n);
    tpu_tensor *tmp;
    const tpu_tensor *view;
    PJRT_Error *err = pj_host_view(b, &tmp, &view);
    if (err) return err;
    if (strided) pj_copy_strided((char *)tpu_tensor_cdata(view), a->dst, b->rank, b->dims, strides, esz, 1);
    else memcpy(a->dst, tpu_tensor_cdata(view), n);
    tpu_tensor_free(tmp);
    a->event = pj_event_ready(NULL);
    return NULL;
}

PJRT_Error *pjx_PJRT_Buffer_CopyRawToHost(PJRT_Buffer_CopyRawToHost_Args *a)
{
    PJ_NEED(a, PJRT_Buffer_CopyRawToHost_Args, event);
    PJRT_Buffer *b = a->buffer;
    if (!pj_buffer_live(b)) return pj_deleted_error(b, "CopyRawToHost");
    tpu_tensor *tmp;
    const tpu_tensor *view;
    PJRT_Error *err = pj_host_view(b, &tmp, &view);
    if (err) return err;
    size_t n = tpu_tensor_nbytes(view);
    if (a->offset < 0 || a->transfer_size < 0 || (uint64_t)a->offset + (uint64_t)a->transfer_size > n) {
        tpu_tensor_free(tmp);
        return pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "CopyRawToHost: bytes [%lld, %lld) outside the buffer's %zu",
                        (long long)a->offset, (long long)(a->offset + a->transfer_size), n);
    }
    memcpy(a->dst, (const char *)tpu_tensor_cdata(view) + a->offset, (size_t)a->transfer_size);
    tpu_tensor_free(tmp);
    a->event = pj_event_ready(NULL);
    return NULL;
}

PJRT_Error *pjx_PJRT_Buffer_IsOnCpu(PJRT_Buffer_IsOnCpu_Args *a)
{
    PJ_NEED(a, PJRT_Buffer_IsOnCpu_Args, is_on_cpu);
    a->is_on_cpu = false;   /* it is on the (simulated) TPU: hosts read it through ToHostBuffer */
    return NULL;
}

PJRT_Error *pjx_PJRT_Buffer_ReadyEvent(PJRT_Buffer_ReadyEvent_Args *a)
{
    PJ_NEED(a, PJRT_Buffer_ReadyEvent_Args, event);
    a->event = pj_event_ready(NULL);
    return a->event ? NULL : pj_nomem();
}

PJRT_Error *pjx_PJRT_Buffer_IncreaseExternalReferenceCount(PJRT_Buffer_IncreaseExternalReferenceCount_Args *a)
{
    PJ_NEED(a, PJRT_Buffer_IncreaseExternalReferenceCount_Args, buffer);
    a->buffer->ext_refs++;
    return NULL;
}

PJRT_Error *pjx_PJRT_Buffer_DecreaseExternalReferenceCount(PJRT_Buffer_DecreaseExternalReferenceCount_Args *a)
{
    PJ_NEED(a, PJRT_Buffer_DecreaseExternalReferenceCount_Args, buffer);
    if (a->buffer->ext_refs <= 0)
        return pj_error(PJRT_Error_Code_FAILED_PRECONDITION, "DecreaseExternalReferenceCount below zero");
    a->buffer->ext_refs--;
    return NULL;
}

/* The simulated device's memory is host memory: the array's address is its "device" address. */
PJRT_Error *pjx_PJRT_Buffer_UnsafePointer(PJRT_Buffer_UnsafePointer_Args *a)
{
    PJ_NEED(a, PJRT_Buffer_UnsafePointer_Args, buffer_pointer);
    if (a->buffer->remote) return pj_error(PJRT_Error_Code_UNIMPLEMENTED, "UnsafePointer: the buffer lives on the remote TPU host");
    if (a->buffer->deleted || !a->buffer->t) return pj_deleted_error(a->buffer, "UnsafePointer");
    a->buffer_pointer = (uintptr_t)tpu_tensor_data(a->buffer->t);
    return NULL;
}

PJRT_Error *pjx_PJRT_Buffer_OpaqueDeviceMemoryDataPointer(PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args *a)
{
    PJ_NEED(a, PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args, device_memory_ptr);
    if (a->buffer->remote)
        return pj_error(PJRT_Error_Code_UNIMPLEMENTED, "OpaqueDeviceMemoryDataPointer: the buffer lives on the remote TPU host");
    if (a->buffer->deleted || !a->buffer->t) return pj_deleted_error(a->buffer, "OpaqueDeviceMemoryDataPointer");
    a->device_memory_ptr = tpu_tensor_data(a->buffer->t);
    return NULL;
}
