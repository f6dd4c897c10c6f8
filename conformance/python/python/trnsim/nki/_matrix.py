"""The feature matrix of the current API (docs/nki.md), generated from this package's own symbol
table against AWS's documented names (`_documented_api`).

Every documented name is either supported, with the test that exercises it (`TESTS`), or
unsupported with one reason from a closed list (`UNSUPPORTED`). `problems()` lists every
disagreement between the two and the package: a supported name the package lacks or only refuses,
an unsupported one the package has a working function for, a name in neither, a test that does not
exist. `tests/test_nki_matrix.py` fails on any, and on docs/nki.md differing from `markdown()`.

    python -m trnsim.nki._matrix                   # prints the matrix
    python -m trnsim.nki._matrix --write docs/nki.md  # rewrites it between the page's markers
"""

import importlib

from ._documented_api import MODULES

REASONS = {
    "hardware-only": "needs the device (no simulator meaning)",
    "compiler-internal": "a compiler detail with nothing to simulate",
    "removed": "removed from the API in a 0.x release",
    "not-yet": "not implemented in trnsim yet",
}

# tests/ files: A = test_nki_current_api.py, K = test_nki_corpus_current.py, C = test_nki_current.py,
# L = test_nki_language.py, I = test_nki_isa.py (legacy call of the same instruction),
# X = test_nki_collectives.py, H = test_nki_holdout_forms.py, M = test_nki_mx.py,
# P = test_nki_ap_forms.py, T = test_nki_dma_transpose.py.
FILES = {
    "A": "test_nki_current_api.py",
    "K": "test_nki_corpus_current.py",
    "C": "test_nki_current.py",
    "L": "test_nki_language.py",
    "I": "test_nki_isa.py",
    "X": "test_nki_collectives.py",
    "H": "test_nki_holdout_forms.py",
    "M": "test_nki_mx.py",
    "P": "test_nki_ap_forms.py",
    "T": "test_nki_dma_transpose.py",
}

TESTS = {
    "nki": {
        "jit": "A test_current_api_defaults_to_trn2_and_the_env_override_selects",
        "simulate": "A test_torch_tensors_in_torch_tensors_out_and_written_inputs_update_in_place",
    },
    "nki.isa": {
        "dma_copy": "K test_tensor_add_lnc2",
        "core_barrier": "A test_lnc2_runs_as_two_cores_and_a_barrier_orders_their_exchange",
        "sendrecv": "K test_lnc2_sendrecv_exchange",
        "tensor_copy": "K test_tiled_matmul_psum_accumulation",
        "memset": "K test_flash_attention_forward",
        "tensor_copy_predicated": "I test_tensor_copy_predicated",
        "nc_matmul": "K test_tiled_matmul_psum_accumulation",
        "nc_transpose": "K test_rmsnorm_qkv_projection",
        "dma_transpose": "T test_each_dge_mode_from_hbm_and_from_sbuf_against_numpy",
        "tensor_tensor": "A test_current_isa_takes_dst_first_positionally_and_has_no_dtype_or_mask",
        "tensor_scalar": "A test_current_isa_takes_dst_first_positionally_and_has_no_dtype_or_mask",
        "tensor_reduce": "K test_flash_attention_forward",
        "tensor_partition_reduce": "I test_tensor_partition_reduce",
        "activation": "K test_flash_attention_forward",
        "activation_reduce": "I test_activation_scale_bias_and_reduce",
        "local_gather": "I test_local_gather",
        "nc_n_gather": "A test_nc_n_gather_takes_flattened_free_elements",
        "bn_stats": "I test_bn_stats_bn_aggr",
        "bn_aggr": "I test_bn_stats_bn_aggr",
        "tensor_tensor_scan": "K test_cumulative_scan",
        "tensor_scalar_cumulative": "H test_tensor_scalar_cumulative_every_reduction_and_the_carried_accumulator",
        "nc_stream_shuffle": "I test_nc_stream_shuffle",
        "rng": "C test_current_rng_and_set_rng_seed_check_their_documented_constraints",
        "dropout": "I test_dropout_extremes",
        "set_rng_seed": "C test_current_rng_and_set_rng_seed_check_their_documented_constraints",
        "reciprocal": "K test_flash_attention_forward",
        "max8": "I test_max8_find_index8_match_replace8",
        "sequence_bounds": "I test_sequence_bounds",
        "scalar_tensor_tensor": "I test_scalar_tensor_tensor",
        "tensor_scalar_reduce": "I test_tensor_scalar_reduce",
        "range_select": "I test_range_select_is_trn2_only",
        "select_reduce": "I test_select_reduce",
        "nc_find_index8": "I test_max8_find_index8_match_replace8",
        "nc_match_replace8": "I test_max8_find_index8_match_replace8",
        # MX (NeuronCore-v4, trn3)
        "quantize_mx": "M test_quantize_mx_matches_numpy_ocp_mx_quantization",
        "nc_matmul_mx": "M test_nc_matmul_mx_matches_a_numpy_block_scaled_matmul",
        # the access-pattern (pattern=) forms
        "iota": "P test_iota_pattern_form_matches_the_documented_formula",
        "affine_select": "P test_affine_select_every_comparison",
        "dma_compute": "P test_dma_compute_read_modify_write_direct_and_scatter",
    },
    "nki.language": {
        **{
            d: "L test_creation"
            for d in (
                "bool_",
                "int8",
                "int16",
                "int32",
                "uint8",
                "uint16",
                "uint32",
                "float16",
                "float32",
                "bfloat16",
                "tfloat32",
                "float8_e4m3",
                "float8_e5m2",
                "float8_e4m3fn",
            )
        },
        # MX containers (trn3)
        "float8_e5m2_x4": "M test_quantize_mx_matches_numpy_ocp_mx_quantization",
        "float8_e4m3fn_x4": "M test_quantize_mx_matches_numpy_ocp_mx_quantization",
        "float4_e2m1fn_x4": "M test_nc_matmul_mx_matches_a_numpy_block_scaled_matmul",
        "ndarray": "K test_tiled_matmul_psum_accumulation",
        "zeros": "L test_creation",
        "shared_constant": "L test_shared_constant_and_identity",
        "shared_identity_matrix": "L test_shared_constant_and_identity",
        "affine_range": "A test_python_range_the_deprecated_aliases_and_fori_loop_unroll_alike",
        "sequential_range": "A test_python_range_the_deprecated_aliases_and_fori_loop_unroll_alike",
        "static_range": "A test_python_range_the_deprecated_aliases_and_fori_loop_unroll_alike",
        "fori_loop": "A test_python_range_the_deprecated_aliases_and_fori_loop_unroll_alike",
        "NKIObject": "A test_nkiobject_configuration_objects_and_no_reorder",
        "no_reorder": "A test_nkiobject_configuration_objects_and_no_reorder",
        "ds": "L test_index_helpers",
        "tile_size": "L test_tile_size_and_par_dim",
        **{f: "L test_binary_arith" for f in ("add", "subtract", "multiply", "maximum", "minimum")},
        "divide": "L test_divide",
        "power": "L test_power_on_gpsimd",
        **{f: "L test_comparisons" for f in ("equal", "not_equal", "greater", "greater_equal", "less", "less_equal")},
        **{f: "L test_logical" for f in ("logical_and", "logical_or", "logical_xor", "logical_not")},
        **{f: "L test_bitwise" for f in ("bitwise_and", "bitwise_or", "bitwise_xor", "left_shift")},
        "right_shift": "L test_right_shift_is_logical_and_invert",
        "invert": "L test_right_shift_is_logical_and_invert",
        "abs": "L test_vector_unaries",
        "reciprocal": "L test_vector_unaries",
        "rsqrt": "L test_activation_functions",
        "gelu_apprx_sigmoid": "L test_activation_functions",
        "gelu_apprx_sigmoid_dx": "L test_activation_functions",
        **{b: "K test_tiled_matmul_psum_accumulation" for b in ("sbuf", "psum", "shared_hbm")},
        "hbm": "L test_creation",
        "private_hbm": "L test_creation",
        "device_print": "L test_device_print_is_accepted_and_fp32_constants",
        "num_programs": "K test_tensor_add_lnc2",
        "program_id": "K test_tensor_add_lnc2",
        "program_ndim": "L test_spmd_program_id_num_programs_ndim",
    },
    "nki.typing": {},
    "nki.collectives": {
        "all_reduce": "X test_all_reduce_kernel_across_four_ranks_matches_numpy",
        "all_gather": "X test_gather_scatter_permute_and_rank_id",
        "reduce_scatter": "X test_gather_scatter_permute_and_rank_id",
        "collective_permute": "X test_gather_scatter_permute_and_rank_id",
        "rank_id": "X test_gather_scatter_permute_and_rank_id",
        "ReplicaGroup": "X test_all_reduce_kernel_across_four_ranks_matches_numpy",
        "all_to_all": "X test_all_to_all_exchanges_row_chunks",
        "all_to_all_v": "X test_all_to_all_v_with_uneven_send_counts",
    },
}

_NO_REGISTERS = "trnsim has no model of the engines' registers (VirtualRegister) yet"
_GEN = "the instruction is not in the simulator yet (the NeuronCore-v3/v4 additions)"

UNSUPPORTED = {
    "nki.isa": {
        "activate2": ("not-yet", _GEN),
        "rand_set_state": ("not-yet", "the XORWOW generator state is not modelled"),
        "rand_get_state": ("not-yet", "the XORWOW generator state is not modelled"),
        "rand2": ("not-yet", "the XORWOW generator state is not modelled"),
        "exponential": ("not-yet", _GEN),
        **{
            r: ("not-yet", _NO_REGISTERS)
            for r in ("register_alloc", "register_move", "register_load", "register_store")
        },
        "nonzero_with_count": (
            "not-yet",
            "in the simulator on trn2/trn3 (docs/isa.md §5.34), not yet in this front-end",
        ),
        "topk": ("not-yet", _GEN),
    },
    "nki.language": {
        "while_loop": ("not-yet", _NO_REGISTERS),
        "dynamic_range": ("not-yet", _NO_REGISTERS),
    },
    "nki.typing": {},
    "nki.collectives": {
        "all_gather_v": ("not-yet", "variable-length gather is not implemented"),
        "collective_permute_implicit": ("not-yet", "the implicit (neighbour) permute is not implemented"),
        "collective_permute_implicit_reduce": ("not-yet", "the implicit (neighbour) permute is not implemented"),
    },
}

# trnsim's module for each documented one
_PACKAGE = {
    "nki": "trnsim.nki.current",
    "nki.isa": "trnsim.nki.isa_current",
    "nki.language": "trnsim.nki.language_current",
    "nki.typing": "trnsim.nki.typing",
    "nki.collectives": "trnsim.nki.collectives",
}


def _module(name):
    try:
        return importlib.import_module(_PACKAGE[name])
    except ImportError:
        return None


def has_working(module, name):
    """Whether the package's module has `name` and it is not a refusal (`_trnsim_refused`)."""
    mod = _module(module)
    if mod is None or not hasattr(mod, name):
        return False
    return not getattr(getattr(mod, name), "_trnsim_refused", False)


def problems(tests_dir=None):
    out = []
    for module, names in MODULES.items():
        sup, uns = TESTS.get(module, {}), UNSUPPORTED.get(module, {})
        for n in names:
            if (n in sup) == (n in uns):
                out.append(f"{module}.{n}: {'both supported and unsupported' if n in sup else 'in neither list'}")
                continue
            working = has_working(module, n)
            if n in sup and not working:
                out.append(f"{module}.{n}: marked supported, but the package has no working {n}")
            if n in uns:
                if working:
                    out.append(f"{module}.{n}: marked unsupported ({uns[n][1]}), but the package has it")
                if uns[n][0] not in REASONS:
                    out.append(f"{module}.{n}: reason {uns[n][0]!r} is not in the closed list {sorted(REASONS)}")
        for n in list(sup) + list(uns):
            if n not in names:
                out.append(f"{module}.{n}: not a documented name")
        if tests_dir is not None:
            for n, t in sup.items():
                key, test = t.split(" ", 1)
                with open(f"{tests_dir}/{FILES[key]}") as f:
                    if f"def {test}(" not in f.read():
                        out.append(f"{module}.{n}: test {FILES[key]}::{test} does not exist")
    return out


def markdown():
    lines = [
        "Legend: tests in `conformance/python/tests/`: "
        + ", ".join(f"{k} = `{v}`" for k, v in FILES.items())
        + ". Reasons: "
        + "; ".join(f"**{k}**: {v}" for k, v in REASONS.items())
        + "."
    ]
    for module, names in MODULES.items():
        if not names:
            lines += ["", f"### `{module}`", "", "No documented names found in the sources (see `_documented_api.py`)."]
            continue
        sup, uns = TESTS.get(module, {}), UNSUPPORTED.get(module, {})
        n_sup = sum(1 for n in names if n in sup)
        lines += [
            "",
            f"### `{module}` ({n_sup} of {len(names)} supported)",
            "",
            "| name | status | test or reason |",
            "|---|---|---|",
        ]
        for n in names:
            if n in sup:
                key, test = sup[n].split(" ", 1)
                lines.append(f"| `{n}` | supported | {key} `{test}` |")
            elif n in uns:
                lines.append(f"| `{n}` | unsupported: {uns[n][0]} | {uns[n][1]} |")
    return "\n".join(lines) + "\n"


BEGIN = "<!-- feature-matrix:begin (generated: python -m trnsim.nki._matrix) -->"
END = "<!-- feature-matrix:end -->"


def write(path):
    """Replace the matrix between the markers of the page at `path`."""
    with open(path) as f:
        text = f.read()
    a, b = text.index(BEGIN) + len(BEGIN), text.index(END)
    with open(path, "w") as f:
        f.write(text[:a] + "\n" + markdown() + text[b:])


if __name__ == "__main__":
    import sys

    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        write(sys.argv[2])
    else:
        print(markdown(), end="")
