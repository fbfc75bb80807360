/* hlo_proto_bin.c — reads a binary HloModuleProto (protobuf wire format) into the module IR.
 *
 * PyTorch/XLA hands a PJRT plugin its program as a serialized xla.HloModuleProto; XLA's dumps write HloProto
 * (`*.hlo.pb`, the module in field hlo_module) and HloSnapshot (an HloProto in field hlo, plus argument and
 * result literals). The bytes are decoded, driven by the schema table below (field numbers and enum values
 * from XLA's xla/service/hlo.proto, xla/xla_data.proto and xla/xla.proto), into the same tree of fields the
 * protobuf text reader makes (hlo_proto.h): fields named as in the .proto files, enum values by name, numbers
 * as decimal text. The builder in hlo_proto_text.c then makes the module, so both forms give the same IR.
 *
 * Unknown fields are skipped with a warning. Malformed bytes are errors naming the byte offset and the field
 * path. Nothing is allocated from a length read from the input: the tree only grows with bytes consumed.
 */
#include "hlo_proto.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the schema ---- */

typedef enum pb_kind {
    PB_MSG,      /* a sub-message, decoded */
    PB_OPAQUE,   /* a sub-message tpusim does not read: framing checked, kept as an empty message */
    PB_IGNORE,   /* any wire type, skipped without a warning and without a node */
    PB_STRING, PB_BYTES,
    PB_INT32, PB_INT64, PB_UINT32, PB_UINT64, PB_SINT32, PB_SINT64, PB_BOOL, PB_ENUM,
    PB_FIXED32, PB_SFIXED32, PB_FLOAT,   /* wire type 5 */
    PB_FIXED64, PB_SFIXED64, PB_DOUBLE   /* wire type 1 */
} pb_kind;

enum { PB_WT_VARINT = 0, PB_WT_I64 = 1, PB_WT_LEN = 2, PB_WT_SGROUP = 3, PB_WT_EGROUP = 4, PB_WT_I32 = 5 };

typedef struct pb_ev {
    int32_t     num;
    const char *name;
} pb_ev;

struct pb_msg;
typedef struct pb_field {
    uint32_t             num;
    uint8_t              kind;   /* pb_kind */
    uint8_t              rep;    /* repeated */
    const char          *name;
    const struct pb_msg *msg;    /* PB_MSG */
    const pb_ev         *ev;     /* PB_ENUM: values, ended by a NULL name */
} pb_field;

typedef struct pb_msg {
    const char     *name;        /* for messages: "xla.ShapeProto" */
    const pb_field *f;           /* ended by num 0 */
} pb_msg;

#define PB_MAX_FIELDS 128   /* per message (HloInstructionProto has ~90) */
#define PB_MAX_DEPTH  100   /* protobuf's own default recursion limit */

#define F(n, k, nm)   {n, PB_##k, 0, nm, NULL, NULL}
#define R(n, k, nm)   {n, PB_##k, 1, nm, NULL, NULL}
#define M(n, nm, m)   {n, PB_MSG, 0, nm, &pb_m_##m, NULL}
#define RM(n, nm, m)  {n, PB_MSG, 1, nm, &pb_m_##m, NULL}
#define E(n, nm, e)   {n, PB_ENUM, 0, nm, NULL, pb_e_##e}
#define RE(n, nm, e)  {n, PB_ENUM, 1, nm, NULL, pb_e_##e}
#define IGN(n)        {n, PB_IGNORE, 1, "", NULL, NULL}
#define PB_END        {0, 0, 0, NULL, NULL, NULL}

/* enums (xla_data.proto unless noted) */
static const pb_ev pb_e_PrimitiveType[] = {
    {0, "PRIMITIVE_TYPE_INVALID"}, {1, "PRED"}, {2, "S8"}, {3, "S16"}, {4, "S32"}, {5, "S64"}, {6, "U8"},
    {7, "U16"}, {8, "U32"}, {9, "U64"}, {10, "F16"}, {11, "F32"}, {12, "F64"}, {13, "TUPLE"}, {14, "OPAQUE_TYPE"},
    {15, "C64"}, {16, "BF16"}, {17, "TOKEN"}, {18, "C128"}, {19, "F8E5M2"}, {20, "F8E4M3FN"}, {21, "S4"},
    {22, "U4"}, {23, "F8E4M3B11FNUZ"}, {24, "F8E5M2FNUZ"}, {25, "F8E4M3FNUZ"}, {26, "S2"}, {27, "U2"},
    {28, "F8E4M3"}, {29, "F8E3M4"}, {30, "S1"}, {31, "U1"}, {32, "F4E2M1FN"}, {33, "F8E8M0FNU"}, {34, "BUFFER"},
    {35, "F6E3M2FN"}, {36, "F6E2M3FN"}, {0, NULL}};
static const pb_ev pb_e_DimLevelType[] = {
    {0, "DIM_DENSE"}, {1, "DIM_COMPRESSED"}, {2, "DIM_SINGLETON"}, {3, "DIM_LOOSE_COMPRESSED"}, {0, NULL}};
static const pb_ev pb_e_ProfileType[] = {{0, "INVALID"}, {1, "WINDOW"}, {2, "FLAG"}, {3, "INTEGER"}, {0, NULL}};
static const pb_ev pb_e_ShardingType[] = {
    {0, "REPLICATED"}, {1, "MAXIMAL"}, {2, "TUPLE"}, {3, "OTHER"}, {4, "MANUAL"}, {5, "UNKNOWN"},
    {6, "UNREDUCED"}, {0, NULL}};
static const pb_ev pb_e_ShardGroupType[] = {{0, "AS"}, {1, "LIKE"}, {0, NULL}};
static const pb_ev pb_e_RandomDistribution[] = {{0, "RNG_INVALID"}, {1, "RNG_UNIFORM"}, {2, "RNG_NORMAL"}, {0, NULL}};
static const pb_ev pb_e_RandomAlgorithm[] = {{0, "RNG_DEFAULT"}, {1, "RNG_THREE_FRY"}, {2, "RNG_PHILOX"}, {0, NULL}};
static const pb_ev pb_e_FftType[] = {{0, "FFT"}, {1, "IFFT"}, {2, "RFFT"}, {3, "IRFFT"}, {0, NULL}};
static const pb_ev pb_e_PaddingType[] = {{0, "PADDING_INVALID"}, {1, "PADDING_VALID"}, {2, "PADDING_SAME"}, {0, NULL}};
static const pb_ev pb_e_Precision[] = {{0, "DEFAULT"}, {1, "HIGH"}, {2, "HIGHEST"}, {0, NULL}};
static const pb_ev pb_e_Algorithm[] = {
    {0, "ALG_UNSET"}, {1, "ALG_DOT_ANY_F8_ANY_F8_F32"}, {2, "ALG_DOT_ANY_F8_ANY_F8_F32_FAST_ACCUM"},
    {3, "ALG_DOT_F16_F16_F16"}, {4, "ALG_DOT_F16_F16_F32"}, {5, "ALG_DOT_BF16_BF16_BF16"},
    {6, "ALG_DOT_BF16_BF16_F32"}, {7, "ALG_DOT_BF16_BF16_F32_X3"}, {8, "ALG_DOT_BF16_BF16_F32_X6"},
    {9, "ALG_DOT_TF32_TF32_F32"}, {10, "ALG_DOT_TF32_TF32_F32_X3"}, {11, "ALG_DOT_F32_F32_F32"},
    {12, "ALG_DOT_F64_F64_F64"}, {13, "ALG_DOT_BF16_BF16_F32_X9"}, {0, NULL}};
static const pb_ev pb_e_Transpose[] = {
    {0, "TRANSPOSE_INVALID"}, {1, "NO_TRANSPOSE"}, {2, "TRANSPOSE"}, {3, "ADJOINT"}, {0, NULL}};
static const pb_ev pb_e_AccuracyMode[] = {{0, "DEFAULT"}, {1, "HIGHEST"}, {0, NULL}};
/* hlo.proto */
static const pb_ev pb_e_CustomCallSchedule[] = {
    {0, "SCHEDULE_NONE"}, {1, "SCHEDULE_LATEST"}, {2, "SCHEDULE_EARLIEST"}, {0, NULL}};
static const pb_ev pb_e_TriState[] = {
    {0, "TRI_STATE_UNSPECIFIED"}, {1, "TRI_STATE_TRUE"}, {2, "TRI_STATE_FALSE"}, {0, NULL}};
static const pb_ev pb_e_ConvolutionKind[] = {
    {0, "CONVOLUTION_KIND_UNSET"}, {1, "CONVOLUTION_KIND_FPROP"}, {2, "CONVOLUTION_KIND_DGRAD"},
    {3, "CONVOLUTION_KIND_WGRAD"}, {0, NULL}};
static const pb_ev pb_e_CustomCallApiVersion[] = {
    {0, "API_VERSION_UNSPECIFIED"}, {1, "API_VERSION_ORIGINAL"}, {2, "API_VERSION_STATUS_RETURNING"},
    {3, "API_VERSION_STATUS_RETURNING_UNIFIED"}, {4, "API_VERSION_TYPED_FFI"}, {0, NULL}};
static const pb_ev pb_e_AliasKind[] = {{0, "UNDEFINED_ALIAS"}, {1, "MAY_ALIAS"}, {2, "MUST_ALIAS"}, {0, NULL}};

/* messages: declared first, they refer to each other */
static const pb_msg pb_m_Shape, pb_m_Layout, pb_m_Tile, pb_m_SplitConfig, pb_m_ProgramShape, pb_m_Literal,
    pb_m_OpMetadata, pb_m_OpSharding, pb_m_WindowDimension, pb_m_Window, pb_m_ConvDims, pb_m_DotDims,
    pb_m_RaggedDotDims, pb_m_GatherDims, pb_m_ScatterDims, pb_m_PaddingDimension, pb_m_PaddingConfig,
    pb_m_Precision, pb_m_ReplicaGroup, pb_m_IotaGroups, pb_m_DeviceList, pb_m_SourceTarget, pb_m_MapEntry,
    pb_m_Frontend, pb_m_TriangularSolve, pb_m_Cholesky, pb_m_ParamReplication, pb_m_OutputOperandAlias,
    pb_m_Statistic, pb_m_StatisticsViz, pb_m_Tolerance, pb_m_Accuracy, pb_m_TensorSparsity, pb_m_Sparsity,
    pb_m_SliceDimensions, pb_m_Instruction,
    pb_m_Computation, pb_m_AliasEntry, pb_m_IoAlias, pb_m_DonorEntry, pb_m_Donor, pb_m_FileLocation,
    pb_m_StackFrame, pb_m_FrameIndex, pb_m_Module, pb_m_Config, pb_m_HloProto, pb_m_Snapshot, pb_m_WithConfig,
    pb_m_Unoptimized;

static const pb_field pb_f_Shape[] = {
    E(2, "element_type", PrimitiveType), R(3, INT64, "dimensions"), RM(4, "tuple_shapes", Shape),
    M(5, "layout", Layout), R(6, BOOL, "is_dynamic_dimension"), PB_END};
static const pb_field pb_f_Layout[] = {
    R(1, INT64, "minor_to_major"), RM(6, "tiles", Tile), F(7, INT64, "element_size_in_bits"),
    F(8, INT64, "memory_space"), RE(9, "dim_level_types", DimLevelType), M(10, "physical_shape", Shape),
    E(11, "index_primitive_type", PrimitiveType), E(12, "pointer_primitive_type", PrimitiveType),
    R(13, BOOL, "dim_unique"), R(14, BOOL, "dim_ordered"), F(15, INT64, "dynamic_shape_metadata_prefix_bytes"),
    F(16, INT64, "tail_padding_alignment_in_elements"), RM(17, "split_configs", SplitConfig), PB_END};
static const pb_field pb_f_Tile[] = {R(1, INT64, "dimensions"), PB_END};
static const pb_field pb_f_SplitConfig[] = {F(1, INT64, "dimension"), R(2, INT64, "split_indices"), PB_END};
static const pb_field pb_f_ProgramShape[] = {
    RM(1, "parameters", Shape), M(2, "result", Shape), R(3, STRING, "parameter_names"), PB_END};
static const pb_field pb_f_Literal[] = {
    M(1, "shape", Shape), R(2, BOOL, "preds"), F(3, BYTES, "u8s"), R(4, INT32, "s32s"), R(5, INT64, "s64s"),
    R(6, UINT32, "u32s"), R(7, UINT64, "u64s"), R(8, FLOAT, "f32s"), R(9, DOUBLE, "f64s"),
    RM(10, "tuple_literals", Literal), F(11, BYTES, "f16s"), R(12, FLOAT, "c64s"), F(13, BYTES, "bf16s"),
    R(14, INT64, "sparse_indices"), F(15, BYTES, "s8s"), F(16, BYTES, "u16s"), F(17, BYTES, "s16s"),
    R(18, DOUBLE, "c128s"), F(19, BYTES, "f8e5m2s"), F(20, BYTES, "f8e4m3fns"), F(21, BYTES, "s4s"),
    F(22, BYTES, "u4s"), F(23, BYTES, "f8e4m3b11fnuzs"), F(24, BYTES, "f8e5m2fnuzs"), F(25, BYTES, "f8e4m3fnuzs"),
    F(26, BYTES, "s2s"), F(27, BYTES, "u2s"), F(28, BYTES, "f8e4m3s"), F(29, BYTES, "f8e3m4s"),
    F(30, BYTES, "s1s"), F(31, BYTES, "u1s"), F(32, BYTES, "f4e2m1fns"), F(33, BYTES, "f8e8m0fnus"),
    R(34, INT32, "dynamic_sizes"), F(35, BYTES, "f6e3m2fns"), F(36, BYTES, "f6e2m3fns"), PB_END};
static const pb_field pb_f_OpMetadata[] = {
    F(1, STRING, "op_type"), F(2, STRING, "op_name"), F(3, STRING, "source_file"), F(4, INT32, "source_line"),
    RE(5, "profile_type", ProfileType), F(8, INT64, "size_of_generated_code_in_bytes"),
    F(9, INT64, "size_of_memory_working_set_in_bytes"), F(10, OPAQUE, "profile_info"),
    F(12, STRING, "deduplicated_name"), F(15, INT32, "stack_frame_id"), F(16, STRING, "scheduling_name"),
    F(17, INT32, "source_end_line"), F(18, INT32, "source_column"), F(19, INT32, "source_end_column"),
    F(20, OPAQUE, "metadata_payload"), PB_END};
static const pb_field pb_f_OpSharding[] = {
    E(1, "type", ShardingType), M(2, "tile_shape", Shape), R(3, INT64, "tile_assignment_dimensions"),
    R(4, INT64, "tile_assignment_devices"), RM(5, "tuple_shardings", OpSharding),
    F(6, BOOL, "replicate_on_last_tile_dim"), RM(7, "metadata", OpMetadata), RE(8, "last_tile_dims", ShardingType),
    R(9, INT64, "iota_reshape_dims"), R(10, INT32, "iota_transpose_perm"), F(11, BOOL, "is_shard_group"),
    F(12, INT64, "shard_group_id"), E(13, "shard_group_type", ShardGroupType), F(14, OPAQUE, "named_sharding"),
    PB_END};
static const pb_field pb_f_WindowDimension[] = {
    F(1, INT64, "size"), F(2, INT64, "stride"), F(3, INT64, "padding_low"), F(4, INT64, "padding_high"),
    F(5, INT64, "window_dilation"), F(6, INT64, "base_dilation"), F(7, BOOL, "window_reversal"), PB_END};
static const pb_field pb_f_Window[] = {RM(1, "dimensions", WindowDimension), PB_END};
static const pb_field pb_f_ConvDims[] = {
    F(3, INT64, "kernel_input_feature_dimension"), F(4, INT64, "kernel_output_feature_dimension"),
    R(6, INT64, "kernel_spatial_dimensions"), F(7, INT64, "input_batch_dimension"),
    F(8, INT64, "input_feature_dimension"), F(9, INT64, "output_batch_dimension"),
    F(10, INT64, "output_feature_dimension"), R(11, INT64, "input_spatial_dimensions"),
    R(12, INT64, "output_spatial_dimensions"), PB_END};
static const pb_field pb_f_DotDims[] = {
    R(1, INT64, "lhs_contracting_dimensions"), R(2, INT64, "rhs_contracting_dimensions"),
    R(3, INT64, "lhs_batch_dimensions"), R(4, INT64, "rhs_batch_dimensions"), PB_END};
static const pb_field pb_f_RaggedDotDims[] = {
    M(1, "dot_dimension_numbers", DotDims), R(2, INT64, "lhs_ragged_dimensions"),
    R(3, INT64, "rhs_group_dimensions"), PB_END};
static const pb_field pb_f_GatherDims[] = {
    R(1, INT64, "offset_dims"), R(2, INT64, "collapsed_slice_dims"), R(3, INT64, "start_index_map"),
    F(4, INT64, "index_vector_dim"), R(5, INT64, "operand_batching_dims"), R(6, INT64, "start_indices_batching_dims"),
    PB_END};
static const pb_field pb_f_ScatterDims[] = {
    R(1, INT64, "update_window_dims"), R(2, INT64, "inserted_window_dims"), R(3, INT64, "scatter_dims_to_operand_dims"),
    F(4, INT64, "index_vector_dim"), R(5, INT64, "input_batching_dims"), R(6, INT64, "scatter_indices_batching_dims"),
    PB_END};
static const pb_field pb_f_PaddingDimension[] = {
    F(1, INT64, "edge_padding_low"), F(2, INT64, "edge_padding_high"), F(3, INT64, "interior_padding"), PB_END};
static const pb_field pb_f_PaddingConfig[] = {RM(1, "dimensions", PaddingDimension), PB_END};
static const pb_field pb_f_Precision[] = {RE(1, "operand_precision", Precision), E(2, "algorithm", Algorithm), PB_END};
static const pb_field pb_f_ReplicaGroup[] = {R(1, INT64, "replica_ids"), PB_END};
static const pb_field pb_f_IotaGroups[] = {
    F(1, INT64, "num_replica_groups"), F(2, INT64, "num_devices_per_group"), R(3, INT64, "iota_reshape_dims"),
    R(4, INT32, "iota_transpose_perm"), PB_END};
/* field 2 is reserved in newer XLA (the iota list moved to HloInstructionProto field 92); older protos use it */
static const pb_field pb_f_DeviceList[] = {
    RM(1, "replica_groups", ReplicaGroup), M(2, "iota_replica_group_list", IotaGroups), PB_END};
static const pb_field pb_f_SourceTarget[] = {F(1, INT64, "source"), F(2, INT64, "target"), PB_END};
static const pb_field pb_f_MapEntry[] = {F(1, STRING, "key"), F(2, STRING, "value"), PB_END};
static const pb_field pb_f_Frontend[] = {RM(1, "map", MapEntry), PB_END};   /* map<string, string> */
static const pb_field pb_f_TriangularSolve[] = {
    F(1, BOOL, "left_side"), F(2, BOOL, "lower"), F(3, BOOL, "unit_diagonal"), E(4, "transpose_a", Transpose), PB_END};
static const pb_field pb_f_Cholesky[] = {F(1, BOOL, "lower"), PB_END};
static const pb_field pb_f_ParamReplication[] = {R(1, BOOL, "replicated_at_leaf_buffers"), PB_END};
static const pb_field pb_f_OutputOperandAlias[] = {
    R(1, INT64, "output_shape_index"), F(2, INT64, "operand_index"), R(3, INT64, "operand_shape_index"), PB_END};
static const pb_field pb_f_Statistic[] = {F(1, STRING, "stat_name"), F(2, DOUBLE, "stat_val"), PB_END};
static const pb_field pb_f_StatisticsViz[] = {
    F(1, INT64, "stat_index_to_visualize"), RM(2, "statistics", Statistic), PB_END};
static const pb_field pb_f_Tolerance[] = {F(1, DOUBLE, "atol"), F(2, DOUBLE, "rtol"), F(3, INT64, "ulps"), PB_END};
static const pb_field pb_f_Accuracy[] = {E(1, "mode", AccuracyMode), M(2, "tolerance", Tolerance), PB_END};
static const pb_field pb_f_TensorSparsity[] = {
    F(1, INT64, "num_non_zero"), F(2, INT64, "block_size"), F(3, INT64, "dimension"), F(4, INT64, "stride"), PB_END};
static const pb_field pb_f_Sparsity[] = {M(1, "lhs", TensorSparsity), M(2, "rhs", TensorSparsity), PB_END};
static const pb_field pb_f_SliceDimensions[] = {
    F(1, INT64, "start"), F(2, INT64, "limit"), F(3, INT64, "stride"), PB_END};

/* hlo.proto */
static const pb_field pb_f_Instruction[] = {
    F(1, STRING, "name"), F(2, STRING, "opcode"), M(3, "shape", Shape), M(7, "metadata", OpMetadata),
    M(8, "literal", Literal), F(9, INT64, "parameter_number"), F(11, STRING, "fusion_kind"),
    F(13, INT64, "tuple_index"), R(14, INT64, "dimensions"), M(15, "window", Window),
    M(16, "convolution_dimension_numbers", ConvDims), RM(17, "slice_dimensions", SliceDimensions),
    F(18, INT32, "exponent_bits"), F(19, INT32, "mantissa_bits"), R(20, INT64, "dynamic_slice_sizes"),
    M(21, "padding_config", PaddingConfig), F(22, BYTES, "outfeed_config"), E(23, "distribution", RandomDistribution),
    F(24, FLOAT, "epsilon"), F(25, INT64, "feature_index"), F(26, INT64, "channel_id"), F(27, BYTES, "infeed_config"),
    F(28, STRING, "custom_call_target"), M(29, "outfeed_shape", Shape), M(30, "dot_dimension_numbers", DotDims),
    E(31, "fft_type", FftType), R(32, INT64, "fft_length"), M(33, "gather_dimension_numbers", GatherDims),
    R(34, INT64, "gather_slice_sizes"), F(35, INT64, "id"), R(36, INT64, "operand_ids"),
    R(37, INT64, "control_predecessor_ids"), R(38, INT64, "called_computation_ids"), M(40, "sharding", OpSharding),
    F(43, BYTES, "backend_config"), F(45, INT64, "all_reduce_id"), F(47, BOOL, "is_host_transfer"),
    M(48, "scatter_dimension_numbers", ScatterDims), RM(49, "replica_groups", ReplicaGroup),
    F(50, INT64, "feature_group_count"), M(51, "precision_config", Precision),
    RM(52, "source_target_pairs", SourceTarget), M(54, "domain_entry_sharding", OpSharding),
    M(55, "domain_exit_sharding", OpSharding), F(56, BOOL, "constrain_layout"),
    RM(57, "operand_shapes_with_layout", Shape), F(58, INT64, "batch_group_count"),
    M(59, "triangular_solve_options", TriangularSolve), F(60, BOOL, "is_stable"),
    M(61, "parameter_replication", ParamReplication), M(62, "cholesky_options", Cholesky),
    F(63, STRING, "comparison_direction"), F(65, BOOL, "custom_call_has_side_effect"), F(66, INT64, "delta"),
    F(67, BOOL, "indices_are_sorted"), M(68, "frontend_attributes", Frontend), F(69, BOOL, "unique_indices"),
    E(70, "rng_algorithm", RandomAlgorithm), F(71, BOOL, "use_global_device_ids"), F(72, STRING, "comparison_type"),
    F(73, BOOL, "is_cross_program_prefetch"), RM(74, "output_operand_aliasing", OutputOperandAlias),
    E(75, "padding_type", PaddingType), E(76, "custom_call_schedule", CustomCallSchedule),
    E(77, "custom_call_api_version", CustomCallApiVersion), F(79, STRING, "async_execution_thread"),
    F(80, INT32, "cross_program_prefetch_index"), F(81, INT64, "k"), M(82, "statistics_viz", StatisticsViz),
    F(85, BOOL, "largest"), M(87, "collective_device_list", DeviceList), F(88, OPAQUE, "original_value"),
    F(89, BOOL, "is_composite"), M(90, "ragged_dot_dimension_numbers", RaggedDotDims),
    M(91, "result_accuracy", Accuracy), M(92, "iota_collective_device_list", IotaGroups),
    F(93, OPAQUE, "mesh_axes_replica_group_list"), F(94, BOOL, "is_reverse"), F(95, INT64, "num_carries"),
    E(96, "is_associative", TriState), E(97, "conv_kind", ConvolutionKind), M(98, "sparsity_config", Sparsity),
    F(99, OPAQUE, "backend_config_payload"), PB_END};
static const pb_field pb_f_Computation[] = {
    F(1, STRING, "name"), RM(2, "instructions", Instruction), M(4, "program_shape", ProgramShape), F(5, INT64, "id"),
    F(6, INT64, "root_id"), F(7, BOOL, "is_fusion_computation"), F(8, STRING, "execution_thread"), PB_END};
static const pb_field pb_f_AliasEntry[] = {
    R(1, INT64, "output_shape_index"), F(2, INT64, "parameter_number"), R(3, INT64, "parameter_shape_index"),
    E(4, "kind", AliasKind), PB_END};
static const pb_field pb_f_IoAlias[] = {RM(1, "entries", AliasEntry), PB_END};
static const pb_field pb_f_DonorEntry[] = {
    F(1, INT64, "parameter_number"), R(2, INT64, "parameter_shape_index"), PB_END};
static const pb_field pb_f_Donor[] = {RM(1, "entries", DonorEntry), PB_END};
static const pb_field pb_f_FileLocation[] = {
    F(1, INT32, "file_name_id"), F(2, INT32, "function_name_id"), F(3, INT32, "line"), F(4, INT32, "column"),
    F(5, INT32, "end_line"), F(6, INT32, "end_column"), PB_END};
static const pb_field pb_f_StackFrame[] = {F(1, INT32, "file_location_id"), F(2, INT32, "parent_frame_id"), PB_END};
static const pb_field pb_f_FrameIndex[] = {
    R(1, STRING, "file_names"), R(2, STRING, "function_names"), RM(3, "file_locations", FileLocation),
    RM(4, "stack_frames", StackFrame), PB_END};
static const pb_field pb_f_Module[] = {
    F(1, STRING, "name"), F(2, STRING, "entry_computation_name"), RM(3, "computations", Computation),
    M(4, "host_program_shape", ProgramShape), F(5, INT64, "id"), F(6, INT64, "entry_computation_id"),
    F(7, OPAQUE, "schedule"), M(8, "input_output_alias", IoAlias), F(9, OPAQUE, "dynamic_parameter_binding"),
    R(10, OPAQUE, "cross_program_prefetches"), F(11, BOOL, "is_dynamic"), M(12, "spmd_output_sharding", OpSharding),
    R(13, OPAQUE, "profile_info"), RM(14, "spmd_parameters_shardings", OpSharding),
    F(15, OPAQUE, "device_assignment"), F(16, BOOL, "use_auto_spmd_partitioning"),
    M(17, "stack_frame_index", FrameIndex), M(18, "buffer_donor", Donor), M(19, "frontend_attributes", Frontend),
    F(20, OPAQUE, "original_value_recovery_table"), F(21, STRING, "device_type"), R(22, BYTES, "payloads"),
    F(23, INT64, "pjrt_id"), PB_END};
/* xla.proto: HloModuleConfigProto; tpusim reads two fields, the rest (debug options...) are not program */
static const pb_field pb_f_Config[] = {
    IGN(1), IGN(2), IGN(3), F(4, INT64, "replica_count"), F(5, INT64, "num_partitions"), IGN(6), IGN(7), IGN(8),
    IGN(9), IGN(10), IGN(11), IGN(12), IGN(13), IGN(14), IGN(15), IGN(16), IGN(17), IGN(18), IGN(19), IGN(20),
    IGN(21), IGN(22), IGN(23), IGN(24), IGN(25), IGN(27), IGN(28), IGN(29), IGN(30), IGN(31), IGN(32), IGN(33),
    IGN(34), IGN(35), IGN(36), IGN(37), IGN(38), IGN(39), IGN(40), IGN(41), IGN(42), PB_END};
/* the wrappers */
static const pb_field pb_f_HloProto[] = {M(1, "hlo_module", Module), F(3, OPAQUE, "buffer_assignment"), PB_END};
static const pb_field pb_f_Snapshot[] = {
    M(1, "hlo", HloProto), R(2, OPAQUE, "arguments"), F(3, OPAQUE, "result"), F(4, STRING, "execution_platform"),
    PB_END};
static const pb_field pb_f_WithConfig[] = {M(1, "hlo_module", Module), M(2, "config", Config), PB_END};
static const pb_field pb_f_Unoptimized[] = {
    M(1, "hlo_module", Module), R(2, OPAQUE, "partitions"), F(3, INT32, "version"), PB_END};

#define PB_MSG_DEF(id, nm) static const pb_msg pb_m_##id = {nm, pb_f_##id}
PB_MSG_DEF(Shape, "xla.ShapeProto");
PB_MSG_DEF(Layout, "xla.LayoutProto");
PB_MSG_DEF(Tile, "xla.TileProto");
PB_MSG_DEF(SplitConfig, "xla.SplitConfigProto");
PB_MSG_DEF(ProgramShape, "xla.ProgramShapeProto");
PB_MSG_DEF(Literal, "xla.LiteralProto");
PB_MSG_DEF(OpMetadata, "xla.OpMetadata");
PB_MSG_DEF(OpSharding, "xla.OpSharding");
PB_MSG_DEF(WindowDimension, "xla.WindowDimension");
PB_MSG_DEF(Window, "xla.Window");
PB_MSG_DEF(ConvDims, "xla.ConvolutionDimensionNumbers");
PB_MSG_DEF(DotDims, "xla.DotDimensionNumbers");
PB_MSG_DEF(RaggedDotDims, "xla.RaggedDotDimensionNumbers");
PB_MSG_DEF(GatherDims, "xla.GatherDimensionNumbers");
PB_MSG_DEF(ScatterDims, "xla.ScatterDimensionNumbers");
PB_MSG_DEF(PaddingDimension, "xla.PaddingConfig.PaddingConfigDimension");
PB_MSG_DEF(PaddingConfig, "xla.PaddingConfig");
PB_MSG_DEF(Precision, "xla.PrecisionConfig");
PB_MSG_DEF(ReplicaGroup, "xla.ReplicaGroup");
PB_MSG_DEF(IotaGroups, "xla.IotaReplicaGroupListProto");
PB_MSG_DEF(DeviceList, "xla.CollectiveDeviceListProto");
PB_MSG_DEF(SourceTarget, "xla.SourceTarget");
PB_MSG_DEF(MapEntry, "xla.FrontendAttributes.MapEntry");
PB_MSG_DEF(Frontend, "xla.FrontendAttributes");
PB_MSG_DEF(TriangularSolve, "xla.TriangularSolveOptions");
PB_MSG_DEF(Cholesky, "xla.CholeskyOptions");
PB_MSG_DEF(ParamReplication, "xla.ParameterReplication");
PB_MSG_DEF(OutputOperandAlias, "xla.OutputOperandAliasing");
PB_MSG_DEF(Statistic, "xla.Statistic");
PB_MSG_DEF(StatisticsViz, "xla.StatisticsViz");
PB_MSG_DEF(Tolerance, "xla.ResultAccuracy.Tolerance");
PB_MSG_DEF(Accuracy, "xla.ResultAccuracy");
PB_MSG_DEF(TensorSparsity, "xla.SparsityConfig.TensorSparsityConfig");
PB_MSG_DEF(Sparsity, "xla.SparsityConfig");
PB_MSG_DEF(SliceDimensions, "xla.HloInstructionProto.SliceDimensions");
PB_MSG_DEF(Instruction, "xla.HloInstructionProto");
PB_MSG_DEF(Computation, "xla.HloComputationProto");
PB_MSG_DEF(AliasEntry, "xla.HloInputOutputAliasProto.AliasEntryProto");
PB_MSG_DEF(IoAlias, "xla.HloInputOutputAliasProto");
PB_MSG_DEF(DonorEntry, "xla.HloBufferDonorProto.BufferDonorEntryProto");
PB_MSG_DEF(Donor, "xla.HloBufferDonorProto");
PB_MSG_DEF(FileLocation, "xla.StackFrameIndexProto.FileLocation");
PB_MSG_DEF(StackFrame, "xla.StackFrameIndexProto.StackFrame");
PB_MSG_DEF(FrameIndex, "xla.StackFrameIndexProto");
PB_MSG_DEF(Module, "xla.HloModuleProto");
PB_MSG_DEF(Config, "xla.HloModuleConfigProto");
PB_MSG_DEF(HloProto, "xla.HloProto");
PB_MSG_DEF(Snapshot, "xla.HloSnapshot");
PB_MSG_DEF(WithConfig, "xla.HloModuleProtoWithConfig");
PB_MSG_DEF(Unoptimized, "xla.HloUnoptimizedSnapshot");

/* every message, for the schema check */
static const pb_msg *const pb_all_msgs[] = {
    &pb_m_Shape, &pb_m_Layout, &pb_m_Tile, &pb_m_SplitConfig, &pb_m_ProgramShape, &pb_m_Literal, &pb_m_OpMetadata,
    &pb_m_OpSharding, &pb_m_WindowDimension, &pb_m_Window, &pb_m_ConvDims, &pb_m_DotDims, &pb_m_RaggedDotDims,
    &pb_m_GatherDims, &pb_m_ScatterDims, &pb_m_PaddingDimension, &pb_m_PaddingConfig, &pb_m_Precision,
    &pb_m_ReplicaGroup, &pb_m_IotaGroups, &pb_m_DeviceList, &pb_m_SourceTarget, &pb_m_MapEntry, &pb_m_Frontend,
    &pb_m_TriangularSolve, &pb_m_Cholesky, &pb_m_ParamReplication, &pb_m_OutputOperandAlias, &pb_m_Statistic,
    &pb_m_StatisticsViz, &pb_m_Tolerance, &pb_m_Accuracy, &pb_m_TensorSparsity, &pb_m_Sparsity,
    &pb_m_SliceDimensions, &pb_m_Instruction,
    &pb_m_Computation, &pb_m_AliasEntry, &pb_m_IoAlias, &pb_m_DonorEntry, &pb_m_Donor, &pb_m_FileLocation,
    &pb_m_StackFrame, &pb_m_FrameIndex, &pb_m_Module, &pb_m_Config, &pb_m_HloProto, &pb_m_Snapshot,
    &pb_m_WithConfig, &pb_m_Unoptimized};

#undef F
#undef R
#undef M
#undef RM
#undef E
#undef RE
#undef IGN
#undef PB_END
#undef PB_MSG_DEF

int hlo_proto_bin_schema_check(char *why, size_t size)
{
    for (int i = 0; i < UT_ARRAY_LEN(pb_all_msgs); i++) {
        const pb_msg *m = pb_all_msgs[i];
        int n = 0;
        for (const pb_field *f = m->f; f->num; f++, n++) {
            for (const pb_field *g = m->f; g != f; g++)
                if (g->num == f->num || (*f->name && !strcmp(g->name, f->name))) {
                    snprintf(why, size, "%s: field %u (%s) defined twice", m->name, f->num, f->name);
                    return 0;
                }
            if ((f->kind == PB_MSG) != (f->msg != NULL) || (f->kind == PB_ENUM) != (f->ev != NULL)) {
                snprintf(why, size, "%s: field %s has a bad kind", m->name, f->name);
                return 0;
            }
        }
        if (n > PB_MAX_FIELDS) {
            snprintf(why, size, "%s has %d fields, more than PB_MAX_FIELDS", m->name, n);
            return 0;
        }
    }
    return 1;
}

/* ---- decoding ---- */

typedef struct pb {
    tpu_ctx       *ctx;
    const uint8_t *buf;
    const char    *file;
    ut_arena      *tree;
    int            failed, nomem;
    struct { const pb_msg *m; uint32_t num; } warned[32];   /* unknown fields already warned about */
    int            nwarned;
} pb;

static int pb_nomem(pb *B)
{
    if (!B->failed) {
        B->failed = B->nomem = 1;
        ut_nomem(B->ctx);
    }
    return 0;
}

static int pb_native_wt(int kind)
{
    switch (kind) {
    case PB_FIXED32: case PB_SFIXED32: case PB_FLOAT: return PB_WT_I32;
    case PB_FIXED64: case PB_SFIXED64: case PB_DOUBLE: return PB_WT_I64;
    case PB_MSG: case PB_OPAQUE: case PB_STRING: case PB_BYTES: return PB_WT_LEN;
    default: return PB_WT_VARINT;
    }
}

/* "path.to.field[i]": the parent's path and, when given, the field being read (with the index its node would
 * get if it is a repeated message; a packed scalar's values have no one index). */
static void pb_path(const pt_node *parent, const pb_field *f, char *buf, size_t size)
{
    hlo_proto_path(parent, buf, size);
    if (!f) return;
    size_t len = strlen(buf);
    int w = snprintf(buf + len, size - len, "%s%s", len ? "." : "", f->name);
    if (w < 0 || (size_t)w >= size - len || !f->rep || pb_native_wt(f->kind) != PB_WT_LEN) return;
    len += (size_t)w;
    int idx = 0;
    for (const pt_node *s = parent->child; s; s = s->next) idx += !strcmp(s->name, f->name);
    snprintf(buf + len, size - len, "[%d]", idx);
}

static int pb_error(pb *B, size_t off, const pt_node *parent, const pb_field *f, const char *fmt, ...) UT_PRINTF(5, 6);
static int pb_error(pb *B, size_t off, const pt_node *parent, const pb_field *f, const char *fmt, ...)
{
    if (B->failed) return 0;
    B->failed = 1;
    char msg[300], path[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pb_path(parent, f, path, sizeof path);
    ut_err(B->ctx, TPU_ERR_PARSE, "%s: byte %zu: %s%s%s", B->file, off, path, *path ? ": " : "", msg);
    return 0;
}

static const char *pb_wt_name(int wt)
{
    static const char *const names[] = {"varint", "64-bit", "length-delimited", "group start", "group end",
                                        "32-bit", "invalid (6)", "invalid (7)"};
    return names[wt & 7];
}

/* A varint at *pos; `what` says what it is for the message ("tag", "length", "value"). */
static int pb_varint(pb *B, size_t *pos, size_t end, uint64_t *v, const pt_node *parent, const pb_field *f,
                     const char *what)
{
    size_t start = *pos;
    uint64_t x = 0;
    for (int i = 0; i < 10; i++) {
        if (*pos >= end)
            return pb_error(B, start, parent, f, "truncated varint (%s): the message ends after %d byte%s of it", what,
                            i, i == 1 ? "" : "s");
        uint8_t c = B->buf[(*pos)++];
        if (i == 9 && c > 1) return pb_error(B, start, parent, f, "varint (%s) overflows 64 bits", what);
        x |= (uint64_t)(c & 0x7f) << (7 * i);
        if (!(c & 0x80)) {
            *v = x;
            return 1;
        }
    }
    return pb_error(B, start, parent, f, "varint (%s) longer than 10 bytes", what);   /* not reached: i == 9 */
}

/* A length prefix that must fit in what is left of the enclosing message. */
static int pb_len(pb *B, size_t *pos, size_t end, size_t *n, size_t at, const pt_node *parent, const pb_field *f)
{
    uint64_t v;
    if (!pb_varint(B, pos, end, &v, parent, f, "length")) return 0;
    if (v > end - *pos)
        return pb_error(B, at, parent, f, "length %llu runs past the end of the message (%zu bytes left)",
                        (unsigned long long)v, end - *pos);
    *n = (size_t)v;
    return 1;
}

/* Skips one field's value (unknown or ignored); groups are skipped to their matching end. */
static int pb_skip(pb *B, size_t *pos, size_t end, int wt, uint64_t num, size_t at, const pt_node *parent, int depth)
{
    uint64_t v;
    size_t n;
    switch (wt) {
    case PB_WT_VARINT: return pb_varint(B, pos, end, &v, parent, NULL, "value");
    case PB_WT_I64: n = 8; break;
    case PB_WT_I32: n = 4; break;
    case PB_WT_LEN:
        if (!pb_len(B, pos, end, &n, at, parent, NULL)) return 0;
        break;
    case PB_WT_SGROUP:
        if (depth >= PB_MAX_DEPTH)
            return pb_error(B, at, parent, NULL, "groups nested more than %d deep", PB_MAX_DEPTH);
        for (;;) {
            size_t fat = *pos;
            if (*pos >= end) return pb_error(B, at, parent, NULL, "group %llu is not closed", (unsigned long long)num);
            if (!pb_varint(B, pos, end, &v, parent, NULL, "tag")) return 0;
            if ((v & 7) == PB_WT_EGROUP) {
                if ((v >> 3) != num)
                    return pb_error(B, fat, parent, NULL, "group %llu closed by the end of group %llu",
                                    (unsigned long long)num, (unsigned long long)(v >> 3));
                return 1;
            }
            if (!pb_skip(B, pos, end, (int)(v & 7), v >> 3, fat, parent, depth + 1)) return 0;
        }
    default:
        return pb_error(B, at, parent, NULL, "field %llu has wire type %s, which cannot start a field",
                        (unsigned long long)num, pb_wt_name(wt));
    }
    if (n > end - *pos)
        return pb_error(B, at, parent, NULL, "field %llu: %zu bytes run past the end of the message",
                        (unsigned long long)num, n);
    *pos += n;
    return 1;
}

static void pb_warn_unknown(pb *B, size_t at, const pt_node *parent, const pb_msg *m, uint64_t num, int wt)
{
    for (int i = 0; i < B->nwarned; i++)
        if (B->warned[i].m == m && B->warned[i].num == num) return;
    if (B->nwarned == UT_ARRAY_LEN(B->warned)) return;   /* enough said (and no time spent on floods) */
    B->warned[B->nwarned].m = m;
    B->warned[B->nwarned++].num = (uint32_t)num;
    char path[256];
    hlo_proto_path(parent, path, sizeof path);
    ut_warn(B->ctx, "%s: byte %zu: %s%swarning: unknown field %llu (%s) of %s skipped", B->file, at, path,
            *path ? ": " : "", (unsigned long long)num, pb_wt_name(wt), m->name);
}

static pt_node *pb_node(pb *B, pt_node *parent, const pb_field *f, size_t at)
{
    pt_node *n = ut_arena_alloc(B->tree, sizeof *n);
    if (!n) {
        pb_nomem(B);
        return NULL;
    }
    n->name = f->name;
    n->line = 1;
    n->col = (int)(at + 1);   /* the input is shorter than INT_MAX bytes */
    n->off = at;
    n->rep = f->rep;
    n->val = "";
    n->parent = parent;
    if (parent->last) parent->last->next = n;
    else parent->child = n;
    parent->last = n;
    return n;
}


/* One scalar of wire type wt (varint, 32- or 64-bit little-endian) as 64 raw bits. */
static int pb_value(pb *B, size_t *pos, size_t end, int wt, uint64_t *raw, const pt_node *parent, const pb_field *f)
{
    if (wt == PB_WT_VARINT) return pb_varint(B, pos, end, raw, parent, f, "value");
    size_t w = wt == PB_WT_I32 ? 4 : 8;
    if (w > end - *pos)
        return pb_error(B, *pos, parent, f, "truncated %zu-byte value: the message ends after %zu byte%s of it", w,
                        end - *pos, end - *pos == 1 ? "" : "s");
    uint64_t x = 0;
    for (size_t i = 0; i < w; i++) x |= (uint64_t)B->buf[*pos + i] << (8 * i);
    *pos += w;
    *raw = x;
    return 1;
}

/* A decimal that reads back (through strtod, as the builder reads it) to the same value. */
static void pb_real_text(char *buf, size_t size, double x, int is_float)
{
    if (isnan(x)) {
        snprintf(buf, size, "%s", signbit(x) ? "-nan" : "nan");
        return;
    }
    if (isinf(x)) {
        snprintf(buf, size, "%s", x < 0 ? "-inf" : "inf");
        return;
    }
    if (is_float) {   /* 9 digits always read back to the same float; literals hold many, so no search */
        snprintf(buf, size, "%.9g", x);
        return;
    }
    for (int prec = 15; prec <= 17; prec++) {   /* doubles are few (statistics, tolerances): keep them short */
        snprintf(buf, size, "%.*g", prec, x);
        if (strtod(buf, NULL) == x) return;
    }
}

/* Decimal digits of v (and a '-' when neg) into tmp (at least 22 bytes); snprintf is slow for big literals. */
static void pb_int_text(char *tmp, uint64_t v, int neg)
{
    char d[24];
    int k = 0;
    do {
        d[k++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    if (neg) *tmp++ = '-';
    while (k) *tmp++ = d[--k];
    *tmp = 0;
}

static void pb_signed_text(char *tmp, int64_t v) { pb_int_text(tmp, v < 0 ? 0 - (uint64_t)v : (uint64_t)v, v < 0); }

/* An IEEE value as an exact C hexadecimal float ("-0x1.8p+3"), which strtod reads back bit for bit: for the
 * repeated float fields (literal values, often millions), where decimal conversion would dominate the read.
 * mbits: 23 (float) or 52 (double). */
static void pb_hex_real(char *tmp, uint64_t bits, int mbits)
{
    int ebits = mbits == 23 ? 8 : 11, bias = (1 << (ebits - 1)) - 1;
    int neg = (int)(bits >> (mbits + ebits)) & 1;
    int e = (int)(bits >> mbits) & ((1 << ebits) - 1);
    uint64_t man = bits & (((uint64_t)1 << mbits) - 1);
    char *q = tmp;
    if (neg) *q++ = '-';
    if (e == (1 << ebits) - 1) {
        strcpy(q, man ? "nan" : "inf");
        return;
    }
    if (!e && !man) {
        strcpy(q, "0");
        return;
    }
    int nhex = (mbits + 3) / 4;
    man <<= nhex * 4 - mbits;   /* align the fraction to whole hex digits */
    *q++ = '0';
    *q++ = 'x';
    *q++ = e ? '1' : '0';   /* subnormals: 0.fraction at the smallest exponent */
    *q++ = '.';
    for (int i = nhex - 1; i >= 0; i--) *q++ = "0123456789abcdef"[(man >> (4 * i)) & 15];
    *q++ = 'p';
    pb_signed_text(q, e ? e - bias : 1 - bias);
    if (q[0] != '-') {   /* strtod wants a sign or digit after 'p'; a '+' reads better */
        memmove(q + 1, q, strlen(q) + 1);
        q[0] = '+';
    }
}

/* A scalar field's value as the text the builder reads: decimal integers, true/false, enum value names; floats
 * in decimal, or exactly in hexadecimal for repeated ones (literal values). */
static const char *pb_scalar_text(const pb_field *f, uint64_t raw, char *tmp, size_t size)
{
    switch (f->kind) {
    case PB_INT32: case PB_SFIXED32: pb_signed_text(tmp, (int32_t)(uint32_t)raw); break;
    case PB_UINT32: case PB_FIXED32: pb_int_text(tmp, (uint32_t)raw, 0); break;
    case PB_UINT64: case PB_FIXED64: pb_int_text(tmp, raw, 0); break;
    case PB_SINT32: {
        uint32_t u = (uint32_t)raw;
        pb_signed_text(tmp, (int32_t)((u >> 1) ^ (0u - (u & 1))));   /* zigzag */
        break;
    }
    case PB_SINT64: pb_signed_text(tmp, (int64_t)((raw >> 1) ^ (0 - (raw & 1)))); break;
    case PB_BOOL: return raw ? "true" : "false";
    case PB_ENUM: {
        int32_t v = (int32_t)(uint32_t)raw;
        for (const pb_ev *e = f->ev; e->name; e++)
            if (e->num == v) return e->name;
        pb_signed_text(tmp, v);   /* a value newer than this table: the builder says what it needs */
        break;
    }
    case PB_FLOAT: case PB_DOUBLE: {
        int dbl = f->kind == PB_DOUBLE;
        if (f->rep) {
            pb_hex_real(tmp, dbl ? raw : (uint32_t)raw, dbl ? 52 : 23);
            break;
        }
        uint32_t u = (uint32_t)raw;
        float x32;
        double x64;
        memcpy(&x32, &u, sizeof x32);
        memcpy(&x64, &raw, sizeof x64);
        pb_real_text(tmp, size, dbl ? x64 : x32, !dbl);
        break;
    }
    default: pb_signed_text(tmp, (int64_t)raw); break;   /* int64, sfixed64 */
    }
    return NULL;
}

/* A scalar becomes a node; a second value of a singular field replaces the first (protobuf: last one wins). */
static int pb_scalar(pb *B, pt_node *parent, const pb_field *f, pt_node **seen, size_t at, uint64_t raw)
{
    char tmp[48];
    const char *fixed = pb_scalar_text(f, raw, tmp, sizeof tmp);
    pt_node *n = seen && *seen ? *seen : pb_node(B, parent, f, at);
    if (!n) return 0;
    if (seen) *seen = n;
    if (fixed) {
        n->val = fixed;
    } else if (!(n->val = ut_arena_strdup(B->tree, tmp))) {
        return pb_nomem(B);
    }
    n->vlen = strlen(n->val);
    return 1;
}

/* A packed repeated scalar field: the values back to back in [pos, end). */
static int pb_packed(pb *B, pt_node *parent, const pb_field *f, size_t at, size_t pos, size_t end)
{
    int wt = pb_native_wt(f->kind);
    size_t w = wt == PB_WT_I32 ? 4 : wt == PB_WT_I64 ? 8 : 0;
    if (w && (end - pos) % w)
        return pb_error(B, at, parent, f, "packed length %zu is not a multiple of the %zu-byte value", end - pos, w);
    while (pos < end) {
        size_t vat = pos;
        uint64_t raw;
        if (!pb_value(B, &pos, end, wt, &raw, parent, f) || !pb_scalar(B, parent, f, NULL, vat, raw)) return 0;
    }
    return 1;
}

static int pb_message(pb *B, const pb_msg *m, pt_node *node, size_t pos, size_t end, int depth);

/* One field of a known kind whose tag (at byte `at`) has been read. */
static int pb_read_field(pb *B, pt_node *parent, const pb_field *f, pt_node **seen, size_t at, size_t *pos,
                         size_t end, int wt, int depth)
{
    int native = pb_native_wt(f->kind);
    if (wt == native && native != PB_WT_LEN) {
        uint64_t raw;
        return pb_value(B, pos, end, wt, &raw, parent, f) && pb_scalar(B, parent, f, f->rep ? NULL : seen, at, raw);
    }
    if (wt != PB_WT_LEN || (native != PB_WT_LEN && !f->rep))
        return pb_error(B, at, parent, f, "wire type %s, expected %s%s", pb_wt_name(wt), pb_wt_name(native),
                        native != PB_WT_LEN ? (f->rep ? " (or packed)" : "") : "");
    size_t n;
    if (!pb_len(B, pos, end, &n, at, parent, f)) return 0;
    size_t start = *pos;
    *pos += n;
    if (native != PB_WT_LEN) return pb_packed(B, parent, f, at, start, start + n);
    /* a second copy of a singular message merges into the first; of a string, replaces it */
    pt_node *node = !f->rep && *seen ? *seen : pb_node(B, parent, f, at);
    if (!node) return 0;
    if (!f->rep) *seen = node;
    if (f->kind == PB_MSG || f->kind == PB_OPAQUE) {
        node->is_msg = 1;
        if (f->kind == PB_OPAQUE) return 1;
        if (depth >= PB_MAX_DEPTH) return pb_error(B, at, parent, f, "messages nested more than %d deep", PB_MAX_DEPTH);
        return pb_message(B, f->msg, node, start, start + n, depth + 1);
    }
    char *s = ut_arena_strndup(B->tree, (const char *)B->buf + start, n);
    if (!s) return pb_nomem(B);
    node->val = s;
    node->vlen = n;
    node->is_str = 1;
    return 1;
}

/* The fields of message m in [pos, end) become children of node. */
static int pb_message(pb *B, const pb_msg *m, pt_node *node, size_t pos, size_t end, int depth)
{
    pt_node *seen[PB_MAX_FIELDS];   /* singular fields already read, by schema slot */
    memset(seen, 0, sizeof seen);
    while (pos < end) {
        size_t at = pos;
        uint64_t tag;
        if (!pb_varint(B, &pos, end, &tag, node, NULL, "tag")) return 0;
        uint64_t num = tag >> 3;
        int wt = (int)(tag & 7);
        if (num == 0 || num > 536870911)
            return pb_error(B, at, node, NULL, "field number %llu is out of range (a tag must be 1 .. 2^29-1)",
                            (unsigned long long)num);
        int i = 0;
        while (m->f[i].num && m->f[i].num != num) i++;
        const pb_field *f = &m->f[i];
        if (!f->num || f->kind == PB_IGNORE) {
            if (!f->num) pb_warn_unknown(B, at, node, m, num, wt);
            if (!pb_skip(B, &pos, end, wt, num, at, node, depth)) return 0;
            continue;
        }
        if (!pb_read_field(B, node, f, &seen[i], at, &pos, end, wt, depth)) return 0;
    }
    return 1;
}

/* ---- which message the bytes hold ---- */

/* Frames the top-level fields of a message without decoding them. Reports field 1's payload (when it is
 * length-delimited) and whether field 2 is length-delimited and field 3 a varint. */
static int pb_scan(const uint8_t *p, size_t n, const uint8_t **f1, size_t *f1n, int *f2_len, int *f3_varint)
{
    size_t pos = 0;
    *f1 = NULL;
    *f1n = 0;
    *f2_len = *f3_varint = 0;
    while (pos < n) {
        uint64_t v[2];
        for (int k = 0; k < 2; k++) {   /* the tag, then a varint value or a length */
            v[k] = 0;
            int i = 0;
            for (;; i++) {
                if (pos >= n || i == 10) return 0;
                uint8_t c = p[pos++];
                v[k] |= (uint64_t)(c & 0x7f) << (7 * i);
                if (!(c & 0x80)) break;
            }
            int wt = (int)(v[0] & 7);
            if (k == 0 && wt != PB_WT_VARINT && wt != PB_WT_LEN) {
                size_t w = wt == PB_WT_I32 ? 4 : wt == PB_WT_I64 ? 8 : 0;
                if (!w || w > n - pos) return 0;
                pos += w;
                break;
            }
        }
        uint64_t num = v[0] >> 3;
        int wt = (int)(v[0] & 7);
        if (wt == PB_WT_LEN) {
            if (v[1] > n - pos) return 0;
            if (num == 1) {
                *f1 = p + pos;
                *f1n = (size_t)v[1];
            }
            *f2_len |= num == 2;
            pos += (size_t)v[1];
        }
        *f3_varint |= num == 3 && wt == PB_WT_VARINT;
    }
    return 1;
}

/* HloModuleProto, or a wrapper that holds it in field 1 (HloProto, HloModuleProtoWithConfig,
 * HloUnoptimizedSnapshot) or holds an HloProto there (HloSnapshot). A module's field 1 is its name, printable
 * text; a wrapper's field 1 is a message, whose first byte is a tag below 0x20. */
static const pb_msg *pb_detect(const uint8_t *p, size_t n)
{
    const uint8_t *f1;
    size_t f1n;
    int top_f2_len, top_f3_varint, f2_len, f3_varint, depth = 0;
    if (!pb_scan(p, n, &f1, &f1n, &top_f2_len, &top_f3_varint)) return &pb_m_Module;
    while (depth < 2 && f1 && f1n && f1[0] < 0x20 && pb_scan(f1, f1n, &f1, &f1n, &f2_len, &f3_varint)) depth++;
    if (depth == 0) return &pb_m_Module;
    if (depth == 2) return &pb_m_Snapshot;
    if (top_f3_varint) return &pb_m_Unoptimized;
    return top_f2_len ? &pb_m_WithConfig : &pb_m_HloProto;
}

static int pb_is_control(unsigned char c)
{
    return c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != '\v';
}

int hlo_is_proto_bin(const char *data, size_t len)
{
    /* A serialized module or wrapper starts with the tag of field 1, 2 or 3 (below 0x20; 0x0a for field 1, which
     * is also '\n') and has more tags and lengths below 0x20 within its first bytes (after the module's name at
     * most). Text starts with a printable character or whitespace and has no other control characters: a NUL
     * in the middle of HLO text is the text reader's error to report. */
    if (!len || (unsigned char)data[0] >= 0x20) return 0;
    if (pb_is_control((unsigned char)data[0])) return 1;
    size_t n = len < 4096 ? len : 4096;
    for (size_t i = 1; i < n; i++)
        if (pb_is_control((unsigned char)data[i])) return 1;
    return 0;
}

tpu_status hlo_parse_proto_bin(tpu_ctx *ctx, const void *bytes, size_t len, const char *filename, hlo_module **out)
{
    *out = NULL;
    const char *file = filename ? filename : "<proto>";
    if (len >= INT_MAX)
        return ut_err(ctx, TPU_ERR_PARSE, "%s: %zu bytes: a protobuf message holds less than 2 GiB", file, len);
    ut_arena tree;
    ut_arena_init(&tree);
    pt_node root;
    memset(&root, 0, sizeof root);
    root.name = "";
    root.val = "";
    root.is_msg = 1;
    pb B;
    memset(&B, 0, sizeof B);
    B.ctx = ctx;
    B.buf = bytes;
    B.file = file;
    B.tree = &tree;
    const pb_msg *m = pb_detect(bytes, len);
    tpu_status st;
    if (pb_message(&B, m, &root, 0, len, 0)) st = hlo_proto_build(ctx, &root, file, 0, 1, out);
    else st = B.nomem ? TPU_ERR_NOMEM : TPU_ERR_PARSE;
    ut_arena_free(&tree);
    return st;
}
