"""NKI backend modules (``nki:MODULE``): importing one, checking its ``OVERLOADS`` table, and
naming its kernels by ``file:line``.

One implementation for both places a backend module is used: ``trnconf run --backend
nki:MODULE`` (the process executor, conformance/pyexec/nki_module_backend.py) and the PyTorch
device's ``TRNSIM_TORCH_BACKEND=nki:MODULE`` (``trnsim.torch``). docs/nki-backend.md describes
the module's shape::

    OVERLOADS = {"add.Tensor": (add_kernel, add_tensor), ...}   # (kernel or tuple of kernels, wrapper)
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys


class BackendModuleError(Exception):
    """A backend module that cannot be used: no such file, an import that fails, or an
    ``OVERLOADS`` table of the wrong shape. The message starts with the module's spelling."""


def _import(spec: str):
    if spec.endswith(".py") or os.sep in spec:
        path = os.path.abspath(spec)
        if not os.path.isfile(path):
            raise BackendModuleError(f"{spec}: no such file")
        name = os.path.splitext(os.path.basename(path))[0]
        folder = os.path.dirname(path)
        if folder not in sys.path:
            sys.path.insert(0, folder)  # the module's own helpers import as siblings
        mod_spec = importlib.util.spec_from_file_location(name, path)
        if mod_spec is None or mod_spec.loader is None:
            raise BackendModuleError(f"{spec}: not a Python file")
        module = importlib.util.module_from_spec(mod_spec)
        sys.modules[name] = module
        mod_spec.loader.exec_module(module)
        return module
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    return importlib.import_module(spec)


def load(spec: str):
    """Imports the backend module ``spec`` (a path to a .py file, or a dotted name importable from
    the current directory) and checks its ``OVERLOADS``. Raises :class:`BackendModuleError`."""
    try:
        module = _import(spec)
    except BackendModuleError:
        raise
    except Exception as e:  # any import failure names the module
        raise BackendModuleError(f"{spec}: the module does not import: {type(e).__name__}: {e}") from e
    table = getattr(module, "OVERLOADS", None)
    if not isinstance(table, dict):
        raise BackendModuleError(
            f"{spec}: a backend module defines OVERLOADS, a dict from Core ATen overload to "
            "(kernel or tuple of kernels, wrapper)"
        )
    for op, entry in table.items():
        if not (isinstance(entry, tuple) and len(entry) == 2 and callable(entry[1])):
            raise BackendModuleError(f"{spec}: OVERLOADS[{op!r}] must be (kernel or tuple of kernels, wrapper)")
    return module


def kernels_of(entry) -> list:
    """The kernels of one ``OVERLOADS`` entry (one kernel or a tuple of them)."""
    k = entry[0]
    return list(k) if isinstance(k, (tuple, list)) else [k]


def function_of(kernel):
    """The Python function behind a kernel object (an ``nki.jit`` wrapper or a plain function)."""
    f = kernel
    for _ in range(8):
        inner = None
        for attr in ("func", "__wrapped__", "fn", "kernel", "function"):
            g = getattr(f, attr, None)
            if g is not None and g is not f and callable(g):
                inner = g
                break
        if inner is None:
            break
        f = inner
    return f


def display_path(path: str) -> str:
    """``path`` relative to the current directory when it lies below it, else as given."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def kernel_location(kernel) -> str:
    """``name (file:line)`` of a kernel: the line of its ``def``."""
    f = function_of(kernel)
    name = getattr(f, "__name__", repr(f))
    try:
        path = inspect.getsourcefile(f)
        lines, first = inspect.getsourcelines(f)
    except (TypeError, OSError):
        return name
    for i, line in enumerate(lines):
        if line.lstrip().startswith(("def ", "async def ")):
            first += i
            break
    return f"{name} ({display_path(path or '?')}:{first})"


def source_files(module) -> set[str]:
    """The module's file and every file that defines one of its kernels: a traceback frame in
    one of them is the module's own code."""
    files = {os.path.abspath(getattr(module, "__file__", "") or "")}
    for entry in module.OVERLOADS.values():
        for k in kernels_of(entry):
            try:
                files.add(os.path.abspath(inspect.getsourcefile(function_of(k)) or ""))
            except TypeError:
                pass
    return files
