"""The Flax NNX GPT twin, its weight port and its proof, checked against `deepdive.models.gpt.GPT`.

The configurations differ from the GPT page's on purpose (depth, odd head counts, biases,
sequence and vocabulary sizes that are not powers of two), so neither the twin nor the port
is tuned to one shape.
"""

import copy

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch
from flax import nnx

from deepdive.book import plan, plans
from deepdive.models import gpt, gpt_jax, parity

CONFIGS = {"3 layers, 3 heads, biases": gpt.GPTConfig(3, 3, 48, 20, 37, bias=True),
           "1 layer, 2 heads": gpt.GPTConfig(1, 2, 32, 12, 11)}


@pytest.fixture(autouse=True)
def strict_fp32():
    with parity.strict_fp32():
        yield


def ported_pair(cfg, attention="eager", dtype=jnp.float32):
    torch.manual_seed(0)
    torch_model = gpt.GPT(cfg)
    twin = gpt_jax.GPT(cfg, attention=attention, dtype=dtype, rngs=nnx.Rngs(0))
    gpt_jax.port_torch_weights(torch_model, twin)
    return torch_model, twin


def batches(cfg, n=3, batch=4, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.integers(0, cfg.vocab_size, (batch, cfg.block_size)),
             rng.integers(0, cfg.vocab_size, (batch, cfg.block_size))) for _ in range(n)]


def model_rows(torch_model, twin, cfg):
    return parity.family_model_parity(gpt_jax.family(), torch_model, twin, batches(cfg))


@pytest.mark.parametrize("attention", gpt_jax.ATTENTION)
@pytest.mark.parametrize("cfg", CONFIGS.values(), ids=CONFIGS.keys())
def test_the_twin_matches_logits_loss_and_every_gradient(cfg, attention):
    torch_model, twin = ported_pair(cfg, attention)

    rows = model_rows(torch_model, twin, cfg)

    parity.assert_parity(rows)
    assert [r["quantity"] for r in rows] == ["logits", "loss", "gradients"]
    assert rows[-1]["tensors compared"] == sum(1 for _ in torch_model.parameters())


@pytest.mark.parametrize("cfg", CONFIGS.values(), ids=CONFIGS.keys())
def test_the_whole_proof_holds_and_its_loss_curves_agree(cfg):
    torch_model, twin = ported_pair(cfg)
    curves = {}

    rows = parity.prove(gpt_jax.family(), torch_model, twin, batches(cfg),
                        optimizers=[gpt_jax.optimizer_pair(parity.TRAJECTORY_ADAMW)],
                        hyper=gpt_jax.TRAINING, curves=curves)

    parity.assert_parity(rows)
    assert len(rows) == 5 and rows[-1]["tensors compared"] == parity.TRAINING_STEPS
    assert np.abs(curves["PyTorch"] - curves["JAX"]).max() <= \
        parity.TOLERANCES["loss curve"]["atol"]
    assert curves["PyTorch"][-1] < curves["PyTorch"][0] - 100 * \
        parity.TOLERANCES["loss curve"]["atol"]  # it trained: the curves can tell a mistake


def test_the_proof_leaves_both_models_unchanged():
    cfg = CONFIGS["1 layer, 2 heads"]
    torch_model, twin = ported_pair(cfg)
    before = [p.detach().clone() for p in torch_model.parameters()]
    twin_before = jax.tree.map(np.asarray, nnx.state(twin, nnx.Param))

    parity.prove(gpt_jax.family(), torch_model, twin, batches(cfg), hyper=gpt_jax.TRAINING,
                 optimizers=[gpt_jax.optimizer_pair(parity.TRAJECTORY_ADAMW)])

    assert all(torch.equal(a, b) for a, b in zip(before, torch_model.parameters(), strict=True))
    jax.tree.map(np.testing.assert_array_equal, twin_before,
                 jax.tree.map(np.asarray, nnx.state(twin, nnx.Param)))


def test_a_transposed_kernel_breaks_the_proof():
    cfg = CONFIGS["3 layers, 3 heads, biases"]
    torch_model, twin = ported_pair(cfg)
    kernel = twin.blocks[1].attn.proj.kernel
    kernel[...] = kernel[...].T  # square, so only the numbers can tell

    with pytest.raises(AssertionError, match="logits .*gradients"):
        parity.assert_parity(model_rows(torch_model, twin, cfg))


def test_the_port_refuses_a_pytorch_model_whose_head_lost_its_tie():
    cfg = CONFIGS["1 layer, 2 heads"]
    torch_model, twin = ported_pair(cfg)
    torch_model.head.weight = torch.nn.Parameter(torch_model.tok.weight.detach().clone())

    with pytest.raises(KeyError, match=r"head\.weight.*untied output head"):
        gpt_jax.port_torch_weights(torch_model, twin)


class UntiedTwin(gpt_jax.GPT):
    """A twin whose head is a parameter of its own: the tie is missing."""

    def __init__(self, cfg, **kwargs):
        super().__init__(cfg, **kwargs)
        self.head = nnx.Param(jnp.zeros((cfg.vocab_size, cfg.n_embd)))

    def logits(self, idx):
        x = self.tok.embedding[...][idx] + self.pos.embedding[...][:idx.shape[1]]
        for block in self.blocks:
            x = block(x)
        return jnp.einsum("btc,vc->btv", self.ln_f(x), self.head[...])


def test_the_port_refuses_a_twin_with_a_head_of_its_own():
    cfg = CONFIGS["1 layer, 2 heads"]
    torch_model, _ = ported_pair(cfg)

    with pytest.raises(KeyError, match="no PyTorch source: .*head"):
        gpt_jax.port_torch_weights(torch_model, UntiedTwin(cfg, rngs=nnx.Rngs(0)))


def test_a_twin_without_the_tie_fails_the_proof_even_with_the_right_numbers():
    cfg = CONFIGS["3 layers, 3 heads, biases"]
    torch_model, twin = ported_pair(cfg)
    untied = UntiedTwin(cfg, rngs=nnx.Rngs(0))
    nnx.update(untied, nnx.state(twin, nnx.Param))
    untied.head[...] = twin.tok.embedding[...]  # the same numbers, no longer shared

    rows = {r["quantity"]: r for r in model_rows(torch_model, untied, cfg)
            if r["quantity"] in ("logits", "loss")}
    assert all(r["within tolerance"] for r in rows.values())  # the forward cannot tell
    with pytest.raises(AssertionError, match=r"gradients .*tok\.embedding"):
        parity.assert_parity(model_rows(torch_model, untied, cfg))  # the head's share is lost


def test_a_wrong_token_gradient_fails_the_proof():
    """The tie's other half: the head's share of the embedding's gradient must arrive."""
    cfg = CONFIGS["1 layer, 2 heads"]
    torch_model, twin = ported_pair(cfg)

    class HeadWithoutGradient(gpt_jax.GPT):
        def logits(self, idx):
            x = self.tok.embedding[...][idx] + self.pos.embedding[...][:idx.shape[1]]
            for block in self.blocks:
                x = block(x)
            head = jax.lax.stop_gradient(self.tok.embedding[...])
            return jnp.einsum("btc,vc->btv", self.ln_f(x), head)

    broken = HeadWithoutGradient(cfg, rngs=nnx.Rngs(0))
    nnx.update(broken, nnx.state(twin, nnx.Param))

    with pytest.raises(AssertionError, match="gradients .*tok.embedding"):
        parity.assert_parity(model_rows(torch_model, broken, cfg))


@pytest.mark.parametrize("mistake", ["no decay mask", "no clipping", "swapped betas"])
def test_a_mistranslated_optimizer_fails_the_proof(mistake):
    hyper = parity.TRAJECTORY_ADAMW
    wrong = {"no decay mask": optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(
                 hyper["lr"], b1=hyper["b1"], b2=hyper["b2"], eps=hyper["eps"],
                 weight_decay=hyper["weight_decay"])),
             "no clipping": gpt_jax.nanogpt_adamw(**hyper, clip=None),
             "swapped betas": gpt_jax.nanogpt_adamw(**{**hyper, "b1": hyper["b2"],
                                                       "b2": hyper["b1"]})}[mistake]
    torch_model, _ = ported_pair(CONFIGS["1 layer, 2 heads"])
    named = {n: p.detach().numpy() for n, p in torch_model.named_parameters()}
    pair = parity.OptimizerPair("wrong", gpt_jax.optimizer_pair(hyper).torch, wrong)

    rows = parity.optimizer_parity(named, [pair])

    assert not rows[0]["within tolerance"]


def test_layer_norm_uses_pytorchs_epsilon_where_it_matters():
    cfg = CONFIGS["1 layer, 2 heads"]
    torch_model, twin = ported_pair(cfg)
    x = np.random.default_rng(0).standard_normal((2, 5, cfg.n_embd)).astype(np.float32) * 1e-3

    ours = np.asarray(twin.blocks[0].ln1(jnp.asarray(x)))
    theirs = torch_model.blocks[0].ln1(torch.from_numpy(x)).detach().numpy()

    assert gpt_jax.LAYER_NORM_EPS == torch.nn.LayerNorm(4).eps
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)
    flax_default = nnx.LayerNorm(cfg.n_embd, rngs=nnx.Rngs(0))  # epsilon 1e-6
    assert np.abs(np.asarray(flax_default(jnp.asarray(x))) - theirs).max() > 1e-2


def test_gpt2_initialisation_has_pytorchs_statistics():
    cfg = gpt.GPTConfig(4, 4, 256, 64, 512)
    torch.manual_seed(0)
    torch_model = gpt.GPT(cfg)
    twin = gpt_jax.GPT(cfg, rngs=nnx.Rngs(0))  # its own initialisation, no port
    ours = {path: np.asarray(v[...]) for path, v in nnx.to_flat_state(nnx.state(twin, nnx.Param))}
    theirs = gpt_jax.torch_arrays_as_nnx((n, p.detach().numpy())
                                         for n, p in torch_model.named_parameters())

    assert set(ours) == set(theirs)
    for path, value in ours.items():
        expected = theirs[path]
        assert value.shape == expected.shape
        if expected.std() == 0:  # LayerNorm gains: exactly one
            np.testing.assert_array_equal(value, expected)
        else:
            assert abs(value.std() / expected.std() - 1) < 0.1, path
            assert abs(value.mean()) < 0.1 * expected.std(), path


def test_bf16_follows_autocasts_policy():
    cfg = CONFIGS["3 layers, 3 heads, biases"]
    torch_model, twin = ported_pair(cfg, dtype=jnp.bfloat16)
    idx, targets = batches(cfg, n=1)[0]

    logits = twin.logits(jnp.asarray(idx))
    loss, grads = nnx.value_and_grad(lambda m: m(jnp.asarray(idx), jnp.asarray(targets)))(twin)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch_loss = torch_model(torch.from_numpy(idx), torch.from_numpy(targets))
    torch_loss.backward()
    torch_grads = gpt_jax.torch_arrays_as_nnx((n, p.grad.numpy())
                                              for n, p in torch_model.named_parameters())

    assert logits.dtype == jnp.bfloat16
    assert all(v.dtype == jnp.float32 for _, v in nnx.to_flat_state(nnx.state(twin, nnx.Param)))
    assert abs(float(loss) - torch_loss.item()) / torch_loss.item() < 1e-2
    for path, v in nnx.to_flat_state(grads):
        g, expected = np.asarray(v[...]), torch_grads[path]
        assert np.linalg.norm(g - expected) <= 0.05 * np.linalg.norm(expected) + 1e-6, path


def test_first_moment_after_one_step_is_the_clipped_gradient():
    cfg = CONFIGS["1 layer, 2 heads"]
    _, twin = ported_pair(cfg)
    idx, targets = (jnp.asarray(a) for a in batches(cfg, n=1)[0])
    optimizer = nnx.Optimizer(twin, gpt_jax.nanogpt_adamw(**gpt_jax.TRAINING, clip=1e-3),
                              wrt=nnx.Param)
    grads = nnx.grad(lambda m: m(idx, targets))(twin)
    norm = float(optax.tree.norm(grads))

    optimizer.update(twin, grads)

    mu = dict(nnx.to_flat_state(gpt_jax.first_moment(optimizer.opt_state)))
    assert norm > 1e-3  # clipping acted
    for path, g in nnx.to_flat_state(grads):
        np.testing.assert_allclose(np.asarray(mu[path][...]) / (1 - gpt_jax.TRAINING["b1"]),
                                   np.asarray(g[...]) * 1e-3 / norm, rtol=1e-5, atol=1e-12)


def test_clipped_adamw_decays_matrices_only_and_clips():
    model = gpt.GPT(CONFIGS["1 layer, 2 heads"])
    optimizer = gpt_jax.ClippedAdamW(model.parameters(), lr=1e-3, clip=0.5)
    decays = {p.dim(): g["weight_decay"] for g in optimizer.optimizer.param_groups
              for p in g["params"]}
    for p in model.parameters():
        p.grad = torch.ones_like(p)

    optimizer.step()

    assert decays == {2: 0.1, 1: 0.0}
    total = torch.sqrt(sum(p.grad.square().sum() for p in model.parameters()))
    assert abs(total.item() - 0.5) < 1e-5


@pytest.mark.parametrize(("name", "message"), [
    ("head.weight", "untied output head"), ("blocks.0.attn.c_attn.weight", "no place"),
    ("lm_head.weight", "no place")])
def test_unknown_pytorch_names_are_refused_by_name(name, message):
    with pytest.raises(KeyError, match=message):
        gpt_jax.nnx_path(name)


def test_bad_inputs_say_what_is_wrong():
    cfg = CONFIGS["1 layer, 2 heads"]
    with pytest.raises(ValueError, match="attention must be one of"):
        gpt_jax.GPT(cfg, attention="flash", rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match="GPTConfig"):
        gpt_jax.GPT({"n_layer": 1}, rngs=nnx.Rngs(0))
    twin = gpt_jax.GPT(cfg, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="exceeds block_size"):
        twin.logits(jnp.zeros((1, cfg.block_size + 1), jnp.int32))
    with pytest.raises(ValueError, match=r"\(batch, time\)"):
        twin.logits(jnp.zeros((cfg.block_size,), jnp.int32))
    with pytest.raises(ValueError, match="targets must have the shape"):
        twin(jnp.zeros((1, 4), jnp.int32), jnp.zeros((1, 5), jnp.int32))


@pytest.mark.parametrize("other", [gpt.GPTConfig(1, 2, 32, 16, 11),
                                   gpt.GPTConfig(1, 4, 32, 12, 11)],
                         ids=["longer context", "other head count, same shapes"])
def test_the_port_refuses_a_twin_of_another_config(other):
    torch_model, _ = ported_pair(CONFIGS["1 layer, 2 heads"])

    with pytest.raises(ValueError, match="config .* is not the twin's"):
        gpt_jax.port_torch_weights(torch_model, gpt_jax.GPT(other, rngs=nnx.Rngs(0)))


def test_the_port_refuses_weights_that_are_not_fp32():
    torch_model, twin = ported_pair(CONFIGS["1 layer, 2 heads"])

    with pytest.raises(ValueError, match="must be fp32"):
        gpt_jax.port_torch_weights(torch_model.to(torch.bfloat16), twin)


def dot_generals(jaxpr):
    """Every dot_general of a jaxpr, nested ones (jit, custom derivatives) included."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            yield eqn
        for value in eqn.params.values():
            for inner in value if isinstance(value, tuple | list) else (value,):
                inner = getattr(inner, "jaxpr", inner)
                if hasattr(inner, "eqns"):
                    yield from dot_generals(inner)


@pytest.mark.parametrize("attention", gpt_jax.ATTENTION)
def test_bf16_backward_matmuls_run_in_bf16_as_autocasts_do(attention):
    cfg = CONFIGS["3 layers, 3 heads, biases"]
    _, twin = ported_pair(cfg, attention, dtype=jnp.bfloat16)
    graphdef, params = nnx.split(twin)
    idx, targets = (jnp.asarray(a) for a in batches(cfg, n=1)[0])
    loss = jax.value_and_grad(lambda p: nnx.merge(graphdef, p)(idx, targets))

    dots = list(dot_generals(jax.make_jaxpr(loss)(params).jaxpr))
    # XLA's CPU backend runs a plain bf16 x bf16 dot in fp32; the algorithm keeps it in bf16.
    plain = [e for e in dots if "BF16_BF16_F32" not in str(e.params["precision"])]

    assert len(dots) >= 3 * (4 * cfg.n_layer + 1)  # forward and both transposes of each
    if attention == "eager":
        assert not plain, [str(e) for e in plain][:2]
    else:  # jax.nn.dot_product_attention's weights x values: its forward and two transposes
        assert len(plain) == 3 * cfg.n_layer
        assert all({str(v.aval.dtype) for v in e.invars} == {"bfloat16"} for e in plain)


def test_autocast_runs_the_pytorch_models_matmuls_in_bf16():
    """The other side of the policy, as the chapter's steps run it (CPU autocast)."""
    cfg = CONFIGS["1 layer, 2 heads"]
    torch_model, _ = ported_pair(cfg)
    seen = {}
    for name, module in torch_model.named_modules():
        if isinstance(module, torch.nn.Linear | torch.nn.LayerNorm):
            module.register_forward_hook(lambda m, i, o, name=name: seen.update({name: o.dtype}))
    idx, targets = (torch.from_numpy(a) for a in batches(cfg, n=1)[0])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch_model(idx, targets)

    assert {seen[n] for n in seen if "ln" not in n} == {torch.bfloat16}
    assert {seen[n] for n in seen if "ln" in n} == {torch.float32}


@pytest.mark.parametrize("cfg", CONFIGS.values(), ids=CONFIGS.keys())
def test_flattened_tokens_compute_the_same_function(cfg):
    torch_model, _ = ported_pair(cfg)
    flat = gpt_jax.GPT(cfg, flatten_tokens=True, rngs=nnx.Rngs(0))
    gpt_jax.port_torch_weights(torch_model, flat)

    parity.assert_parity(model_rows(torch_model, flat, cfg))


def test_a_copied_pytorch_model_keeps_its_tie():
    """The page copies the proven model for each variant: the copy must stay tied."""
    model = copy.deepcopy(gpt.GPT(CONFIGS["1 layer, 2 heads"]))
    assert model.head.weight is model.tok.weight


def test_the_modes_compile_bf16_everywhere_inductor_compiles_it():
    cpu = plan.cpu_target("cpu", 1, 2**34)
    a100 = plan.gpu_target(*plans.READER_GPUS["A100-80GB"])
    t4 = plan.gpu_target(*plans.READER_GPUS["T4"])

    def modes(target, precision):
        return [m for m, p in plans.gpt_twin_modes(target) if p == precision]

    assert modes(cpu, "bf16") == ["torch eager", "torch eager A/A copy",
                                  "torch.compile aot_eager", "torch.compile", "jax.jit"]
    assert "torch.compile reduce-overhead" not in modes(cpu, "fp32")
    assert modes(a100, "bf16") == ["torch eager", "torch eager A/A copy",
                                   "torch.compile aot_eager", "torch.compile",
                                   "torch.compile cudagraphs", "torch.compile reduce-overhead",
                                   "jax.jit"]
    # no bf16 arithmetic: emulated, so no verdict; only the plain eager step (no JAX dot)
    assert modes(t4, "bf16") == ["torch eager"]
    assert {"torch eager A/A copy", "jax.jit", "jax.jit, tokens flattened"} <= set(
        modes(t4, "fp32"))
