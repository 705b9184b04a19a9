"""Whether a claim's verdict holds on every machine the ledger has seen with this build's pins:
the intro and the guide give as advice only verdicts that every comparable bundle agrees on
(the methodology's rule; issue 37: the same pins on another CPU changed 26 of 109 verdicts).

A bundle is *comparable* to this build for one claim when it ran the same torch and jax
(local labels such as "+cpu" aside: another wheel of one release), and its row of the claim
ran at the same scale on the same kind of device (a CPU or a GPU); the CPU model may differ,
which is the point. Each bundle's verdict is decided again from its saved numbers with the
book's rule (`deepdive.book.claims.reread_verdict`). Nothing here imports torch or jax.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from deepdive.book import bundles
from deepdive.book.claims import reread_verdict
from deepdive.book.machines import cpu_kind, machine
from deepdive.core import env

__all__ = ["COLUMNS", "THIS_BUILD", "agreement", "comparable", "comparable_folders",
           "cpu_kind"]

COLUMNS = ("chapter", "claim_id", "agreed", "verdicts", "machines")
THIS_BUILD = "this build"


def _public(version) -> str:
    return str(version).split("+")[0]


def _kind(label) -> str:
    return "cpu" if env.is_cpu_label(label) else "gpu"


def _ids(row: dict) -> list[str]:
    """A claim's id, then the other ids its page gave the same measurement."""
    return [str(row["claim_id"]), *(a for a in str(row.get("aliases", "")).split(";")
                                    if a not in ("", "nan"))]


def comparable(bundle: bundles.Bundle, pins: tuple[str, str]) -> bool:
    """Whether a bundle ran this build's torch and jax (`pins`), local labels aside."""
    return tuple(_public(bundle.build["versions"][n]) for n in ("torch", "jax")) == tuple(
        _public(p) for p in pins)


def comparable_folders(folders, pins: tuple[str, str] | None = None, follow=None) -> list[Path]:
    """The bundles of `folders` that ran `pins` (torch, jax; by default those installed)."""
    pins = pins or _installed()
    follow = follow or (lambda chapter, claim_id: (chapter, claim_id))
    return [Path(f) for f in folders if comparable(bundles.load(Path(f), current=follow), pins)]


def _installed() -> tuple[str, str]:
    installed = env.versions()
    return installed["torch"], installed["jax"]


def _rows_by_id(saved: pd.DataFrame, follow) -> dict[tuple, dict]:
    """A bundle's rows by (chapter, claim id) where they live now (`follow`), and by each
    alias the row names, where the bundle saved no row under that id."""
    found: dict[tuple, dict] = {}
    aliases: dict[tuple, dict] = {}
    for row in saved.to_dict("records"):
        chapter, claim_id = follow(str(row["chapter"]), str(row["claim_id"]))
        found[chapter, claim_id] = row
        for alias in _ids(row)[1:]:
            aliases.setdefault((chapter, alias), row)
    return aliases | found


def _sides(row: dict, reverse: bool = False) -> tuple:
    """(chapter, scope, baseline, candidate) of a claim: the same comparison whatever its id
    (a pair asked the other way round has its sides swapped)."""
    sides = (str(row["baseline"]), str(row["candidate"]))
    scope = str(row["question"]).split(": ")[0]
    return (str(row["chapter"]), scope, *(sides[::-1] if reverse else sides))


def _rows_by_sides(saved: pd.DataFrame, follow) -> dict[tuple, dict]:
    """A bundle's rows by `_sides`, each in the chapter where it lives now."""
    found = {}
    for row in saved.to_dict("records"):
        chapter, _ = follow(str(row["chapter"]), str(row["claim_id"]))
        found.setdefault(_sides({**row, "chapter": chapter}), row)
    return found


def _verdicts(entries: list[tuple[str, str, str]]) -> str:
    """"machine: verdict; ...", one entry per machine whose builds agree, else one per build
    with its bundle named."""
    by_machine: dict[str, list[tuple[str, str]]] = {}
    for name, source, verdict in entries:
        by_machine.setdefault(name, []).append((source, verdict))
    shown = []
    for name, found in by_machine.items():
        if len({verdict for _, verdict in found}) == 1:
            shown.append(f"{name}: {found[0][1]}")
        else:
            shown += [f"{name} [{source}]: {verdict}" for source, verdict in found]
    return "; ".join(shown)


def agreement(current: pd.DataFrame, folders: list[Path], pins: tuple[str, str] | None = None,
              follow: Callable[[str, str], tuple[str, str]] | None = None) -> pd.DataFrame:
    """For each claim of `current` (this build's claims.csv), its verdict on every machine
    that made it with this build's `pins` (torch, jax; by default those installed, the
    build's): COLUMNS, where `agreed` holds when every verdict is the same decided one
    (faster, slower or tie; a withheld verdict anywhere agrees with nothing), `verdicts`
    names each machine's ("Intel Xeon (2 cores): faster; AMD EPYC (2 cores): tie") and
    `machines` counts the CPU models or GPUs. A claim no comparable bundle made agrees with
    itself alone (1 machine). The bundles in `folders` are validated as they are read
    (`bundles.load`); `follow` maps an older build's (chapter, claim id) to where it lives
    now (`deepdive.chapters.claim_map.current`)."""
    follow = follow or (lambda chapter, claim_id: (chapter, claim_id))
    pins = pins or _installed()
    found = [bundles.load(Path(f), current=follow) for f in folders]
    others = [(b.name, _rows_by_id(b.claims, follow), _rows_by_sides(b.claims, follow)) for b in
              sorted(found, key=lambda b: (b.build["date"], b.name)) if comparable(b, pins)]
    rows = []
    for row in current.to_dict("records"):
        key = (str(row["chapter"]), str(row["claim_id"]))
        entries = [(machine(row["device"]), THIS_BUILD, reread_verdict(row))]
        for name, saved, by_sides in others:
            other = next((saved[key[0], i] for i in _ids(row) if (key[0], i) in saved), None)
            turned = other is None and _sides(row, reverse=True) in by_sides
            other = by_sides.get(_sides(row, reverse=True)) if turned else other
            if other is not None and other["scale"] == row["scale"] and _kind(
                    other["device"]) == _kind(row["device"]):
                verdict = reread_verdict(other)
                verdict = {"faster": "slower", "slower": "faster"}.get(verdict, verdict) \
                    if turned else verdict  # the same pair asked the other way round
                entries.append((machine(other["device"]), name, verdict))
        verdicts = {verdict for *_, verdict in entries}
        rows.append({"chapter": key[0], "claim_id": key[1],
                     "agreed": len(verdicts) == 1 and "withheld" not in verdicts,
                     "verdicts": _verdicts(entries),
                     "machines": len({name for name, *_ in entries})})
    return pd.DataFrame(rows, columns=list(COLUMNS))
