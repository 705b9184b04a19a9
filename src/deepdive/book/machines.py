"""Short names for the machine a build ran on, read from its device label: bundle folders
(`deepdive.book.bundles`), the ledger page and the advice that needs every comparable bundle
to agree (`deepdive.book.agreement`) name a CPU the same way.

A device label is `deepdive.core.env.device_label()`'s: a GPU's name, or a CPU's model as the
operating system reports it with the cores the page could use, "Intel(R) Xeon(R) Processor
(1 of 2 cores)". The marketing noise ("(R)", "CPU", "@ 2.20GHz") says nothing about which
CPU it is; the model does, so two CPUs built on one day get two names. Nothing here imports
torch or jax.
"""

from __future__ import annotations

import re

__all__ = ["cpu_kind", "machine", "total_cores"]

_CORES = re.compile(r"\s*\((?:\d+ of )?(?P<total>\d+) cores?\)$")  # pinned or not
_NOISE = re.compile(r"\((?:R|TM)\)|\b(?:CPU|Processor)\b|@\s*[\d.]+\s*GHz|\b\d+-Core\b",
                    re.IGNORECASE)


def cpu_kind(label: str) -> str:
    """The CPU's model without its trademarks, clock or cores: "Intel(R) Xeon(R) Processor
    (1 of 2 cores)" is "Intel Xeon", "AMD EPYC 7763 64-Core Processor" is "AMD EPYC 7763". A
    GPU's label is its name, kept as it is but for trademarks."""
    model = _CORES.sub("", str(label))
    return " ".join(_NOISE.sub(" ", model).split()) or model.strip() or "unknown CPU"


def total_cores(label: str) -> int | None:
    """The cores of a CPU label's machine ("(1 of 2 cores)": 2), None for a GPU's label."""
    found = _CORES.search(str(label))
    return int(found["total"]) if found else None


def machine(label: str) -> str:
    """A machine as the ledger and the advice name it: "Intel Xeon (2 cores)" for a CPU (its
    kind and all its cores, however many a page pinned), the GPU's name for a GPU."""
    cores = total_cores(label)
    if cores is None:
        return cpu_kind(label)
    return f"{cpu_kind(label)} ({cores} core{'s' * (cores != 1)})"
