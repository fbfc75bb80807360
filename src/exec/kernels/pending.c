/* pending.c — kernels being written by colleagues right now. Each function here reports clearly that the
 * op cannot run yet; whoever lands the real kernel deletes its entry. This file must be empty (and then
 * deleted) before the foundation issue is called done. */
#include "exec/exec.h"

#define PENDING(name, what)                                                                          \
    EXE_KERNEL(name)                                                                                 \
    {                                                                                                \
        (void)ops; (void)out;                                                                        \
        return exe_fail(S, in, TPU_ERR_UNSUPPORTED, "%s is not implemented in this build yet", what); \
    }

