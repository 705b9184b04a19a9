"""Did two training runs take the same steps? Their parameters, compared by name, chapter 5.

Chapter 5 checks every data-parallel and sharded layout, in both frameworks, against one
device after several optimizer steps, not one: after one step of SGD with momentum the
momentum buffer *is* the gradient, so a run that dropped the momentum would still match.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np


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
