"""The methodology page's allocator probe, as a worker process: the chapters' training steps
under the allocator regime the process started with (glibc reads its malloc settings at
start-up; the page starts one process per regime with `deepdive.core.allocator.child_env`).

The steps, at `small` sizes in fp32 strict with one compute thread: chapter 4's GPT step in
PyTorch eager and under `jax.jit` (Flax's dense layers, and tokens flattened), chapter 5's
ViT step in PyTorch eager with SDPA and under `jax.jit` with `dot_product_attention`.
`python -m deepdive.chapters.regimes` times them in one `compare`, counts a steady call's
minor page faults, and prints both, with the regime in force, as JSON.
"""

from __future__ import annotations

import json
import resource

__all__ = ["faults_per_call", "run"]


def _steps() -> dict:
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

    steps = {}
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

    def torch_gpt():
        optimizer.zero_grad(set_to_none=True)
        loss = model(ti, tt)
        loss.backward()
        optimizer.step()
        return loss.detach()

    steps["GPT torch eager"] = torch_gpt
    ji, jt = jnp.asarray(idx), jnp.asarray(targets)
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

        held = [state]  # the step's state, donated and replaced by each call

        def jax_gpt(held=held, train=train):
            held[0], loss = train(held[0], ji, jt)
            return loss

        steps[name] = jax_gpt

    sizes = plans.sizes("05_vit_training", "small")
    config = ViTConfig(**sizes.config)
    torch.manual_seed(0)
    hf = ViTForImageClassification(config)
    images = rng.standard_normal((sizes.ref_batch, 3, config.image_size, config.image_size),
                                 dtype=np.float32)
    labels = rng.integers(0, config.num_labels, sizes.ref_batch)
    sdpa = copy.deepcopy(hf)
    sdpa.set_attn_implementation("sdpa")
    steps["ViT torch eager, SDPA"] = xla_worker.torch_step(sdpa, images, labels)[0]
    steps["ViT jax.jit split/merge, dot_product_attention"] = vit.split_merge_step(
        hf, vit.nchw_to_nhwc(images), labels, parity.optax_adamw(parity.ADAMW),
        attention="dot_product_attention")
    return steps


def faults_per_call(fn, calls: int = 5) -> float:
    """The minor page faults one steady call of `fn` takes (its first call not counted)."""
    from deepdive.core.sync import block

    block(fn())
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(calls):
        block(fn())
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / calls


def run() -> dict:
    """Each step's median, IQR/median, page faults per call and the paired rounds' per-round
    times (for speed-ups), with the allocator regime in force (`allocator.describe`)."""
    from deepdive.core import allocator, env
    from deepdive.models import parity

    env.pin_cpu_threads()
    import torch

    from deepdive.core.timing import BLOCKS, compare

    torch.set_num_threads(env.compute_threads())
    parity.strict_fp32()  # the book's one switch, as every page's set-up
    steps = _steps()
    timings = compare(steps, max_blocks=BLOCKS)  # an explanation, not a claim: no extension
    return {"allocator": allocator.describe(),
            "steps": {name: {"median_s": t.median, "iqr_fraction": t.iqr / t.median,
                             "faults_per_call": faults_per_call(steps[name]),
                             "samples": [float(s) for s in t.samples]}
                      for name, t in timings.items()}}


if __name__ == "__main__":
    print(json.dumps(run()))
