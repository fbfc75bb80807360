/* hlo.h — the HLO module IR: shapes, literals, attributes, instructions, computations, modules.
 *
 * A module owns one arena; every IR object and string lives in it and is freed with the module. The parser
 * (hlo_parse.c) builds it from text, the printer (hlo_print.c) writes it back; printing and re-parsing
 * gives the same module. Names start with hlo_.
 */
#ifndef TPU_HLO_H
#define TPU_HLO_H

#include "util/util.h"

/* ---- opcodes ---- */
typedef enum hlo_class {
    HLO_CLASS_EW1, HLO_CLASS_EW2, HLO_CLASS_EW3, HLO_CLASS_CMP, HLO_CLASS_DATA, HLO_CLASS_CTRL,
    HLO_CLASS_RED, HLO_CLASS_MXU, HLO_CLASS_COLL, HLO_CLASS_IO, HLO_CLASS_ASYNC, HLO_CLASS_MISC
} hlo_class;

typedef enum hlo_op {
#define X(e, name, arity, cls) HLO_##e,
#include "hlo_ops.def"
#undef X
    HLO_OP_COUNT
} hlo_op;

const char *hlo_op_name(hlo_op op);
int         hlo_op_arity(hlo_op op);          /* -1: variadic */
hlo_class   hlo_op_class(hlo_op op);
/* HLO_OP_COUNT if unknown */
hlo_op      hlo_op_from_name(const char *s, size_t n);

/* ---- shapes ---- */
#define HLO_MAX_TILES 4
#define HLO_MAX_TILE_RANK 4
#define HLO_TILE_COMBINE (-1)   /* '*' in a tile: combine with the next dimension */
#define HLO_TILE_DYNAMIC (-2)   /* '?' */

typedef struct hlo_tile {
    int     n;
    int64_t d[HLO_MAX_TILE_RANK];
} hlo_tile;

typedef struct hlo_layout {
    int         rank;                       /* entries in minor_to_major */
    int8_t      m2m[TPU_MAX_RANK];          /* minor_to_major */
    int         ntiles;
    hlo_tile    tiles[HLO_MAX_TILES];       /* T(8,128)(2,1) */
    int64_t     tail_pad;                   /* L(n), 0 when absent */
    int         elem_bits;                  /* E(n), 0 when absent */
    int64_t     mem_space;                  /* S(n), 0 when absent */
    uint8_t     index_type, pointer_type;   /* #(s32), *(s64): tpu_dtype, 0 when absent */
    const char *extra;                      /* other items (D(..), SC(..), P(..), M(n)) verbatim, or NULL */
} hlo_layout;

typedef struct hlo_shape {
    uint8_t           dtype;        /* tpu_dtype; TPU_TUPLE for tuples */
    uint8_t           rank;
    uint8_t           is_buffer;    /* written as b(...) */
    uint16_t          dyn_mask;     /* bit i: dims[i] is '<=N' (bounded) or '?' (dims[i] == -1) */
    int64_t           dims[TPU_MAX_RANK];
    const hlo_layout *layout;       /* NULL: none written (default layout applies) */
    int               ntuple;
    struct hlo_shape *tuple;        /* tuple element shapes */
} hlo_shape;

static inline int hlo_shape_is_tuple(const hlo_shape *s) { return s->dtype == TPU_TUPLE; }
static inline int hlo_shape_is_array(const hlo_shape *s)
{
    return s->dtype != TPU_TUPLE && s->dtype != TPU_TOKEN && s->dtype != TPU_OPAQUE && s->dtype != TPU_INVALID;
}
int64_t hlo_shape_count(const hlo_shape *s);        /* elements of an array shape (dynamic dims at bound; INT64_MAX if it overflows) */
int     hlo_shape_is_static(const hlo_shape *s);    /* no dynamic dims anywhere, tuples included */
/* Same dtype, dims, dynamism and tuple structure (layouts ignored). */
int     hlo_shape_same(const hlo_shape *a, const hlo_shape *b);
/* Same dtype and dims where a dynamic dimension matches any size up to its bound (XLA's "compatible":
 * layouts and dynamism ignored). */
int     hlo_shape_compatible(const hlo_shape *a, const hlo_shape *b);
/* Same as hlo_shape_same and also the same layout (for the round-trip test). */
int     hlo_shape_identical(const hlo_shape *a, const hlo_shape *b);
void    hlo_shape_print(ut_buf *b, const hlo_shape *s, int with_layout);
/* Into a caller buffer (truncated if short), for messages. */
const char *hlo_shape_str(const hlo_shape *s, char *buf, size_t size);
/* The minor_to_major order of an array shape: its layout's, or the default (rank-1 ... 0). */
void    hlo_shape_m2m(const hlo_shape *s, int *m2m);

/* ---- literals ---- */
typedef struct hlo_literal {
    hlo_shape           shape;
    int                 elided;   /* written as {...}: values unknown */
    void               *data;     /* dense row-major, tpu_dtype_size bytes per element; NULL for tuples */
    size_t              nbytes;
    int                 ntuple;
    struct hlo_literal *tuple;
} hlo_literal;

/* ---- attributes ---- */
typedef enum hlo_attr_kind {
    HA_INT, HA_BOOL, HA_FLOAT, HA_STR, HA_IDENT, HA_INTS, HA_INTSS, HA_IDENTS, HA_COMP, HA_COMPS, HA_WINDOW,
    HA_SLICE, HA_PADDING, HA_DIMLABELS, HA_RGROUPS, HA_KV, HA_SHAPE, HA_SHAPES, HA_PROGSHAPE, HA_ALIAS,
    HA_NAMES, HA_RAW
} hlo_attr_kind;

typedef enum hlo_attr_key {
#define X(e, name, kind) HK_##e,
#include "hlo_attrs.def"
#undef X
    HK_COUNT,
    HK_UNKNOWN = HK_COUNT
} hlo_attr_key;

const char   *hlo_attr_key_name(hlo_attr_key k);
hlo_attr_kind hlo_attr_key_kind(hlo_attr_key k);
hlo_attr_key  hlo_attr_key_from_name(const char *s, size_t n);   /* HK_UNKNOWN if unknown */

typedef struct hlo_window_dim {
    int64_t size, stride, pad_lo, pad_hi, lhs_dilate, rhs_dilate;
    uint8_t reversal;
} hlo_window_dim;

typedef struct hlo_window {
    int            rank;
    hlo_window_dim d[TPU_MAX_RANK];
    uint8_t        has_size, has_stride, has_pad, has_lhs_dilate, has_rhs_dilate, has_reversal; /* as written */
} hlo_window;

typedef struct hlo_slice {
    int     rank;
    int64_t start[TPU_MAX_RANK], limit[TPU_MAX_RANK], stride[TPU_MAX_RANK];
    uint8_t has_stride[TPU_MAX_RANK];
} hlo_slice;

typedef struct hlo_padding {
    int     rank;
    int64_t lo[TPU_MAX_RANK], hi[TPU_MAX_RANK], interior[TPU_MAX_RANK];
    uint8_t has_interior[TPU_MAX_RANK];
} hlo_padding;

/* dim_labels=b01f_01io->b01f: which dimension of each array is batch / feature / spatial i. */
typedef struct hlo_dimlabels {
    int nspatial;
    int in_batch, in_feature, in_spatial[TPU_MAX_RANK];
    int k_in, k_out, k_spatial[TPU_MAX_RANK];
    int out_batch, out_feature, out_spatial[TPU_MAX_RANK];
    const char *text;   /* as written */
} hlo_dimlabels;

/* replica_groups: explicit {{0,1},{2,3}} or iota [G,S]<=[dims]T(perm) */
typedef struct hlo_rgroups {
    int      iota;
    int      ngroups;         /* explicit: number of groups */
    int     *len;             /* explicit: size of each group */
    int64_t **ids;            /* explicit: members */
    int64_t  gdims[2];        /* iota: [num_groups, group_size] */
    int      nreshape;
    int64_t  reshape[TPU_MAX_RANK];
    int      nperm;           /* 0: no T(...) */
    int      perm[TPU_MAX_RANK];
} hlo_rgroups;

typedef struct hlo_kv {
    const char *key;
    const char *val;     /* unescaped string, or the raw token of a non-string value */
    int         is_str;
} hlo_kv;

/* input_output_alias={ {0}: (0, {}, may-alias), {1, 2}: (1, {0}) } */
typedef struct hlo_alias_entry {
    int     nout;
    int64_t out[TPU_MAX_RANK];
    int64_t param;
    int     nparam_idx;
    int64_t param_idx[TPU_MAX_RANK];
    int     kind;         /* 0: not written, 1: may-alias, 2: must-alias */
} hlo_alias_entry;

struct hlo_comp;
struct hlo_instr;

typedef struct hlo_attr {
    uint16_t    key;     /* hlo_attr_key */
    uint8_t     kind;    /* hlo_attr_kind */
    const char *name;    /* the name as written */
    int         line, col;
    union {
        int64_t i;
        int     b;
        double  f;
        const char *s;                                              /* STR (unescaped), IDENT, RAW */
        struct { int n; int64_t *v; } ints;
        struct { int n; int *len; int64_t **v; } intss;
        struct { int n; const char **v; } idents;                   /* IDENTS, NAMES (names) */
        struct { int n; const char **names; struct hlo_comp **v; } comps;  /* COMP: n == 1 */
        hlo_window    *window;
        hlo_slice     *slice;
        hlo_padding   *padding;
        hlo_dimlabels *dimlabels;
        hlo_rgroups   *rgroups;
        struct { int n; hlo_kv *v; char sep; } kv;                 /* sep: ' ' metadata, ',' others */
        hlo_shape     *shape;
        struct { int n; hlo_shape *v; } shapes;
        struct { int n; hlo_shape *params; hlo_shape *result; } prog;
        struct { int n; hlo_alias_entry *v; } alias;
    } v;
} hlo_attr;

/* ---- instructions, computations, modules ---- */
typedef struct hlo_instr {
    const char        *name;
    uint16_t           op;           /* hlo_op */
    uint8_t            is_root;
    hlo_shape          shape;
    int                nops;
    struct hlo_instr **ops;
    int                nattrs;
    hlo_attr          *attrs;
    hlo_literal       *literal;      /* constant */
    int64_t            param_no;     /* parameter(N) */
    int                ncalled;      /* every computation named by an attribute, in attribute order */
    struct hlo_comp  **called;
    int                nctrl;        /* control-predecessors */
    struct hlo_instr **ctrl;
    struct hlo_comp   *parent;
    int                id;           /* index in parent->instrs (a topological order) */
    int                line, col;
    const char       **op_names;     /* operand names as written (resolved into ops) */
    uint8_t           *op_typed;     /* operand i was written with its shape */
    uint8_t            shape_omitted; /* no result shape in the text: hlo_parse leaves shape.dtype TPU_INVALID
                                         and verify/ (ver_fill_shapes) infers it when the module is loaded */
    uint8_t            anon;          /* a nested operand instruction (add(f32[] multiply(a, b), c)): the
                                         parser named it <opcode>.anon */
} hlo_instr;

typedef struct hlo_comp {
    const char        *name;
    int                is_entry;
    int                ninstrs;
    hlo_instr        **instrs;       /* topological order (operands before users), stable w.r.t. the text */
    hlo_instr         *root;
    int                nparams;
    hlo_instr        **params;       /* by parameter number */
    int                has_sig;      /* (a: f32[2]) -> f32[] written */
    hlo_shape          sig_result;
    int                nattrs;
    hlo_attr          *attrs;
    int                id;
    int                line, col;
} hlo_comp;

/* The stack-frame index (text: FileNames / FunctionNames / FileLocations / StackFrames after the header;
 * proto: stack_frame_index). Ids are 1-based as in XLA's proto; 0 means none (XLA's text writes
 * parent_frame_id one higher: the parser and printer convert). metadata={stack_frame_id=N} points into frames. */
typedef struct hlo_file_loc {
    int64_t file_id, func_id, line, end_line, column, end_column;
} hlo_file_loc;
typedef struct hlo_frame {
    int64_t loc_id, parent_id;
} hlo_frame;
typedef struct hlo_frames {
    int           nfiles, nfuncs, nlocs, nframes;
    const char  **files, **funcs;
    hlo_file_loc *locs;
    hlo_frame    *frames;
} hlo_frames;

struct tpu_module {
    ut_arena    arena;
    const char *name;
    const char *filename;
    int         has_header;   /* "HloModule name" written */
    int         nattrs;
    hlo_attr   *attrs;        /* header attributes */
    int         ncomps;
    hlo_comp  **comps;        /* text order */
    hlo_comp   *entry;
    int64_t     ninstrs;      /* all computations */
    hlo_frames *frames;       /* stack-frame index, NULL when absent */
    int         from_proto;   /* read from an HloModuleProto, text or binary (hlo_proto_text.c, hlo_proto_bin.c) */
    int         verified;     /* ver_require's verdict, kept (modules do not change once loaded): 0 not yet,
                                 1 verifies, -1 does not; read and written atomically (several threads run one
                                 module) */
    int64_t     verified_split;   /* replicas << 32 | partitions of the last replicated run's view that
                                     verified (the runtime's view of the module with other counts), or 0 */
    uint64_t    fingerprint;  /* tpu_module_fingerprint, 0 until asked for (atomic) */
    /* the executor's plans of the computations (exe_interp.c), made by the first run and kept for the next
     * (modules do not change once loaded): published atomically, read-only once published (several threads
     * run one module); hlo_module_free frees them with exec_plans_free */
    void       *exec_plans;
    void      (*exec_plans_free)(void *plans);
};
typedef struct tpu_module hlo_module;

const hlo_attr *hlo_attr_find(const hlo_instr *in, hlo_attr_key k);
const hlo_attr *hlo_module_attr(const hlo_module *m, hlo_attr_key k);
/* Convenience getters with a default when absent. */
int64_t     hlo_attr_int(const hlo_instr *in, hlo_attr_key k, int64_t dflt);
int         hlo_attr_bool(const hlo_instr *in, hlo_attr_key k, int dflt);
const char *hlo_attr_str(const hlo_instr *in, hlo_attr_key k);         /* STR/IDENT/RAW, NULL if absent */
/* INTS attribute: count (0 if absent) and pointer. */
int         hlo_attr_ints(const hlo_instr *in, hlo_attr_key k, const int64_t **v);
/* A metadata sub-key ("op_type", "op_name", "source_file", "source_line"), NULL if absent. */
const char *hlo_meta(const hlo_instr *in, const char *key);
/* The module's replica_count / num_partitions (1 when absent). */
int64_t     hlo_module_replica_count(const hlo_module *m);
int64_t     hlo_module_num_partitions(const hlo_module *m);

/* The source file and line of a metadata={stack_frame_id=N} (innermost frame), or 0 if none. */
int         hlo_frame_source(const hlo_module *m, int64_t frame_id, const char **file, int64_t *line);

/* ---- parsing and printing ---- */
/* Parses one module. line_offset is added to line numbers in messages (for split files). Instructions
 * written without a result shape keep shape.dtype == TPU_INVALID (shape_omitted set): the public loaders in
 * verify/ver_api.c infer them. */
tpu_status hlo_parse(tpu_ctx *ctx, const char *text, size_t len, const char *filename, int line_offset,
                     hlo_module **out);
/* Reads an HloModuleProto in protobuf text format (`hlo_module { name: ... computations { ... } }` or the
 * bare message body `name: ... computations { ... }`) into the same IR. */
tpu_status hlo_parse_proto_text(tpu_ctx *ctx, const char *text, size_t len, const char *filename,
                                int line_offset, hlo_module **out);
/* Does the text look like protobuf text (first token `hlo_module {`, `name:` or a proto field)? */
int        hlo_is_proto_text(const char *text, size_t len);
/* Reads a binary (wire format) HloModuleProto, HloProto, HloSnapshot or HloModuleProtoWithConfig, told apart
 * from the bytes (hlo_proto_bin.c). Instructions get line 1 and column = byte offset + 1; messages name the
 * byte offset and the field path. */
tpu_status hlo_parse_proto_bin(tpu_ctx *ctx, const void *bytes, size_t len, const char *filename, hlo_module **out);
/* Are these bytes a binary proto rather than text (a field tag first, control bytes other than whitespace
 * near the start)? */
int        hlo_is_proto_bin(const char *data, size_t len);
/* Can this opcode be written without its result shape (XLA's parser infers it)? */
int        hlo_op_shape_optional(hlo_op op);
void       hlo_module_free(hlo_module *m);
/* A deep copy of src in an arena of its own (hlo_clone.c): a rewrite edits the copy's IR. Not yet verified. */
tpu_status hlo_module_clone(tpu_ctx *ctx, const hlo_module *src, hlo_module **out);
/* After a rewrite added, removed or moved instructions: computation and instruction ids, parents and the
 * module's instruction count made consistent again. */
void       hlo_module_renumber(hlo_module *m);
void       hlo_print_module(ut_buf *b, const hlo_module *m);
void       hlo_print_instr(ut_buf *b, const hlo_instr *in);
void       hlo_print_literal(ut_buf *b, const hlo_literal *lit);
/* Structural equality of two modules (names, shapes with layouts, operands, attributes, literals). On a
 * difference, writes what differs into why (if not NULL). */
int        hlo_module_equal(const hlo_module *a, const hlo_module *b, char *why, size_t why_size);

/* "file:line:col" of an instruction, for messages ("file (added by tpusim)" for line 0). */
const char *hlo_where(const hlo_module *m, const hlo_instr *in, char *buf, size_t size);

#endif
