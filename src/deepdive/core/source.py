"""Where the code a timing ran was written: the page itself, or which module of the package.

A chapter's timed variants are written on its page (DESIGN.md, "A chapter page"), so a
reader sees the code that was timed; shared code (the models, their workers, the measurement
core) lives in `deepdive.models` and `deepdive.core`. `defined_in` names the modules behind
one timed callable, and `deepdive.core.timing.compare` keeps them with every `Timing`
(`Timing.code`), as `torch.utils.benchmark` keeps the statement it timed. The site's tests
read them back from the build's results and fail where a page timed code from anywhere
else. Chapter 1 introduces it.
"""

from __future__ import annotations

import functools
import inspect
import types

__all__ = ["ALLOWED", "PAGE", "defined_in", "foreign"]

PAGE = "__main__"  # a notebook's cells run as __main__ in its kernel
# Where timed code may come from: the page, the shared layers, and any library outside the book.
ALLOWED = (PAGE, "deepdive.core", "deepdive.models")
_DEPTH = 4  # page functions that call page functions: how deep the walk follows them


def defined_in(fn, _depth: int = _DEPTH, _seen: set | None = None) -> tuple[str, ...]:
    """The module (and qualified name) of `fn`, unwrapped from `functools.partial`,
    `jax.jit`, `torch.compile` and bound methods, then of every `deepdive` module,
    function or object it names directly (its closure and the globals its code reads).
    Functions written on the page are followed `_depth` levels deep, so a page lambda that
    calls a page function that calls a package helper names that helper's module.

    Returns sorted "module:qualname" strings (bare "module" for a module the code reads).
    """
    seen = set() if _seen is None else _seen
    found: set[str] = set()
    target = _unwrap(fn)
    if id(target) in seen:
        return ()
    seen.add(id(target))
    found.add(_name(target))
    if _depth > 0:
        for ref in _references(target):
            if isinstance(ref, types.ModuleType):
                if ref.__name__.startswith("deepdive"):
                    found.add(ref.__name__)
                continue
            inner = _unwrap(ref)
            module = _module(inner)
            if module == PAGE and isinstance(inner, types.FunctionType):
                found.update(defined_in(inner, _depth - 1, seen))
            elif module.startswith("deepdive") and callable(inner):  # code, not data
                found.add(_name(inner))
    return tuple(sorted(found))


def foreign(origins) -> list[str]:
    """Of `origins` ("module:qualname" strings), the ones from inside the book's package but
    outside its shared layers: page code that hid in a module."""
    return [o for o in origins if o.split(":")[0].startswith("deepdive")
            and not o.split(":")[0].startswith(ALLOWED[1:])]


def _unwrap(fn):
    for _ in range(16):
        if isinstance(fn, functools.partial):
            fn = fn.func
        elif inspect.ismethod(fn):
            fn = fn.__func__
        elif getattr(fn, "__wrapped__", None) is not None:  # jax.jit, torch.compile(fn)
            fn = fn.__wrapped__
        elif getattr(fn, "_orig_mod", None) is not None:  # torch.compile(module)
            fn = fn._orig_mod
        else:
            break
    return fn


def _module(obj) -> str:
    module = getattr(obj, "__module__", None)
    if not isinstance(module, str) or not isinstance(obj, type | types.FunctionType
                                                     | types.BuiltinFunctionType):
        module = type(obj).__module__  # an instance: where its class was written
    return module or "?"


def _name(obj) -> str:
    owner = obj if isinstance(obj, type | types.FunctionType | types.BuiltinFunctionType) \
        else type(obj)
    return f"{_module(obj)}:{getattr(owner, '__qualname__', type(owner).__name__)}"


def _references(fn) -> list:
    """What a plain function's code reads: its closure cells and the globals it names."""
    if not isinstance(fn, types.FunctionType):
        call = type(fn).__dict__.get("__call__")  # a callable object: its class's __call__
        return _references(call) if isinstance(call, types.FunctionType) else []
    refs = []
    for cell in fn.__closure__ or ():
        try:
            refs.append(cell.cell_contents)
        except ValueError:  # an empty cell
            continue
    names = set(fn.__code__.co_names)
    for const in fn.__code__.co_consts:  # lambdas and comprehensions nested in the code
        if isinstance(const, types.CodeType):
            names.update(const.co_names)
    refs += [fn.__globals__[n] for n in sorted(names) if n in fn.__globals__]
    return refs
