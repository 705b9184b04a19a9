"""Chapter 3's GPT: shapes, weight tying, the loss, nanoGPT's parameter count, causality."""

import pytest
import torch
import torch.nn.functional as F

from deepdive.models.gpt import GPT, GPTConfig, adamw

TINY = GPTConfig(n_layer=2, n_head=2, n_embd=16, block_size=8, vocab_size=11)


@pytest.fixture
def model():
    torch.manual_seed(0)
    return GPT(TINY)


def token_ids(batch=3, time=8, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, TINY.vocab_size, (batch, time), generator=generator)


def test_logits_have_one_row_per_position_and_a_column_per_token(model):
    assert model.logits(token_ids(batch=3, time=5)).shape == (3, 5, TINY.vocab_size)


def test_forward_returns_a_scalar_loss_that_backpropagates(model):
    loss = model(token_ids(), token_ids(seed=2))
    assert loss.shape == ()
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())


def test_the_head_is_the_token_embedding(model):
    assert model.head.weight is model.tok.weight
    with torch.no_grad():
        model.tok.weight[3, 0] = 7.0
    assert model.head.weight[3, 0].item() == 7.0
    # Counted once: the tied matrix is one parameter.
    assert sum(p is model.tok.weight for p in model.parameters()) == 1


def test_loss_is_cross_entropy_of_the_logits(model):
    idx, targets = token_ids(), token_ids(seed=2)
    expected = F.cross_entropy(model.logits(idx).reshape(-1, TINY.vocab_size), targets.reshape(-1))
    torch.testing.assert_close(model(idx, targets), expected, rtol=0, atol=0)


def test_an_untrained_model_predicts_close_to_uniform(model):
    loss = model(token_ids(), token_ids(seed=2))
    assert abs(loss.item() - torch.log(torch.tensor(float(TINY.vocab_size))).item()) < 0.1


def test_params_for_flops_is_nanogpts_count_without_position_embeddings(model):
    everything = sum(p.numel() for p in model.parameters())
    assert model.num_parameters() == everything
    assert model.params_for_flops() == everything - TINY.block_size * TINY.n_embd


@pytest.mark.parametrize("bias", [False, True])
def test_matmul_params_are_what_the_flop_counter_charges_a_training_step(bias):
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    model = GPT(GPTConfig(**{**vars(TINY), "bias": bias}))
    norms = sum(p.numel() for m in model.modules() if isinstance(m, torch.nn.LayerNorm)
                for p in m.parameters())
    biases = sum(m.bias.numel() for m in model.modules()
                 if isinstance(m, torch.nn.Linear) and m.bias is not None)
    assert model.matmul_params() == model.params_for_flops() - norms - biases
    idx, targets = token_ids(), token_ids(seed=2)
    counter = FlopCounterMode(display=False)
    with counter:
        model(idx, targets).backward()
    matmuls = sum(flops for op, flops in counter.get_flop_counts()["Global"].items()
                  if str(op).split(".")[-1] in ("mm", "addmm", "bmm"))
    assert matmuls == 6 * model.matmul_params() * idx.numel()


@pytest.mark.parametrize(("cfg", "millions"), [
    # nanoGPT prints these for train_shakespeare_char.py and train.py's GPT-2 defaults.
    (GPTConfig(6, 6, 384, 256, 65), 10.65),
    (GPTConfig(12, 12, 768, 1024, 50304), 123.59),
])
def test_nanogpt_sizes_have_nanogpts_parameter_counts(cfg, millions):
    with torch.device("meta"):  # shapes only: no memory, no time
        model = GPT(cfg)
    assert round(model.params_for_flops() / 1e6, 2) == millions


def test_biases_are_optional():
    with_bias = GPT(GPTConfig(**{**vars(TINY), "bias": True}))
    assert with_bias.blocks[0].attn.qkv.bias is not None
    assert with_bias.num_parameters() > GPT(TINY).num_parameters()


def test_residual_projections_start_smaller():
    torch.manual_seed(0)
    big = GPT(GPTConfig(n_layer=8, n_head=2, n_embd=64, block_size=8, vocab_size=11))
    assert big.blocks[0].mlp.proj.weight.std().item() == pytest.approx(0.02 / 4, rel=0.1)
    assert big.blocks[0].mlp.up.weight.std().item() == pytest.approx(0.02, rel=0.1)


def test_a_future_token_does_not_change_earlier_logits(model):
    idx = token_ids(batch=2, time=8)
    changed = idx.clone()
    changed[:, 5] = (changed[:, 5] + 1) % TINY.vocab_size
    before, after = model.logits(idx), model.logits(changed)
    torch.testing.assert_close(before[:, :5], after[:, :5], rtol=0, atol=0)
    assert not torch.allclose(before[:, 5:], after[:, 5:])


@pytest.mark.parametrize(("field", "value", "message"), [
    ("n_embd", 30, "divisible by n_head"),
    ("n_layer", 0, "n_layer must be a positive integer"),
    ("vocab_size", 2.5, "vocab_size must be a positive integer"),
    ("block_size", True, "block_size must be a positive integer"),
    ("bias", "no", "bias must be True or False"),
])
def test_bad_configs_say_what_is_wrong(field, value, message):
    fields = {**vars(TINY), "n_head": 4, "n_embd": 32, field: value}
    with pytest.raises(ValueError, match=message):
        GPTConfig(**fields)


def test_bad_inputs_say_what_is_wrong(model):
    with pytest.raises(ValueError, match="exceeds block_size"):
        model.logits(token_ids(time=TINY.block_size + 1))
    with pytest.raises(ValueError, match=r"\(batch, time\)"):
        model.logits(token_ids()[0])
    with pytest.raises(ValueError, match="targets must have the shape"):
        model(token_ids(), token_ids()[:, :4])
    with pytest.raises(TypeError, match="needs a GPTConfig"):
        GPT(vars(TINY))


def test_adamw_decays_matrices_only_as_nanogpt_does():
    model = GPT(GPTConfig(**{**vars(TINY), "bias": True}))
    optimizer = adamw(model, lr=1e-3)
    decayed, plain = optimizer.param_groups
    assert decayed["weight_decay"] == 0.1 and plain["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decayed["params"])
    assert all(p.dim() < 2 for p in plain["params"])
    assert len(decayed["params"]) + len(plain["params"]) == len(list(model.parameters()))
    assert optimizer.defaults["betas"] == (0.9, 0.95)
    with pytest.raises(ValueError, match="lr must be positive"):
        adamw(model, lr=0)
