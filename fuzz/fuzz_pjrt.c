/* fuzz_pjrt.c — libFuzzer target for the PJRT plugin's inputs as a framework hands them over: a serialized
 * CompileOptionsProto and a program (HLO text or HloModuleProto bytes, format "hlo") given to
 * PJRT_Client_Compile. Input: two bytes of little-endian options length, the options, then the program.
 * Every call must return (an executable or an error), never crash; executables and errors are freed.
 * Seeds: fuzz/corpus/pjrt/.
 *   make fuzz && build/fuzz/fuzz_pjrt fuzz/corpus-work/pjrt fuzz/corpus/pjrt -max_total_time=60 */
#include "pjrt_c_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const PJRT_Api *GetPjrtApi(void);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void drop_error(const PJRT_Api *api, PJRT_Error *e)
{
    if (!e) return;
    PJRT_Error_Message_Args m = {.struct_size = PJRT_Error_Message_Args_STRUCT_SIZE, .error = e};
    api->PJRT_Error_Message(&m);
    if (!m.message) abort();   /* every error has a message */
    PJRT_Error_Destroy_Args d = {.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE, .error = e};
    api->PJRT_Error_Destroy(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const PJRT_Api *api;
    static PJRT_Client *client;
    if (!api) {
        setenv("TPUSIM_QUIET", "1", 1);
        api = GetPjrtApi();
        PJRT_Client_Create_Args ca = {.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE};
        if (api->PJRT_Client_Create(&ca)) abort();
        client = ca.client;
    }
    if (size < 2 || size > (1 << 16)) return 0;
    size_t olen = (size_t)data[0] | (size_t)data[1] << 8;
    if (olen > size - 2) olen = size - 2;
    const char *opts = (const char *)data + 2, *code = opts + olen;
    size_t clen = size - 2 - olen;
    PJRT_Program prog = {.struct_size = PJRT_Program_STRUCT_SIZE, .code = (char *)code, .code_size = clen,
                         .format = "hlo", .format_size = 3};
    PJRT_Client_Compile_Args a = {.struct_size = PJRT_Client_Compile_Args_STRUCT_SIZE, .client = client,
                                  .program = &prog, .compile_options = opts, .compile_options_size = olen};
    PJRT_Error *e = api->PJRT_Client_Compile(&a);
    if (e) {
        drop_error(api, e);
        return 0;
    }
    /* what a framework asks of a new executable */
    PJRT_LoadedExecutable_GetDeviceAssignment_Args da = {
        .struct_size = PJRT_LoadedExecutable_GetDeviceAssignment_Args_STRUCT_SIZE, .executable = a.executable};
    drop_error(api, api->PJRT_LoadedExecutable_GetDeviceAssignment(&da));
    PJRT_LoadedExecutable_Destroy_Args d = {.struct_size = PJRT_LoadedExecutable_Destroy_Args_STRUCT_SIZE,
                                            .executable = a.executable};
    drop_error(api, api->PJRT_LoadedExecutable_Destroy(&d));
    return 0;
}
