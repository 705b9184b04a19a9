"""deepdive.book.bundles: a build's evidence written as a dated bundle, refused where it is not
one build's, and read back with every malformation named by file and field. The fixture
builds are small folders of real CSV files in tmp_path."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from deepdive.book import bundles, claim_ids, claims, provenance, results
from deepdive.book.bundles import BundleError
from deepdive.core import env

INSTALLED = env.versions()
TORCH, JAX = INSTALLED["torch"], INSTALLED["jax"]
CPU = "AMD EPYC 7B13 (2 cores)"
GPU = "NVIDIA H100 80GB HBM3"
CLAIMED = (("01_vmap", "dot_jit_vs_compile"), ("04_gpt_training", "char_fp32_jax_vs_torch"),
           ("05_vit_training", "best_jax_vs_torch_b8"))
# hand_bundle's default build: named by the day, the CPU's kind and cores, torch and jax
HAND_NAME = "2026-11-28_amd-epyc-7b13-2core_torch-2.13.0_jax-0.10.2"
GPU_SLUG = "gpu-nvidia-h100-80gb-hbm3"


def claim(chapter, claim_id, ratio=(1.5, 1.4, 1.6), band=0.05, device=CPU, scale="small"):
    """A claims.csv row; its saved verdict is stale on purpose (readers recompute it)."""
    row = dict.fromkeys(claims.COLUMNS, "")
    row.update(chapter=chapter, claim_id=claim_id, question=f"a workload: {claim_id}",
               ratio=ratio[0], low=ratio[1], high=ratio[2], verdict="stale", reason="stale",
               noisy=False, n=15, device=device, scale=scale, tie_band=band,
               decision_band=band, build_band=band, widened_by="", baseline="base",
               candidate="cand", headline=False)
    return row


def stamp(chapter, device=CPU, scale="small", torch=TORCH, jax=JAX,
          executed_at="2026-11-28 12:00:00 UTC", build_id="20261128T115500Z-abc123"):
    return {"chapter": chapter, "build_id": build_id, "commit": "abc123",
            "executed_at": executed_at, "device": device, "scale": scale, "torch": torch,
            "jax": jax, "allocator": "glibc, freed memory kept (mmap threshold 1 GiB)"}


def record(chapter, device=CPU):
    return dict(zip(results.COLUMNS, (chapter, "sweep", "jax", "jax.jit", 8, "median", 0.1, "s",
                                      device, "small", "__main__:step"), strict=True))


def make_results(folder: Path, rows=None, stamps=None, records_into: str = "") -> Path:
    """A build's results folder: claims.csv, provenance.csv, one result file per chapter
    (under `records_into`, where a bundle keeps them), and files a bundle leaves out."""
    rows = [claim(*key) for key in CLAIMED] if rows is None else rows
    chapters = list(dict.fromkeys(r["chapter"] for r in rows))
    stamps = [stamp(c) for c in chapters] if stamps is None else stamps
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows, columns=claims.COLUMNS).to_csv(folder / claims.FILE_NAME, index=False)
    pd.DataFrame(stamps, columns=provenance.COLUMNS).to_csv(folder / provenance.FILE_NAME,
                                                            index=False)
    (folder / records_into).mkdir(exist_ok=True)
    for chapter in chapters:
        pd.DataFrame([record(chapter)]).to_csv(folder / records_into / f"{chapter}.csv",
                                               index=False)
    if not records_into:
        (folder / "calibration.json").write_text("{}")
        (folder / "stability.csv").write_text("a,b\n1,2\n")
    return folder


def build_json(**changes) -> dict:
    build = {"date": "2026-11-28", "build_id": "20261128T115500Z-abc123", "commit": "abc123",
             "device": CPU, "device_kind": "cpu", "cores": 2, "python": "3.13.1",
             "versions": {name: "1.0" for name in bundles.VERSION_NAMES}
             | {"torch": "2.13.0", "jax": "0.10.2"},
             "scale": "small", "tie_band": 0.05, "allocator": "glibc", "notes": ""}
    versions = changes.pop("versions", {})
    build.update(changes)
    build["versions"] = build["versions"] | versions
    return build


def hand_bundle(root: Path, rows=None, stamps=None, **changes) -> Path:
    """A committed bundle written by hand (any versions, not only the installed ones)."""
    build = build_json(**changes)
    if stamps is None:  # its pages stamped with its own build id
        chapters = dict.fromkeys(r["chapter"] for r in (rows or [claim(*k) for k in CLAIMED]))
        stamps = [stamp(c, build_id=build["build_id"]) for c in chapters]
    folder = make_results(root / bundles.bundle_name(build), rows, stamps, bundles.RESULTS_FOLDER)
    (folder / bundles.BUILD_FILE).write_text(json.dumps(build))
    return folder


# ---- writing ------------------------------------------------------------------------------

def test_write_makes_a_dated_bundle_of_the_builds_evidence_that_loads(tmp_path):
    stamps = [stamp(c) for c in ("01_vmap", "04_gpt_training", "05_vit_training", "methodology")]
    source = make_results(tmp_path / "results", stamps=stamps)
    pd.DataFrame([record("methodology")]).to_csv(source / "methodology.csv", index=False)
    folder = bundles.write(source, into=tmp_path / "builds", notes="first")
    slug = {name: re.sub(r"[^a-z0-9.]+", "-", v.split("+")[0].lower()) for name, v in
            (("torch", TORCH), ("jax", JAX))}
    assert folder.name == (f"2026-11-28_amd-epyc-7b13-{env.available_cores()}core_torch-"
                           f"{slug['torch']}_jax-{slug['jax']}")
    stamped = [f"{bundles.RESULTS_FOLDER}/{s['chapter']}.csv" for s in stamps]
    expected = sorted([claims.FILE_NAME, provenance.FILE_NAME, *stamped])
    # every stamped page's file, and no unstamped stability.csv
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.csv")) == expected
    build = json.loads((folder / "build.json").read_text())
    assert set(build) == set(bundles.BUILD_FIELDS)
    assert build["versions"]["torch"] == TORCH and set(build["versions"]) == set(
        bundles.VERSION_NAMES)
    assert (build["device"], build["device_kind"], build["scale"], build["tie_band"],
            build["notes"], build["build_id"]) == (CPU, "cpu", "small", 0.05, "first",
                                                    "20261128T115500Z-abc123")
    loaded = bundles.load(folder)
    assert list(loaded.claims["claim_id"]) == [c for _, c in CLAIMED]
    assert not list(tmp_path.joinpath("builds").glob(".*"))  # no staging folder left


def test_the_date_build_and_commit_are_the_last_chapter_to_run(tmp_path):
    stamps = [stamp("01_vmap", executed_at="2026-11-27 23:50:00 UTC", build_id="old"),
              stamp("04_gpt_training", executed_at="2026-11-28 00:10:00 UTC", build_id="new"),
              stamp("05_vit_training", executed_at="2026-11-28 00:05:00 UTC", build_id="new")]
    build = bundles.describe_build(make_results(tmp_path, stamps=stamps))
    assert (build["date"], build["build_id"]) == ("2026-11-28", "new")


def test_the_command_prints_the_folder_and_its_size(tmp_path, capsys):
    source = make_results(tmp_path / "results")
    code = bundles.main(["write", "--results", str(source), "--into", str(tmp_path / "b"),
                         "--notes", "an H100 run"])
    out = capsys.readouterr().out
    (folder,) = (tmp_path / "b").iterdir()
    assert code == 0 and re.fullmatch(rf"wrote .*{re.escape(folder.name)} \(\d+\.\d kB\)\n", out)
    assert json.loads((folder / "build.json").read_text())["notes"] == "an H100 run"


@pytest.mark.parametrize("missing", ["claims.csv", "provenance.csv"])
def test_write_refuses_a_build_without_its_claims_or_stamps(tmp_path, missing):
    source = make_results(tmp_path)
    (source / missing).unlink()
    with pytest.raises(BundleError, match=rf"{missing}: file missing: build the book first"):
        bundles.write(source, into=tmp_path / "builds")


def test_write_refuses_a_build_that_saved_no_claims(tmp_path):
    source = make_results(tmp_path, rows=[], stamps=[stamp("01_vmap")])
    with pytest.raises(BundleError, match="claims.csv: no rows"):
        bundles.write(source, into=tmp_path / "builds")


@pytest.mark.parametrize("field, value", [("device", "Intel Xeon 8480 (4 cores)"),
                                          ("device", "NVIDIA A100-SXM4-80GB"),
                                          ("scale", "medium"), ("torch", "2.12.0"),
                                          ("jax", "0.9.0")])
def test_write_refuses_chapters_that_disagree_and_names_them(tmp_path, field, value):
    stamps = [stamp("01_vmap"), stamp("04_gpt_training"),
              stamp("05_vit_training", **{field: value})]
    if value.startswith("NVIDIA"):  # two GPUs are two machines too
        stamps = [stamp(c, device=GPU) for c in ("01_vmap", "04_gpt_training")] + stamps[2:]
    with pytest.raises(BundleError) as refused:
        bundles.write(make_results(tmp_path, stamps=stamps), into=tmp_path / "builds")
    assert refused.match(rf"chapters disagree on {field}: .*01_vmap, 04_gpt_training.*"
                         r"05_vit_training.*one build's evidence")
    assert not (tmp_path / "builds").exists()


def test_a_gpu_build_with_chapters_on_its_cpu_and_pinned_cores_is_one_build(tmp_path):
    """The PyTorch/XLA page and simulated devices run on the CPU of a GPU build, and the XLA
    page stamps both torches that ran; a chapter that pinned its threads names fewer cores
    of the same CPU. None of these is another build."""
    rows = [claim("04_gpt_training", "char_fp32_jax_vs_torch", device=GPU, band=0.02,
                  scale="medium"),
            claim("05_vit_xla", "xla_lazy_vs_jax", device="AMD EPYC 7B13 (1 of 2 cores)",
                  scale="medium"),
            claim("06_distributed", "dp_x2_vs_one", device=CPU, scale="medium")]
    stamps = [stamp("04_gpt_training", device=GPU, scale="medium"),
              stamp("05_vit_xla", device="AMD EPYC 7B13 (1 of 2 cores)", scale="medium",
                    torch=f"2.9.0 (routes, in the worker); {TORCH.split('+')[0]} (this page)"),
              stamp("06_distributed", device=CPU, scale="medium")]
    folder = bundles.write(make_results(tmp_path / "r", rows, stamps), into=tmp_path / "b")
    build = json.loads((folder / "build.json").read_text())
    assert (build["device"], build["device_kind"], build["tie_band"]) == (GPU, "gpu", 0.02)
    assert f"_{GPU_SLUG}_" in folder.name and build["versions"]["torch"] == TORCH


def test_a_gpu_build_whose_claims_all_ran_on_its_cpu_keeps_their_band(tmp_path):
    rows = [claim("06_distributed", "dp_x2_vs_one", band=0.07, scale="medium")]
    stamps = [stamp("04_gpt_training", device=GPU, scale="medium"),
              stamp("06_distributed", scale="medium")]
    build = bundles.describe_build(make_results(tmp_path, rows, stamps))
    assert (build["device_kind"], build["tie_band"]) == ("gpu", 0.07)


def test_by_default_this_builds_results_are_written_into_the_books_builds(tmp_path,
                                                                          monkeypatch):
    (tmp_path / "_toc.yml").write_text("root: book/intro\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DEEPDIVE_RESULTS_DIR", str(make_results(tmp_path / "elsewhere")))
    folder = bundles.write()
    assert folder.parent == tmp_path / "book" / "data" / "builds"
    assert bundles.describe_build()["build_id"] == stamp("01_vmap")["build_id"]


@pytest.mark.parametrize("stamped, agrees", [
    ("2.13.0+cpu", True), ("2.9.0 (routes, in the worker); 2.13.0 (this page)", True),
    ("2.9.0 (routes); 2.13.0+cpu (this page)", True), ("2.13.01", False), ("12.13.0", False),
    ("2.9.0 (routes, in the worker)", False), ("2.13.0.1", False)])
def test_a_stamp_names_the_builds_torch_with_or_without_its_local_label(tmp_path, stamped,
                                                                         agrees):
    stamps = [stamp(c, torch="2.13.0+cpu") for c in ("01_vmap", "04_gpt_training")]
    stamps.append(stamp("05_vit_xla", torch=stamped))
    rows = [claim(c, i) for c, i in (("01_vmap", "dot_jit_vs_compile"),
                                     ("04_gpt_training", "char_fp32_jax_vs_torch"),
                                     ("05_vit_xla", "xla_lazy_vs_jax"))]
    build = bundles.describe_build(make_results(tmp_path, rows, stamps), strict=False)
    assert build["versions"]["torch"] == "2.13.0+cpu"
    assert (re.search(r"disagree on torch\b", build["notes"]) is None) == agrees


def test_write_refuses_claims_decided_against_two_calibrations(tmp_path):
    rows = [claim("01_vmap", "dot_jit_vs_compile", band=0.05),
            claim("04_gpt_training", "char_fp32_jax_vs_torch", band=0.08)]
    with pytest.raises(BundleError, match=r"disagree on build_band: 0.05 \(01_vmap\); 0.08 "
                                          r"\(04_gpt_training\)"):
        bundles.write(make_results(tmp_path, rows), into=tmp_path / "builds")
    shown = bundles.describe_build(tmp_path, strict=False)  # the ledger's "this build"
    assert re.search(r"disagree on build_band\b", shown["notes"]) and shown["tie_band"] == 0.08


def test_write_refuses_an_environment_that_is_not_the_builds(tmp_path):
    stamps = [stamp(c, torch="0.0.1") for c, _ in CLAIMED]
    with pytest.raises(BundleError, match=f"this environment has torch {re.escape(TORCH)}, but "
                                          "the build .* ran 0.0.1"):
        bundles.write(make_results(tmp_path, stamps=stamps), into=tmp_path / "builds")


def test_write_refuses_a_bundle_over_five_megabytes(tmp_path):
    source = make_results(tmp_path / "r")
    (source / "01_vmap.csv").write_text("x" * bundles.MAX_BYTES)
    with pytest.raises(BundleError, match=r"would hold 5\.0 MB, over the 5 MB .*01_vmap.csv "
                                          r"5\.0 MB"):
        bundles.write(source, into=tmp_path / "b")
    assert not (tmp_path / "b").exists()


def test_an_existing_bundle_is_replaced_only_when_asked(tmp_path, capsys):
    source = make_results(tmp_path / "r")
    folder = bundles.write(source, into=tmp_path / "b")
    (folder / "stale.txt").write_text("from the first write")
    with pytest.raises(BundleError, match="exists: pass --replace to write over it"):
        bundles.write(source, into=tmp_path / "b")
    assert bundles.main(["write", "--results", str(source), "--into", str(tmp_path / "b")]) == 1
    assert "refused: " in capsys.readouterr().err
    assert bundles.write(source, into=tmp_path / "b", replace=True) == folder
    assert not (folder / "stale.txt").exists()


def test_write_refuses_a_claim_the_registry_does_not_know_naming_the_builds_file(tmp_path):
    rows = [claim("01_vmap", "dot_jit_vs_compile"), claim("01_vmap", "foo_vs_bar")]
    with pytest.raises(BundleError, match="r/claims.csv: unknown claim id 'foo_vs_bar' "
                                          "\\(row 2\\)"):
        bundles.write(make_results(tmp_path / "r", rows), into=tmp_path / "b")
    assert not (tmp_path / "b").exists()


def test_write_leaves_nothing_behind_when_the_bundle_would_not_load(tmp_path):
    source = make_results(tmp_path / "r")
    pd.DataFrame([{"chapter": "01_vmap"}]).to_csv(source / "01_vmap.csv", index=False)
    with pytest.raises(BundleError, match="results/01_vmap.csv: missing column 'experiment'"):
        bundles.write(source, into=tmp_path / "b")
    assert list((tmp_path / "b").iterdir()) == []


# ---- reading and validating ---------------------------------------------------------------

def test_load_reads_a_committed_bundle(tmp_path):
    loaded = bundles.load(hand_bundle(tmp_path))
    assert loaded.name == HAND_NAME
    assert loaded.build["versions"]["jax"] == "0.10.2" and len(loaded.provenance) == 3


def test_a_gpu_bundle_is_named_for_its_device_and_versions():
    build = build_json(device=GPU, device_kind="gpu", date="2026-12-01",
                       build_id="20261201T080000Z-abc123",
                       versions={"torch": "2.15.0+cu130", "jax": "0.12.0.1"})
    name = f"2026-12-01_{GPU_SLUG}_torch-2.15.0_jax-0.12.0.1"  # the version without "+cu130"
    assert bundles.bundle_name(build) == name
    # named by the day the build started: one that ran past midnight keeps its first day
    assert bundles.bundle_name(dict(build, date="2026-12-02")).startswith("2026-12-01_")
    assert bundles.bundle_name(dict(build, build_id="none (run outside make book)")
                               ).startswith("2026-12-01_")  # no start time: its date


def test_rows_saved_before_decision_bands_existed_load(tmp_path):
    row = claim("01_vmap", "dot_jit_vs_compile")
    row["decision_band"] = ""
    assert pd.isna(bundles.load(hand_bundle(tmp_path, [row])).claims["decision_band"].iat[0])


def test_claims_saved_before_the_aliases_column_load(tmp_path):
    folder = hand_bundle(tmp_path)
    saved = pd.read_csv(folder / "claims.csv").drop(columns="aliases")
    saved.to_csv(folder / "claims.csv", index=False)
    assert "aliases" not in bundles.load(folder).claims and "aliases" not in \
        bundles.claim_columns()


def edit_json(folder, change):
    build = json.loads((folder / "build.json").read_text())
    change(build)
    (folder / "build.json").write_text(json.dumps(build))


def edit_claims(folder, change):
    """Rewrite claims.csv as `change` returns it."""
    change(pd.read_csv(folder / "claims.csv")).to_csv(folder / "claims.csv", index=False)


def set_cells(row, **values):
    def change(frame):
        for column, value in values.items():
            frame[column] = frame[column].astype(object)
            frame.loc[row, column] = value
        return frame
    return change


MALFORMED = {
    "build.json missing": (lambda f: (f / "build.json").unlink(), "build.json: file missing"),
    "build.json not JSON": (lambda f: (f / "build.json").write_text("{date"),
                            "build.json: not valid JSON"),
    "build.json not an object": (lambda f: (f / "build.json").write_text("[]"),
                                 "build.json: not a JSON object"),
    "no cores": (lambda f: edit_json(f, lambda b: b.pop("cores")),
                 "build.json: missing field 'cores'"),
    "cores as text": (lambda f: edit_json(f, lambda b: b.update(cores="2")),
                      "build.json: field 'cores' must be a whole number, got '2'"),
    "band as a flag": (lambda f: edit_json(f, lambda b: b.update(tie_band=True)),
                       "build.json: field 'tie_band' must be a number"),
    "no flax": (lambda f: edit_json(f, lambda b: b["versions"].pop("flax")),
                "build.json: missing field 'versions.flax'"),
    "no torch version": (lambda f: edit_json(f, lambda b: b["versions"].update(torch=None)),
                         "build.json: field 'versions.torch' must name a version"),
    "bad date": (lambda f: edit_json(f, lambda b: b.update(date="28/11/2026")),
                 "build.json: field 'date' must be YYYY-MM-DD"),
    "bad kind": (lambda f: edit_json(f, lambda b: b.update(device_kind="tpu")),
                 "build.json: field 'device_kind' has an impossible value 'tpu'"),
    "bad scale": (lambda f: edit_json(f, lambda b: b.update(scale="huge")),
                  "build.json: field 'scale' has an impossible value 'huge'"),
    "renamed folder": (lambda f: edit_json(f, lambda b: b.update(cores=4)),
                       f"build.json: the folder's name '{HAND_NAME}' does not match its "
                       "fields"),
    "claims missing": (lambda f: (f / "claims.csv").unlink(), "claims.csv: file missing"),
    "claims empty": (lambda f: (f / "claims.csv").write_text(""), "claims.csv: not a readable CSV"),
    "claims header only": (lambda f: edit_claims(f, lambda c: c.iloc[:0]),
                           "claims.csv: no claims"),
    "no ratio": (lambda f: edit_claims(f, lambda c: c.drop(columns="ratio")),
                 "claims.csv: missing column 'ratio'"),
    "unknown id": (lambda f: edit_claims(f, set_cells(2, claim_id="foo_vs_bar")),
                   "claims.csv: unknown claim id 'foo_vs_bar' (row 3)"),
    "twice": (lambda f: edit_claims(f, set_cells(2, chapter="01_vmap",
                                                 claim_id="dot_jit_vs_compile")),
              "claims.csv: claim id 'dot_jit_vs_compile' of 01_vmap twice (rows 1 and 3)"),
    "text ratio": (lambda f: edit_claims(f, set_cells(1, low="fast")),
                   "claims.csv: column 'low' must be a positive number, got 'fast' (row 2)"),
    "zero ratio": (lambda f: edit_claims(f, set_cells(0, ratio=0.0)),
                   "claims.csv: column 'ratio' must be a positive number, got 0.0 (row 1)"),
    "outside": (lambda f: edit_claims(f, set_cells(0, ratio=3.0)),
                "claims.csv: the interval [low, high] must hold the ratio (row 1)"),
    "narrow": (lambda f: edit_claims(f, set_cells(1, decision_band=0.01)),
               "claims.csv: column 'decision_band' may not be narrower than 'tie_band' (row 2)"),
    "no stamps": (lambda f: (f / "provenance.csv").unlink(), "provenance.csv: file missing"),
    "no device": (lambda f: pd.read_csv(f / "provenance.csv").drop(columns="device").to_csv(
        f / "provenance.csv", index=False), "provenance.csv: missing column 'device'"),
    "bad records": (lambda f: pd.read_csv(f / "results/01_vmap.csv").drop(columns="value").to_csv(
        f / "results/01_vmap.csv", index=False), "results/01_vmap.csv: missing column 'value'"),
}


@pytest.mark.parametrize("malformation", MALFORMED)
def test_a_malformed_bundle_is_named_by_file_and_field(tmp_path, malformation):
    folder = hand_bundle(tmp_path)
    damage, message = MALFORMED[malformation]
    damage(folder)
    with pytest.raises(BundleError) as refused:
        bundles.load(folder)
    assert f"{folder.name}/{message}" in str(refused.value)
    assert isinstance(refused.value, ValueError)


def test_a_missing_folder_is_not_a_bundle(tmp_path):
    with pytest.raises(BundleError, match="not a bundle folder"):
        bundles.load(tmp_path / "nothing")


def test_a_moved_claim_is_known_by_where_it_lives_now(tmp_path):
    folder = hand_bundle(tmp_path, rows=[claim("03_torch_compile", "old_name")])
    patterns = (r"^new_name$",)
    with pytest.raises(BundleError, match="unknown claim id 'old_name'"):
        bundles.load(folder, patterns)

    def current(chapter, claim_id):
        return ("04_gpt_training", "new_name") if claim_id == "old_name" else (chapter, claim_id)

    assert bundles.load(folder, patterns, current).claims["claim_id"].tolist() == ["old_name"]


def test_load_all_reads_every_bundle_oldest_first_and_skips_the_rest(tmp_path):
    assert bundles.load_all(tmp_path / "none yet") == []
    newer = hand_bundle(tmp_path, date="2026-12-01")
    older = hand_bundle(tmp_path, versions={"torch": "2.12.0"})
    (tmp_path / ".2026-12-02_amd-epyc-2core_torch-x_jax-y.partial").mkdir()  # a write under way
    (tmp_path / "README.md").write_text("how to add a bundle")
    assert [b.name for b in bundles.load_all(tmp_path)] == [older.name, newer.name]


def test_the_check_command_validates_every_bundle(tmp_path, capsys):
    hand_bundle(tmp_path)
    assert bundles.main(["check", "--into", str(tmp_path)]) == 0
    assert capsys.readouterr().out.split() == ["1", "bundle", "valid:", HAND_NAME]
    assert bundles.main(["check", "--into", str(tmp_path / "empty")]) == 0
    assert capsys.readouterr().out.startswith("0 bundles")
    broken = hand_bundle(tmp_path, date="2026-11-29") / bundles.BUILD_FILE
    broken.unlink()
    assert bundles.main(["check", "--into", str(tmp_path)]) == 1
    assert f"{broken.name}: file missing" in capsys.readouterr().err


def test_the_module_runs_as_a_command_without_importing_a_framework(tmp_path):
    hand_bundle(tmp_path)
    probe = ("import runpy, sys; sys.argv = ['bundles', 'check', '--into', sys.argv[1]]\n"
             "try:\n    runpy.run_module('deepdive.book.bundles', run_name='__main__')\n"
             "except SystemExit as done:\n"
             "    print(done.code, sorted({'torch', 'jax'} & set(sys.modules)))")
    ran = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True,
                         text=True, check=True)
    said, (code, imported) = ran.stdout.splitlines()[0], ran.stdout.splitlines()[1].split(" ", 1)
    assert said.endswith(HAND_NAME) and (code, imported) == ("0", "[]")


def test_paths_in_messages_are_shown_from_the_books_root(tmp_path, monkeypatch):
    (tmp_path / "_toc.yml").write_text("root: intro\n")
    monkeypatch.chdir(tmp_path)
    folder = hand_bundle(tmp_path / "book" / "data" / "builds")
    (folder / "claims.csv").unlink()
    assert bundles.builds_dir() == tmp_path / "book" / "data" / "builds"
    with pytest.raises(BundleError, match=rf"^book/data/builds/{folder.name}/claims.csv: file "
                                          "missing$"):
        bundles.load_all()


# ---- the registry -------------------------------------------------------------------------

def test_every_registry_pattern_is_fully_anchored():
    for pattern in claim_ids.CLAIM_IDS:
        assert pattern.startswith("^") and pattern.endswith("$"), pattern


def test_the_registry_knows_sizes_and_refuses_near_misses():
    assert all(map(claim_ids.known, ("best_jax_vs_torch_b1024", "dp_x8_vs_one")))
    assert claim_ids.known("vocab_inductor_reduce_overhead_bf16")
    assert claim_ids.unknown(["best_jax_vs_torch_b", "dot_jit_vs_compile", "xdot_jit_vs_compile",
                              "best_jax_vs_torch_b", "dot_jit_vs_compile_2"]) == [
        "best_jax_vs_torch_b", "xdot_jit_vs_compile", "dot_jit_vs_compile_2"]
    assert claim_ids.known("anything", patterns=(r"^any.*$",))
