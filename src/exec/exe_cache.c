/* exe_cache.c — what the executor keeps per module between runs (hlo_module.exec_cache), built once by the
 * first run, shared read-only by every later run and thread (the PJRT plugin runs one executable from several
 * threads): the module with every call inlined.
 *
 * JAX lowers each jitted sub-function (relu, _where, log_softmax, threefry rounds...) to a `call`; XLA and the
 * TPU compiler inline them all before fusing. Run as written, every call is a fusion boundary and a nested
 * computation with its own set-up per execution; run inlined, the elementwise ops on both sides of a call
 * fuse into one loop. The inlined copy keeps the source positions of the instructions it shares with the
 * original (by name), so errors still point into the user's file. TPUSIM_NO_INLINE=1 runs the calls as
 * written. */
#include "exec.h"
#include "compile/policy.h"

#include <stdlib.h>
#include <string.h>

typedef struct exe_mcache {
    hlo_module *inlined;   /* NULL: the module has no calls, or inlining failed (run the module itself) */
} exe_mcache;

static void exe_mcache_free(void *p)
{
    exe_mcache *c = p;
    if (!c) return;
    hlo_module_free(c->inlined);
    ut_free(c);
}

static int exe_has_calls(const hlo_module *m)
{
    for (int c = 0; c < m->ncomps; c++)
        for (int i = 0; i < m->comps[c]->ninstrs; i++) {
            const hlo_instr *in = m->comps[c]->instrs[i];
            if (in->op == HLO_CALL && in->ncalled == 1 && !hlo_attr_bool(in, HK_IS_COMPOSITE, 0)) return 1;
        }
    return 0;
}

static uint64_t exe_name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* Instructions of `inl` whose name is one of `m`'s get that instruction's source position. */
static void exe_copy_positions(const hlo_module *m, hlo_module *inl)
{
    size_t cap = 16;
    while (cap < 2 * (size_t)m->ninstrs + 16) cap *= 2;
    const hlo_instr **tab = ut_calloc(cap, sizeof *tab);
    if (!tab) return;
    for (int c = 0; c < m->ncomps; c++)
        for (int i = 0; i < m->comps[c]->ninstrs; i++) {
            const hlo_instr *in = m->comps[c]->instrs[i];
            size_t k = exe_name_hash(in->name) & (cap - 1);
            while (tab[k]) k = (k + 1) & (cap - 1);
            tab[k] = in;
        }
    for (int c = 0; c < inl->ncomps; c++)
        for (int i = 0; i < inl->comps[c]->ninstrs; i++) {
            hlo_instr *in = inl->comps[c]->instrs[i];
            for (size_t k = exe_name_hash(in->name) & (cap - 1); tab[k]; k = (k + 1) & (cap - 1))
                if (!strcmp(tab[k]->name, in->name)) {
                    in->line = tab[k]->line;
                    in->col = tab[k]->col;
                    break;
                }
        }
    ut_free(tab);
}

static exe_mcache *exe_mcache_build(const hlo_module *m)
{
    exe_mcache *c = ut_calloc(1, sizeof *c);
    const char *e = getenv("TPUSIM_NO_INLINE");   /* A/B checks: run the calls as written */
    if (!c || !exe_has_calls(m) || (e && *e && strcmp(e, "0"))) return c;
    tpu_ctx *ctx = tpu_ctx_new();   /* its own: a failure here only means running the module as written */
    if (ctx && cmp_inline_calls(ctx, m, &c->inlined) == TPU_OK && c->inlined) exe_copy_positions(m, c->inlined);
    tpu_ctx_free(ctx);
    return c;
}

const hlo_module *exe_module_for_run(const hlo_module *m)
{
    hlo_module *mm = (hlo_module *)m;   /* the cache slot is the only thing written, once */
    exe_mcache *c = __atomic_load_n((exe_mcache **)&mm->exec_cache, __ATOMIC_ACQUIRE);
    if (!c) {
        exe_mcache *mine = exe_mcache_build(m), *expected = NULL;
        if (!mine) return m;
        mm->exec_cache_free = exe_mcache_free;   /* the same function whichever thread wins */
        if (__atomic_compare_exchange_n((exe_mcache **)&mm->exec_cache, &expected, mine, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
            c = mine;
        } else {
            exe_mcache_free(mine);
            c = expected;
        }
    }
    return c->inlined ? c->inlined : m;
}
