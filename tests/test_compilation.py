"""deepdive.core.compilation: JAX's stages timed cold, kernels counted in optimized HLO."""

import json
import math
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from deepdive.core.compilation import (
    Kernel,
    break_even_calls,
    collectives,
    describe_kernels,
    entry_kernels,
    fusions,
    jax_compile_stages,
    keep_loss,
    uses_cuda_graphs,
)
from deepdive.core.timing import compilations

HLO = """HloModule demo
%fused_a (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
  ROOT %s = f32[8]{0} sine(%p)
}
ENTRY %main (x: f32[8], y: f32[8,8]) -> f32[8] {
  %x = f32[8]{0} parameter(0)
  %y = f32[8,8]{1,0} parameter(1)
  %sin_fusion = f32[8]{0} fusion(%x), kind=kLoop, calls=%fused_a
  %gemm = f32[8]{0} custom-call(%y, %sin_fusion), custom_call_target="__cublas$gemm"
  %ynn = f32[8]{0} fusion(%x), kind=kCustom, calls=%fused_a, backend_config={YNN}
  %t = (f32[8]{0}, f32[8]{0}) tuple(%ynn, %x)
  %c = f32[8]{0} copy(%x)
  ROOT %reduce_fusion.2 = f32[8]{0} fusion(%gemm), kind=kInput, calls=%fused_a
}
""".replace("{YNN}", '{"fusion_config":{"kind":"__ynn_fusion"}}')


def test_fusions_lists_each_fusion_of_the_entry_computation_with_its_kind():
    assert fusions(HLO) == [("sin_fusion", "kLoop"), ("ynn", "kCustom"),
                            ("reduce_fusion.2", "kInput")]


def test_entry_kernels_names_each_kernels_kind_and_skips_what_launches_nothing():
    assert entry_kernels(HLO) == [
        Kernel("sin_fusion", "loop"),
        Kernel("gemm", "library call", "__cublas$gemm"),
        Kernel("ynn", "custom", "__ynn_fusion"),
        Kernel("c", "unfused op", "copy"),
        Kernel("reduce_fusion.2", "input"),
    ]


def test_describe_kernels_counts_them_by_kind_for_the_prose():
    kinds = ["1 loop fusion", "1 library call (__cublas$gemm)", "1 custom fusion (__ynn_fusion)",
             "1 unfused op (copy)", "1 input fusion"]
    assert describe_kernels(entry_kernels(HLO)).split(", ") == kinds
    assert describe_kernels([Kernel("a", "loop"), Kernel("b", "loop")]) == "2 loop fusions"
    assert describe_kernels([]) == "no kernels"


def test_an_elementwise_chain_compiles_to_one_xla_loop_fusion():
    compiled = jax.jit(lambda x: jnp.sin(x) * 2 + 1).lower(jnp.ones(1024)).compile()

    assert [k.kind for k in entry_kernels(compiled.as_text())] == ["loop"]


def test_a_batched_matmul_on_a_cpu_is_a_library_kernel_not_xla_code():
    q = jnp.ones((64, 64, 32))
    text = jax.jit(lambda a, b: a @ b.transpose(0, 2, 1)).lower(q, q).compile().as_text()

    kinds = {k.kind for k in entry_kernels(text)}
    assert kinds & {"custom", "library call"}, kinds  # YNNPACK, oneDNN or Eigen: not a loop


def test_text_without_an_entry_computation_is_rejected():
    with pytest.raises(ValueError, match="no ENTRY computation"):
        fusions("{ lambda ; a:f32[]. let  in (a,) }")


def test_compile_stages_are_timed_and_the_executable_is_right():
    x = jnp.arange(8.0)

    stages, compiled = jax_compile_stages(lambda v: v * 3 + 1, x)

    assert stages.trace > 0 and stages.lower > 0 and stages.compile > 0
    assert stages.total == pytest.approx(stages.trace + stages.lower + stages.compile)
    np.testing.assert_allclose(compiled(x), np.arange(8.0) * 3 + 1)


def test_compile_stages_compile_cold_every_time():
    # With JAX's in-memory caches left in place, the second call would compile nothing.
    def f(v):
        return v - 1

    x = jnp.ones(4)
    before = compilations()
    jax_compile_stages(f, x)
    jax_compile_stages(f, x)

    assert compilations() - before == 2


def test_compile_stages_rejects_a_non_callable():
    with pytest.raises(TypeError, match="needs a function"):
        jax_compile_stages(3, jnp.ones(2))


def test_break_even_divides_compile_time_by_the_time_saved_per_call():
    assert break_even_calls(compile_s=1.0, eager_s=0.003, compiled_s=0.001) == pytest.approx(500)
    assert break_even_calls(1.0, eager_s=0.001, compiled_s=0.002) == math.inf


def test_break_even_rejects_negative_times():
    with pytest.raises(ValueError, match="compile_s must be a number of seconds >= 0"):
        break_even_calls(-1.0, 0.1, 0.01)


_SHARDED_PROGRAMS = """
import json
import jax
jax.config.update("jax_num_cpu_devices", 4)
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
from deepdive.core.compilation import collectives
mesh = jax.make_mesh((4,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
x = jax.device_put(jnp.ones((8, 16)), NamedSharding(mesh, P("data")))
grad = jax.jit(jax.grad(lambda w, x: jnp.mean((x @ w) ** 2)))
counts = {}
for name, spec in (("replicated", P()), ("sharded", P("data"))):
    w = jax.device_put(jnp.ones((16, 4)), NamedSharding(mesh, spec))
    counts[name] = collectives(grad.lower(w, x).compile().as_text())
single = jax.jit(jax.grad(lambda w, x: jnp.mean((x @ w) ** 2)))
counts["one device"] = collectives(single.lower(jnp.ones((16, 4)), jnp.ones((8, 16)))
                                   .compile().as_text())
print(json.dumps(counts))
"""


def test_collectives_finds_what_xla_inserts_for_data_and_parameter_sharding():
    done = subprocess.run([sys.executable, "-c", _SHARDED_PROGRAMS], capture_output=True,
                          text=True, timeout=120, check=True)
    counts = json.loads(done.stdout.strip().splitlines()[-1])

    assert counts["replicated"]["all-reduce"] >= 1  # gradients summed across the batch shards
    assert counts["replicated"]["all-gather"] == 0
    assert counts["sharded"]["all-gather"] >= 1  # the sharded weight gathered for the matmul
    assert sum(counts["one device"].values()) == 0


def test_collectives_rejects_text_that_is_not_hlo():
    with pytest.raises(ValueError, match="not an HLO module"):
        collectives("def f(x): return x")


def replayed_steps(values):
    """Losses as a CUDA-graph replay returns them: each step's value written in place into
    the one static output buffer, which the next replay overwrites (a CPU stand-in)."""
    static = torch.zeros((), requires_grad=False)
    for value in values:
        static.fill_(value)
        yield static


def test_kept_losses_survive_the_replays_that_overwrite_their_buffer():
    values = [3.0, 2.5, 2.0]
    aliased = [loss.detach() for loss in replayed_steps(values)]
    assert torch.stack(aliased).tolist() == [2.0, 2.0, 2.0]  # the bug: every entry the last

    kept = [keep_loss(loss) for loss in replayed_steps(values)]

    assert torch.stack(kept).tolist() == values  # read once, at the end, as chapter 3 does
    assert float(kept[0]) == 3.0


def test_a_kept_loss_owns_its_memory_and_leaves_autograd():
    x = torch.randn(8, 4)
    model = torch.nn.Linear(4, 1)
    loss = model(x).pow(2).mean()

    kept = keep_loss(loss)

    assert not kept.requires_grad and kept.grad_fn is None
    assert kept.dtype == loss.dtype and kept.device == loss.device and kept.shape == loss.shape
    assert kept.untyped_storage().data_ptr() != loss.untyped_storage().data_ptr()
    before = float(kept)
    loss.backward()  # the loss is still usable: keeping it took nothing from the step
    with torch.no_grad():
        loss.zero_()  # a later step writing where this loss was
    assert float(kept) == before


def test_keep_loss_rejects_what_is_not_a_tensor():
    with pytest.raises(TypeError, match="needs the step's loss tensor"):
        keep_loss(0.5)


@pytest.mark.parametrize(("options", "expected"), [
    (None, False),  # eager: not compiled
    (dict(backend="aot_eager"), False),
    (dict(backend="inductor"), False),
    ({}, False),  # the default: Inductor, default mode
    (dict(mode="default"), False),
    (dict(mode="max-autotune-no-cudagraphs"), False),  # autotuning alone
    (dict(mode="reduce-overhead"), True),
    (dict(mode="max-autotune"), True),  # autotuning and CUDA graphs together
    (dict(backend="cudagraphs"), True),
    (dict(backend="inductor", mode="max-autotune"), True),
    (dict(options={"triton.cudagraphs": True}), True),
    (dict(options={"max_autotune": True}), False),
])
def test_uses_cuda_graphs_follows_pytorchs_table_of_modes(options, expected):
    assert uses_cuda_graphs(options) is expected


def test_uses_cuda_graphs_rejects_what_torch_compile_would():
    with pytest.raises(RuntimeError, match="Unrecognized mode"):
        uses_cuda_graphs(dict(mode="max-autotune-cudagraphs"))
    with pytest.raises(TypeError, match="keyword arguments as a dict"):
        uses_cuda_graphs("reduce-overhead")
