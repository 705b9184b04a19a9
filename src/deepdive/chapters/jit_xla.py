"""Chapter 2 (jit and XLA): the few tools its page needs that are not its technique.

The page ({ref}`ch-jit`) writes every function it times. It runs some of them in fresh
processes (under glibc's default allocator, or with a new compilation cache), and
`in_fresh_process` sends them there as their source, so a timing made in the child still
records the page as where its code was written (`deepdive.core.source`). The rest reads the
machine (XLA's thread pool, transparent huge pages, the last-level cache) and collects what
JAX logs or what its debugger is typed. torch and jax are never imported here.
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import itertools
import logging
import os
import pickle
import re
import subprocess
import sys
import tempfile
import textwrap
import types
from contextlib import contextmanager
from pathlib import Path

from deepdive.core import allocator
from deepdive.core.timing import Timing

__all__ = ["TypedCommands", "in_fresh_process", "jax_log", "llc_kib", "page_code", "thp_mode",
           "xla_pool_threads"]

PAGE = "__main__"  # a notebook's cells run as __main__ in its kernel
# The child pins its CPU threads before anything imports torch or jax, as the page's set-up does.
_PRELUDE = "import pickle\nimport sys\n\nfrom deepdive.core import env\n\nenv.pin_cpu_threads()\n"
_children = itertools.count(1)


def _names(code: types.CodeType) -> set[str]:
    """The global names a function's code reads, its nested lambdas and comprehensions too."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def page_code(fn) -> str:
    """The source a fresh process needs to define the page function `fn`: an import for each
    module, package function or class it reads, each plain value (number, string) it reads,
    and the source of every page function it calls, its own last. Anything else it reads
    (an array, a dict) must be an argument: the child fails naming it."""
    imports: list[str] = []
    sources: dict[str, str] = {}

    def visit(f) -> None:
        sources[f.__name__] = ""  # taken before its callees: a cycle ends here
        for name in sorted(_names(f.__code__)):
            value = f.__globals__.get(name)
            if name in sources or value is None:
                continue
            module = getattr(value, "__module__", None)
            if isinstance(value, types.ModuleType):
                imports.append(f"import {value.__name__} as {name}")
            elif isinstance(value, types.FunctionType) and module == PAGE:
                visit(value)
            elif isinstance(value, type | types.FunctionType | types.BuiltinFunctionType) \
                    and module not in (None, PAGE) and value.__qualname__.isidentifier():
                imports.append(f"from {module} import {value.__qualname__} as {name}")
            elif type(value) in (bool, int, float, str):
                imports.append(f"{name} = {value!r}")
        sources[f.__name__] = textwrap.dedent(inspect.getsource(f))

    visit(fn)
    own = sources.pop(fn.__name__)
    return "\n".join(dict.fromkeys(imports)) + "\n\n\n" + "\n\n".join([*sources.values(), own])


def in_fresh_process(fn, *args, regime: str = allocator.KEPT, timeout: float = 600):
    """Call the page function `fn(*args)` in a new Python process under the allocator
    `regime` (`allocator.KEPT` or `allocator.DEFAULTS`), defined there from its source
    (`page_code`), and return what it returns. Arguments and result travel by pickle; every
    `Timing` in the result comes back with a negative session of its own, so it never pairs
    with a timing made here (`deepdive.book.claims.Claims` pairs by session)."""
    helpers = str(Path(__file__).resolve().parents[2])  # deepdive, where it is not installed
    path = os.pathsep.join([helpers, os.environ.get("PYTHONPATH", "")])
    base = {**os.environ, "PYTHONPATH": path}
    call = f"\nresult = {fn.__name__}(*pickle.loads(open(sys.argv[1], 'rb').read()))\n" \
           "open(sys.argv[2], 'wb').write(pickle.dumps(result))\n"
    with tempfile.TemporaryDirectory(prefix="deepdive-child-") as folder:
        given, returned = Path(folder, "args.pickle"), Path(folder, "result.pickle")
        given.write_bytes(pickle.dumps(args))
        done = subprocess.run(
            [sys.executable, "-c", _PRELUDE + page_code(fn) + call, str(given), str(returned)],
            env=allocator.child_env(regime, base), capture_output=True, text=True,
            timeout=timeout, check=False)
        if done.returncode:
            raise RuntimeError(f"{fn.__name__} failed in a fresh process:\n{done.stderr[-3000:]}")
        return _apart(pickle.loads(returned.read_bytes()), next(_children))


def _apart(value, child: int):
    if isinstance(value, Timing):
        return dataclasses.replace(value, session=-(1000 * child + value.session))
    if isinstance(value, dict):
        return {k: _apart(v, child) for k, v in value.items()}
    if isinstance(value, list | tuple) and not hasattr(value, "_fields"):
        return type(value)(_apart(v, child) for v in value)
    return value


# --- the machine ------------------------------------------------------------------------------

def xla_pool_threads(tasks: Path = Path("/proc/self/task")) -> int | None:
    """Threads in XLA's CPU compute pool (Linux names them tf_XLAEigen); None elsewhere."""
    if not tasks.is_dir():
        return None
    names = []
    for task in tasks.iterdir():
        try:
            names.append((task / "comm").read_text().strip())
        except OSError:  # a thread that ended while we looked
            pass
    return names.count("tf_XLAEigen")


def thp_mode(path: Path = Path("/sys/kernel/mm/transparent_hugepage/enabled")) -> str:
    """The kernel's transparent-huge-page mode ('always', 'madvise', 'never'), or 'unknown'."""
    found = re.search(r"\[(\w+)\]", path.read_text()) if path.exists() else None
    return found.group(1) if found else "unknown"


def llc_kib(path: Path = Path("/sys/devices/system/cpu/cpu0/cache/index3/size")) -> int | None:
    """The last-level cache's size in KiB as the kernel reports it; None where it does not."""
    return int(path.read_text().strip().rstrip("K")) if path.exists() else None


# --- what JAX logs, what its debugger reads ---------------------------------------------------

@contextmanager
def jax_log():
    """Collect the messages JAX logs inside the block (a list, filled as they come)."""
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    handler = Collect()
    logging.getLogger("jax").addHandler(handler)
    try:
        yield messages
    finally:
        logging.getLogger("jax").removeHandler(handler)


class TypedCommands(io.StringIO):
    """Debugger commands from a string, echoed into `transcript` as if typed."""

    def __init__(self, commands: str, transcript: io.StringIO):
        super().__init__(commands)
        self.transcript = transcript

    def readline(self, *args):
        line = super().readline(*args)
        self.transcript.write(line)
        return line
