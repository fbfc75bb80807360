/* fuzz_net.c — libFuzzer target for the request decoder of `tpusim serve` (src/net/decode.c): the first byte
 * picks the method (low 7 bits; bit 7 set: not the first message of a stream) (and whether the message is the first of a PutBuffer stream), the rest is the message as it
 * would arrive from the network. Every decoded request is walked field by field the way the service reads it,
 * so a count that disagrees with its array shows up as an out-of-bounds read. Seeds: fuzz/corpus/net/
 * (made by fuzz/net_seeds.py); crashes found become regression files in fuzz/regress/net/.
 *   make fuzz && build/fuzz/fuzz_net fuzz/corpus/net -max_total_time=120 */
#include "net/net.h"
#include "tpusim.pb-c.h"
#include "health.pb-c.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t fuzz_sink;

static void fuzz_walk(tn_method m, const ProtobufCMessage *msg)
{
    uint64_t s = 0;
    if (m == TN_M_EXECUTE) {
        const Tpusim__V1__ExecuteRequest *r = (const void *)msg;
        for (size_t d = 0; d < r->n_arguments; d++)
            for (size_t i = 0; i < r->arguments[d]->n_buffers; i++) s += r->arguments[d]->buffers[i];
        for (size_t i = 0; i < r->n_non_donatable; i++) s += (uint64_t)r->non_donatable[i];
        for (size_t i = 0; i < r->n_devices; i++) s += (uint64_t)r->devices[i];
    } else if (m == TN_M_PUT_BUFFER) {
        const Tpusim__V1__PutBufferRequest *r = (const void *)msg;
        s += (uint64_t)tn_array_dtype(r->dtype) + strlen(r->session);
        for (size_t i = 0; i < r->n_dims; i++) s += (uint64_t)r->dims[i];
        for (size_t i = 0; i < r->data.len; i++) s += r->data.data[i];
    } else if (m == TN_M_COMPILE) {
        const Tpusim__V1__CompileRequest *r = (const void *)msg;
        for (size_t i = 0; i < r->n_device_assignment; i++) s += (uint64_t)r->device_assignment[i];
        for (size_t i = 0; i < r->program.len; i++) s += r->program.data[i];
        s += strlen(r->format) + strlen(r->numerics);
    } else if (m == TN_M_EXECUTE_STREAM) {
        const Tpusim__V1__ExecuteStreamRequest *r = (const void *)msg;
        if (r->execute) fuzz_walk(TN_M_EXECUTE, &r->execute->base);
        if (r->host_data) s += r->host_data->data.len + (uint64_t)r->host_data->channel;
    } else if (m == TN_M_DELETE) {
        const Tpusim__V1__DeleteRequest *r = (const void *)msg;
        for (size_t i = 0; i < r->n_buffers; i++) s += r->buffers[i];
        for (size_t i = 0; i < r->n_executables; i++) s += r->executables[i];
    }
    fuzz_sink += s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    tn_method m = (tn_method)((data[0] & 0x7f) % TN_M_COUNT);
    int first = !(data[0] & 0x80);
    tn_err e = {0};
    ProtobufCMessage *msg = tn_decode(m, data + 1, size - 1, first, &e);
    if (msg) {
        fuzz_walk(m, msg);
        size_t len = 0;
        /* what the decoder accepted encodes and validates again (unknown fields too: protobuf-c keeps them
         * verbatim, and the decoder refuses the one it could not write back, field 0, at any depth) */
        uint8_t *again = tn_msg_pack(msg, &len);
        if (again) {
            ProtobufCMessage *back = tn_decode(m, again, len, first, &e);
            if (!back) __builtin_trap();   /* it validated once: it must validate again */
            tn_msg_free(back);
        }
        free(again);
        tn_msg_free(msg);
    } else if (!tn_err_msg(&e)[0]) {
        __builtin_trap();   /* every refusal says why */
    }
    tn_err_clear(&e);
    return 0;
}
