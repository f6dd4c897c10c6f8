"""trnsim.torch.distributed.project against hand-computed ring and RDH costs."""

from __future__ import annotations

import math

import pytest
import trnsim.torch.distributed as tdist
from trnsim import collectives as cc

RANK_BW = 1024e9 / 4  # a rank's share of a chip's NeuronLink bandwidth
RED = 3500e9 / 4 * 0.5  # a rank's share of the DMA collective-compute rate
ON_CHIP = 3500e9 / 4
HOP = 1.5e-6


def ring16(s):
    return 30 * HOP + 30 * (s / 16) / RANK_BW + 15 * (s / 16) / RED


def ring4(s):
    # 4 ranks on one chip: on-chip DMA every step
    return 6 * HOP + 6 * (s / 4) / ON_CHIP + 3 * (s / 4) / RED


def test_projection_ring_by_hand():
    s = 8e6
    p = tdist.project(2e-3, [{"collective": "all_reduce", "bytes": s}], 4, s=cc.Settings(algorithm="ring"))
    assert p.kind == "projection" and p.extrapolated
    row = next(r for r in p.rows if r.ranks == 16)
    assert math.isclose(row.comm_s, ring16(s), rel_tol=1e-12)
    assert math.isclose(row.step_s, 2e-3 + ring16(s), rel_tol=1e-12)
    assert math.isclose(row.scaling_efficiency, (2e-3 + ring4(s)) / (2e-3 + ring16(s)), rel_tol=1e-12)
    assert math.isclose(row.comm_share, ring16(s) / (2e-3 + ring16(s)), rel_tol=1e-12)
    assert "PROJECTION" in p.table()


def test_projection_rdh_by_size_by_hand():
    s = 8e6  # between 1 MB and 56 MB: RDH
    p = tdist.project(1e-3, [{"collective": "all_reduce", "bytes": s, "count": 2}], 2)
    row = next(r for r in p.rows if r.ranks == 16)
    one = (
        2 * (3e-6 + 3 * HOP)
        + 2 * (s / 2 / RANK_BW + s / 4 / RANK_BW + s / 8 / ON_CHIP + s / 16 / ON_CHIP)
        + (s / 2 + s / 4 + s / 8 + s / 16) / RED
    )
    assert row.per_collective[0]["algorithm"] == "rdh"
    assert math.isclose(row.comm_s, 2 * one, rel_tol=1e-12)
    efa = [r for r in p.rows if "EFA" in r.system]
    assert [r.ranks for r in efa] == [128, 256, 512, 1024]
    assert all(a.step_s <= b.step_s for a, b in zip(efa, efa[1:]))
    with pytest.raises(ValueError):
        tdist.project(1e-3, [], 16)
