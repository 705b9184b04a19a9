"""Do two computations agree? One output against its reference (`matches`, the check every
timed variant passes before it is timed), and two training runs' parameters, compared by
name (the distributed chapter).

The distributed chapter checks every data-parallel and sharded layout, in both frameworks,
against one device after several optimizer steps, not one: after one step of SGD with
momentum the momentum buffer *is* the gradient, so a run that dropped the momentum would
still match.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["as_numpy", "assert_same_parameters", "largest_difference", "matches"]


def as_numpy(out) -> np.ndarray | list[np.ndarray]:
    """A torch tensor (on any device), a JAX or NumPy array, or a list of them, as NumPy."""
    if isinstance(out, (list, tuple)):
        return [as_numpy(o) for o in out]
    detach = getattr(out, "detach", None)  # torch, without importing it
    if detach is not None:
        return detach().cpu().numpy()
    return np.asarray(out)


def matches(reference, *, rtol: float = 1e-5, atol: float = 1e-5):
    """A check for `timing.compare(check=...)`: raise AssertionError unless an output is
    within `rtol`/`atol` of `reference`, whichever framework computed it."""
    expected = as_numpy(reference)

    def check(out) -> None:
        np.testing.assert_allclose(as_numpy(out), expected, rtol=rtol, atol=atol)

    return check


def largest_difference(candidate: Mapping[str, object], reference: Mapping[str, object]) -> float:
    """The largest absolute difference between same-named arrays of two runs."""
    _same_names(candidate, reference)
    return max(float(np.max(np.abs(np.asarray(candidate[k]) - np.asarray(reference[k]))))
               for k in reference)


def assert_same_parameters(candidate: Mapping[str, object], reference: Mapping[str, object],
                           *, rtol: float, atol: float, what: str = "candidate") -> float:
    """Raise AssertionError, naming the parameter, unless every array of `candidate` is
    within `rtol`/`atol` of the same-named array of `reference`; return the largest
    absolute difference."""
    _same_names(candidate, reference)
    for name, value in reference.items():
        np.testing.assert_allclose(np.asarray(candidate[name]), np.asarray(value), rtol=rtol,
                                   atol=atol, err_msg=f"{what}: parameter {name!r}")
    return largest_difference(candidate, reference)


def _same_names(candidate, reference) -> None:
    if not reference:
        raise ValueError("no parameters to compare")
    if set(candidate) != set(reference):
        raise KeyError(f"the runs name different parameters: only in candidate "
                       f"{sorted(set(candidate) - set(reference))}, only in reference "
                       f"{sorted(set(reference) - set(candidate))}")
