"""Small trnsim programs for the binding tests, built as JSON (docs/isa.md's format).

Not a test module: helpers shared by test_bindings*.py.
"""

from __future__ import annotations

import json


def hbm(name, dtype, partitions, row, offset=0):
    """An access pattern over HBM tensor ``name`` viewed as [partitions, row] (C order)."""
    ap = {"mem": {"hbm": name}, "dtype": dtype, "partitions": partitions, "partition_step": row, "free": [[1, row]]}
    if offset:
        ap["offset"] = offset
    return ap


def sbuf(dtype, partitions, row, offset=0, start=0):
    """An access pattern over SBUF: ``partitions`` rows of ``row`` elements at byte ``offset``."""
    ap = {"mem": "sbuf", "dtype": dtype, "partitions": partitions, "free": [[1, row]]}
    if offset:
        ap["offset"] = offset
    if start:
        ap["start_partition"] = start
    return ap


def inst(engine, opcode, loc=None, **fields):
    i = {"engine": engine, "op": {opcode: fields}}
    if loc is not None:
        i["loc"] = loc
    return i


def dma(dst, src, loc=None):
    return inst("dma", "dma_copy", loc=loc, dst=dst, src=src)


def program(hbm_decls, instructions, target="trn2"):
    """Program JSON text: ``hbm_decls`` is a list of (name, dtype, shape, role). The
    instructions are written in program order; their cross-engine waits are filled in by
    ``Program.infer_waits`` (the race detector refuses a program without them)."""
    import trnsim

    text = json.dumps(
        {
            "target": target,
            "hbm": [{"name": n, "dtype": d, "shape": list(s), "role": r} for n, d, s, r in hbm_decls],
            "instructions": instructions,
        }
    )
    prog = trnsim.Program.from_json(text)
    prog.infer_waits()
    return prog.to_json()


def copy_through_sbuf(dtype, partitions, row, src="x", dst="y"):
    """y = x, through SBUF by two DMAs: moves bytes, converts nothing."""
    return program(
        [(src, dtype, (partitions, row), "input"), (dst, dtype, (partitions, row), "output")],
        [
            dma(sbuf(dtype, partitions, row), hbm(src, dtype, partitions, row)),
            dma(hbm(dst, dtype, partitions, row), sbuf(dtype, partitions, row)),
        ],
    )


def add(partitions=4, row=8, dtype="f32", a="a", b="b", out="out"):
    """out = a + b on VectorE (f32 math, cast on write)."""
    size = {"f32": 4, "bf16": 2}[dtype]
    off_b, off_o = row * size, 2 * row * size
    return program(
        [
            (a, dtype, (partitions, row), "input"),
            (b, dtype, (partitions, row), "input"),
            (out, dtype, (partitions, row), "output"),
        ],
        [
            dma(sbuf(dtype, partitions, row), hbm(a, dtype, partitions, row)),
            dma(sbuf(dtype, partitions, row, off_b), hbm(b, dtype, partitions, row)),
            inst(
                "vector",
                "tensor_tensor",
                dst=sbuf(dtype, partitions, row, off_o),
                in0=sbuf(dtype, partitions, row),
                in1=sbuf(dtype, partitions, row, off_b),
                op="add",
            ),
            dma(hbm(out, dtype, partitions, row), sbuf(dtype, partitions, row, off_o)),
        ],
    )


def cast(src_dtype, dst_dtype, partitions, row):
    """y = x converted by VectorE tensor_copy (fp32 math, round-to-nearest-even on write)."""
    return program(
        [("x", src_dtype, (partitions, row), "input"), ("y", dst_dtype, (partitions, row), "output")],
        [
            dma(sbuf(src_dtype, partitions, row), hbm("x", src_dtype, partitions, row)),
            inst(
                "vector",
                "tensor_copy",
                dst=sbuf(dst_dtype, partitions, row, 4096),
                src=sbuf(src_dtype, partitions, row),
            ),
            dma(hbm("y", dst_dtype, partitions, row), sbuf(dst_dtype, partitions, row, 4096)),
        ],
    )
