/* memory.h — memory statistics and the report of a compiled program (memory.c), and the viewer
 * (viewer.c). */
#ifndef TPU_CMP_MEMORY_H
#define TPU_CMP_MEMORY_H

#include "compile.h"

typedef struct cmp_memory_stats {
    int64_t capacity;            /* HBM a core's program may use */
    int64_t reserved;            /* HBM the runtime keeps */
    int64_t args_padded, args_unpadded;
    int64_t outputs_padded, outputs_unpadded;
    int64_t consts_padded;
    int64_t temp_peak;           /* heap peak of temporaries and outputs */
    int64_t temp_live_padded;    /* bytes live at the peak */
    int64_t temp_live_unpadded;
    int64_t fragmentation;       /* temp_peak - temp_live_padded */
    int64_t program;             /* temp_peak + constants */
    int64_t used;                /* program + arguments */
    int64_t padded_total, unpadded_total;   /* everything live at the peak, arguments included */
    int     fits;
    int     nlargest;
    int    *largest;             /* value indices, largest first */
} cmp_memory_stats;

tpu_status cmp_memory_compute(const cmp_program *p, cmp_memory_stats *ms, int top_n);
void       cmp_memory_stats_free(cmp_memory_stats *ms);
void       cmp_memory_text(ut_buf *b, const cmp_program *p, const cmp_memory_stats *ms);
void       cmp_fmt_bytes(char *buf, size_t n, int64_t bytes);
/* viewer.c: the picture and the page */
tpu_status cmp_memory_svg(tpu_ctx *ctx, ut_buf *b, const cmp_program *p, const cmp_memory_stats *ms);
tpu_status cmp_memory_html(tpu_ctx *ctx, ut_buf *b, const cmp_program *p, const cmp_memory_stats *ms);

#endif
