/* pjrt_python.c — the front end for jax's programs: jax hands the plugin a StableHLO portable artifact (MLIR
 * bytecode). jaxlib's own converter turns it into HLO, and for a program jit'ed over a mesh (sharding
 * annotations, num_partitions > 1) XLA's own SPMD partitioner in jaxlib makes the per-device program. Both
 * live in the Python process that loaded the plugin: the plugin calls tpusim.plugin.frontend through the
 * CPython C API, resolved with dlsym at run time (no link against libpython, so the library loads anywhere).
 * The calls hold the GIL (PyGILState_Ensure works from any thread of the process). */
#define _GNU_SOURCE
#include "pjrt_internal.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

typedef void PyObj;

typedef struct pj_py {
    int ok;
    char why[256];
    int (*IsInitialized)(void);
    int (*GILState_Ensure)(void);
    void (*GILState_Release)(int);
    PyObj *(*Import_ImportModule)(const char *);
    PyObj *(*Object_GetAttrString)(PyObj *, const char *);
    PyObj *(*Object_CallObject)(PyObj *, PyObj *);
    PyObj *(*Bytes_FromStringAndSize)(const char *, ssize_t);
    int (*Bytes_AsStringAndSize)(PyObj *, char **, ssize_t *);
    PyObj *(*Unicode_FromString)(const char *);
    const char *(*Unicode_AsUTF8AndSize)(PyObj *, ssize_t *);
    PyObj *(*Tuple_New)(ssize_t);
    int (*Tuple_SetItem)(PyObj *, ssize_t, PyObj *);
    PyObj *(*Tuple_GetItem)(PyObj *, ssize_t);
    ssize_t (*Tuple_Size)(PyObj *);
    PyObj *(*List_GetItem)(PyObj *, ssize_t);
    ssize_t (*List_Size)(PyObj *);
    void (*DecRef)(PyObj *);
    PyObj *(*Err_Occurred)(void);
    void (*Err_Fetch)(PyObj **, PyObj **, PyObj **);
    void (*Err_NormalizeException)(PyObj **, PyObj **, PyObj **);
    PyObj *(*Object_Str)(PyObj *);
    void (*Err_Clear)(void);
    PyObj *None;
} pj_py;

static pj_py py;
static pthread_once_t py_once = PTHREAD_ONCE_INIT;

#define PJ_SYM(field, name)                                                                                    \
    do {                                                                                                       \
        *(void **)&py.field = dlsym(RTLD_DEFAULT, name);                                                       \
        if (!py.field) {                                                                                       \
            snprintf(py.why, sizeof py.why, "the process has no Python C API symbol %s", name);                 \
            return;                                                                                            \
        }                                                                                                      \
    } while (0)

static void pj_py_load(void)
{
    PJ_SYM(IsInitialized, "Py_IsInitialized");
    PJ_SYM(GILState_Ensure, "PyGILState_Ensure");
    PJ_SYM(GILState_Release, "PyGILState_Release");
    PJ_SYM(Import_ImportModule, "PyImport_ImportModule");
    PJ_SYM(Object_GetAttrString, "PyObject_GetAttrString");
    PJ_SYM(Object_CallObject, "PyObject_CallObject");
    PJ_SYM(Bytes_FromStringAndSize, "PyBytes_FromStringAndSize");
    PJ_SYM(Bytes_AsStringAndSize, "PyBytes_AsStringAndSize");
    PJ_SYM(Unicode_FromString, "PyUnicode_FromString");
    PJ_SYM(Unicode_AsUTF8AndSize, "PyUnicode_AsUTF8AndSize");
    PJ_SYM(Tuple_New, "PyTuple_New");
    PJ_SYM(Tuple_SetItem, "PyTuple_SetItem");
    PJ_SYM(Tuple_GetItem, "PyTuple_GetItem");
    PJ_SYM(Tuple_Size, "PyTuple_Size");
    PJ_SYM(List_GetItem, "PyList_GetItem");
    PJ_SYM(List_Size, "PyList_Size");
    PJ_SYM(DecRef, "Py_DecRef");
    PJ_SYM(Err_Occurred, "PyErr_Occurred");
    PJ_SYM(Err_Fetch, "PyErr_Fetch");
    PJ_SYM(Err_NormalizeException, "PyErr_NormalizeException");
    PJ_SYM(Object_Str, "PyObject_Str");
    PJ_SYM(Err_Clear, "PyErr_Clear");
    PJ_SYM(None, "_Py_NoneStruct");
    if (!py.IsInitialized()) {
        snprintf(py.why, sizeof py.why, "the process's Python interpreter is not initialized");
        return;
    }
    py.ok = 1;
}

/* The pending Python exception as "Type: message" (cleared), or `dflt`. */
static void pj_py_error(char *buf, size_t n, const char *dflt)
{
    snprintf(buf, n, "%s", dflt);
    if (!py.Err_Occurred()) return;
    PyObj *t = NULL, *v = NULL, *tb = NULL;
    py.Err_Fetch(&t, &v, &tb);
    py.Err_NormalizeException(&t, &v, &tb);
    PyObj *s = v ? py.Object_Str(v) : NULL;
    PyObj *tn = t ? py.Object_GetAttrString(t, "__name__") : NULL;
    ssize_t ln = 0, tl = 0;
    const char *msg = s ? py.Unicode_AsUTF8AndSize(s, &ln) : NULL;
    const char *tname = tn ? py.Unicode_AsUTF8AndSize(tn, &tl) : NULL;
    if (msg) snprintf(buf, n, "%s: %s", tname ? tname : "error", msg);
    py.Err_Clear();
    if (s) py.DecRef(s);
    if (tn) py.DecRef(tn);
    if (t) py.DecRef(t);
    if (v) py.DecRef(v);
    if (tb) py.DecRef(tb);
}

static int pj_py_bytes_list(PyObj *list, int *n, char ***items, size_t **lens)
{
    *n = 0;
    *items = NULL;
    *lens = NULL;
    if (list == py.None) return 1;
    ssize_t k = py.List_Size(list);
    if (k < 0) return 0;
    *items = calloc((size_t)k + 1, sizeof **items);
    *lens = calloc((size_t)k + 1, sizeof **lens);
    if (!*items || !*lens) return 0;
    for (ssize_t i = 0; i < k; i++) {
        char *p;
        ssize_t l;
        if (py.Bytes_AsStringAndSize(py.List_GetItem(list, i), &p, &l) < 0) return 0;
        (*items)[i] = malloc(l > 0 ? (size_t)l : 1);
        if (!(*items)[i]) return 0;
        memcpy((*items)[i], p, (size_t)l);
        (*lens)[i] = (size_t)l;
        (*n)++;
    }
    return 1;
}

/* tpusim.plugin.frontend.compile_program(code, format, compile_options) returns
 * ("ok", hlo_text, param_shardings | None, output_shardings | None) or ("error", message). */
static PJRT_Error *pj_py_call(const char *code, size_t len, const char *format, const char *opts, size_t opts_len,
                              pj_frontend_result *out)
{
    char why[2048];
    PJRT_Error *err = NULL;
    PyObj *mod = py.Import_ImportModule("tpusim.plugin.frontend");
    PyObj *fn = mod ? py.Object_GetAttrString(mod, "compile_program") : NULL;
    PyObj *args = fn ? py.Tuple_New(3) : NULL;
    PyObj *res = NULL;
    if (args) {
        py.Tuple_SetItem(args, 0, py.Bytes_FromStringAndSize(code, (ssize_t)len));
        py.Tuple_SetItem(args, 1, py.Unicode_FromString(format));
        py.Tuple_SetItem(args, 2, py.Bytes_FromStringAndSize(opts ? opts : "", (ssize_t)opts_len));
        res = py.Object_CallObject(fn, args);
    }
    if (!res) {
        pj_py_error(why, sizeof why, "no details");
        err = pj_error(PJRT_Error_Code_INTERNAL,
                       "tpusim: the program could not be handed to jaxlib's converter (tpusim.plugin.frontend): %s", why);
    } else {
        ssize_t sl = 0;
        PyObj *tag = py.Tuple_Size(res) >= 2 ? py.Tuple_GetItem(res, 0) : NULL;
        const char *t = tag ? py.Unicode_AsUTF8AndSize(tag, &sl) : NULL;
        if (!t) {
            pj_py_error(why, sizeof why, "a malformed answer");
            err = pj_error(PJRT_Error_Code_INTERNAL, "tpusim.plugin.frontend.compile_program returned %s", why);
        } else if (strcmp(t, "ok")) {
            const char *m = py.Unicode_AsUTF8AndSize(py.Tuple_GetItem(res, 1), &sl);
            err = pj_error(PJRT_Error_Code_INVALID_ARGUMENT, "%s", m ? m : "the front end failed");
        } else {
            const char *h = py.Unicode_AsUTF8AndSize(py.Tuple_GetItem(res, 1), &sl);
            out->hlo = h ? strndup(h, (size_t)sl) : NULL;
            if (!out->hlo || !pj_py_bytes_list(py.Tuple_GetItem(res, 2), &out->nin, &out->in_shard, &out->in_len) ||
                !pj_py_bytes_list(py.Tuple_GetItem(res, 3), &out->nout, &out->out_shard, &out->out_len)) {
                pj_py_error(why, sizeof why, "out of memory");
                err = pj_error(PJRT_Error_Code_INTERNAL, "tpusim: reading the front end's answer: %s", why);
            }
        }
    }
    if (res) py.DecRef(res);
    if (args) py.DecRef(args);
    if (fn) py.DecRef(fn);
    if (mod) py.DecRef(mod);
    return err;
}

PJRT_Error *pj_python_frontend(const char *code, size_t len, const char *format, const char *opts, size_t opts_len,
                               pj_frontend_result *out)
{
    memset(out, 0, sizeof *out);
    pthread_once(&py_once, pj_py_load);
    if (!py.ok)
        return pj_error(PJRT_Error_Code_UNIMPLEMENTED,
                        "tpusim: a '%s' program needs jaxlib's converter, which runs in the Python process that loaded "
                        "the plugin, but %s. Load the plugin from Python with jax==0.10.2 installed (pip install "
                        "jax==0.10.2), or hand it HLO (format \"hlo\": a serialized HloModuleProto)", format, py.why);
    int g = py.GILState_Ensure();
    PJRT_Error *err = pj_py_call(code, len, format, opts, opts_len, out);
    py.GILState_Release(g);
    if (err) pj_frontend_result_free(out);
    return err;
}

void pj_frontend_result_free(pj_frontend_result *r)
{
    free(r->hlo);
    for (int i = 0; i < r->nin; i++) free(r->in_shard[i]);
    for (int i = 0; i < r->nout; i++) free(r->out_shard[i]);
    free(r->in_shard);
    free(r->out_shard);
    free(r->in_len);
    free(r->out_len);
    memset(r, 0, sizeof *r);
}

/* tpusim.plugin.frontend.optimized_program(hlo_text) -> ("ok", StableHLO bytecode) | ("error", message):
 * the per-device program in the form PJRT_Executable_OptimizedProgram returns ("mlir"). */
PJRT_Error *pj_python_optimized_program(const char *hlo, char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    pthread_once(&py_once, pj_py_load);
    if (!py.ok) return pj_error(PJRT_Error_Code_UNIMPLEMENTED, "tpusim: the optimized program needs jaxlib (%s)", py.why);
    char why[1024];
    PJRT_Error *err = NULL;
    int g = py.GILState_Ensure();
    PyObj *mod = py.Import_ImportModule("tpusim.plugin.frontend");
    PyObj *fn = mod ? py.Object_GetAttrString(mod, "optimized_program") : NULL;
    PyObj *args = fn ? py.Tuple_New(1) : NULL;
    PyObj *res = NULL;
    if (args) {
        py.Tuple_SetItem(args, 0, py.Unicode_FromString(hlo));
        res = py.Object_CallObject(fn, args);
    }
    ssize_t sl = 0;
    PyObj *tag = res && py.Tuple_Size(res) == 2 ? py.Tuple_GetItem(res, 0) : NULL;
    const char *t = tag ? py.Unicode_AsUTF8AndSize(tag, &sl) : NULL;
    if (!t) {
        pj_py_error(why, sizeof why, "a malformed answer");
        err = pj_error(PJRT_Error_Code_INTERNAL, "tpusim.plugin.frontend.optimized_program: %s", why);
    } else if (strcmp(t, "ok")) {
        const char *m = py.Unicode_AsUTF8AndSize(py.Tuple_GetItem(res, 1), &sl);
        err = pj_error(PJRT_Error_Code_UNIMPLEMENTED, "%s", m ? m : "no optimized program");
    } else {
        char *p;
        ssize_t n;
        if (py.Bytes_AsStringAndSize(py.Tuple_GetItem(res, 1), &p, &n) < 0 || !(*out = malloc(n > 0 ? (size_t)n : 1))) {
            pj_py_error(why, sizeof why, "out of memory");
            err = pj_error(PJRT_Error_Code_INTERNAL, "tpusim: reading the optimized program: %s", why);
        } else {
            memcpy(*out, p, (size_t)n);
            *len = (size_t)n;
        }
    }
    if (res) py.DecRef(res);
    if (args) py.DecRef(args);
    if (fn) py.DecRef(fn);
    if (mod) py.DecRef(mod);
    py.GILState_Release(g);
    return err;
}
