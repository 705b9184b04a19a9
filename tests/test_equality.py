"""deepdive.core.equality: a multi-step check sees a missing momentum; a one-step check cannot."""

import numpy as np
import pytest

from deepdive.core.equality import assert_same_parameters, largest_difference
from deepdive.models import torch_distributed as td

TOLERANCE = dict(rtol=1e-5, atol=1e-6)  # chapter 5's fp32 tolerance


def torch_run(steps, momentum):
    import torch
    import torch.nn.functional as F

    model = td.make_model(32, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=td.SGD["lr"], momentum=momentum)
    for step in range(steps):
        x, y = td.global_batch(16, step)
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def jax_run(steps, momentum):
    import jax
    import jax.numpy as jnp
    import optax

    start = td.make_model(32, 2).state_dict()
    params = {k: jnp.asarray(v.numpy()) for k, v in start.items()}
    names = [k.removesuffix(".weight") for k in params if k.endswith(".weight")]

    def loss_fn(params, x, y):
        h = x
        for i, name in enumerate(names):
            h = h @ params[f"{name}.weight"].T + params[f"{name}.bias"]
            h = jax.nn.gelu(h, approximate=False) if i < len(names) - 1 else h
        return optax.softmax_cross_entropy_with_integer_labels(h, y).mean()

    optimizer = optax.sgd(td.SGD["lr"], momentum=momentum or None)
    state = optimizer.init(params)
    for step in range(steps):
        x, y = (jnp.asarray(t.numpy()) for t in td.global_batch(16, step))
        updates, state = optimizer.update(jax.grad(loss_fn)(params, x, y), state, params)
        params = optax.apply_updates(params, updates)
    return {k: np.asarray(v) for k, v in params.items()}


@pytest.mark.parametrize("run", [torch_run, jax_run], ids=["torch", "jax"])
def test_a_missing_momentum_fails_the_multi_step_check(run):
    reference = run(td.CHECK_STEPS, td.SGD["momentum"])

    with pytest.raises(AssertionError, match="parameter"):
        assert_same_parameters(run(td.CHECK_STEPS, 0.0), reference, **TOLERANCE)
    assert_same_parameters(run(td.CHECK_STEPS, td.SGD["momentum"]), reference, **TOLERANCE)


@pytest.mark.parametrize("run", [torch_run, jax_run], ids=["torch", "jax"])
def test_one_step_cannot_see_the_momentum(run):
    """Why the chapter checks several steps: the first momentum buffer is the gradient."""
    assert_same_parameters(run(1, 0.0), run(1, td.SGD["momentum"]), **TOLERANCE)


def test_torch_and_jax_take_the_same_steps_with_momentum():
    reference = torch_run(td.CHECK_STEPS, td.SGD["momentum"])
    assert_same_parameters(jax_run(td.CHECK_STEPS, td.SGD["momentum"]), reference, **TOLERANCE)
    assert largest_difference(reference, torch_run(0, 0.0)) > 1e3 * TOLERANCE["atol"]


def test_runs_with_different_parameters_are_refused():
    with pytest.raises(KeyError, match="only in candidate"):
        largest_difference({"a": np.zeros(2), "b": np.zeros(2)}, {"a": np.zeros(2)})
    with pytest.raises(ValueError, match="no parameters"):
        largest_difference({}, {})


def test_matches_accepts_each_frameworks_output_and_rejects_a_wrong_one():
    import jax.numpy as jnp
    import torch

    from deepdive.core import equality

    check = equality.matches(np.arange(3.0))
    check(torch.arange(3.0))
    check(jnp.arange(3.0))
    check([np.arange(3.0)][0])
    with pytest.raises(AssertionError):
        check(torch.arange(3.0) + 1e-3)
    equality.matches([np.ones(2), np.zeros(2)])([jnp.ones(2), torch.zeros(2)])
