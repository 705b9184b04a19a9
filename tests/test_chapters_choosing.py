"""deepdive.chapters.choosing: the choosing chapter's and the intro's readings. Every
branch, on small fake claims (shaped like a build's by tests/test_evidence.py)."""

import importlib.util
import math
from pathlib import Path

import pandas as pd
import pytest
from test_evidence import SCALES, claim_row, results_for

from deepdive.chapters import bottom_line, choosing, claim_map, evidence, guide

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "book" / "data"
ANCHORS = pd.read_csv(DATA / "published_anchors.csv")
ECOSYSTEM = pd.read_csv(DATA / "ecosystem.csv")


def table_for(scale="small", **kwargs):
    return evidence.evidence_table(results_for(scale, **kwargs))


# --- the ratio, one way -------------------------------------------------------------------

def test_every_ratio_is_pytorch_time_over_jax_time_whichever_side_is_the_candidate():
    table = table_for(override={"dot_jit_vs_compile": (2.0, 1.5, 2.5, False),  # JAX candidate
                                "tiny_compile_vs_jit": (2.0, 1.5, 2.5, False)})  # PyTorch's
    rows = table.set_index("key")
    assert rows.loc["dot_jit_vs_compile", list(evidence.ONE_WAY)].tolist() == [2.0, 1.5, 2.5]
    assert rows.loc["tiny_compile_vs_jit", list(evidence.ONE_WAY)].tolist() == [0.5, 0.4,
                                                                                 1 / 1.5]
    assert math.isnan(rows.loc["fsdp_memory", "torch_over_jax"])


def test_the_guide_states_its_ratios_one_way_with_a_label_per_case():
    advice = guide.guide_table(table_for(override={
        "best_jax_vs_torch_b8": (0.5, 0.45, 0.55, False)})).set_index("if you need")
    vit = advice.loc[advice.index.str.startswith("training a ViT"), guide.RATIO].iat[0]
    assert vit.startswith("batch 8: 0.50 [0.45, 0.55]; batch 32: 2.00 [1.90, 2.10]")
    assert advice.loc["many tiny operations per step, compiled", guide.RATIO] == \
        "0.50 [0.48, 0.53]"  # torch.compile twice as fast: PyTorch time / JAX time = 1/2
    assert advice.loc["parameters and optimizer state sharded across devices",
                      guide.RATIO] == ""


def test_cases_with_one_scope_are_told_apart_by_what_ran():
    rows = pd.DataFrame({"question": ["ViT, batch 32: lazy vs jax", "ViT, batch 32: xla vs jax"],
                         "candidate": ["lazy", "xla"], "baseline": ["jax", "jax"]})
    assert guide._short_labels(rows) == ["lazy", "xla"]
    same = rows.assign(candidate=["x", "x"], baseline=["a", "b"])
    assert guide._short_labels(same) == ["a", "b"]
    neither = rows.assign(candidate=["x", "x"], baseline=["a", "a"])
    assert guide._short_labels(neither) == ["lazy vs jax", "xla vs jax"]


def test_a_guide_cell_is_a_sentence_or_two():
    advice = guide.guide_table(table_for("small"))
    for text in advice["this build suggests"]:
        assert len(text.split()) <= 40, text


# --- claims that moved --------------------------------------------------------------------

def test_claims_an_older_build_saved_elsewhere_are_read_where_they_live_now(monkeypatch):
    shape = SCALES["small"]
    monkeypatch.setitem(claim_map.MOVED, ("03_torch_compile", "old_id"),
                        ("04_gpt_training", "new_id"))
    claims = pd.DataFrame([claim_row("03_torch_compile", "old_id", "s", shape, "small"),
                           claim_row("03_torch_compile", "kept", "s", shape, "small")])
    moved = evidence.follow_moves(claims)
    assert list(zip(moved["chapter"], moved["claim_id"], strict=True)) == [
        ("04_gpt_training", "new_id"), ("03_torch_compile", "kept")]


def test_a_claim_saved_in_its_new_home_wins_over_the_moved_copy(monkeypatch):
    shape = SCALES["small"]
    monkeypatch.setitem(claim_map.MOVED, ("03_torch_compile", "x"), ("04_gpt_training", "x"))
    claims = pd.DataFrame([claim_row("03_torch_compile", "x", "old", shape, "small"),
                           claim_row("04_gpt_training", "x", "new", shape, "small")])
    moved = evidence.follow_moves(claims)
    assert len(moved) == 1 and moved["question"].iat[0] == "new: x"


def test_load_all_follows_the_map(tmp_path, monkeypatch):
    shape = SCALES["small"]
    monkeypatch.setitem(claim_map.MOVED, ("03_torch_compile", "a"), ("04_gpt_training", "a"))
    pd.DataFrame([claim_row("03_torch_compile", "a", "s", shape, "small")]).to_csv(
        tmp_path / "claims.csv", index=False)
    assert evidence.load_all(tmp_path)["claims"]["chapter"].tolist() == ["04_gpt_training"]


# --- the intro's table and the findings box ----------------------------------------------

def test_at_a_glance_holds_the_decided_rows_each_scoped():
    table = table_for(override={"tiny_compile_vs_jit": (1.05, 0.9, 1.2, False),
                                "tiny_eager_torch_vs_jax": (1.0, 0.99, 1.01, False)})
    glance = choosing.at_a_glance(table)
    assert "tiny_compile_vs_jit" not in " ".join(glance["workload and size"])  # withheld
    assert (glance["scale"] == "small").all() and (glance["device"] != "").all()
    verdicts = dict(zip(glance["compared"], glance["verdict"], strict=True))
    assert verdicts["cand vs base"] in {"JAX faster", "PyTorch faster", "tie"}
    assert "tie" in set(glance["verdict"])  # the eager tiny op, inside the band
    memory = glance[glance[guide.RATIO] == ""]
    assert len(memory) == 1 and memory["verdict"].iat[0] == (
        "memory, not time: either framework (exact byte counts)")


def test_a_verdict_names_the_side_it_favours():
    assert choosing._verdict_word({"verdict": "tie", "favours": "even"}) == "tie"
    assert choosing._verdict_word({"verdict": "faster", "favours": "PyTorch"}) == \
        "PyTorch faster"
    assert choosing._verdict_word({"verdict": "bytes", "favours": "neither"}) == "neither"


def test_findings_one_bullet_per_guide_row_then_the_counts():
    table = table_for(override={"fusion_compile_vs_jit": (1.05, 0.9, 1.2, False)})
    advice = guide.guide_table(table)
    bullets = choosing.findings(advice, table).splitlines()
    assert len(bullets) == len(advice) + 1
    assert bullets[-1].startswith("- Of ") and "1 withheld" in bullets[-1]


def test_findings_without_evidence_say_how_to_get_it():
    table = evidence.evidence_table({})
    assert choosing.findings(guide.guide_table(table), table).startswith(
        "- No evidence to read yet")
    assert choosing.glance_counts(pd.DataFrame()).startswith("No timed comparison")


# --- where the evidence comes from --------------------------------------------------------

def test_the_evidence_is_this_builds_unless_another_is_named(tmp_path):
    assert choosing.evidence_dir(tmp_path, environ={}) == (tmp_path, None)
    other = tmp_path / "other"
    other.mkdir()
    for name in evidence.EVIDENCE_FILES:
        (other / name).write_text("x\n")
    folder, source = choosing.evidence_dir(tmp_path / "results",
                                           environ={"DEEPDIVE_EVIDENCE": str(other)})
    assert source == f"{other}/" and (folder / "claims.csv").exists()


def test_the_notes_say_whose_evidence_it_is():
    assert "this build" in choosing.source_notes(None)[1]
    text, note = choosing.source_notes("https://x/results/")
    assert "https://x/results/" in text and "Read from another build" in note


@pytest.mark.parametrize(("stamp", "source", "expected"), [
    ({"build_id": "b1", "commit": "c"}, "elsewhere", "another build, read from DEEPDIVE_EVIDENCE"),
    ({"build_id": "outside", "commit": "c"}, None, "a run outside make book"),
    ({"build_id": "b1", "commit": "c"}, None, "this build"),
    ({"build_id": "b0", "commit": "c+u"}, None, "an earlier build (served from the cache)"),
    ({"build_id": "b0", "commit": "d"}, None,
     "an earlier build at another commit (served from the cache)"),
])
def test_which_build_measured_a_chapter(stamp, source, expected):
    assert choosing.measured_in(stamp, "b1", "c", source, "outside", "+u") == expected


def test_missing_chapters_are_named_loudly():
    found, warning = choosing.evidence_status(table_for(), Path("/r"))
    assert found == choosing.ALL_FOUND and warning is None
    status, warning = choosing.evidence_status(table_for(skip=("05_vit_training",)), Path("/r"))
    assert status.startswith("MISSING RESULTS: 05_vit_training") and "`" not in status
    assert warning.startswith("> **WARNING: results missing for 05_vit_training")


def test_the_provenance_tables_list_every_chapter_the_guide_reads(tmp_path, monkeypatch):
    from deepdive.book import provenance

    monkeypatch.setattr(provenance, "build_id", lambda: "b1")
    monkeypatch.setattr(provenance, "commit", lambda: "c")
    pd.DataFrame([{"chapter": "01_vmap", "build_id": "b1", "commit": "c"}]).to_csv(
        tmp_path / provenance.FILE_NAME, index=False)
    read, stamps = choosing.provenance_tables(tmp_path, None)
    assert list(read["chapter"]) == list(evidence.CHAPTERS)
    by = read.set_index("chapter")["measured in"]
    assert by["01_vmap"] == "this build" and by["06_distributed"] == "MISSING: not run"
    assert list(stamps["chapter"]) == ["01_vmap"]


def test_the_data_folder_is_found_from_anywhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no _toc.yml above: found beside the package's source
    assert choosing.data_dir() == DATA


# --- the guide's surroundings -------------------------------------------------------------

def test_guide_counts_and_scope():
    advice = guide.guide_table(table_for())
    assert choosing.guide_counts(advice).startswith(f"The guide's {len(advice)} rows, by status")
    assert choosing.guide_counts(advice.iloc[:1]).startswith("The guide's 1 row,")
    assert choosing.guide_scope(table_for("small")).startswith("Every measured row")
    assert choosing.guide_scope(table_for("full")).startswith("This build measured on NVIDIA")
    assert choosing.guide_scope(pd.DataFrame({"device": [""]})).startswith("This build has no")


def test_the_vmap_row_is_set_beside_pytorchs_hand_batched_ops():
    shape = SCALES["small"]
    claims = pd.DataFrame([claim_row("01_vmap", "dot_compile_vs_batched", "dot", shape, "small",
                                     (0.5, 0.45, 0.55))])
    note = choosing.batched_note(claims)
    assert "dot: slower, 0.500x [0.450, 0.550]" in note and "hand-batched" in note
    assert "did not time" in choosing.batched_note(claims.assign(claim_id="other"))
    assert "saved no claims" in choosing.batched_note(None)


@pytest.mark.parametrize(("ran", "start"), [
    ({"Triton": "interpreter", "Pallas": "interpret=True"}, "On this build both kernels ran in"),
    ({"Triton": "interpreter", "Pallas": "Triton backend"}, "On this build Triton ran in an"),
    ({"Triton": "compiled", "Pallas": "Triton backend"}, "On this build both kernels were"),
    ({"Triton": "compiled", "Pallas": choosing.pallas_ran(None, "gpu", "Tesla T4")},
     "On this build Pallas did not run (not run: this JAX has no Pallas backend for Tesla T4"),
])
def test_the_kernels_say_how_they_ran(ran, start):
    assert choosing.kernels_ran(ran).startswith(start)


@pytest.mark.parametrize(("platform", "triton", "capability", "chosen"), [
    ("cpu", True, None, "interpret"),
    ("tpu", False, None, "interpret"),
    ("gpu", True, (7, 5), "triton"),  # while JAX ships the Triton backend: on any GPU
    ("gpu", True, (9, 0), "triton"),
    ("gpu", False, (9, 0), "mosaic_gpu"),  # gone: Mosaic GPU from Hopper on
    ("gpu", False, (10, 0), "mosaic_gpu"),
    ("gpu", False, (8, 0), None),  # an A100 then has no Pallas GPU backend
    ("gpu", False, None, None),
])
def test_the_pallas_backend_follows_what_jax_ships_and_the_gpu(platform, triton, capability,
                                                              chosen):
    assert choosing.pallas_backend(platform, triton, capability) == chosen


def test_pallas_launch_options_per_backend():
    assert choosing.pallas_launch("interpret") == {"interpret": True}
    if choosing.has_pallas_triton():  # this build's JAX: 0.12.0.1 still ships it
        assert "compiler_params" in choosing.pallas_launch("triton")
    with pytest.raises(ValueError, match="backend must be 'interpret', 'triton' or 'mosaic_gpu'"):
        choosing.pallas_launch("cuda")


def test_pallas_ran_names_each_backend():
    assert choosing.pallas_ran("interpret", "cpu", "cpu") == "interpret=True (XLA on the CPU)"
    assert choosing.pallas_ran("triton", "gpu", "H100") == "Triton backend, H100"
    assert choosing.pallas_ran("mosaic_gpu", "gpu", "H100") == "Mosaic GPU backend, H100"
    assert choosing.pallas_ran(None, "gpu", "A100").startswith("not run")


def test_the_slides_readings_match_or_not():
    readings, said = choosing.slides_readings(ANCHORS)
    assert list(readings.columns)[0] == "stated by the slides (%)" and len(readings) >= 1
    assert said.startswith("The stated percentages match")
    _, none = choosing.slides_readings(ANCHORS, tolerance=-1)
    assert "match none" in none
    stated = ANCHORS["metric"].str.startswith("speedup")
    first = ANCHORS[stated].index[0]
    # one row's statement read exactly, the other's made impossible: some rows only
    changed = ANCHORS.copy()
    changed.loc[stated & (ANCHORS.index != first), "value"] = 1e6
    _, some = choosing.slides_readings(changed, tolerance=1e5)
    assert "some rows only" in some


def test_the_sizes_this_build_trained():
    assert "GPT training step" in choosing.sizes_run(table_for())
    assert choosing.sizes_run(pd.DataFrame()).startswith("nothing yet")
    assert choosing.sizes_run(table_for(), groups=("nothing",)).startswith("nothing yet")


def test_the_claims_figure_draws_each_timed_claim_or_nothing():
    import matplotlib

    matplotlib.use("Agg")
    figure = choosing.claims_figure(table_for(), None)
    assert figure is not None and "PyTorch time" in figure.axes[0].get_xlabel()
    assert choosing.claims_figure(evidence.evidence_table({}), None) is None


# --- the bottom line ----------------------------------------------------------------------

def test_the_bottom_line_says_what_to_do_in_a_sentence_or_two():
    table = bottom_line.bottom_line(guide.guide_table(table_for()), ANCHORS, ECOSYSTEM)
    assert list(table.columns)[0] == "what to do"
    for cell in table["what to do"]:
        assert len(cell.split()) <= 35, cell
    assert table.loc["GPU training", "what to do"].startswith("Time your own model")
    gpu = bottom_line.bottom_line(guide.guide_table(table_for("full")), ANCHORS, ECOSYSTEM)
    assert gpu.loc["GPU training", "what to do"].startswith("Start from the side")
    assert gpu.loc["CPU-only", "what to do"].startswith("Time your own model: this build")


def test_the_tpu_row_reads_the_ecosystem_facts_about_xla_and_pallas():
    facts = bottom_line.tpu_facts(ECOSYSTEM)
    assert "Pallas kernels lower to Mosaic" in facts and "PyTorch/XLA" in facts
    assert bottom_line.tpu_facts(ECOSYSTEM.iloc[:0]).startswith("No TPU facts")
    table = bottom_line.bottom_line(guide.guide_table(table_for()), ANCHORS, ECOSYSTEM.iloc[:0])
    assert table.loc["TPU", "what to do"].startswith("Read the vendors'")


def test_the_algoperf_anchor_carries_the_later_pull_requests_caveat():
    said = bottom_line.gpu_anchors(ANCHORS)
    assert "algoperf-pr897" in said and "predates" in said
    alone = bottom_line.gpu_anchors(ANCHORS[ANCHORS["source_key"] != "algoperf-pr897"])
    assert "algoperf-pr897" not in alone


def test_the_slides_memory_row_says_what_was_divided():
    table = bottom_line.slides_verdicts(guide.guide_table(table_for()), choosing.UNMEASURED)
    memory = table.iloc[0, 0]
    assert "1/n of the state" in memory and "parameters and optimizer state" in memory


# --- the intro is read last ---------------------------------------------------------------

def load_extension(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "book" / "_ext" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class App:
    class config:  # noqa: N801  (Sphinx's attribute name)
        root_doc = "book/intro"
        master_doc = "index"

    def __init__(self):
        self.connected = []

    def connect(self, event, handler):
        self.connected.append((event, handler))


def test_the_root_page_is_read_after_every_chapter():
    extension = load_extension("root_last")
    docs = sorted(["book/intro", "book/ledger", "notebooks/01_vmap", "notebooks/07_choosing",
                   "book/reproduce"])
    extension.read_root_last(App(), None, docs)
    assert docs[-2:] == ["book/ledger", "book/intro"] and sorted(docs) == sorted(set(docs))
    unchanged = ["notebooks/01_vmap"]
    extension.read_root_last(App(), None, unchanged)  # an incremental read without the root
    assert unchanged == ["notebooks/01_vmap"]


def test_the_extension_connects_before_the_read_and_is_configured():
    import yaml

    app = App()
    extension = load_extension("root_last")
    extension.setup(app)
    assert app.connected == [("env-before-read-docs", extension.read_root_last)]
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["sphinx"]["local_extensions"]["root_last"] == "book/_ext"
    assert yaml.safe_load((ROOT / "_toc.yml").read_text())["root"] == "book/intro"


def test_the_root_doc_falls_back_to_master_doc():
    extension = load_extension("root_last")

    class Old:
        root_doc = None
        master_doc = "index"

    assert extension.root_doc(Old) == "index"
    assert extension.root_doc(App.config) == "book/intro"


def test_the_intro_is_re_read_every_build_and_executes_last():
    assert "book/intro" in load_extension("always_reread").ALWAYS_REREAD
    import jupytext

    intro = jupytext.read(ROOT / "book" / "intro.md")
    assert intro.metadata["mystnb"] == {"execution_mode": "force"}
    shown = [c for c in intro.cells if c.cell_type == "code"
             and "remove-cell" not in c.metadata.get("tags", [])]
    assert all("hide-input" in c.metadata.get("tags", []) for c in shown)


def test_a_failing_cell_shows_its_error_type_and_the_first_lines_of_its_message():
    try:
        raise ValueError("one\nat /tmp/ipykernel_12/345.py:1\nthree\nfour\nfive\nsix")
    except ValueError as error:
        shown = choosing.short_traceback(ValueError, error)
    assert shown == ["ValueError: one", "at <cell>:1", "three", "four",
                     "[... 2 more lines of the message]"]
    assert choosing.short_traceback(KeyError, KeyError("x")) == ["KeyError: 'x'"]
    assert choosing.short_traceback(RuntimeError, RuntimeError("")) == ["RuntimeError: "]


def test_short_errors_installs_the_handler_for_every_exception():
    class Shell:
        def set_custom_exc(self, kinds, handler):
            self.kinds, self.handler = kinds, handler

        def _showtraceback(self, etype, value, stb):
            self.shown = (etype, value, stb)

    shell = Shell()
    choosing.short_errors(shell, lines=1)
    assert shell.kinds == (Exception,)
    error = KeyError("x")
    assert shell.handler(shell, KeyError, error, None) == ["KeyError: 'x'"]
    assert shell.shown == (KeyError, error, ["KeyError: 'x'"])  # the error output is sent


def test_short_errors_in_a_real_shell_still_fail_the_cell_and_show_the_error():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shown = []
    shell._showtraceback = lambda etype, value, stb: shown.append(stb)
    choosing.short_errors(shell, lines=1)
    result = shell.run_cell("raise ValueError('first\\nsecond')")
    assert isinstance(result.error_in_exec, ValueError)
    assert shown == [["ValueError: first", "[... 1 more lines of the message]"]]
    shell.set_custom_exc((), None)


def test_what_to_do_is_one_bullet_per_situation():
    situations = bottom_line.bottom_line(guide.guide_table(table_for()), ANCHORS, ECOSYSTEM)
    bullets = choosing.what_to_do(situations).splitlines()
    assert len(bullets) == len(bottom_line.SITUATIONS)
    assert bullets[1].startswith("- **TPU**: Start with JAX")


def test_a_glance_verdict_keeps_the_noisy_mark_and_names_a_memory_row():
    noisy = {"verdict": "faster", "favours": "JAX",
             "result": "a against b: faster, 2.279x [2.246, 2.379]; noisy, size uncertain"}
    assert choosing._verdict_word(noisy) == "JAX faster; noisy, size uncertain"
    assert choosing._verdict_word({**noisy, "result": "faster, 1.5x"}) == "JAX faster"
    assert choosing._verdict_word({"verdict": "tie", "favours": "tie", "result": ""}) == "tie"


def test_the_intro_names_the_releases_and_device_its_verdicts_were_measured_with(tmp_path):
    assert choosing.releases_measured(tmp_path) == "No page has saved results in this build yet."
    pd.DataFrame({"chapter": ["01_vmap", "05_vit_xla", "06_distributed"],
                  "device": ["Xeon (1 of 2 cores)", "Xeon (1 of 2 cores)", "Xeon (2 cores)"],
                  "scale": ["small"] * 3,
                  "torch": ["2.15.0+cu132", "2.9.0 (routes, in the worker); 2.15.0 (this page)",
                            "2.15.0+cu132"],
                  "jax": ["0.12.0.1"] * 3}).to_csv(tmp_path / "provenance.csv", index=False)
    assert choosing.releases_measured(tmp_path) == (
        "These verdicts were measured with torch 2.15.0 and jax 0.12.0.1, on Xeon (1 of 2 "
        "cores), at small scale (each page's own stamp is on the Reproduce page).")
