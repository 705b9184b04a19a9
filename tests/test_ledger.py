"""deepdive.chapters.ledger and the ledger page: builds read from small fixture bundles and a
fixture "this build" in tmp_path, their claims compared pair by pair by the verdict rule, the
page's own cells run with none, one and two bundles; and the claim-id registry checked
against what the pages can save."""

import ast
import json
import math
import re
from pathlib import Path

import jupytext
import pandas as pd
import pytest
import yaml
from test_bundles import CPU, GPU, JAX, TORCH, claim, hand_bundle, make_results, stamp

from deepdive.book import bundles, claim_ids, evidence, provenance
from deepdive.book.bundles import BundleError
from deepdive.book.claims import verdict_parts
from deepdive.chapters import claim_map, ledger
from deepdive.core import env

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "book" / "ledger.md"
NEW = {"torch": "2.99.0", "jax": "0.99.0"}  # a release no test environment has
XEON = "Intel(R) Xeon(R) Processor (1 of 2 cores)"
XEON_MODEL, EPYC_MODEL = XEON.removesuffix(" (1 of 2 cores)"), CPU.removesuffix(" (2 cores)")
ID = "dot_jit_vs_compile"  # the claim most fixtures make
OTHER = "dot_jit_vs_vmap"
MADE = "claims both made"
# ratio, low, high: decided against a band of ±5% ("tie" inside [0.952, 1.05])
FASTER, SLOWER, TIE, OPEN = (1.5, 1.4, 1.6), (0.6, 0.55, 0.65), (1.0, 0.99, 1.01), \
    (1.05, 1.0, 1.1)


def rows(**ratios):
    """Claims of 01_vmap by id, each with its (ratio, low, high)."""
    return [claim("01_vmap", claim_id, ratio) for claim_id, ratio in ratios.items()]


def this_build(tmp_path, claims_rows, build_id="20261201T100000Z-new", device=CPU,
               date="2026-12-01"):
    stamps = [stamp(c, device=device, build_id=build_id, executed_at=f"{date} 10:00:00 UTC")
              for c in dict.fromkeys(r["chapter"] for r in claims_rows)]
    return make_results(tmp_path / "results", claims_rows, stamps)


def committed(tmp_path, *specs):
    """Bundles under tmp_path/builds from (claim rows, build.json changes); their root."""
    root = tmp_path / "builds"
    for number, (claims_rows, changes) in enumerate(specs):
        # each bundle its own build unless a test says otherwise
        day = changes.get("date", "2026-11-28").replace("-", "")
        changes = {"build_id": f"{day}T11550{number}Z-bundle{number}", **changes}
        hand_bundle(root, claims_rows, **changes)
    return root


def builds(tmp_path, *specs, this=None):
    """The ledger's builds of `specs` (see `committed`) and `this` build's claim rows."""
    results = this_build(tmp_path, this) if this is not None else tmp_path / "none"
    return ledger.builds(committed(tmp_path, *specs), results)


# ---- the builds ---------------------------------------------------------------------------

def test_builds_put_cpu_then_gpu_bundles_oldest_first_then_this_build(tmp_path):
    found = builds(tmp_path,
                   (rows(dot_jit_vs_compile=FASTER), dict(date="2026-11-27", device=GPU,
                                                          device_kind="gpu")),
                   (rows(dot_jit_vs_compile=FASTER), dict(date="2026-11-30",
                                                          build_id="20261130T090000Z-b")),
                   (rows(dot_jit_vs_compile=FASTER), dict(date="2026-11-30", versions=NEW,
                                                          build_id="20261130T080000Z-a")),
                   (rows(dot_jit_vs_compile=FASTER), dict(date="2026-11-28", versions=NEW)),
                   this=rows(dot_jit_vs_compile=FASTER))
    # on one date, the earlier build id first, whatever its folder's name
    old, new = ("2.13.0", "0.10.2"), (NEW["torch"], NEW["jax"])
    assert [(b.build["date"], b.pins, b.build["device_kind"]) for b in found[:4]] == [
        ("2026-11-28", new, "cpu"), ("2026-11-30", new, "cpu"), ("2026-11-30", old, "cpu"),
        ("2026-11-27", old, "gpu")]
    assert [b.folder.name for b in found[:4]] == [b.label for b in found[:4]]
    assert found[-1].label == ledger.THIS_BUILD and found[-1].folder is None
    assert found[-1].pins == (TORCH.split("+")[0], JAX)


def test_this_build_committed_as_a_bundle_shows_once_and_names_its_folder(tmp_path):
    spec = (rows(dot_jit_vs_compile=FASTER), dict(build_id="20261201T100000Z-new",
                                                  date="2026-12-01"))
    (only,) = builds(tmp_path, spec, this=rows(dot_jit_vs_compile=(1.5, 1.4, 1.7)))
    assert only.label == ledger.THIS_BUILD and only.folder.parent == tmp_path / "builds"
    # pages re-run since the bundle was written keep this build's numbers
    assert only.claims.set_index("claim_id").at[ID, "high"] == 1.7
    other = ledger.builds(tmp_path / "builds", this_build(
        tmp_path / "later", rows(dot_jit_vs_compile=FASTER), build_id="20261202T100000Z-b"))
    assert [b.label for b in other] == [other[0].folder.name, ledger.THIS_BUILD]


def test_a_build_run_outside_make_book_never_matches_a_bundle(tmp_path):
    found = builds(tmp_path, (rows(dot_jit_vs_compile=FASTER),
                              dict(build_id=provenance.OUTSIDE_BUILD)))
    results = this_build(tmp_path, rows(dot_jit_vs_compile=FASTER),
                         build_id=provenance.OUTSIDE_BUILD)
    assert len(found) == 1 and len(ledger.builds(tmp_path / "builds", results)) == 2


def test_there_is_no_this_build_before_a_page_saved_a_claim(tmp_path):
    assert ledger.this_build(tmp_path) is None
    make_results(tmp_path, [], [stamp("01_vmap")])
    assert ledger.this_build(tmp_path) is None


def test_this_build_keeps_stamps_that_disagree_in_its_notes(tmp_path):
    claims_rows = rows(dot_jit_vs_compile=FASTER) + [claim("04_gpt_training",
                                                           "char_fp32_jax_vs_torch")]
    stamps = [stamp("01_vmap"), stamp("04_gpt_training", torch="2.12.0")]
    this = ledger.this_build(make_results(tmp_path, claims_rows, stamps))
    assert "04_gpt_training" in this.build["notes"] and "2.12.0" in this.build["notes"]


def test_a_malformed_bundle_fails_the_reading_naming_its_file(tmp_path):
    hand_bundle(tmp_path / "builds", [claim("01_vmap", "foo_vs_bar")])
    with pytest.raises(BundleError, match="claims.csv: unknown claim id 'foo_vs_bar' \\(row 1\\)"):
        ledger.builds(tmp_path / "builds", tmp_path / "none")


def test_the_device_is_the_model_without_the_cores_a_page_pinned(tmp_path):
    (pinned,) = builds(tmp_path, (rows(dot_jit_vs_compile=TIE), dict(device=XEON)))
    assert pinned.device == XEON_MODEL
    (whole,) = builds(tmp_path / "w", (rows(dot_jit_vs_compile=TIE), {}))
    assert whole.device == EPYC_MODEL


# ---- claims: moves followed, aliases counted once ------------------------------------------

def test_verdicts_are_recomputed_and_read_in_the_books_one_form(tmp_path):
    found = builds(tmp_path, (rows(dot_jit_vs_compile=SLOWER, dot_jit_vs_vmap=OPEN,
                                   attention_jit_vs_vmap=TIE), {}))
    table = ledger.verdicts(found).set_index("claim_id")
    assert table["verdict"].tolist() == ["slower", "withheld", "tie"]  # saved as "stale"
    forms = [verdict_parts(p)["form"] for p in table["phrase"]]
    assert forms == ["decided", "withheld", "tie"]
    slower = verdict_parts(table.at[ID, "phrase"])
    assert (slower["fast"], slower["ratio"]) == ("base", pytest.approx(1 / 0.6, abs=1e-3))


def test_claims_that_moved_are_matched_where_they_live_now(tmp_path):
    was, now = ("03_torch_compile", "char_inductor_fp32"), ("04_gpt_training", "char_inductor_fp32")
    assert claim_map.current(*was) == now
    found = builds(tmp_path, ([claim(*was)], {}), this=[claim(*now, SLOWER)])
    assert {tuple(k) for k in ledger.verdicts(found)[ledger.KEY].to_numpy()} == {now}
    assert len(ledger.changes(*found)) == 1


def aliased(claim_id, alias, ratio=FASTER):
    row = claim("05_vit_training", claim_id, ratio)
    row["aliases"] = alias
    return row


def test_a_measurement_saved_under_two_ids_counts_once_between_two_builds(tmp_path):
    """The cold read's 110 claims against 109 rows: both builds saved one measurement under
    an id and its alias; the pair counts it once."""
    spec = [aliased("best_jax_vs_torch_b32", "math_jax_vs_torch"),
            claim("05_vit_training", "best_jax_vs_torch_b8")]
    old, new = builds(tmp_path, (spec, {}), (spec, dict(date="2026-11-30", versions=NEW)))
    assert (old.claims["alias_of"] != "").sum() == 1  # the alias meets other builds' rows
    assert len(ledger.changes(old, new)) == 2 == ledger.pairs([old, new])[MADE][0]


def test_an_alias_meets_the_claim_another_build_saved_under_that_id(tmp_path):
    best, eager = "char_bf16_jax_vs_torch", "char_bf16_jax_vs_eager"  # PyTorch's best: eager
    merged = aliased(best, eager)
    merged["chapter"] = "04_gpt_training"
    old, new = builds(tmp_path, ([merged], {}), ([
        claim("04_gpt_training", best, FASTER), claim("04_gpt_training", eager, TIE)],
        dict(date="2026-11-30")))
    found = ledger.changes(old, new)
    assert set(found.index.get_level_values("claim_id")) == {best, eager}
    table = ledger.verdicts([old, new]).pivot(index="claim_id", columns="build",
                                              values="verdict")
    assert table.loc[eager].tolist() == ["faster", "tie"]


# ---- what changed between two builds ------------------------------------------------------

def test_changes_decide_the_ratio_of_ratios_against_the_wider_band(tmp_path):
    wide = [claim("01_vmap", claim_id, TIE, band=0.05)
            for claim_id in ("attention_jit_vs_vmap", "attention_jit_vs_compile")]
    for row in wide:
        row["decision_band"] = 0.2  # a noisy side widened these claims' bands in the old build
    old, new = builds(
        tmp_path,
        (rows(dot_jit_vs_compile=TIE, dot_jit_vs_vmap=TIE, grads_jit_vs_compile=TIE,
              dot_vmap_vs_batched=TIE) + wide, {}),
        (rows(dot_jit_vs_compile=FASTER, dot_jit_vs_vmap=SLOWER, grads_jit_vs_compile=TIE,
              dot_vmap_vs_batched=OPEN, attention_jit_vs_vmap=(1.15, 1.12, 1.18),
              attention_jit_vs_compile=(1.3, 1.25, 1.35), attention_vmap_vs_batched=TIE),
         dict(date="2026-11-30", versions=NEW)))
    found = ledger.changes(old, new).droplevel("chapter")
    assert found["change"].tolist() == [
        "moved", "moved", "steady", "undecided",
        # inside the widened ±20% but not the unwidened ±5%: a noisy side widens only what
        # a move must clear, so this is not steady; it would move against ±5%
        "undecided",
        "moved"]  # clears even ±20%
    assert found.index[0] == ID and found.index[4] == wide[0]["claim_id"]
    moved = found.loc[ID]
    low = 1.5 * math.exp(-math.hypot(math.log(1.5 / 1.4), math.log(1.01)))
    high = 1.5 * math.exp(math.hypot(math.log(1.6 / 1.5), -math.log(0.99)))
    assert moved[["new / old", "low", "high"]].tolist() == pytest.approx([1.5, low, high])
    assert verdict_parts(moved["old"])["form"] == "tie"
    assert verdict_parts(moved["new"])["fast"] == "cand"  # the verdict names who took less time
    noisy = found.loc["attention_jit_vs_vmap"]
    assert (noisy["band"], noisy["decision band"]) == (0.05, 0.2)


def test_a_claim_saved_without_a_decision_band_is_decided_against_its_tie_band(tmp_path):
    saved = claim("01_vmap", "dot_jit_vs_compile", TIE, band=0.7)
    saved["decision_band"] = ""
    old, new = builds(tmp_path, ([saved], {}), ([claim("01_vmap", "dot_jit_vs_compile",
                                                       FASTER)], dict(versions=NEW)))
    found = ledger.changes(old, new)
    assert (found["band"].iat[0], found["decision band"].iat[0]) == (0.7, 0.7)
    assert found["change"].iat[0] == "steady"


def test_two_builds_are_never_compared_across_device_kinds(tmp_path):
    cpu, gpu = builds(tmp_path, (rows(dot_jit_vs_compile=TIE), {}),
                      (rows(dot_jit_vs_compile=TIE), dict(device=GPU, device_kind="gpu")))
    with pytest.raises(ValueError, match="one kind of device"):
        ledger.changes(cpu, gpu)
    assert ledger.pairs([cpu, gpu]).empty


def test_differences_name_the_device_model_and_versions_with_their_local_tags(tmp_path):
    old, new = builds(tmp_path, (rows(dot_jit_vs_compile=TIE), {}),
                      (rows(dot_jit_vs_compile=TIE), dict(
                          date="2026-11-29", python="3.14.0", commit="def456", device=XEON,
                          versions=NEW | {"jaxlib": "0.99.0", "triton": None})))
    assert ledger.differences(old, new) == {
        "device": (EPYC_MODEL, XEON_MODEL),
        "python": ("3.13.1", "3.14.0"), "commit": ("abc123", "def456"),
        "torch": ("2.13.0", "2.99.0"), "jax": ("0.10.2", "0.99.0"),
        "jaxlib": ("1.0", "0.99.0"), "triton": ("1.0", "None")}
    # The cold read: "+cpu" stripped hid a switch from the CPU wheel to PyPI's CUDA build
    cpu_wheel = builds(tmp_path / "w", (rows(dot_jit_vs_compile=TIE), {}), (
        rows(dot_jit_vs_compile=TIE), dict(date="2026-11-29", versions={"torch": "2.13.0+cpu"})))
    assert ledger.differences(*cpu_wheel) == {"torch": ("2.13.0", "2.13.0+cpu")}
    (pair,) = ledger.pairs(cpu_wheel).to_dict("records")
    assert (pair["torch"], pair["kind"]) == ("2.13.0 → 2.13.0+cpu", "pins change")


def test_a_rebuild_keeps_the_commit_the_device_model_torch_and_jax(tmp_path):
    """The cold reads: a build on another CPU with the same pins was taken for a rebuild, the
    old release on a Xeon was set against the new one on an EPYC without saying so, and two
    builds of the same pins forty commits apart (every chapter and the timer rewritten) were
    counted as a rebuild."""
    spec = rows(dot_jit_vs_compile=TIE, dot_jit_vs_vmap=TIE, grads_jit_vs_compile=TIE)
    found = builds(tmp_path, (spec, dict(device=XEON, date="2026-11-27")),
                   (spec, dict(device=XEON, date="2026-11-28")),
                   (rows(dot_jit_vs_compile=FASTER, dot_jit_vs_vmap=TIE, grads_jit_vs_compile=OPEN),
                    dict(device=XEON, date="2026-11-29", versions=NEW)),
                   (spec, dict(date="2026-11-30", versions=NEW)),  # the same pins on an EPYC
                   (spec, dict(date="2026-12-01", versions=NEW, commit="def456")),  # new code
                   (spec, dict(date="2026-12-02", scale="medium")))  # another scale
    table = ledger.pairs(found).set_index(["old", "new"])
    names = [b.label for b in found]
    assert len(table) == 10  # every two builds at small scale; the medium one stands alone
    kinds = table["kind"].to_dict()
    assert kinds[names[0], names[1]] == "rebuild"  # one commit, device and pins
    assert kinds[names[3], names[4]] == "code change"  # the same EPYC and pins, new commit
    assert kinds[names[2], names[3]] == kinds[names[2], names[4]] == "device change"
    assert [kinds[names[i], names[2]] for i in (0, 1)] == ["pins change"] * 2
    assert sorted(kinds.values()) == sorted(["rebuild", "code change", *["pins change"] * 2,
                                             *["device change"] * 6])
    assert table.loc[(names[3], names[4]), "commit"] == "abc123 → def456"
    epyc = table.loc[(names[2], names[3])]
    assert (epyc["device"], epyc["torch"], epyc["jax"]) == (f"{XEON_MODEL} → {EPYC_MODEL}",
                                                            "=", "=")
    release = table.loc[(names[1], names[2])]
    assert (release["device"], release["torch"]) == ("=", "2.13.0 → 2.99.0")
    assert release[[MADE, "moved", "steady", "undecided"]].tolist() == [3, 1, 1, 1]


@pytest.mark.parametrize("commit", [f"abc123{provenance.UNCOMMITTED}", "unknown"])
def test_builds_whose_code_is_not_recorded_are_never_a_rebuild(tmp_path, commit):
    spec = rows(dot_jit_vs_compile=TIE)
    found = builds(tmp_path, (spec, dict(commit=commit, date="2026-11-27")),
                   (spec, dict(commit=commit, date="2026-11-28")))
    assert ledger.pairs(found)[["commit", "kind"]].values.tolist() == [["=", "code change"]]


# ---- the page -----------------------------------------------------------------------------

def page_cells():
    return [c for c in jupytext.read(PAGE).cells if c.cell_type == "code"]


def run_page(book: Path, monkeypatch) -> dict:
    """Run the page's code cells in a book at `book`, as the build would; returns what it
    glued, the value of each cell, and the page's names."""
    import matplotlib.pyplot as plt
    from IPython.core.displaypub import CapturingDisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell

    (book / "_toc.yml").write_text("root: book/intro\n")
    monkeypatch.chdir(book)
    monkeypatch.setenv("DEEPDIVE_RESULTS_DIR", str(book / "_build" / "results"))
    shell = InteractiveShell.instance()
    shell.display_pub = CapturingDisplayPublisher()
    try:
        namespace, shown = {}, []
        for cell in page_cells():
            *body, last = ast.parse(cell.source).body
            exec(compile(ast.Module(body, []), "<cell>", "exec"), namespace)
            value = (eval(compile(ast.Expression(last.value), "<cell>", "eval"), namespace)
                     if isinstance(last, ast.Expr) else None)
            if not isinstance(last, ast.Expr):
                exec(compile(ast.Module([last], []), "<cell>", "exec"), namespace)
            shown.append(value)
        glued = {o["metadata"]["scrapbook"]["name"]: o["data"] for o in shell.display_pub.outputs}
    finally:
        InteractiveShell.clear_instance()
        pd.reset_option("display.max_colwidth")
        pd.reset_option("display.max_rows")
        plt.close("all")
    return {"glued": {k: next(iter(v.values())) for k, v in glued.items()}, "shown": shown,
            "names": namespace}


@pytest.mark.parametrize("bundle_count", [0, 1, 2])
def test_the_page_runs_with_no_one_or_two_bundles(tmp_path, monkeypatch, bundle_count):
    root = tmp_path / "book" / "data" / "builds"
    for i in range(bundle_count):
        hand_bundle(root, rows(**{ID: TIE, OTHER: TIE}),
                    date=f"2026-11-2{i}", versions=NEW if i else {},
                    build_id=f"an earlier build {i}")
    make_results(tmp_path / "_build" / "results", rows(dot_jit_vs_compile=FASTER))
    ran = run_page(tmp_path, monkeypatch)
    glued, names = ran["glued"], ran["names"]
    assert (glued["ledger_builds"], glued["ledger_claims"]) == (str(bundle_count + 1), "1")
    assert glued["ledger_shared"] == ("1" if bundle_count else "0")
    assert glued["ledger_flipped"] == ("1" if bundle_count else "0")  # tie, then faster
    assert len(names["PAIRS"]) == math.comb(bundle_count + 1, 2)
    flipped = names["flipped"].droplevel("chapter")
    assert flipped.to_dict() == ({ID: True, OTHER: False} if bundle_count else {ID: False})
    assert len(names["moved"]) == bundle_count  # this build moved against each bundle
    assert glued["releases_runs"] == "0" and names["control"] is None


def test_the_page_fails_on_a_malformed_bundle(tmp_path, monkeypatch):
    folder = hand_bundle(tmp_path / "book" / "data" / "builds", rows(dot_jit_vs_compile=TIE))
    (folder / "provenance.csv").unlink()
    with pytest.raises(BundleError, match=f"book/data/builds/{folder.name}/provenance.csv: file "
                                          "missing"):
        run_page(tmp_path, monkeypatch)


def test_the_page_re_executes_every_build_and_hides_only_its_analysis():
    assert jupytext.read(PAGE).metadata["mystnb"] == {"execution_mode": "force"}
    tags = [set(c.metadata.get("tags", [])) for c in page_cells()]
    assert tags[0] == {"hide-cell"}  # the one set-up cell, collapsed, never removed
    assert tags[1] == {"remove-cell"}  # its glue, site bookkeeping
    assert all(t <= {"hide-input", "hide-output"} for t in tags[2:])  # every table shows


def test_every_label_the_book_links_to_on_its_pages_exists():
    pages = [*sorted((ROOT / "book").glob("*.md")), *sorted((ROOT / "notebooks").glob("*.md"))]
    texts = [path.read_text() for path in pages]
    labels = {label for text in texts for label in re.findall(r"^\(([\w-]+)\)=$", text, re.M)}
    labels |= {label for text in texts  # a figure's, table's or container's :name:
               for label in re.findall(r'^:name:\s*"?([\w-]+)"?\s*$', text, re.M)}
    linked = {m[1] or m[2] for text in texts
              for m in re.finditer(r"\{(?:ref|numref)\}`(?:[^`<]*<([\w-]+)>|([\w-]+))`", text)}
    ledger_labels = set(re.findall(r"^\(([\w-]+)\)=$", PAGE.read_text(), re.M))
    assert ledger_labels <= linked | {PAGE.stem}  # the ledger's sections are linked to
    assert linked <= labels


def test_the_page_sits_after_reproduce_in_the_table_of_contents():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    about = next(p for p in toc["parts"] if p["caption"] == "About this book")["chapters"]
    files = [c["file"] for c in about]
    assert files.index("book/ledger") == files.index("book/reproduce") + 1


# ---- the registry of claim ids --------------------------------------------------------------

# (an id ends in a letter, digit or field: "defaults_" handed to a helper is a prefix)
SPELLED_OUT = re.compile(r"""(?:compare|claim)\(\s*f?["']([A-Za-z0-9_{}]*[A-Za-z0-9}])["']""")
# Ids a loop hands to `compare(claim_id, ...)`: chapter 3's (label, id) and (id, baseline,
# candidate) tuples.
LOOP_FED = re.compile(r'\("[^"]+", "(tiny_\w+)"\)|\("(mlp_\w+)", "[^"]+", "[^"]+"\)')
# Chapter 1's per-example gradient claims, a table of (claim id, baseline, candidate, ...).
GRADS = re.compile(r'\("(grads_\w+)", ')


def page_constant(chapter: str, name: str):
    """The literal a page's code cells assign to `name` (ast.literal_eval of it)."""
    for cell in jupytext.read(ROOT / "notebooks" / f"{chapter}.md").cells:
        for node in ast.parse(cell.source).body if cell.cell_type == "code" else ():
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == name:
                return ast.literal_eval(node.value)
    raise KeyError(f"{chapter} assigns no {name}")


def spelled_out_ids():
    """Every claim id the pages and helpers spell out in a `compare(` or `claim(` call (or
    feed one from a loop), each f-string field filled with every value its code can give
    it, and the ids the helpers' own tables and the claim map name."""
    from deepdive.book import plans

    gpts = {w.key for scale in env.SCALES for w in plans.sizes("04_gpt_training", scale).workloads}
    fields = {"w": {"dot", "attention"}, "b": {"16"}, "batch": {"32"}, "n": {"4"},
              "framework": {"torch", "jax"}, "p": {"fp32", "bf16"},
              "part": {"forward", "backward"}, "prefix": {"", "defaults_"}}
    ids = set()
    for path in [*sorted((ROOT / "notebooks").glob("*.md")),
                 *sorted((ROOT / "src" / "deepdive" / "chapters").glob("*.py"))]:
        text = path.read_text()
        spelled = set(SPELLED_OUT.findall(text)) | {a or b for a, b in LOOP_FED.findall(text)}
        spelled |= set(GRADS.findall(text))
        named = {i for i in spelled if "{" not in i}
        own = fields | {  # {key} is a GPT's on chapter 4's page, a route's on the XLA page
            "key": {"xla_lazy", "xla_compile", "torchax"} if "vit_xla" in path.name else gpts,
            "name": named}  # jit_xla.fusion_claims: f"{prefix}{name}"
        ids |= named
        for template in spelled - named:
            filled = {template}
            for field, values in own.items():
                filled = {f.replace(f"{{{field}}}", v) for f in filled for v in values}
            assert not any("{" in f for f in filled), f"no values for a field of {template!r}"
            ids |= filled
    ids |= {f"{k}_{slug}_{p}" for k in gpts for p in ("fp32", "bf16")  # chapter 4's benchmark
            for slug in page_constant("04_gpt_training", "BENCHMARK_SLUGS").values()}
    ids |= set(page_constant("05_vit_training", "BF16_IDS").values())  # chapter 5's, per mode
    ids |= {i.replace("{n}", "8") for item in evidence.EVIDENCE
            if isinstance(item, evidence.FromClaim) for i in item.claim_ids}
    ids |= {i for pair in claim_map.MOVED.items() for _, i in pair}
    # the release sweeps' reduced set names its claims in tables (deepdive.releases)
    for path in sorted((ROOT / "src" / "deepdive" / "releases").glob("*.py")):
        ids |= set(re.findall(r'"(release_\w*[a-z0-9])"', path.read_text()))
    return ids


def test_the_registry_knows_every_claim_id_the_book_spells_out():
    ids = spelled_out_ids()
    assert len(ids) > 90  # the spelling-out found the pages' claims
    assert claim_ids.unknown(sorted(ids)) == []


@pytest.mark.book
def test_every_claim_of_the_built_book_is_in_the_registry():
    built = ROOT / "_build" / "results" / "claims.csv"
    if not built.exists():
        pytest.skip("no _build/results/claims.csv: build the book first (make book)")
    saved = pd.read_csv(built)
    followed = [claim_map.current(c, i)[1] for c, i in zip(saved["chapter"], saved["claim_id"],
                                                             strict=True)]
    assert claim_ids.unknown(followed) == []  # ids the registry does not know: add patterns


def test_the_committed_bundles_are_valid():
    """What the page checks when the book builds, checked here without building it."""
    for found in bundles.load_all(ROOT / "book" / "data" / "builds", current=claim_map.current):
        assert json.loads((found.folder / "build.json").read_text()) == found.build
