"""Names of AWS's current NKI API (package `nki`) that trnsim's feature matrix is checked against
(docs/nki.md). Sources, all public: nki.isa is the instruction surface of aws-neuron/aws-neuron-sdk
`nki/api/nki/isa/__init__.py` at the SDK 2.32 tree; nki.language is the stub
`nki/api/nki/language/__init__.py` of that repository as stored (an earlier 0.x stub) plus the loop
names NKI 0.6.0's release notes add (fori_loop, while_loop; dynamic_range deprecated);
nki.collectives is the module page of the NKI docs (v2.30/v2.33); nki is the `nki` module page (jit,
simulate). nki.typing's names were not found in these sources and are left empty rather than
guessed."""

MODULES = {
    "nki": (
        "jit", "simulate",
    ),
    "nki.isa": (
        "dma_copy", "tensor_copy", "memset", "tensor_copy_predicated", "nc_matmul", "nc_matmul_mx",
        "nc_transpose", "dma_transpose", "tensor_tensor", "tensor_scalar", "tensor_reduce",
        "tensor_partition_reduce", "tensor_scalar_cumulative", "activation", "activation_reduce", "activate2",
        "iota", "affine_select", "local_gather", "nc_n_gather", "bn_stats", "bn_aggr", "tensor_tensor_scan",
        "nc_stream_shuffle", "rng", "dropout", "set_rng_seed", "rand_set_state", "rand_get_state", "rand2",
        "exponential", "reciprocal", "max8", "sequence_bounds", "scalar_tensor_tensor",
        "tensor_scalar_reduce", "core_barrier", "dma_compute", "quantize_mx", "range_select", "select_reduce",
        "sendrecv", "register_alloc", "register_move", "register_load", "register_store", "nc_find_index8",
        "nc_match_replace8", "nonzero_with_count", "topk",
    ),
    "nki.language": (
        "bool_", "int8", "int16", "int32", "uint8", "uint16", "uint32", "float16", "float32", "bfloat16",
        "tfloat32", "float8_e4m3", "float8_e5m2", "float8_e4m3fn", "float8_e5m2_x4", "float8_e4m3fn_x4",
        "float4_e2m1fn_x4", "ndarray", "zeros", "shared_constant", "shared_identity_matrix", "affine_range",
        "ds", "sequential_range", "static_range", "tile_size", "abs", "add", "bitwise_and", "bitwise_or",
        "bitwise_xor", "divide", "equal", "gelu_apprx_sigmoid", "gelu_apprx_sigmoid_dx", "greater",
        "greater_equal", "invert", "left_shift", "less", "less_equal", "logical_and", "logical_not",
        "logical_or", "logical_xor", "maximum", "minimum", "multiply", "not_equal", "power", "reciprocal",
        "right_shift", "rsqrt", "subtract", "sbuf", "psum", "hbm", "shared_hbm", "private_hbm",
        "device_print", "num_programs", "program_id", "program_ndim", "fori_loop", "while_loop",
        "dynamic_range", "NKIObject", "no_reorder",
    ),
    "nki.typing": (
    ),
    "nki.collectives": (
        "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "all_to_all_v", "all_gather_v",
        "collective_permute", "collective_permute_implicit", "collective_permute_implicit_reduce", "rank_id",
        "ReplicaGroup",
    ),
}
