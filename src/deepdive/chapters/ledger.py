"""The ledger page's readings: every committed bundle of a build's evidence beside this build,
claim by claim.

Each build is a column: "this build" (the claims and stamps in `_build/results`) and every
bundle under `book/data/builds/` (`deepdive.book.bundles`), read and validated, with claims
that moved since followed to where they live now (`deepdive.chapters.claim_map`). A build
committed as a bundle shows once. Every verdict is recomputed from its saved ratio,
interval and bands with the book's one rule (`deepdive.book.claims.reread_verdict`); the
saved word is never read. A claim *flips* where two builds decided it differently (a
withheld verdict decides nothing). Between two CPU builds of different releases at one
scale, each shared claim's ratio of ratios (new over old, with a 95% interval that combines
the two builds' intervals as independent estimates) is decided by the same rule: the claim
*moved* (its candidate gained or lost against its baseline) when the interval clears the
wider of its two decision bands, held *steady* inside the wider unwidened tie band, or is
*undecided*; two builds of one release are the control. GPU builds are columns of their
own, labelled with their device, and never enter that comparison.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from deepdive.book import bundles as bundle_files
from deepdive.book import claims, provenance
from deepdive.chapters import claim_map
from deepdive.chapters.evidence import follow_moves
from deepdive.core import env
from deepdive.core.verdict import DECIDED, TieBand, classify

__all__ = ["ABSENT", "CHANGES", "FLIPPED", "THIS_BUILD", "Column", "claims_table", "columns",
           "differences", "flips", "found_sentence", "load_ledger", "provenance_table",
           "ratio_of_ratios", "rebuild_pair", "release_changes", "release_summary",
           "release_pair", "release_sentence", "release_table", "styled_claims", "this_build",
           "verdicts"]

THIS_BUILD = "this build"
ABSENT = "—"  # a claim a build did not make (another scale, device or release)
FLIPPED = "⇄ flipped"
# A ratio of ratios decided by the rule: what it says about the claim between two releases.
CHANGES = {"faster": ("moved", "the candidate gained against its baseline"),
           "slower": ("moved", "the candidate lost against its baseline"),
           "tie": ("steady", "within the band"),
           "withheld": ("undecided", "the interval reaches into the band")}
_KEY = ["chapter", "claim_id"]


@dataclass(frozen=True, eq=False)  # its claims are a DataFrame: no == between columns
class Column:
    """One build on the ledger page: its label, its build.json facts, its claims (moved ones
    followed) and, where it is committed, its bundle's name."""

    label: str
    build: dict
    claims: pd.DataFrame
    bundle: str = ""
    build_ids: frozenset = frozenset()  # every build id its pages' stamps name

    @property
    def kind(self) -> str:
        return self.build["device_kind"]

    @property
    def release(self) -> tuple[str, str]:
        return self.build["versions"]["torch"], self.build["versions"]["jax"]


def this_build(results: Path | None = None) -> Column | None:
    """The ledger page's "this build" column, from the claims and stamps in `results`
    (`_build/results` by default); None before any chapter saved a claim. Stamps that
    disagree (chapters a cached build kept from an older one) are shown in its notes, not
    refused."""
    folder = Path(results) if results is not None else env.results_dir()
    if not all((folder / name).exists() for name in (claims.FILE_NAME, provenance.FILE_NAME)):
        return None
    saved = pd.read_csv(folder / claims.FILE_NAME)
    if saved.empty:
        return None
    build = bundle_files.describe_build(folder, strict=False)
    stamps = provenance.load(folder)
    return Column(THIS_BUILD, build, _read(saved),
                  build_ids=frozenset(stamps["build_id"].astype(str)))


def _read(saved: pd.DataFrame) -> pd.DataFrame:
    """A build's claims as the ledger compares them: moved claims followed to where they live
    now, and each alias (another id a page gave the same measurement, `aliases`) made a row
    of its own, so a comparison one build saved under two ids and another under one still
    meets itself."""
    frame = follow_moves(saved)
    if "aliases" not in frame:
        return frame
    named = [{**row.to_dict(), "claim_id": alias} for _, row in frame.iterrows()
             for alias in str(row["aliases"]).split(";") if alias and alias != "nan"]
    extra = pd.DataFrame(named, columns=frame.columns)
    extra = extra[~extra.set_index(_KEY).index.isin(frame.set_index(_KEY).index)]
    return pd.concat([frame, extra], ignore_index=True) if len(extra) else frame


def load_ledger(root: Path | None = None, results: Path | None = None):
    """What the ledger page reads: (the committed bundles, validated, oldest first; this
    build's column or None). A malformed bundle raises `deepdive.book.bundles.BundleError`,
    which fails the book's build."""
    committed = bundle_files.load_all(root, current=claim_map.current)
    return committed, this_build(results)


def _one_build(a: Column, b: Column) -> bool:
    """Whether two columns hold one build's measurements: a page stamped with the same build
    id (a build id names a run of `make book`; its cached pages keep it in later builds)."""
    return bool((a.build_ids or {a.build["build_id"]}) & (b.build_ids or {b.build["build_id"]})
                - {provenance.OUTSIDE_BUILD})


def columns(committed, this: Column | None) -> list[Column]:
    """The ledger page's columns, oldest first: the CPU bundles, then the GPU bundles, each by
    date, then this build. A bundle that holds this build's measurements (a page stamped
    with one of its build ids: this build's own, or the one its cached pages came from)
    shows once, as this build, named with its bundle; pages re-run since keep their new
    numbers, and this build's notes say how many claims differ from the bundle."""
    built = [Column(b.name, b.build, _read(b.claims), b.name,
                    frozenset(b.provenance["build_id"].astype(str))) for b in committed]
    if this is not None:
        same = [c for c in built if _one_build(c, this)]
        if same:
            built = [c for c in built if c is not same[-1]]
            differ = _claims_differing(same[-1].claims, this.claims)
            notes = "; ".join(filter(None, [this.build.get("notes", ""), (
                f"{differ} of its claims re-measured since its bundle was written (pages "
                "re-run in a later build)") if differ else ""]))
            this = replace(this, bundle=same[-1].bundle, build=dict(this.build, notes=notes))
    order = sorted(built, key=lambda c: (c.kind != "cpu", c.build["date"], c.build["build_id"]))
    return order + ([this] if this is not None else [])


def _claims_differing(a: pd.DataFrame, b: pd.DataFrame) -> int:
    keys = [*_KEY, "ratio", "low", "high"]
    both = a[keys].merge(b[keys], on=_KEY, how="outer", suffixes=("_a", "_b"))
    same = [(both[f"{k}_a"] == both[f"{k}_b"]) for k in ("ratio", "low", "high")]
    return int((~(same[0] & same[1] & same[2])).sum())


def _ratio(value: float) -> str:
    return f"{value:.3f}" if value < 10 else f"{value:.1f}" if value < 1000 else f"{value:.0f}"


def _cell(row) -> str:
    """A claim in one build: its verdict, recomputed, and 'ratio [low, high]'."""
    numbers = [_ratio(float(row[k])) for k in ("ratio", "low", "high")]
    return f"{claims.reread_verdict(row)}, {numbers[0]} [{numbers[1]}, {numbers[2]}]"


def _by_claim(cols: list[Column], read) -> pd.DataFrame:
    """One row per claim any build made, one column per build: `read(row)`, or ABSENT."""
    frames = {c.label: pd.Series([read(row) for _, row in c.claims.iterrows()],
                                 index=pd.MultiIndex.from_frame(c.claims[_KEY]), dtype=object)
              for c in cols}
    if not frames:
        return pd.DataFrame(index=pd.MultiIndex.from_tuples([], names=_KEY))
    table = pd.DataFrame(frames)
    table = table.loc[sorted(table.index, key=_in_order)]  # batch 16 before batch 256
    return table.fillna(ABSENT).rename_axis(["chapter", "claim id"])


def _in_order(key: tuple[str, str]) -> tuple:
    """A claim's place in the tables: by chapter, then by id with its numbers read as
    numbers."""
    return key[0], [int(part) if part.isdigit() else part
                    for part in re.split(r"(\d+)", key[1])]


def verdicts(committed, this: Column | None) -> pd.DataFrame:
    """Each claim's verdict in each build (ABSENT where a build did not make it)."""
    return _by_claim(columns(committed, this), claims.reread_verdict)


def _flipped(row) -> bool:
    return len({v for v in row if v in (*DECIDED, "tie")}) > 1


def claims_table(committed, this: Column | None) -> pd.DataFrame:
    """The ledger page's "Claim by claim": per build, the verdict and 'ratio [low, high]'
    (baseline time over candidate time), and a FLIPPED mark where two builds decided the
    claim differently."""
    cols = columns(committed, this)
    table = _by_claim(cols, _cell)
    table["flipped"] = [FLIPPED if _flipped(row) else "" for _, row in
                        _by_claim(cols, claims.reread_verdict).iterrows()]
    return table


def styled_claims(committed, this: Column | None):
    """`claims_table` with the cells of flipped claims in bold, as the ledger page shows it."""
    table = claims_table(committed, this)

    def bold(row):
        return ["font-weight: bold" if row["flipped"] else "" for _ in row]

    return table.style.apply(bold, axis=1)


def _between(cols: list[Column], row) -> str:
    """What the builds that decided a flipped claim differently differ in."""
    found = set()
    for i, a in enumerate(cols):
        for b in cols[i + 1:]:
            va, vb = row[a.label], row[b.label]
            if va != vb and {va, vb} <= {*DECIDED, "tie"}:
                found.add("device kinds" if a.kind != b.kind else
                          "releases" if a.release != b.release else "builds of one release")
    return ", ".join(sorted(found))


def flips(committed, this: Column | None) -> pd.DataFrame:
    """The claims two builds decided differently: each build's verdict, the claim's
    question (as the first build that made it asked it), what those builds differ in
    (device kinds, releases, or builds of one release) and, where two CPU builds of
    different releases both made it, whether its ratio moved between them (`release_changes`):
    a verdict can cross a band's edge while the change itself stays undecided."""
    cols = columns(committed, this)
    table = _by_claim(cols, claims.reread_verdict)
    flipped = table[[_flipped(row) for _, row in table.iterrows()]].copy()
    questions = _by_claim(cols, lambda row: row["question"])
    flipped.insert(0, "question", [next(q for q in questions.loc[key] if q != ABSENT)
                                   for key in flipped.index])
    flipped["between"] = [_between(cols, row) for _, row in flipped.iterrows()]
    pair = release_pair(committed, this)
    if pair is not None:
        changes = release_changes(*pair)["change"]
        flipped["change between releases"] = [changes.get(key, ABSENT) for key in flipped.index]
    return flipped


def _committed(column: Column) -> str:
    if column.label != THIS_BUILD:
        return "yes"  # its name is the bundle's folder
    return f"as {column.bundle}" if column.bundle else "no"


def provenance_table(committed, this: Column | None) -> pd.DataFrame:
    """The ledger page's "The builds": one row per build, named by its bundle's folder (or
    "this build"): whether it is committed, date, device, cores, Python, torch, jax, flax,
    scale, tie band and notes."""
    rows = [{"build": c.label, "committed": _committed(c), "date": c.build["date"],
             "device": c.build["device"], "cores": c.build["cores"],
             "python": c.build["python"], **{name: c.build["versions"].get(name) or "none"
                                             for name in ("torch", "jax", "flax")},
             "scale": c.build["scale"], "tie band": f"±{100 * c.build['tie_band']:.1f}%",
             "notes": c.build["notes"]} for c in columns(committed, this)]
    return pd.DataFrame(rows, columns=["build", "committed", "date", "device", "cores", "python",
                                       "torch", "jax", "flax", "scale", "tie band", "notes"]
                        ).set_index("build")


def release_pair(committed, this: Column | None) -> tuple[Column, Column] | None:
    """The two CPU builds whose releases the ledger page compares: the newest CPU build, and the
    newest CPU build at its scale on another torch or jax, preferring one on the same CPU;
    None where there is no such pair."""
    cpus = [c for c in columns(committed, this) if c.kind == "cpu"]
    if not cpus:
        return None
    # on one date: this build, then the later build id (it starts with the build's UTC time)
    new = max(cpus, key=lambda c: (c.build["date"], c.label == THIS_BUILD, c.build["build_id"]))
    older = [c for c in cpus if c.release != new.release and c.build["scale"] == new.build["scale"]]
    if not older:
        return None
    old = max(older, key=lambda c: (c.build["device"] == new.build["device"], c.build["date"],
                                    c.build["build_id"]))
    return old, new


def rebuild_pair(committed, this: Column | None) -> tuple[Column, Column] | None:
    """Two CPU builds of one release at one scale (the newest such pair): what a rebuild alone
    moves, the control for `release_pair`'s comparison; None where there is none. Two
    columns of one build (this build, with pages re-run after its bundle was written) are
    not two builds: their shared claims are the same measurements."""
    cpus = [c for c in columns(committed, this) if c.kind == "cpu"]
    pairs = [(a, b) for i, a in enumerate(cpus) for b in cpus[i + 1:]
             if a.release == b.release and a.build["scale"] == b.build["scale"]
             and not _one_build(a, b)]
    return max(pairs, key=lambda ab: (ab[1].build["date"], ab[1].build["build_id"],
                                      ab[0].build["date"], ab[0].build["build_id"]),
               default=None)


def _bands(row) -> tuple[float, float]:
    tie = float(row["tie_band"])
    wide = row["decision_band"] if "decision_band" in row else math.nan
    return tie, (tie if pd.isna(wide) else float(wide))


def ratio_of_ratios(was, now) -> tuple[float, float, float]:
    """New over old for one claim of two builds, with a 95% interval: the builds' rounds are
    independent, so in log space the distances from each median to its interval's ends add
    in quadrature (the new build's low end with the old one's high end, and the reverse).
    Dividing one interval's ends by the other's would assume both builds at their 95%
    extremes at once. The interval covers each build's own sampling only, not what moves
    between two builds of one release: `rebuild_pair` measures that."""
    r_old, lo_old, hi_old = (math.log(float(was[k])) for k in ("ratio", "low", "high"))
    r_new, lo_new, hi_new = (math.log(float(now[k])) for k in ("ratio", "low", "high"))
    centre = r_new - r_old
    below = math.hypot(r_new - lo_new, hi_old - r_old)
    above = math.hypot(hi_new - r_new, r_old - lo_old)
    return math.exp(centre), math.exp(centre - below), math.exp(centre + above)


def release_changes(old: Column, new: Column) -> pd.DataFrame:
    """Each claim both builds made, between two builds on one device kind: both verdicts and
    values, the ratio of ratios new/old with its 95% interval (`ratio_of_ratios`), decided by
    the verdict rule with the wider of the two claims' tie bands, and the wider of their
    decision bands for a decided change (a noisy side widens what a move must clear, never
    what "steady" may span): "moved" (the candidate gained or lost against its baseline),
    "steady" (inside the tie band) or "undecided"."""
    if old.kind != new.kind:
        raise ValueError(f"a release is compared on one kind of device: {old.label} ran on "
                         f"a {old.kind}, {new.label} on a {new.kind}")
    both = old.claims.merge(new.claims, on=_KEY, suffixes=("_old", "_new"))
    rows = []
    for _, pair in both.iterrows():
        was, now = (pair.filter(like=s).rename(lambda k, s=s: k.removesuffix(s))
                    for s in ("_old", "_new"))
        ratio, low, high = ratio_of_ratios(was, now)
        (tie_old, wide_old), (tie_new, wide_new) = _bands(was), _bands(now)
        band, wide = max(tie_old, tie_new), max(wide_old, wide_new, tie_old, tie_new)
        decided = classify(ratio, low, high, TieBand(band), TieBand(wide))
        change, reading = CHANGES[decided]
        rows.append({"chapter": pair["chapter"], "claim id": pair["claim_id"],
                     "question": now["question"], "old": _cell(was), "new": _cell(now),
                     "ratio": ratio, "low": low, "high": high, "band": band,
                     "decision band": wide, "verdict": decided, "change": change,
                     "reading": reading})
    columns_ = ["chapter", "claim id", "question", "old", "new", "ratio", "low", "high", "band",
                "decision band", "verdict", "change", "reading"]
    return pd.DataFrame(rows, columns=columns_).set_index(["chapter", "claim id"])


def _release_words(column: Column) -> str:
    torch, jax = column.release
    return f"{column.label} (torch {torch}, jax {jax})"


def differences(old: Column, new: Column) -> str:
    """Everything two builds' build.json facts differ in besides the date and build id: each
    version (as its package metadata states it), then Python, commit, device and scale, as
    "name old -> new" items; a release comparison is a comparison of all of them."""
    fields = {"Python": ("python",), "commit": ("commit",), "device": ("device",),
              "scale": ("scale",)}
    found = [f"{name} {old.build['versions'].get(name)} -> {new.build['versions'].get(name)}"
             for name in bundle_files.VERSION_NAMES
             if old.build["versions"].get(name) != new.build["versions"].get(name)]
    found += [f"{name} {old.build[key[0]]} -> {new.build[key[0]]}" for name, key in fields.items()
              if old.build[key[0]] != new.build[key[0]]]
    return "; ".join(found) or "nothing recorded"


def release_table(committed, this: Column | None, changes: tuple[str, ...] | None = None
                  ) -> pd.DataFrame:
    """The ledger page's table of `release_changes` between `release_pair`'s two builds, each
    claim's question and both builds' values, moved claims first; only the `changes` named
    ("moved", "undecided", "steady") when given; one row saying why where there is no pair."""
    pair = release_pair(committed, this)
    if pair is None:
        return pd.DataFrame({"what the release changed": [_no_pair(committed, this)]},
                            index=[""])
    old, new = pair
    found = release_changes(old, new)
    shown = found.assign(**{"new / old [95% interval]": [
        f"{_ratio(r)} [{_ratio(lo)}, {_ratio(hi)}]; band ±{100 * b:.1f}%"
        + (f" (±{100 * w:.1f}% to move)" if w > b else "")
        for r, lo, hi, b, w in zip(found["ratio"], found["low"], found["high"], found["band"],
                                   found["decision band"], strict=True)]})
    order = shown["change"].map({"moved": 0, "undecided": 1, "steady": 2})
    shown = shown.assign(_order=order).sort_values("_order", kind="stable")
    if changes is not None:
        shown = shown[shown["change"].isin(changes)]
    return shown[["question", "old", "new", "new / old [95% interval]", "change",
                  "reading"]].rename(columns={"old": _release_words(old),
                                              "new": _release_words(new)})


def _no_pair(committed, this: Column | None) -> str:
    cpus = [c for c in columns(committed, this) if c.kind == "cpu"]
    return ("Comparing releases needs two CPU builds at one scale on different torch or jax "
            f"versions; this ledger has {_count(len(cpus), 'CPU build')}"
            + (f" ({', '.join(_release_words(c) for c in cpus)})" if cpus else "") + ".")


def _count(n: int, noun: str) -> str:
    return f"{'no' if n == 0 else n} {noun}{'' if n == 1 else 's'}"


def _names(ids, most: int = 5) -> str:
    ids = list(ids)
    shown = ", ".join(ids[:most])
    return shown + (f" and {len(ids) - most} more" if len(ids) > most else "")


def _change_counts(changes: pd.DataFrame) -> str:
    counts = changes["change"].value_counts()
    return (f"{counts.get('moved', 0)} of the {_count(len(changes), 'claim')} both made moved "
            f"beyond the claim's band, {counts.get('steady', 0)} held steady and "
            f"{counts.get('undecided', 0)} stayed undecided")


def release_summary(committed, this: Column | None) -> str:
    """The release comparison in one short sentence for the ledger page's box: how many
    shared claims moved between the two CPU releases, which way, and how many a rebuild of
    one release alone moved (`release_sentence` has the rest)."""
    pair = release_pair(committed, this)
    if pair is None:
        return _no_pair(committed, this)
    old, new = pair
    changes = release_changes(old, new)
    ways = [f"in {(changes['verdict'] == v).sum()} {CHANGES[v][1]}"
            for v in DECIDED if (changes["verdict"] == v).any()]
    torch_old, jax_old = old.release
    torch_new, jax_new = new.release
    said = (f"From torch {torch_old} and jax {jax_old} to torch {torch_new} and jax {jax_new} "
            f"(CPU, {new.build['scale']} scale), {(changes['change'] == 'moved').sum()} of "
            f"{_count(len(changes), 'shared claim')} moved"
            + (f" ({', '.join(ways)})" if ways else "") + "; ")
    control = rebuild_pair(committed, this)
    if control is None:
        return said + "no rebuild of one release is committed to compare that with."
    moved = (release_changes(*control)["change"] == "moved").sum()
    return said + f"two builds of one release moved {moved} against each other."


def release_sentence(committed, this: Column | None) -> str:
    """What changed between the two CPU builds of different releases, read from
    `release_changes`: everything the builds differ in (`differences`), how many of the
    claims both made moved, and which, how many held steady or stayed undecided; then the
    same count between two builds of one release (`rebuild_pair`), where there are two, as
    the control a release's moves must stand out from."""
    pair = release_pair(committed, this)
    if pair is None:
        return _no_pair(committed, this)
    old, new = pair
    changes = release_changes(old, new)
    if changes.empty:
        return (f"{_release_words(old)} and {_release_words(new)} share no claim, so "
                "nothing can be said about what the release changed.")
    moved = [(CHANGES[verdict][1], [i for _, i in changes.index[changes["verdict"] == verdict]])
             for verdict in DECIDED]
    named = ", ".join(f"in {len(ids)} {reading} ({_names(ids)})" for reading, ids in moved if ids)
    said = (f"From {_release_words(old)} to {_release_words(new)}, both on the CPU at "
            f"{new.build['scale']} scale (they differ in {differences(old, new)}), "
            f"{_change_counts(changes)}" + (f"; moved: {named}" if named else "") + ". "
            f"Over all {_count(len(changes), 'shared claim')} the median new/old is "
            f"{_ratio(changes['ratio'].median())}: a ratio cannot tell a candidate that sped "
            "up from a baseline that slowed down.")
    peers = [c for c in columns(committed, this) if c.kind == "cpu" and c.release == old.release
             and c.build["scale"] == old.build["scale"] and not _one_build(c, new)]
    if len(peers) > 1:
        moved_each = [set(found.index[found["change"] == "moved"])
                      for found in (release_changes(peer, new) for peer in peers)]
        every = sorted(set.intersection(*moved_each), key=_in_order)
        some = sorted(set.union(*moved_each) - set(every), key=_in_order)
        said += (f" Against each of the {len(peers)} builds of the old release, "
                 f"{len(every)} moved every time" + (f" ({_names(i for _, i in every)})"
                                                     if every else "")
                 + f" and {len(some)} against only some of them"
                 + (f" ({_names(i for _, i in some)})" if some else "") + ".")
    control = rebuild_pair(committed, this)
    if control is None:
        return said + (" No two builds of one release are committed yet, so what a rebuild "
                       "alone moves is not measured here.")
    first, second = control
    return said + (f" Between two builds of one release ({_release_words(first)} and "
                   f"{_release_words(second)}: {differences(first, second)}), "
                   f"{_change_counts(release_changes(first, second))}: a release's moves "
                   "count only beyond what a rebuild alone moves.")


def found_sentence(committed, this: Column | None) -> str:
    """What this build found beside the committed bundles, in one sentence: how many of its
    claims another build also made, how many of those every build decided alike, which
    flipped, and how many no second build decided."""
    committed = list(committed)
    bundles_words = (f"{_count(len(committed), 'bundle')} "
                     f"{'is' if len(committed) == 1 else 'are'} committed")
    if this is None:
        return (f"This build has saved no claims yet, so it has no column here; "
                f"{bundles_words} under book/data/builds/.")
    cols = columns(committed, this)
    mine = len(this.claims)
    if len(cols) == 1:
        alone = ("the only committed bundle is this build's own"
                 if committed else "no bundle is committed under book/data/builds/ yet")
        return (f"This build saved {_count(mine, 'claim')}, and {alone}: they stand "
                "alone until another build's bundle is added (below).")
    table = _by_claim(cols, claims.reread_verdict)
    table = table[table[THIS_BUILD] != ABSENT]
    others = table.drop(columns=THIS_BUILD)
    shared = table[(others != ABSENT).any(axis=1)]
    flipped = [key[1] for key, row in shared.iterrows() if _flipped(row)]
    decided = shared.apply(lambda row: sum(v in (*DECIDED, "tie") for v in row), axis=1)
    held = sum(n >= 2 for n in decided) - len(flipped)
    mine_col = next(c for c in cols if c.label == THIS_BUILD)
    own = f", this build's own among them ({mine_col.bundle})" if mine_col.bundle else ""
    undecided = len(shared) - held - len(flipped)
    return (f"{bundles_words[0].upper()}{bundles_words[1:]}{own}. Of this build's "
            f"{_count(mine, 'claim')}, {len(shared)} {_were(len(shared))} also made by another "
            f"build: {held} reached the same verdict in every build that decided "
            f"{'it' if held == 1 else 'them'}, {len(flipped)} flipped"
            + (f" ({_names(flipped)})" if flipped else "")
            + f", and {undecided} {_were(undecided)} decided by fewer than two builds.")


def _were(n: int) -> str:
    return "was" if n == 1 else "were"
