"""`neuronxcc.nki.compiler` (ncc): allocation control and kernel decorators.

`ncc.sbuf.alloc(func)`, `ncc.psum.alloc(func)` and their `mod_alloc` place a tensor's blocks
where the kernel says (docs/nki-allocation.md); `auto_alloc()` is the default (`nl.sbuf` /
`nl.psum`). `force_auto_alloc` makes the allocator ignore the kernel's placements, as AWS
documents. The other decorators are accepted and change nothing here.
"""

import functools

from ._alloc import DirectAlloc, psum_mod_alloc, sbuf_mod_alloc


def skip_middle_end_transformations(func):
    return func


def enable_stack_allocator(func=None, **kwargs):
    return func if func is not None else (lambda f: f)


def force_auto_alloc(func=None):
    """Every tile of the kernel is allocated automatically; direct allocations are ignored."""
    if func is None:
        return force_auto_alloc

    @functools.wraps(func)
    def forced(*args, **kwargs):
        from ._core import Tracer

        Tracer.current().force_auto_alloc = True
        return func(*args, **kwargs)

    return forced


class _Space:
    def __init__(self, name):
        self.name = name

    def alloc(self, func):
        """Place each logical block where `func(block_index, partitions, bytes)` says: SBUF
        `(start_partition, byte_address)`, PSUM `(bank, start_partition, byte_address)`."""
        if not callable(func):
            from ._core import NkiError, caller_loc

            raise NkiError(
                f"ncc.{self.name}.alloc takes a callable (block index, partitions, bytes) -> address", caller_loc()[0]
            )
        return DirectAlloc(self.name, func, f"ncc.{self.name}.alloc")

    def mod_alloc(self, *args, **kwargs):
        """Modulo allocation: block i goes to base + linear(i % num_*_tiles) * size."""
        if self.name == "sbuf":
            return sbuf_mod_alloc(*args, **kwargs)
        return psum_mod_alloc(*args, **kwargs)

    def auto_alloc(self, *args, **kwargs):
        from . import language as nl

        return getattr(nl, self.name)


sbuf = _Space("sbuf")
psum = _Space("psum")


class no_reorder:
    """`with ncc.no_reorder():` keeps the instructions of the block in program order. trnsim runs
    every kernel's instructions in program order (waits only add order), so the block is already
    in order; accepted as such."""

    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
