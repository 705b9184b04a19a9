"""What a compiler did and what it cost: JAX's stages timed apart, kernels counted in HLO.

Chapter 2 (jit and XLA) introduces these; chapter 1 counts kernels with `entry_kernels`.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

_FUSION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=.*?\sfusion\(.*?kind=(\w+)", re.MULTILINE)


@dataclass(frozen=True)
class CompileStages:
    """Seconds spent in each stage of `jax.jit`: Python -> jaxpr -> StableHLO -> executable."""

    trace: float
    lower: float
    compile: float

    @property
    def total(self) -> float:
        return self.trace + self.lower + self.compile


def jax_compile_stages(fn: Callable, *args, **jit_options):
    """Trace, lower and compile ``jax.jit(fn, **jit_options)`` for `args`, each timed.

    JAX's in-memory caches are cleared first, so every stage really runs (a cold compile;
    the persistent on-disk cache, when configured, still applies). Returns
    ``(CompileStages, compiled)``; call ``compiled(*args)`` to run the executable.
    """
    import jax

    if not callable(fn):
        raise TypeError(f"jax_compile_stages needs a function, got a {type(fn).__name__}")
    jax.clear_caches()
    jitted = jax.jit(fn, **jit_options)
    start = time.perf_counter()
    traced = jitted.trace(*args)
    traced_at = time.perf_counter()
    lowered = traced.lower()
    lowered_at = time.perf_counter()
    compiled = lowered.compile()
    compiled_at = time.perf_counter()
    stages = CompileStages(traced_at - start, lowered_at - traced_at, compiled_at - lowered_at)
    return stages, compiled


def _entry(hlo_text: str) -> str:
    if "ENTRY" not in hlo_text:
        raise ValueError("not an HLO module: no ENTRY computation (pass compiled.as_text())")
    return hlo_text.split("ENTRY", 1)[1]


def fusions(hlo_text: str) -> list[tuple[str, str]]:
    """``(name, kind)`` of each fusion the optimized program launches, e.g. ``kLoop``.

    Reads the ENTRY computation of ``compiled.as_text()``: each fusion there is one
    kernel made of several HLO operations.
    """
    return _FUSION.findall(_entry(hlo_text))


def entry_kernels(hlo_text: str) -> int:
    """Kernels the optimized program launches: fusions plus library calls (custom calls,
    such as cuBLAS GEMMs on a GPU), counted in its ENTRY computation."""
    entry = _entry(hlo_text)
    return len(fusions(hlo_text)) + entry.count(" custom-call(")


def break_even_calls(compile_s: float, eager_s: float, compiled_s: float) -> float:
    """Calls after which compiling has paid for itself: compile / (eager - compiled).

    ``inf`` when the compiled call is not faster than the eager one.
    """
    for name, value in (("compile_s", compile_s), ("eager_s", eager_s),
                        ("compiled_s", compiled_s)):
        if not value >= 0:
            raise ValueError(f"{name} must be a number of seconds >= 0, got {value!r}")
    saved = eager_s - compiled_s
    return math.inf if saved <= 0 else compile_s / saved


COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "collective-permute",
               "all-to-all")
# An instruction whose opcode is a collective, in its synchronous or async-start form.
_COLLECTIVE = re.compile(
    r"=\s*[^=]*?\s(" + "|".join(COLLECTIVES) + r")(?:-start)?\(", re.MULTILINE)


def collectives(hlo_text: str) -> dict[str, int]:
    """How many of each cross-device collective a compiled XLA program runs.

    Reads ``compiled.as_text()``; async pairs (``all-reduce-start``/``-done``) count once.
    Chapter 5 lists what XLA inserted for each sharding strategy.
    """
    if "HloModule" not in hlo_text:
        raise ValueError("not an HLO module (pass jitted.lower(...).compile().as_text())")
    counts = dict.fromkeys(COLLECTIVES, 0)
    for match in _COLLECTIVE.finditer(hlo_text):
        counts[match.group(1)] += 1
    return counts
