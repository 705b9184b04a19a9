"""The ViT chapter's PyTorch/XLA section: readings ({ref}`ch-vit-xla`, `notebooks/05_vit_xla.md`).

The checks and sentences of the page that runs the ViT's PyTorch training step through
PyTorch/XLA (lazy tensors, `torch.compile` with the openxla backend) and torchax in a worker
process (`deepdive.models.xla_route`, `deepdive.models.xla_worker`): the worker's settings
checked against this process's, each route's versions and mode-table row, and the verdicts
read as prose."""

from __future__ import annotations

import math

from deepdive.models import xla_route

__all__ = [
    "torch_named",
    "torch_here",
    "JAX_HERE",
    "check_worker",
    "route_framework",
    "route_versions",
    "first_two_steps_s",
    "parity_column",
    "mode_row",
    "compile_sentence",
    "compile_story",
    "verdict_phrase",
    "version_reading",
    "xla_reading",
    "scope_sentence",
    "first_two_losses",
    "loss_check",
    "not_run_glue",
    "this_process",
]

JAX_HERE = "JAX jax.jit (Flax NNX twin)"  # the page's own JAX route
SAME_LIBRARIES = ("jax", "jaxlib", "flax", "optax", "transformers")


def torch_named(torch_version: str) -> str:
    """A torch version as the page's prose names it, any local build tag (+cpu) dropped:
    "2.9.0+cpu" -> "torch 2.9.0". The page glues the book's torch and the worker's this way."""
    return f"torch {torch_version.split('+')[0]}"


def torch_here(torch_version: str) -> str:
    """The page's own PyTorch route, eager on this process's torch (the book's pinned one):
    "torch <version> eager"."""
    return f"{torch_named(torch_version)} eager"


def check_worker(hello: dict, here: dict, cpu_threads: int, affinity: list[int]) -> dict:
    """Assert the worker runs as this process does: one CPU affinity and thread count, fp32
    strict in torch, torch_xla and JAX, no CUDA in torch_xla, and the same JAX-side libraries
    (the A/A control runs the same JAX step in both). Returns the worker's table column."""
    side = hello["versions"]
    problems = []
    if hello["torch threads"] != cpu_threads:
        problems.append(f"torch threads {hello['torch threads']} != {cpu_threads}")
    if hello["CPU affinity"] != sorted(affinity):
        problems.append(f"CPU affinity {hello['CPU affinity']} != {sorted(affinity)}")
    if hello["torch_xla matmul precision"] != "highest" or hello["PJRT_DEVICE"] != "CPU":
        problems.append("torch_xla is not fp32 strict on the CPU")
    for key in ("torch matmul precision", "jax matmul precision"):
        if not hello[key] == here[key] == "highest":
            problems.append(f"{key}: worker {hello[key]}, here {here[key]}")
    if hello["torch_xla's _has_cuda_support binding present"]:
        problems.append("torch_xla has CUDA support")
    problems += [f"{name}: worker {side[name]}, here {here[f'version of {name}']}"
                 for name in SAME_LIBRARIES if side[name] != here[f"version of {name}"]]
    if problems:
        raise AssertionError("the worker does not run as this process: " + "; ".join(problems))
    return ({k: ", ".join(map(str, v)) if isinstance(v, list) else v
             for k, v in hello.items() if k != "versions"}
            | {f"version of {k}": v for k, v in side.items()})


def route_framework(route: str) -> str:
    """Which framework's runtime a route runs on: torchax and the twin run on JAX."""
    return "jax" if route in (JAX_HERE, xla_route.JAX_TWIN, xla_route.TORCHAX) else "torch"


def route_versions(route: str, side: dict, here_jax: str, here_torch: str) -> str:
    """The versions a route ran: the worker's (`side`) or this process's."""
    if route in (JAX_HERE, xla_route.JAX_TWIN):
        return f"jax {side['jax'] if route == xla_route.JAX_TWIN else here_jax}"
    if route == torch_here(here_torch):
        return f"torch {here_torch}"
    extra = {xla_route.LAZY: ["torch_xla"], xla_route.COMPILED: ["torch_xla"],
             xla_route.TORCHAX: ["torchax", "jax"]}.get(route, [])
    return ", ".join([f"torch {side['torch']}"] + [f"{name} {side[name]}" for name in extra])


def first_two_steps_s(first_steps: dict) -> float:
    """Seconds of a worker route's first two steps."""
    return first_steps["first_step_s"] + first_steps["second_step_s"]


def parity_column(reference: str) -> str:
    """The mode table's parity column, named for the route every other is checked against
    (`torch_here` of the book's torch)."""
    return f"max |grad difference| vs {reference}"


def mode_row(route: str, timing, first_steps: dict, parity: float, versions: str,
             batch: int, *, reference: str) -> dict:
    """One row of the mode table; `first_steps` is empty for this process's routes, and
    `parity` is the route's largest gradient difference from `reference`'s."""
    compiled = (f"{first_steps['xla_first_step']} + {first_steps['xla_second_step']} XLA, "
                f"{first_steps['dynamo_first_step'] + first_steps['dynamo_second_step']} "
                "Dynamo" if first_steps else "n/a (this process)")
    return {"route": route, "versions": versions,
            parity_column(reference): parity,
            "first step (s)": timing.first_call,
            "second step (s)": first_steps.get("second_step_s", math.nan),
            "compiled in steps 1 + 2": compiled,
            "steady step (ms)": 1e3 * timing.median, "IQR (ms)": 1e3 * timing.iqr,
            "images/s": batch / timing.median, "recompilations while timed": timing.recompiles,
            "blocks": timing.n, "steps per block": timing.calls_per_block}


def compile_sentence(route: str, steps: dict, recompiles: int) -> str:
    """What a worker route's first two steps, its sizing and its timed rounds compiled."""
    return (f"{route}: step 1 took {steps['first_step_s']:.3f} s and compiled "
            f"{steps['xla_first_step']} XLA program(s) from {steps['dynamo_first_step']} "
            f"Dynamo graph(s), step 2 took {steps['second_step_s']:.3f} s and compiled "
            f"{steps['xla_second_step']} (Dynamo: {steps['dynamo_second_step']}); sizing its "
            f"blocks compiled {steps['xla_sizing'] + steps['dynamo_sizing']}, the timed "
            f"rounds {recompiles}")


def compile_story(first_steps: dict, recompiles: dict) -> str:
    """Every worker route's compile sentence (route -> first-steps report), or nothing."""
    if not first_steps:
        return ""
    return "In this build: " + "; ".join(compile_sentence(r, s, recompiles[r])
                                         for r, s in first_steps.items()) + "."


def verdict_phrase(glued: dict, key: str) -> str:
    """A claim's verdict word, "it" and its glued ratio: "faster than it (1.2x [...])"."""
    return f"{glued[key]} it ({glued[key + '_ratio']})"


def version_reading(verdict: str, xla_torch: str, book_torch: str) -> str:
    """How to read the worker's rows (`xla_torch`, "torch 2.9.0") beside the ViT chapter's,
    measured on the book's torch (`book_torch`), from the verdict of the same eager step on
    both versions."""
    if verdict == "tie":
        return (f"so at this size rows measured on {xla_torch} can be read beside the ViT "
                f"chapter's {book_torch} rows")
    if verdict == "withheld":
        return ("so this build cannot tell whether the two versions differ at this size: "
                f"read {xla_torch} rows beside the ViT chapter's with that caveat")
    return (f"so the versions differ at this size: compare {xla_torch} rows only with "
            f"{xla_torch} rows")


def xla_reading(glued: dict, cited: bool, first_two: dict, book_torch: str,
                xla_torch: str) -> str:
    """The page's verdicts as a paragraph. `first_two`: route -> seconds of its first two
    steps (lazy, compiled, torchax, the worker's JAX twin); `cited`: the JAX-against-eager
    claim is the ViT chapter's, cited rather than measured again; `book_torch` and
    `xla_torch`: this process's torch and the worker's, as `torch_named` writes them."""
    said = {key: verdict_phrase(glued, key) for key in (
        "xla_lazy_vs_eager", "xla_compile_vs_eager", "torchax_vs_eager", "xla_lazy_vs_jax",
        "xla_compile_vs_jax", "torchax_vs_jax")}
    own = ""
    if (glued["xla_lazy_vs_eager_verdict"] == "slower"
            and glued["jax_vs_torch_eager_verdict"] == "slower"):
        own = ("JAX's own step lost to eager PyTorch too, so part of what the XLA routes lose "
               "against eager PyTorch here is XLA on this CPU, not the PyTorch side; the "
               "verdicts against JAX isolate what running PyTorch code through XLA costs. ")
    jax_claim = ("The ViT chapter's claim on the same step (cited, not measured again here): "
                 "JAX's jitted step was " if cited
                 else "In this page's process, JAX's jitted step was ")
    seconds = {route: f"{s:.1f} s" for route, s in first_two.items()}
    return (
        f"On {xla_torch}, against eager PyTorch, lazy tensors were {said['xla_lazy_vs_eager']}, "
        f"the openxla backend {said['xla_compile_vs_eager']} and torchax "
        f"{said['torchax_vs_eager']}. Against the same JAX step in the same worker, they were "
        f"{said['xla_lazy_vs_jax']}, {said['xla_compile_vs_jax']} and {said['torchax_vs_jax']}. "
        + jax_claim + f"{glued['jax_vs_torch_eager']} eager PyTorch on {book_torch} "
        f"({glued['jax_vs_torch_eager_ratio']}). {own}Before a route is fast, its first two "
        f"steps cost: lazy tensors {seconds[xla_route.LAZY]}, the openxla backend "
        f"{seconds[xla_route.COMPILED]}, torchax {seconds[xla_route.TORCHAX]} and the JAX step "
        f"{seconds[xla_route.JAX_TWIN]}. The same eager step on {xla_torch} was "
        f"{glued['xla_torch_vs_book_torch']} {book_torch} "
        f"({glued['xla_torch_vs_book_torch_ratio']}), "
        f"{version_reading(glued['xla_torch_vs_book_torch_verdict'], xla_torch, book_torch)}. "
        "All of this is one small "
        "model on one CPU core; on a TPU or at the seed's sizes the balance can differ, and "
        "this build does not measure it.")


def scope_sentence(scope_device: str, scale: str, n_params: int, batch: int,
                   xla_torch: str | None) -> str:
    """The findings box's scope: device, scale, model size, batch and versions; `xla_torch`
    is the torch the worker ran ("torch 2.9.0"), None when no worker ran."""
    side = (f" Rows on {xla_torch} ran in the side environment; the verdicts against eager "
            f"PyTorch compare {xla_torch} with {xla_torch}." if xla_torch else "")
    return (f"Measured on {scope_device} at {scale} scale: one training step of a "
            f"{n_params / 1e6:.2f}M-parameter ViT, batch {batch}.{side} A CPU build's "
            "verdicts speak neither to the seed's GPU results nor to TPUs, the device both "
            "PyTorch/XLA and torchax target first.")


def first_two_losses(step) -> list[float]:
    """The losses of a step's first two calls (the second shows the first AdamW update)."""
    return [float(loss.item() if hasattr(loss, "item") else loss) for loss in (step(), step())]


def loss_check(route: str, reference: list[float], tolerance: dict, record: dict):
    """A check for a route's first-steps report (or its two losses): records them under
    `route` in `record`, and raises when they leave `tolerance` (np.allclose's rtol, atol)
    around the `reference` losses (eager PyTorch on the book's torch, in this process)."""
    import numpy as np

    def check(report):
        losses = report["losses"] if isinstance(report, dict) else report
        record[route] = losses
        if not np.allclose(losses, reference, **tolerance):
            raise AssertionError(f"{route}: first two losses {losses} differ from the book's "
                                 f"torch eager's {reference} beyond {tolerance}")

    return check


def not_run_glue(reason: str, tie_band_pct: float) -> dict:
    """What the page glues when the route did not run: the reason in the findings box and
    the summary, and this build's band for the captions' numbers."""
    import pandas as pd
    from IPython.display import Markdown

    return {"claims_found": Markdown(f"- The PyTorch/XLA route was {reason}."),
            "claims_all": pd.DataFrame({"verdict": ["not run"]},
                                       index=pd.Index([reason], name="question")),
            "tie_band_pct": tie_band_pct, "across_band_pct": tie_band_pct,
            "aa_reach_pct": tie_band_pct}


def this_process() -> dict:
    """This process's settings and versions, as the worker reports its own ("hello")."""
    import os
    import platform

    import jax
    import torch

    from deepdive.models import xla_worker

    here = {"torch threads": torch.get_num_threads(),
            "CPU affinity": ", ".join(map(str, sorted(os.sched_getaffinity(0)))),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
            "XLA_FLAGS": os.environ.get("XLA_FLAGS"),
            "torch matmul precision": torch.get_float32_matmul_precision(),
            "jax matmul precision": str(jax.config.jax_default_matmul_precision),
            "torch build's CUDA": torch.version.cuda or "none (CPU build)"}
    here |= {f"version of {name}": version for name, version in xla_worker.installed(
        ["torch", *SAME_LIBRARIES]).items()}
    return here | {"version of python": platform.python_version()}
