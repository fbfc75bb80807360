/* hlo_proto.h — what the two HloModuleProto readers share: the tree of fields and the builder that turns it
 * into the module IR. hlo_proto_text.c reads protobuf text into the tree and holds the builder;
 * hlo_proto_bin.c decodes the binary wire format into the same tree (fields named as in XLA's .proto files,
 * enum values by name, numbers as decimal text), so one builder serves both. */
#ifndef TPU_HLO_PROTO_H
#define TPU_HLO_PROTO_H

#include "hlo.h"

typedef struct pt_node {
    const char     *name;
    int             line, col;  /* text: where the field starts; binary: line 1, col = byte offset + 1 */
    int             is_msg;
    const char     *val;        /* scalar: unescaped string or the number / enum name as text ("" for messages) */
    size_t          vlen;       /* bytes in val (strings may hold NULs) */
    int             is_str;
    int             rep;        /* binary: a repeated field, so its path shows an index */
    size_t          off;        /* binary: byte offset of the field's tag */
    struct pt_node *parent;
    struct pt_node *child, *last, *next;
} pt_node;

/* Builds a module from the tree under root (an HloModuleProto, or HloProto / HloSnapshot /
 * HloModuleProtoWithConfig holding one). binary: messages name the byte offset and field path
 * ("prog.pb: byte 120: computations[1].instructions[3]: ...") instead of line:col. */
tpu_status hlo_proto_build(tpu_ctx *ctx, const pt_node *root, const char *file, int line_offset, int binary,
                           hlo_module **out);

/* The field path of n from the root, e.g. "computations[2].instructions[7].shape" (indices on repeated
 * fields of a binary tree). */
void hlo_proto_path(const pt_node *n, char *buf, size_t size);

/* Checks the binary reader's schema table (no field number or name twice, kinds consistent); on a fault
 * says which in why. For the unit tests. */
int hlo_proto_bin_schema_check(char *why, size_t size);

#endif
