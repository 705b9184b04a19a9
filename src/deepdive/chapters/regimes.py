"""The experiment behind `deepdive.core.allocator`: the book's workloads under each allocator
regime, one fresh process per regime (glibc reads its settings when a process starts).

Each probe pins one compute thread, as the pages do, builds workloads the chapters time (a
GPT training step in both frameworks with JAX's two linear-layer forms, a ViT training step
in both), times them in one interleaved `compare`, and counts the minor page faults a
steady call takes. The methodology page runs it on every build; the GPT and ViT pages read
what the regime changed from it. Chapter 2 teaches the effect itself, on an elementwise
chain, in both regimes. `python -m deepdive.chapters.regimes REGIME` runs one probe and
prints it as JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys

from deepdive.core import allocator

__all__ = ["PAIRS", "REGIMES", "explained", "probe", "probes", "readings", "record", "saved_probes"]

REGIMES = (allocator.DEFAULTS, allocator.KEPT)
# The pairs the pages read: (workload, PyTorch's variant, JAX's variant).
PAIRS = (("GPT", "GPT torch eager", "GPT jax.jit"),
         ("GPT", "GPT torch eager", "GPT jax.jit, tokens flattened"),
         ("ViT", "ViT torch eager, SDPA", "ViT jax.jit split/merge, dot_product_attention"))


def probe(regime: str, timeout_s: float = 600) -> dict:
    """Medians, IQR/median, page faults per call and paired ratios of the workloads, timed
    in a fresh process under `regime` (`allocator.DEFAULTS` or `allocator.KEPT`)."""
    done = subprocess.run([sys.executable, "-m", "deepdive.chapters.regimes", regime],
                          capture_output=True, text=True, timeout=timeout_s,
                          env=allocator.child_env(regime))
    if done.returncode != 0:
        raise RuntimeError(f"the {regime!r} probe failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def probes(regimes=REGIMES):
    """One probe per regime, as two tidy frames: one row per variant and regime, and one
    row per pair (`PAIRS`) and regime with JAX's speed-up over PyTorch and its interval."""
    import pandas as pd

    variants, pairs = [], []
    for regime in regimes:
        found = probe(regime)
        for name, reading in found["variants"].items():
            variants.append({"regime": regime, "allocator": found["allocator"],
                             "variant": name, **reading})
        for row in found["pairs"]:
            pairs.append({"regime": regime, **row})
    return pd.DataFrame(variants), pd.DataFrame(pairs)


def record(records, pairs) -> None:
    """Add each pair's JAX speed-up and interval per regime to `records` (the methodology
    page's `Results`), where `explained` finds them."""
    for row in pairs.to_dict("records"):
        for metric in ("jax speed-up", "low", "high"):
            records.add("allocator_regimes", "both", f"{row['workload']}: {row['jax']} against "
                        f"{row['pytorch']}", row["regime"], metric, row[metric], "ratio")


def readings(pairs):
    """JAX's speed-up over PyTorch eager with its interval, one column per regime."""
    shown = [f"{r['jax speed-up']:.3f}x [{r['low']:.3f}, {r['high']:.3f}]"
             for r in pairs.to_dict("records")]
    return pairs.assign(**{"JAX's speed-up [95% interval]": shown}).pivot(
        index=["workload", "jax"], columns="regime", values="JAX's speed-up [95% interval]")


def _variants():
    """The workloads, built as the chapters build them (small sizes, fp32 strict)."""
    import copy
    import functools

    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch
    from flax import nnx
    from transformers import ViTConfig, ViTForImageClassification

    from deepdive.book import plans
    from deepdive.models import gpt, gpt_jax, parity, vit, xla_worker

    variants = {}
    w = plans.sizes("04_gpt_training", "small").workloads[0]
    cfg = gpt.GPTConfig(*w.config)
    torch.manual_seed(0)
    reference = gpt.GPT(cfg)
    rng = np.random.default_rng(0)
    idx, targets = (rng.integers(0, cfg.vocab_size, (w.batch_size, cfg.block_size))
                    for _ in range(2))
    model = copy.deepcopy(reference)
    optimizer = gpt_jax.ClippedAdamW(model.parameters(), **gpt_jax.TRAINING)
    ti, tt = torch.from_numpy(idx), torch.from_numpy(targets)
    ji, jt = jnp.asarray(idx), jnp.asarray(targets)

    def torch_gpt():
        optimizer.zero_grad(set_to_none=True)
        loss = model(ti, tt)
        loss.backward()
        optimizer.step()
        return loss.detach()

    variants["GPT torch eager"] = torch_gpt
    for name, flatten in (("GPT jax.jit", False), ("GPT jax.jit, tokens flattened", True)):
        twin = gpt_jax.GPT(cfg, attention="dot_product_attention", flatten_tokens=flatten,
                           rngs=nnx.Rngs(0))
        gpt_jax.port_torch_weights(reference, twin)
        jax_optimizer = nnx.Optimizer(twin, gpt_jax.nanogpt_adamw(**gpt_jax.TRAINING),
                                      wrt=nnx.Param)
        graphdef, state = nnx.split((twin, jax_optimizer))

        @functools.partial(jax.jit, donate_argnums=0)
        def train(state, i, t, graphdef=graphdef):
            m, o = nnx.merge(graphdef, state)
            loss, grads = nnx.value_and_grad(lambda q: q(i, t))(m)
            o.update(m, grads)
            return nnx.state((m, o)), loss

        held = [state]

        def jax_gpt(held=held, train=train):
            held[0], loss = train(held[0], ji, jt)
            return loss

        variants[name] = jax_gpt

    sizes = plans.sizes("05_vit_training", "small")
    config = ViTConfig(**sizes.config)
    torch.manual_seed(0)
    hf = ViTForImageClassification(config)
    images = rng.standard_normal((sizes.ref_batch, 3, config.image_size, config.image_size),
                                 dtype=np.float32)
    labels = rng.integers(0, config.num_labels, sizes.ref_batch)
    sdpa = copy.deepcopy(hf)
    sdpa.set_attn_implementation("sdpa")
    variants["ViT torch eager, SDPA"] = xla_worker.torch_step(sdpa, images, labels)[0]
    variants["ViT jax.jit split/merge, dot_product_attention"] = vit.split_merge_step(
        hf, vit.nchw_to_nhwc(images), labels, parity.optax_adamw(parity.ADAMW),
        attention="dot_product_attention")
    return variants


def _faults(fn, calls: int = 5) -> float:
    import resource

    from deepdive.core.sync import block

    block(fn())
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(calls):
        block(fn())
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / calls


def _run(regime: str) -> dict:
    from deepdive.core import env
    from deepdive.models import parity

    env.pin_cpu_threads()
    if regime == allocator.KEPT:
        allocator.keep_freed_memory()
    import torch

    from deepdive.core.timing import BLOCKS, compare, speedup

    torch.set_num_threads(env.compute_threads())
    parity.strict_fp32()  # the book's one switch, as every page's set-up
    variants = _variants()
    timings = compare(variants, max_blocks=BLOCKS)  # an explanation, not a claim: no extension
    found = {name: {"median_s": t.median, "iqr_fraction": t.iqr / t.median,
                    "faults_per_call": _faults(variants[name])}
             for name, t in timings.items()}
    pairs = []
    for workload, torch_side, jax_side in PAIRS:
        ratio, low, high = speedup(timings[torch_side], timings[jax_side])
        pairs.append({"workload": workload, "pytorch": torch_side, "jax": jax_side,
                      "jax speed-up": ratio, "low": low, "high": high})
    return {"allocator": allocator.describe(), "variants": found, "pairs": pairs}


if __name__ == "__main__":
    print(json.dumps(_run(sys.argv[1])))


def saved_probes():
    """The methodology page's saved records (this build's results), or None before it ran."""
    from deepdive.book import results

    try:
        return results.load("methodology")
    except FileNotFoundError:
        return None


def explained(records, workload: str) -> str:
    """What the allocator regime did to JAX against PyTorch eager on `workload` ("GPT",
    "ViT"), read from the methodology page's saved records (`records`, its
    results frame, or None before it ran): one sentence, chosen by the intervals."""
    if records is None:
        return ("The methodology page, which measures both allocator regimes on this "
                "workload, has not run in this build.")
    rows = records[(records["experiment"] == "allocator_regimes")
                   & records["variant"].str.startswith(f"{workload}: ")]
    if rows.empty:
        raise KeyError(f"the methodology page saved no allocator readings for {workload!r}")
    parts = []
    for variant, by in rows.groupby("variant", sort=False):
        value = by.set_index(["size", "metric"])["value"]
        shown = {regime: (f"{value[regime, 'jax speed-up']:.3f}x [{value[regime, 'low']:.3f}, "
                          f"{value[regime, 'high']:.3f}]") for regime in REGIMES}
        apart = (value[allocator.KEPT, "low"] > value[allocator.DEFAULTS, "high"]
                 or value[allocator.KEPT, "high"] < value[allocator.DEFAULTS, "low"])
        parts.append(f"for {variant.split(': ', 1)[1]}, {shown[allocator.DEFAULTS]} with glibc's "
                     f"defaults and {shown[allocator.KEPT]} with freed memory kept"
                     + (", intervals apart" if apart else ", intervals overlapping"))
    moved = any("intervals apart" in p for p in parts)
    return ("In the methodology page's probe of this workload (its small size, one fresh "
            "process per regime), JAX's speed-up over PyTorch eager (PyTorch's time over "
            "JAX's) was, " + "; ".join(parts)
            + (". The allocator explained part of what separates the frameworks under glibc's "
               "defaults: fresh pages cost the two frameworks differently." if moved else
               ". The allocator regime did not move these ratios measurably."))
