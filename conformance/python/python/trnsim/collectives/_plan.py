"""Collective algorithms as step-by-step plans of moves between ranks (pure Python, no torch).

A plan is a list of steps; a step is a list of :class:`Move`. Every move of a step reads its
source as it was at the start of the step (the hardware's rings run a step's transfers
concurrently), and the moves that land on one rank are applied in list order. A reducing move
combines the received chunk into the destination (``dst = dst op received``); a copying move
overwrites it. docs/distributed.md ("Algorithms") writes out the order of every algorithm.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: The algorithms AWS names for Trainium collectives (neuron-runtime intranode-collective-comm).
ALGORITHMS = ("mesh", "rdh", "kangaring", "ring")


@dataclass(frozen=True)
class Move:
    """``n`` elements from ``src``'s buffer ``src_buf`` at ``src_off`` to ``dst``'s ``dst_buf`` at
    ``dst_off`` (element offsets); ``reduce``: combine instead of overwrite."""

    src: int
    dst: int
    src_off: int
    dst_off: int
    n: int
    reduce: bool
    src_buf: str = "buf"
    dst_buf: str = "buf"


@dataclass
class Plan:
    collective: str
    algorithm: str
    world: int
    steps: list[list[Move]] = field(default_factory=list)
    #: why the algorithm differs from the one asked for (a Ring fallback), or None.
    fallback: str | None = None

    def moves(self):
        for step in self.steps:
            yield from step

    def bytes_moved(self, itemsize: int) -> int:
        """Bytes that cross between ranks (moves within one rank are local DMA copies)."""
        return sum(m.n * itemsize for m in self.moves() if m.src != m.dst)


def is_pow2(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def split(n: int, parts: int) -> list[tuple[int, int]]:
    """``n`` elements in ``parts`` contiguous chunks ``(offset, length)``: the first ``n % parts``
    chunks one element longer (chunks may be empty)."""
    base, extra = divmod(n, parts)
    out, off = [], 0
    for c in range(parts):
        ln = base + (1 if c < extra else 0)
        out.append((off, ln))
        off += ln
    return out


def chunks_of(counts: list[int]) -> list[tuple[int, int]]:
    out, off = [], 0
    for c in counts:
        out.append((off, c))
        off += c
    return out


def effective(algorithm: str, world: int, collective: str) -> tuple[str, str | None]:
    """The algorithm that runs for ``algorithm`` at ``world`` ranks, and why it differs.

    RDH needs a power-of-two rank count (it pairs ranks across the bits of the rank); KangaRing
    needs an even count (a primary and a secondary rank per chip). Either falls back to Ring
    otherwise, as does KangaRing for the collectives it is not defined for here (broadcast)."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown collective algorithm {algorithm!r} (one of {', '.join(ALGORITHMS)})")
    if world == 1:
        return algorithm, None
    if algorithm == "rdh" and not is_pow2(world):
        return "ring", f"RDH needs a power-of-two rank count, not {world}"
    if algorithm == "kangaring" and world % 2:
        return "ring", f"KangaRing needs an even rank count (primary/secondary ranks per chip), not {world}"
    if algorithm == "kangaring" and collective == "broadcast":
        return "ring", "KangaRing is modelled for reductions and gathers only"
    return algorithm, None


def _mv(src, dst, chunk, reduce, src_buf="buf", dst_buf="buf"):
    off, n = chunk
    return Move(src, dst, off, off, n, reduce, src_buf, dst_buf)


# ---------------------------------------------------------------------------------------------
# Reduce-scatter phases: rank c ends holding the fully reduced chunk c.


def rs_ring(n_ranks: int, chunks) -> list[list[Move]]:
    # Step k: rank r sends chunk (r-k-1) mod N to rank r+1, which reduces it into its own. The
    # partial sum of chunk c starts at rank c+1 and travels c+1 -> c+2 -> ... -> c.
    n = n_ranks
    return [[_mv(r, (r + 1) % n, chunks[(r - k - 1) % n], True) for r in range(n)] for k in range(n - 1)]


def rs_rdh(n_ranks: int, chunks) -> list[list[Move]]:
    # Recursive halving: at distance d = N/2, N/4, ..., 1 rank r exchanges with r XOR d; each
    # keeps the half of its current chunk range on its side of bit d and sends the other half.
    n = n_ranks
    ranges = [(0, n) for _ in range(n)]
    steps = []
    d = n // 2
    while d >= 1:
        step = []
        new = list(ranges)
        for r in range(n):
            lo, hi = ranges[r]
            mid = (lo + hi) // 2
            send, keep = ((lo, mid), (mid, hi)) if r & d else ((mid, hi), (lo, mid))
            new[r] = keep
            off = chunks[send[0]][0]
            ln = sum(chunks[c][1] for c in range(send[0], send[1]))
            step.append(Move(r, r ^ d, off, off, ln, True))
        ranges = new
        steps.append(step)
        d //= 2
    return steps


def rs_mesh(n_ranks: int, chunks) -> list[list[Move]]:
    # One step of routed writes: every rank writes chunk c to rank c; rank c combines them in
    # the order c+1, c+2, ..., c-1 (mod N) into its own.
    n = n_ranks
    step = []
    for c in range(n):
        for j in range(1, n):
            step.append(_mv((c + j) % n, c, chunks[c], True))
    return [step]


def _kr_chip(n_ranks: int):
    m = n_ranks // 2
    return m, (lambda j: 2 * (j % m)), (lambda j: 2 * (j % m) + 1)


def rs_kangaring_core(n_ranks: int, chunks) -> list[list[Move]]:
    """KangaRing reduce-scatter until the primaries hold their chip's two chunks.

    Ranks 2j (primary) and 2j+1 (secondary) share chip j. The secondary first hands its whole
    buffer to the primary (reduced). The primaries then run two rings at once over the M = N/2
    chips: the even chunks 2i travel forward (j -> j+1), the odd chunks 2i+1 backward
    (j -> j-1), so each ring crosses N/2 hops. Afterwards primary 2j holds chunks 2j and 2j+1."""
    m, prim, sec = _kr_chip(n_ranks)
    total = (chunks[0][0], sum(ln for _, ln in chunks))
    steps = [[_mv(sec(j), prim(j), total, True) for j in range(m)]]
    for k in range(m - 1):
        step = []
        for j in range(m):
            step.append(_mv(prim(j), prim(j + 1), chunks[2 * ((j - k - 1) % m)], True))
            step.append(_mv(prim(j), prim(j - 1), chunks[2 * ((j + k + 1) % m) + 1], True))
        steps.append(step)
    return steps


def rs_kangaring(n_ranks: int, chunks) -> list[list[Move]]:
    m, prim, sec = _kr_chip(n_ranks)
    return rs_kangaring_core(n_ranks, chunks) + [[_mv(prim(j), sec(j), chunks[2 * j + 1], False) for j in range(m)]]


# ---------------------------------------------------------------------------------------------
# All-gather phases: rank c starts with chunk c; every rank ends with all of them.


def ag_ring(n_ranks: int, chunks) -> list[list[Move]]:
    n = n_ranks
    return [[_mv(r, (r + 1) % n, chunks[(r - k) % n], False) for r in range(n)] for k in range(n - 1)]


def ag_rdh(n_ranks: int, chunks) -> list[list[Move]]:
    # Recursive doubling: distance d = 1, 2, ..., N/2; each rank sends all it holds to r XOR d.
    n = n_ranks
    ranges = [(r, r + 1) for r in range(n)]
    steps = []
    d = 1
    while d < n:
        step = []
        for r in range(n):
            lo, hi = ranges[r]
            off = chunks[lo][0]
            ln = sum(chunks[c][1] for c in range(lo, hi))
            step.append(Move(r, r ^ d, off, off, ln, False))
        ranges = [(min(ranges[r][0], ranges[r ^ d][0]), max(ranges[r][1], ranges[r ^ d][1])) for r in range(n)]
        steps.append(step)
        d *= 2
    return steps


def ag_mesh(n_ranks: int, chunks) -> list[list[Move]]:
    n = n_ranks
    return [[_mv(c, (c + j) % n, chunks[c], False) for c in range(n) for j in range(1, n)]]


def ag_kangaring_from_primaries(n_ranks: int, chunks) -> list[list[Move]]:
    """Primary 2j holds chunks 2j and 2j+1: it gives both to its secondary, then the two rings
    carry them around, every write landing on the next chip's primary and secondary at once
    (the hardware's write duplication)."""
    m, prim, sec = _kr_chip(n_ranks)
    steps = [[_mv(prim(j), sec(j), chunks[2 * j + h], False) for j in range(m) for h in (0, 1)]]
    for k in range(m - 1):
        step = []
        for j in range(m):
            even = chunks[2 * ((j - k) % m)]
            odd = chunks[2 * ((j + k) % m) + 1]
            step += [_mv(prim(j), prim(j + 1), even, False), _mv(prim(j), sec(j + 1), even, False)]
            step += [_mv(prim(j), prim(j - 1), odd, False), _mv(prim(j), sec(j - 1), odd, False)]
        steps.append(step)
    return steps


def ag_kangaring(n_ranks: int, chunks) -> list[list[Move]]:
    m, prim, sec = _kr_chip(n_ranks)
    return [[_mv(sec(j), prim(j), chunks[2 * j + 1], False) for j in range(m)]] + ag_kangaring_from_primaries(
        n_ranks, chunks
    )


_RS = {"ring": rs_ring, "rdh": rs_rdh, "mesh": rs_mesh, "kangaring": rs_kangaring}
_AG = {"ring": ag_ring, "rdh": ag_rdh, "mesh": ag_mesh, "kangaring": ag_kangaring}


# ---------------------------------------------------------------------------------------------
# Collectives


def all_reduce(algorithm: str, world: int, n: int) -> Plan:
    alg, why = effective(algorithm, world, "all_reduce")
    plan = Plan("all_reduce", alg, world, fallback=why)
    if world == 1:
        return plan
    chunks = split(n, world)
    if alg == "kangaring":
        plan.steps = rs_kangaring_core(world, chunks) + ag_kangaring_from_primaries(world, chunks)
    else:
        plan.steps = _RS[alg](world, chunks) + _AG[alg](world, chunks)
    return plan


def reduce_scatter(algorithm: str, world: int, counts: list[int]) -> Plan:
    """Rank r ends with the reduction of elements ``[off_r, off_r + counts[r])`` of the buffer
    (uneven counts allowed)."""
    alg, why = effective(algorithm, world, "reduce_scatter")
    plan = Plan("reduce_scatter", alg, world, fallback=why)
    if world > 1:
        plan.steps = _RS[alg](world, chunks_of(counts))
    return plan


def all_gather(algorithm: str, world: int, counts: list[int]) -> Plan:
    """Rank r starts with its block at ``[off_r, off_r + counts[r])`` of the buffer."""
    alg, why = effective(algorithm, world, "all_gather")
    plan = Plan("all_gather", alg, world, fallback=why)
    if world > 1:
        plan.steps = _AG[alg](world, chunks_of(counts))
    return plan


def broadcast(algorithm: str, world: int, n: int, root: int) -> Plan:
    alg, why = effective(algorithm, world, "broadcast")
    plan = Plan("broadcast", alg, world, fallback=why)
    if world == 1:
        return plan
    whole = (0, n)
    rel = lambda v: (v + root) % world
    if alg == "mesh":
        plan.steps = [[_mv(root, rel(v), whole, False) for v in range(1, world)]]
    elif alg == "rdh":
        # A binomial tree: at distance d = 1, 2, 4, ... every rank that has the data sends it d on.
        d = 1
        while d < world:
            plan.steps.append([_mv(rel(v), rel(v + d), whole, False) for v in range(d) if v + d < world])
            d *= 2
    else:
        plan.steps = [[_mv(rel(v), rel(v + 1), whole, False)] for v in range(world - 1)]
    return plan


def reduce(algorithm: str, world: int, n: int, root: int) -> Plan:
    """A reduce-scatter of the algorithm, then every chunk's owner writes it to the root."""
    alg, why = effective(algorithm, world, "reduce")
    plan = Plan("reduce", alg, world, fallback=why)
    if world == 1:
        return plan
    chunks = split(n, world)
    plan.steps = _RS[alg](world, chunks) + [[_mv(c, root, chunks[c], False) for c in range(world) if c != root]]
    return plan


def all_to_all(world: int, send_counts: list[list[int]]) -> Plan:
    """``send_counts[r][d]``: elements rank r sends to rank d (uneven splits allowed). One step of
    routed writes (Mesh) from each rank's ``in`` buffer into each rank's ``out`` buffer, the
    blocks of ``out`` in source-rank order. The block a rank keeps is a local copy."""
    plan = Plan("all_to_all", "mesh", world)
    step = []
    for r in range(world):
        soff = 0
        for d in range(world):
            n = send_counts[r][d]
            doff = sum(send_counts[s][d] for s in range(r))
            step.append(Move(r, d, soff, doff, n, False, "in", "out"))
            soff += n
    plan.steps = [step]
    return plan
