"""Element-wise add over an SPMD grid of [128, 512] tiles; masks cover ragged edges."""

import neuronxcc.nki.language as nl
from neuronxcc import nki

TILE_P = 128
TILE_F = 512


@nki.jit
def add_tiles(a, b):
    """a, b: [R, C] with R a multiple of 128 and C a multiple of 512; grid = (R // 128, C // 512)."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    row = nl.program_id(0) * TILE_P
    col = nl.program_id(1) * TILE_F
    a_tile = nl.load(a[row : row + TILE_P, col : col + TILE_F])
    b_tile = nl.load(b[row : row + TILE_P, col : col + TILE_F])
    nl.store(out[row : row + TILE_P, col : col + TILE_F], value=a_tile + b_tile)
    return out


@nki.jit
def add_ragged(a, b):
    """Any [R, C]: the grid covers ceil(R / 128) x ceil(C / 512) tiles; the last row and column of
    tiles are masked to the tensor's edge."""
    rows, cols = a.shape
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.program_id(0) * TILE_P + nl.arange(TILE_P)[:, None]
    i_f = nl.program_id(1) * TILE_F + nl.arange(TILE_F)[None, :]
    inside = (i_p < rows) & (i_f < cols)
    a_tile = nl.load(a[i_p, i_f], mask=inside)
    b_tile = nl.load(b[i_p, i_f], mask=inside)
    c_tile = nl.add(a_tile, b_tile)
    nl.store(out[i_p, i_f], value=c_tile, mask=inside)
    return out


@nki.jit
def add_loop(a, b):
    """One instance walking the whole tensor with affine_range loops (no grid)."""
    rows, cols = a.shape
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:TILE_P, 0:TILE_F]
    for r in nl.affine_range((rows + TILE_P - 1) // TILE_P):
        for c in nl.affine_range((cols + TILE_F - 1) // TILE_F):
            rr = r * TILE_P + i_p
            cc = c * TILE_F + i_f
            m = (rr < rows) & (cc < cols)
            x = nl.load(a[rr, cc], mask=m)
            y = nl.load(b[rr, cc], mask=m)
            nl.store(out[rr, cc], value=nl.add(x, y, mask=m), mask=m)
    return out
