"""`neuronxcc.nki.compiler` (ncc): decorators are accepted and ignored; direct allocation
(`ncc.sbuf.alloc`, `mod_alloc`, `psum.*`) is not supported: trnsim's front-end allocates every
tile itself, checking the capacity (docs/nki.md)."""

from ._core import NkiError, caller_loc


def skip_middle_end_transformations(func):
    return func


def enable_stack_allocator(func=None, **kwargs):
    return func if func is not None else (lambda f: f)


def force_auto_alloc(func):
    return func


class _Space:
    def __init__(self, name):
        self.name = name

    def _no(self, *args, **kwargs):
        raise NkiError(f"ncc.{self.name} direct allocation is not supported by the trnsim front-end; use "
                       f"buffer=nl.{self.name}", caller_loc()[0])

    alloc = mod_alloc = _no

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
