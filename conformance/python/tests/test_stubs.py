"""The type stubs of the native module (trnsim/_native.pyi) match the module itself.

The module is compiled from Rust (conformance/python/src/*.rs), so nothing checks the stubs but
this test: every public function, constant and class of `trnsim._native`, and every method,
property and static method of those classes, must have a stub entry of the same kind with the same
parameter names and defaults, and every stub entry must exist in the module. The stubs are read
from beside the imported module, so an install whose wheel left them out fails too.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
from trnsim import _native

STUB = Path(_native.__file__).with_name("_native.pyi")

# Members every class has, or that PyO3 adds to every class, and `object`'s own methods a class
# overrides without changing their signature (a stub leaves those out: ruff's PYI029): not part of
# the module's interface.
_CLASS_INTERNALS = {
    "__doc__",
    "__module__",
    "__new__",
    "__dict__",
    "__weakref__",
    "__qualname__",
    "__repr__",
    "__str__",
}
# Py_TPFLAGS_BASETYPE: the class can be subclassed (a PyO3 class without `subclass` cannot).
_BASETYPE = 1 << 10
_NO_DEFAULT = "<no default>"


def _public(name: str) -> bool:
    return not name.startswith("_") or (name.startswith("__") and name.endswith("__"))


def _runtime_params(obj) -> list[tuple[str, object]] | None:
    """Parameter names and defaults from the compiled signature (PyO3's text signature), without
    `self`; None when the object carries no signature."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    params = list(sig.parameters.values())
    if params and params[0].name == "self":
        params = params[1:]
    return [(p.name, _NO_DEFAULT if p.default is inspect.Parameter.empty else p.default) for p in params]


def runtime_entries(module) -> dict[str, tuple[str, list[tuple[str, object]] | None]]:
    """`qualified name -> (kind, params)` for the module's public interface."""
    out: dict[str, tuple[str, list[tuple[str, object]] | None]] = {}
    if hasattr(module, "__all__"):
        out["__all__"] = ("list of names", sorted(module.__all__))
    for name in dir(module):
        if name.startswith("_"):
            continue
        value = getattr(module, name)
        if isinstance(value, type):
            out[name] = ("final class" if not value.__flags__ & _BASETYPE else "class", None)
            if value.__text_signature__ is not None:  # a `#[new]` constructor: PyO3 defines `__new__`
                out[f"{name}.__new__"] = ("method", _runtime_params(value))
            for member, raw in vars(value).items():
                if member in _CLASS_INTERNALS or not _public(member):
                    continue
                if isinstance(raw, staticmethod):
                    kind = "staticmethod"
                elif inspect.isdatadescriptor(raw):
                    kind = "property"
                else:
                    kind = "method"
                params = None if kind == "property" else _runtime_params(getattr(value, member))
                out[f"{name}.{member}"] = (kind, params)
        elif callable(value):
            out[name] = ("function", _runtime_params(value))
        else:
            out[name] = (f"constant {type(value).__name__}", None)
    return out


def _stub_params(fn: ast.FunctionDef, drop_first: bool) -> list[tuple[str, object]]:
    a = fn.args
    positional = a.posonlyargs + a.args
    defaults = [_NO_DEFAULT] * (len(positional) - len(a.defaults)) + [ast.literal_eval(d) for d in a.defaults]
    params = [(p.arg, d) for p, d in zip(positional, defaults)]
    params += [(p.arg, _NO_DEFAULT if d is None else ast.literal_eval(d)) for p, d in zip(a.kwonlyargs, a.kw_defaults)]
    return params[1:] if drop_first else params


def _decorators(node: ast.FunctionDef | ast.ClassDef) -> set[str]:
    return {d.id if isinstance(d, ast.Name) else ast.unparse(d) for d in node.decorator_list}


def _annotation_type(node: ast.expr) -> str:
    """The runtime type name a constant's annotation names (`list[str]` -> `list`)."""
    return ast.unparse(node.value if isinstance(node, ast.Subscript) else node)


def stub_entries(tree: ast.Module) -> dict[str, tuple[str, list[tuple[str, object]] | None]]:
    """`qualified name -> (kind, params)` for the stub's public entries."""
    out: dict[str, tuple[str, list[tuple[str, object]] | None]] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and _public(node.name):
            out[node.name] = ("function", _stub_params(node, drop_first=False))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and _public(node.target.id):
            out[node.target.id] = (f"constant {_annotation_type(node.annotation)}", None)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id == "__all__":
                    out["__all__"] = ("list of names", sorted(ast.literal_eval(node.value)))
                elif isinstance(target, ast.Name) and not target.id.startswith("_"):
                    out[target.id] = ("constant (unannotated)", None)
        elif isinstance(node, ast.ClassDef) and _public(node.name):
            out[node.name] = ("final class" if "final" in _decorators(node) else "class", None)
            for member in node.body:
                if not isinstance(member, ast.FunctionDef) or not _public(member.name):
                    continue
                decorators = _decorators(member)
                if "staticmethod" in decorators:
                    out[f"{node.name}.{member.name}"] = ("staticmethod", _stub_params(member, drop_first=False))
                elif "property" in decorators:
                    out[f"{node.name}.{member.name}"] = ("property", None)
                else:
                    out[f"{node.name}.{member.name}"] = ("method", _stub_params(member, drop_first=True))
    return out


def mismatches(runtime: dict, stub: dict) -> list[str]:
    """Every difference between the module's interface and the stub's, one line each."""
    problems = [f"`{name}` ({runtime[name][0]}) has no stub entry" for name in sorted(runtime.keys() - stub.keys())]
    problems += [f"stub entry `{name}` is not in the module" for name in sorted(stub.keys() - runtime.keys())]
    for name in sorted(runtime.keys() & stub.keys()):
        (rkind, rparams), (skind, sparams) = runtime[name], stub[name]
        if rkind != skind:
            problems.append(f"`{name}` is a {rkind} in the module, a {skind} in the stub")
        elif rparams is not None and sparams is not None and rparams != sparams:
            problems.append(f"`{name}` differs: module {rparams}, stub {sparams}")
    return problems


def _stub_tree() -> ast.Module:
    assert STUB.is_file(), f"no stub beside the native module ({STUB}): is it in the package?"
    return ast.parse(STUB.read_text(encoding="utf-8"), filename=str(STUB))


def test_the_stub_and_py_typed_ship_beside_the_native_module():
    assert STUB.is_file(), STUB
    assert STUB.with_name("py.typed").is_file(), "no py.typed marker (PEP 561) in the package"


def test_every_attribute_of_the_native_module_has_a_matching_stub():
    runtime = runtime_entries(_native)
    stub = stub_entries(_stub_tree())
    # The inventory itself must see the module's interface, or the comparison proves nothing.
    assert {"Program", "Session", "run", "lower_op", "SOURCE_HASH", "Session.put", "Program.hbm"} <= runtime.keys()
    problems = mismatches(runtime, stub)
    assert not problems, "trnsim/_native.pyi does not match the native module:\n" + "\n".join(problems)


def test_every_stub_entry_is_typed_and_documented():
    problems = []
    for node in ast.walk(_stub_tree()):
        if isinstance(node, ast.ClassDef) and ast.get_docstring(node) is None:
            problems.append(f"class {node.name}: no docstring")
        if not isinstance(node, ast.FunctionDef):
            continue
        if ast.get_docstring(node) is None:
            problems.append(f"{node.name}: no docstring")
        if node.returns is None:
            problems.append(f"{node.name}: no return type")
        a = node.args
        for i, p in enumerate(a.posonlyargs + a.args + a.kwonlyargs):
            if p.annotation is None and not (i == 0 and p.arg in ("self", "cls")):
                problems.append(f"{node.name}({p.arg}): no type")
    assert not problems, "\n".join(problems)


def test_the_check_fails_for_an_attribute_added_without_a_stub(monkeypatch):
    monkeypatch.setattr(_native, "new_function", len, raising=False)
    monkeypatch.setattr(_native, "NEW_CONSTANT", 3, raising=False)
    problems = mismatches(runtime_entries(_native), stub_entries(_stub_tree()))
    assert problems == [
        "`NEW_CONSTANT` (constant int) has no stub entry",
        "`new_function` (function) has no stub entry",
    ]


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            lambda s: s.pop("Session.device_bytes"),
            "`Session.device_bytes` (method) has no stub entry",
        ),
        (
            lambda s: s.update({"Session.flush": ("method", [])}),
            "stub entry `Session.flush` is not in the module",
        ),
        (
            lambda s: s.update({"run": ("function", [("program", _NO_DEFAULT), ("inputs", _NO_DEFAULT)])}),
            (
                "`run` differs: module [('program', '<no default>'), ('inputs', '<no default>'), "
                "('target', None), ('numerics_json', None)], stub [('program', '<no default>'), "
                "('inputs', '<no default>')]"
            ),
        ),
        (
            lambda s: s.update({"Program.target": ("method", [])}),
            "`Program.target` is a property in the module, a method in the stub",
        ),
        (
            lambda s: s.update({"Session": ("class", None)}),
            "`Session` is a final class in the module, a class in the stub",
        ),
        (
            lambda s: s.pop("Session.__new__"),
            "`Session.__new__` (method) has no stub entry",
        ),
        (
            lambda s: s["__all__"][1].remove("run"),
            "`__all__` differs: module "
            + str(sorted(_native.__all__))
            + ", stub "
            + str(sorted(set(_native.__all__) - {"run"})),
        ),
    ],
)
def test_the_check_fails_for_a_stub_that_drifted(edit, expected):
    stub = stub_entries(_stub_tree())
    edit(stub)
    assert mismatches(runtime_entries(_native), stub) == [expected]
