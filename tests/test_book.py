"""The built site: every page in _toc.yml exists, chapters show their figures and tables,
no output carries an error, launch buttons open each chapter's Colab edition, which reads
without MyST, pairs are in sync.

`make test` builds the book first. Run alone, these tests skip when there is no build,
except under CI (CI=true), where a missing build is a failure.
"""

import json
import os
import re
from pathlib import Path

import jupytext
import nbformat
import pandas as pd
import pytest
import yaml
from bs4 import BeautifulSoup

from deepdive.book import editions, plans
from deepdive.book.claims import verdict_phrase

# What chapter 7 says when it found every measuring page's results (its glued list is empty).
ALL_FOUND = "Chapters whose results this page could not find: none."

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
EDITIONS = ROOT / "_build" / "editions"
BASE_URL = yaml.safe_load((ROOT / "_config.yml").read_text())["html"]["baseurl"]
LAUNCHERS = ("https://colab.research.google.com/", "https://mybinder.org/")
EDITIONS_BRANCH = yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]["config"][
    "deepdive_editions_branch"]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.md"))
# What each chapter must show at least (the issues: vmap 3 figures, jit/XLA 4, compile 4,
# ViT training 4, distributed 2; compile keeps 1, its GPT figures moved with the benchmark).
MIN_FIGURES = {"01_vmap": 3, "02_jit_xla": 4, "03_torch_compile": 1, "05_vit_training": 4,
               "05_vit_xla": 1, "04_gpt_training": 3, "06_distributed": 2, "07_choosing": 1}
GLUED_TABLES = {"01_vmap": "tbl-vmap-speedups", "02_jit_xla": "tbl-jit-verdict",
                "03_torch_compile": "tbl-compile-verdict",
                "05_vit_training": "tbl-vit-summary", "04_gpt_training": "tbl-gpt-summary",
                "06_distributed": "tbl-distributed-verdict", "07_choosing": "tbl-evidence"}
# The chapters whose every comparison is a claim in claims.csv, decided by deepdive.core.verdict.
# The distributed chapter makes claims on real devices only (several GPUs): on simulated
# ones it times nothing, and the build's claims.csv says which it did.
CLAIM_CHAPTERS = ("01_vmap", "02_jit_xla", "03_torch_compile", "05_vit_training",
                  "04_gpt_training")
# The pages chapter 6 reads and names in its provenance table.
EVIDENCE_CHAPTERS = ("01_vmap", "02_jit_xla", "03_torch_compile", "05_vit_training",
                     "05_vit_xla", "04_gpt_training", "06_distributed")
# The PyTorch/XLA page makes claims when its side environment ran (always under CI); a
# build with DEEPDIVE_SKIP_XLA=1 shows "not run" there instead. Read from the built page.
XLA_PAGE = HTML / "notebooks" / "05_vit_xla.html"
XLA_RAN = not XLA_PAGE.exists() or "The route runs in this build" in " ".join(
    BeautifulSoup(XLA_PAGE.read_text(), "html.parser").get_text().split())
if XLA_RAN:
    GLUED_TABLES["05_vit_xla"] = "tbl-xla-summary"
CLAIMS_FILE = ROOT / "_build" / "results" / "claims.csv"
DISTRIBUTED_CLAIMED = CLAIMS_FILE.exists() and "06_distributed" in CLAIMS_FILE.read_text()
VERDICT_CHAPTERS = CLAIM_CHAPTERS + (("05_vit_xla",) if XLA_RAN else ()) + (
    ("06_distributed",) if DISTRIBUTED_CLAIMED else ())
ERROR_MARKERS = ("Traceback (most recent call last)", "Error in callback", "DeadKernelError")


def toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [chapter["file"] for chapter in part["chapters"]]
    return files


def page(doc: str) -> BeautifulSoup:
    return BeautifulSoup((HTML / f"{doc}.html").read_text(), "html.parser")


@pytest.fixture(scope="module", autouse=True)
def built_site():
    if not (HTML / "index.html").exists():
        message = f"no built site at {HTML}: run `make book` (or `make test`) first"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


@pytest.mark.parametrize("doc", toc_files())
def test_every_toc_page_is_built(doc):
    assert (HTML / f"{doc}.html").is_file()


@pytest.mark.parametrize("doc", toc_files())
def test_no_page_shows_an_error_or_traceback(doc):
    soup = page(doc)
    for meant_to_fail in soup.select(".tag_raises-exception"):  # errors shown on purpose
        meant_to_fail.decompose()
    text = soup.get_text()
    for marker in ERROR_MARKERS:
        assert marker not in text, f"{doc} shows {marker!r}"
    assert not soup.select(".output.traceback, .output.error"), f"{doc} has an error output"


@pytest.mark.parametrize("chapter", [nb.stem for nb in NOTEBOOKS])
def test_chapter_images_exist_and_meet_the_minimum(chapter):
    soup = page(f"notebooks/{chapter}")
    figures = [img for img in soup.select("main img") if "_images/" in img.get("src", "")]
    for img in figures:
        target = (HTML / "notebooks" / img["src"]).resolve()
        assert target.is_file() and target.stat().st_size > 1000, f"broken image {img['src']}"
    assert len(figures) >= MIN_FIGURES.get(chapter, 1), f"{chapter}: {len(figures)} figures"


@pytest.mark.parametrize("chapter", [nb.stem for nb in NOTEBOOKS])
def test_figures_are_opaque_so_they_read_in_the_dark_theme_too(chapter):
    from matplotlib.image import imread

    soup = page(f"notebooks/{chapter}")
    for img in soup.select("main img"):
        if "_images/" in img.get("src", "") and img["src"].endswith(".png"):
            pixels = imread(HTML / "notebooks" / img["src"])
            if pixels.shape[-1] == 4:  # a transparent figure would show dark text on dark
                assert pixels[..., 3].min() == 1.0, f"{img['src']} has transparent pixels"


@pytest.mark.parametrize(("chapter", "table_id"), GLUED_TABLES.items())
def test_chapter_has_its_glued_summary_table(chapter, table_id):
    figure = page(f"notebooks/{chapter}").find(id=table_id)
    assert figure is not None, f"the summary table (glue:figure {table_id}) is missing"
    assert len(figure.find_all("tr")) > 3


@pytest.mark.parametrize(("chapter", "least"), [("02_jit_xla", 2), ("03_torch_compile", 1),
                                               ("05_vit_training", 1), ("07_choosing", 4)])
def test_cells_meant_to_fail_do_show_their_error(chapter, least):
    failing = page(f"notebooks/{chapter}").select(".tag_raises-exception")
    assert len(failing) >= least
    assert all(re.search(r"\w*(Error|Unsupported)\b", cell.get_text()) for cell in failing)


def test_vmap_summary_gives_intervals():
    assert "95% interval" in page("notebooks/01_vmap").find(id="tbl-vmap-speedups").get_text()


def test_the_guide_read_every_chapters_results_in_this_build():
    soup = page("notebooks/07_choosing")
    assert ALL_FOUND in " ".join(soup.get_text().split())
    for table in ("tbl-guide", "tbl-evidence", "tbl-provenance"):
        assert "MISSING" not in soup.find(id=table).get_text(), table


def glued_rows(table):
    """{row header: [cell texts]} of a glued DataFrame table."""
    return {" ".join(tr.find("th").get_text().split()):
            [" ".join(td.get_text().split()) for td in tr.find_all("td")]
            for tr in table.find_all("tr") if tr.find("th") and tr.find("td")}


def this_build_on_the_reproduce_page():
    machine = glued_rows(page("book/reproduce").find("table"))
    return machine["build id"][0]


def test_the_reproduce_page_and_chapter_6_name_the_same_build_behind_each_chapter():
    """The footer says every number was measured by a build of this book and points at
    the Reproduce page for which one: both pages must agree, chapter by chapter."""
    this_build = this_build_on_the_reproduce_page()
    chapter6 = page("notebooks/07_choosing").find(id="tbl-provenance")
    assert f"This page ran in build {this_build}" in " ".join(chapter6.get_text().split())
    read_by_chapter6 = glued_rows(chapter6)
    listed = glued_rows(page("book/reproduce").find(id="which-build-measured-each-chapter")
                        .find("table"))
    assert set(read_by_chapter6) == set(EVIDENCE_CHAPTERS)
    assert {chapter: listed[chapter] for chapter in EVIDENCE_CHAPTERS} == read_by_chapter6
    assert listed["07_choosing"][0] == this_build  # forced: it ran in this very build
    assert "methodology" in listed
    for chapter, (build_id, *_, measured_in) in read_by_chapter6.items():
        assert (build_id == this_build) == (measured_in == "this build"), chapter
    if os.environ.get("DEEPDIVE_FRESH_BUILD") == "1":  # a clean clone: nothing came from a cache
        assert all(cells[-1] == "this build" for cells in listed.values())
        assert not any("not recorded" in cell for cells in listed.values() for cell in cells)


def guide_rows(table) -> list[dict]:
    """The guide's rows as {column: text}, its two index levels included (a need spans the
    rows of its claims, so a row without its own need header belongs to the one above)."""
    header = [" ".join(th.get_text().split()) for th in table.find("thead").find_all("tr")[-1]
              .find_all("th")]
    columns = [text for th in table.find("thead").find("tr").find_all("th")
               if (text := " ".join(th.get_text().split()))]
    rows, need = [], None
    for tr in table.find("tbody").find_all("tr"):
        heads = [" ".join(th.get_text().split()) for th in tr.find_all("th")]
        need = heads[0] if len(heads) == 2 else need
        cells = [" ".join(td.get_text().split()) for td in tr.find_all("td")]
        rows.append({header[0]: need, header[1]: heads[-1], **dict(zip(columns, cells,
                                                                      strict=True))})
    return rows


def test_every_guide_row_states_where_it_was_measured():
    """Each row of the guide is one claim, its verdict in the book's one form (or the memory
    row's byte counts), with the device and scale it ran at; a full build reads them all."""
    from deepdive.book.claims import verdict_parts
    from deepdive.book.evidence import EVIDENCE, NOT_MEASURED

    rows = guide_rows(page("notebooks/07_choosing").find(id="tbl-guide"))
    measured = [r for r in rows if not r["verdict"].startswith(NOT_MEASURED)]
    for row in measured:
        assert row["device"] and row["scale"] in ("small", "medium", "full"), row
        if row["favours"] in ("JAX", "PyTorch", "tie", "no verdict"):
            said = verdict_parts(row["verdict"])  # the phrase, or a ValueError
            assert said["form"] == {"tie": "tie", "no verdict": "withheld"}.get(
                row["favours"], "decided"), row
    assert {r["if you need"] for r in rows} == {item.need for item in EVIDENCE}
    assert len(measured) >= 10  # every group of EVIDENCE but the GPU-only bf16 ones


def test_the_intro_and_the_guide_read_each_verdict_the_same_way():
    """One verdict, one phrase: the intro's table says what the guide says, and the guide
    what claims.csv's numbers say (`verdict_phrase`)."""
    import pandas as pd

    from deepdive.book.claims import verdict_phrase

    guide = [r["verdict"] for r in guide_rows(page("notebooks/07_choosing").find(id="tbl-guide"))]
    intro = [r["verdict"] for r in guide_rows(page("book/intro").find("table"))]
    assert intro == guide
    phrases = {verdict_phrase(row) for _, row in pd.read_csv(CLAIMS_FILE).iterrows()}
    timed = [v for v in guide if " faster than " in v or " against " in v]
    assert timed and set(timed) <= phrases


def test_the_intro_states_its_scope_before_its_table():
    """The first screen: a box naming the machine the rows ran on, then the table, which has
    a device column only where the guide's rows ran on more than one machine."""
    from deepdive.book.evidence import machine

    soup = page("book/intro")
    table = soup.find("table")
    box = table.find_previous("div", class_="admonition")  # a hidden cell is a <details> one
    assert box is not None
    said = " ".join(box.get_text().split())
    guide = guide_rows(page("notebooks/07_choosing").find(id="tbl-guide"))
    machines = {machine(row["device"]) for row in guide if row["device"]}
    assert machines and all(name in said for name in machines), (machines, said)
    columns = [" ".join(th.get_text().split()) for th in table.find("thead").find_all("th")]
    assert ("device" in columns) == (len(machines) > 1)


def test_making_either_fast_gives_each_setting_its_verdict_or_its_source():
    from deepdive.book.claims import verdict_parts

    # A label before a heading renders as an empty span inside the heading's section.
    section = page("notebooks/07_choosing").find(id="choosing-fast").find_parent("section")
    tables = section.select("table.make-it-fast")
    assert len(tables) == 2  # PyTorch, then JAX
    measured = 0
    for table in tables:
        for tr in table.find("tbody").find_all("tr"):
            last = tr.find_all("td")[-1]
            for span in last.select("span.scope"):  # each verdict's workload and size
                assert span.get_text().strip(), tr
                span.extract()
            for br in last.find_all("br"):  # one verdict a line
                br.replace_with("\n")
            for text in (" ".join(t.split()) for t in last.get_text().split("\n")):
                if text.startswith("not measured here"):
                    assert last.find("a", href=re.compile(r"^https://")), text  # its source
                elif text != "not measured in this build":
                    verdict_parts(text)  # the book's one form, or a ValueError
                    measured += 1
    assert measured >= 8  # a CPU build times most of the settings it can


def test_vit_summary_gives_intervals_and_the_parity_check_passed():
    soup = page("notebooks/05_vit_training")
    assert re.search(r"\dx \[\d+\.\d+, \d+\.\d+\]", soup.find(id="tbl-vit-summary").get_text())
    parity_text = soup.find(id="proof-of-equivalence").get_text()
    assert "within tolerance" in parity_text and "False" not in parity_text.split("A broken")[0]


@pytest.mark.parametrize("chapter", [nb.stem for nb in NOTEBOOKS])
def test_launch_and_download_buttons_open_the_colab_edition(chapter):
    soup = page(f"notebooks/{chapter}")
    links = [a.get("href", "") for a in soup.find_all("a")]
    edition = f"notebooks/{chapter}.ipynb"
    colab = [h for h in links if h.startswith("https://colab.research.google.com/")]
    binder = [h for h in links if h.startswith("https://mybinder.org/")]
    download = [h for h in links if h.endswith(f"_sources/{edition}")]
    assert colab and all(h.endswith(f"/blob/{EDITIONS_BRANCH}/{edition}") for h in colab), colab
    binder_path = f"/{EDITIONS_BRANCH}?urlpath=lab/tree/{edition}"
    assert binder and all(binder_path in h for h in binder), binder
    assert download and not [h for h in links if h.endswith(f"_sources/notebooks/{chapter}.md")]
    # What the download button serves is the edition the build wrote, not the paired notebook.
    assert (HTML / "_sources" / edition).read_text() == (EDITIONS / edition).read_text()


def test_only_chapter_pages_have_launch_buttons():
    """The other executed pages have no edition, and Colab cannot open their MyST source."""
    others = [doc for doc in toc_files() if not doc.startswith("notebooks/")]
    launching = {doc: [a["href"] for a in page(doc).find_all("a", href=True)
                       if a["href"].startswith(LAUNCHERS)] for doc in others}
    assert others and not {doc: links for doc, links in launching.items() if links}


@pytest.mark.parametrize("chapter", [nb.stem for nb in NOTEBOOKS])
def test_every_colab_edition_reads_without_myst_or_site_only_cells(chapter):
    edition = nbformat.read(EDITIONS / "notebooks" / f"{chapter}.ipynb", as_version=4)
    markdown = [c.source for c in edition.cells if c.cell_type == "markdown"]
    left = {i: editions.raw_myst(text) for i, text in enumerate(markdown)}
    assert not {i: found for i, found in left.items() if found}
    assert not [c.source[:80] for c in edition.cells if editions.site_only(c)]
    set_up = [c for c in edition.cells if editions.COLAB_BLOCK in c.source]
    assert len(set_up) == 1 and set_up[0].source.startswith(f"# @title {editions.SET_UP_TITLE}")
    assert set_up[0].metadata["cellView"] == "form"
    # The line under the title names this build and its machine, as the page's stamp does.
    stamp = pd.read_csv(ROOT / "_build" / "results" / "provenance.csv").set_index("chapter")
    row = stamp.loc[chapter]
    timed = "median" in set(pd.read_csv(ROOT / "_build" / "results" / f"{chapter}.csv")["metric"])
    build = editions.Build(row["build_id"], row["device"], row["executed_at"][:10], row["scale"],
                           measures=timed)
    assert markdown[0].startswith("# ") and build.note(f"{BASE_URL}notebooks/{chapter}.html") in (
        markdown[0])


@pytest.mark.parametrize("chapter", [nb.stem for nb in NOTEBOOKS])
def test_every_colab_edition_carries_the_outputs_its_page_shows(chapter):
    """A chapter reads before anything runs: each cell with output on the page has it in the
    edition too (myst-nb's executed notebook of a cached page has none; the cache does)."""
    shown = sum(1 for cell in page(f"notebooks/{chapter}").select("div.cell")
                if cell.select_one("div.cell_output"))
    edition = nbformat.read(EDITIONS / "notebooks" / f"{chapter}.ipynb", as_version=4)
    checks = f"# @title {editions.CHECKS_TITLE}"  # kept from cells the site runs unseen
    carried = sum(bool(c.outputs) for c in edition.cells
                  if c.cell_type == "code" and not c.source.startswith(checks))
    assert shown and carried == shown


def test_chapter_4s_edition_gives_its_summary_with_this_builds_numbers():
    edition = nbformat.read(EDITIONS / "notebooks" / "04_gpt_training.ipynb", as_version=4)
    text = "\n".join(c.source for c in edition.cells if c.cell_type == "markdown")
    summary = text[text.index("## Summary"):]
    claims = pd.read_csv(CLAIMS_FILE)
    best = claims[claims["claim_id"] == "char_fp32_jax_vs_torch"].iloc[0]
    assert verdict_phrase(best) in summary


@pytest.mark.parametrize("md", NOTEBOOKS, ids=lambda p: p.name)
def test_paired_notebook_is_in_sync_with_its_markdown(md):
    ipynb = md.with_suffix(".ipynb")
    assert ipynb.is_file(), f"{md.name} has no pair: run jupytext --sync {md}"
    text, notebook = jupytext.read(md), jupytext.read(ipynb)
    cells = lambda nb: [(c.cell_type, c.source.strip()) for c in nb.cells]  # noqa: E731
    assert cells(text) == cells(notebook), f"run: jupytext --sync {md.relative_to(ROOT)}"


@pytest.mark.parametrize("md", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_notebook_has_no_outputs(md):
    notebook = json.loads(md.with_suffix(".ipynb").read_text())
    for cell in notebook["cells"]:
        assert not cell.get("outputs"), f"{md.with_suffix('.ipynb').name} carries outputs"


@pytest.mark.parametrize("chapter", [nb.stem for nb in NOTEBOOKS])
def test_chapter_results_were_saved(chapter):
    path = ROOT / "_build" / "results" / f"{chapter}.csv"
    assert path.is_file(), f"{chapter} did not save its results"
    header = path.read_text().splitlines()[0]
    assert header.startswith("chapter,experiment,framework,variant,size,metric,value,unit")


def claims_of(chapter):
    import pandas as pd

    frame = pd.read_csv(ROOT / "_build" / "results" / "claims.csv")
    return frame[frame["chapter"] == chapter]


def test_claims_csv_holds_every_required_column_and_the_claim_chapters():
    import pandas as pd

    from deepdive.book.claims import COLUMNS

    frame = pd.read_csv(ROOT / "_build" / "results" / "claims.csv")
    assert tuple(frame.columns) == COLUMNS
    assert set(CLAIM_CHAPTERS) <= set(frame["chapter"])
    assert frame["verdict"].isin(["faster", "slower", "tie", "withheld"]).all()
    assert (frame["n"] >= 15).all()  # at least 15 paired rounds behind every claim


@pytest.mark.parametrize("chapter", VERDICT_CHAPTERS)
def test_every_claim_reads_on_its_page_as_the_file_says(chapter):
    """The box and the summary table show each claim's verdict, recomputed from claims.csv
    with the one rule, in the book's one form: the page cannot say what the file does not."""
    from deepdive.book.claims import reread_verdict, verdict_phrase

    soup = page(f"notebooks/{chapter}")
    # Sphinx's smart quotes turn a question's apostrophe into a curly one in the box.
    box = " ".join(soup.select_one(".admonition.tip").get_text().replace("\u2019", "'").split())
    table = soup.find(id=GLUED_TABLES[chapter])
    rows = {" ".join(tr.find("th").get_text().split()): " ".join(tr.get_text().split())
            for tr in table.find_all("tr") if tr.find("th") and tr.find("td")}
    claims = claims_of(chapter)
    assert not claims.empty
    for _, claim in claims.iterrows():
        verdict = reread_verdict(claim)
        assert verdict == claim["verdict"]
        phrase = " ".join(verdict_phrase(claim).split())
        assert phrase in rows[" ".join(claim["question"].split())]
        if claim["headline"]:  # whole, or its scope once above the claims that share it
            scope, _, asked = claim["question"].partition(": ")
            assert f"{claim['question']}: {phrase}" in box or (
                f"{scope}:" in box and f"{asked}: {phrase}" in box)


def glue_files() -> list[Path]:
    """What each executed page glued, as myst-nb saves it beside the executed notebook."""
    found = sorted((ROOT / "_build" / "jupyter_execute").rglob("*.glue.json"))
    assert found, "the build left no glue files in _build/jupyter_execute"
    return found


def glued_values(path: Path) -> dict[str, str]:
    """{glue key: its text} of one page, for the values glued as text (not tables, numbers
    or figures)."""
    import ast

    values = {}
    for name, output in json.loads(path.read_text()).items():
        text = output.get("data", {}).get("text/plain")
        text = "".join(text) if isinstance(text, list) else text
        try:
            value = ast.literal_eval(text) if text else None
        except (ValueError, SyntaxError):  # a table's or an object's repr
            continue
        if isinstance(value, str):
            values[name] = value
    return values


def test_every_glued_verdict_in_the_built_site_is_in_the_one_form():
    """Every claim a page glues (its own, an alias, or one it cites) reads as the book's one
    verdict phrase, with the numbers and band claims.csv gives it; and no glued text uses
    another way of saying a verdict."""
    import pandas as pd

    from deepdive.book.claims import verdict_parts, verdict_phrase

    frame = pd.read_csv(CLAIMS_FILE)
    phrases = {row["claim_id"]: verdict_phrase(row) for _, row in frame.iterrows()}
    for _, row in frame.iterrows():
        for alias in str(row.get("aliases", "")).split(";"):
            if alias and alias != "nan":
                phrases[alias] = phrases[row["claim_id"]]
    checked = 0
    for notebook in glue_files():
        for key, value in glued_values(notebook).items():
            if key in phrases:
                assert value == phrases[key], (notebook.name, key)
            if key in phrases or re.search(r"\bx faster than\b|: tie within|: no verdict", value):
                said = verdict_parts(value)  # fails on any other form
                assert said["ratio"] >= 1 and said["low"] <= said["ratio"] <= said["high"]
                checked += 1
            assert not re.fullmatch(r"(faster|slower) than|tied with|undecided against", value), (
                notebook.name, key, value)
    assert checked >= len(frame)


def test_every_timed_variant_was_written_on_its_page_or_in_the_shared_layers():
    """The code a page times is the code it shows: each timing keeps where its code was
    written (`deepdive.core.source`), and nothing may come from a module of the package
    outside `deepdive.core` and `deepdive.models`."""
    import pandas as pd

    from deepdive.core.source import foreign

    frame = pd.read_csv(CLAIMS_FILE, dtype=str, keep_default_na=False)
    for column in ("baseline_code", "candidate_code"):
        empty = frame[frame[column] == ""]
        assert empty.empty, f"claims without {column}: {list(empty['claim_id'])}"
        hidden = {row["claim_id"]: foreign(row[column].split(";"))
                  for _, row in frame.iterrows() if foreign(row[column].split(";"))}
        assert not hidden, hidden
    for chapter in EVIDENCE_CHAPTERS:
        medians = pd.read_csv(ROOT / "_build" / "results" / f"{chapter}.csv", dtype=str,
                              keep_default_na=False).query("metric == 'median'")
        hidden = {row["variant"]: foreign(row["code"].split(";"))
                  for _, row in medians.iterrows() if foreign(row["code"].split(";"))}
        assert not hidden, (chapter, hidden)


@pytest.mark.parametrize("chapter", VERDICT_CHAPTERS)
def test_every_timing_of_a_claim_chapter_has_at_least_15_blocks(chapter):
    import pandas as pd

    frame = pd.read_csv(ROOT / "_build" / "results" / f"{chapter}.csv")
    blocks = frame[frame["metric"] == "blocks"]
    assert not blocks.empty, f"{chapter} saved no timings with their block counts"
    assert (blocks["value"] >= 15).all(), blocks[blocks["value"] < 15]


def execution_seconds():
    """{document: run time in s} from the Reproduce page's execution table (myst-nb's
    nb-exec-table), for the documents executed in the build that made it."""
    table = next(t for t in page("book/reproduce").find_all("table")
                 if "Run Time (s)" in t.get_text())
    header = [" ".join(th.get_text().split()) for th in table.find_all("th")]
    column = header.index("Run Time (s)")
    rows = [[" ".join(td.get_text().split()) for td in tr.find_all("td")]
            for tr in table.find_all("tr")]
    return {cells[0]: float(cells[column]) for cells in rows if len(cells) > column}


def run_time_table() -> tuple[dict[str, dict[str, str]], str]:
    """The Reproduce page's table of each chapter's run time and budget on this machine, by
    chapter, and the corner of its header (which names the build's slowness)."""
    table = next(t for t in page("book/reproduce").find_all("table")
                 if "budget here (s)" in t.get_text())
    header_rows = table.find("thead").find_all("tr")
    header = [" ".join(th.get_text().split()) for th in header_rows[0].find_all("th")]
    corner = " ".join(header_rows[-1].find("th").get_text().split())
    rows = {}
    for tr in table.find("tbody").find_all("tr"):
        cells = [" ".join(c.get_text().split()) for c in tr.find_all(["th", "td"])]
        rows[cells[0]] = dict(zip(header[1:], cells[1:], strict=True))
    return rows, corner


def test_the_reproduce_page_reports_each_chapters_run_time_against_its_budget_here():
    """How long a page took is a reported figure, never a pass or fail of the machine's
    speed: the table shows every chapter's run, as the execution table recorded it, and its
    budget stretched by this build's measured slowness."""
    from deepdive.book import calibration

    rows, corner = run_time_table()
    slowness = float(re.search(r"slowness ([\d.]+)x", corner).group(1))
    built = calibration.slowness(calibration.load())  # the build's own, never re-measured here
    assert slowness == pytest.approx(built, abs=0.006)
    executed = execution_seconds()
    for chapter in plans.CHAPTERS:
        budget = plans.budget_s(chapter, "small", built)
        assert float(rows[chapter]["budget here (s)"]) == pytest.approx(budget, rel=1e-3)
        ran = executed.get(f"notebooks/{chapter}")
        if ran is not None:  # executed by this build: the same figure in both tables
            assert float(rows[chapter]["ran (s)"]) == pytest.approx(ran, abs=0.01)
        print(f"{chapter}: ran {rows[chapter]['ran (s)']} s, budget here {budget:.0f} s")


def test_the_site_publishes_the_evidence_chapter_6_can_read_on_its_own():
    from deepdive.book.evidence import EVIDENCE_FILES

    for name in EVIDENCE_FILES:
        published = HTML / "results" / name
        assert published.read_bytes() == (ROOT / "_build" / "results" / name).read_bytes(), name


def test_the_xla_page_measured_every_route_in_this_build():
    """The mode table: every route, each worker row labelled torch 2.9, its parity figure
    equal to the parity table's, first steps apart, and no recompilation while timed."""
    if not XLA_RAN:
        if os.environ.get("CI") == "true":
            pytest.fail("under CI the PyTorch/XLA route must run, and the page says it did not")
        pytest.skip("the PyTorch/XLA route did not run in this build (DEEPDIVE_SKIP_XLA=1)")
    import torch

    from deepdive.models import xla_route

    soup = page("notebooks/05_vit_xla")
    text = " ".join(soup.get_text().split())
    assert "The route runs in this build" in text and "not run in this build" not in text
    modes = soup.find(id="tbl-xla-modes")
    rows = glued_rows(modes)
    here = f"torch {torch.__version__.split('+')[0]} eager"
    jax_here = "JAX jax.jit (Flax NNX twin)"
    assert set(rows) == {here, jax_here, *xla_route.VARIANTS}
    header = [" ".join(th.get_text().split()) for th in modes.find("tr").find_all("th")][1:]
    for route, cells in rows.items():
        row = dict(zip(header, cells, strict=False))
        difference = row[f"max |grad difference| vs {here}"]
        if route == xla_route.JAX_TWIN:
            assert difference == "n/a"  # the page's JAX code; its losses are checked
        elif route in xla_route.PARITY_VARIANTS and route != xla_route.EAGER:
            assert row["versions"].startswith("torch 2.9.0"), route
            assert 0 < float(difference) < 1e-4, route  # a real comparison, in tolerance
        else:
            assert float(difference) < 1e-4, route
        if route in xla_route.VARIANTS:
            assert float(row["second step (s)"]) > 0, route
        assert float(row["first step (s)"]) > 0 and float(row["steady step (ms)"]) > 0
        assert row["recompilations while timed"] == "0", route
    assert float(rows[xla_route.LAZY][header.index("first step (s)")]) > float(
        rows[xla_route.LAZY][header.index("steady step (ms)")]) / 1e3


def built_claims():
    import pandas as pd

    return pd.read_csv(CLAIMS_FILE)


def test_every_claim_says_why_its_verdict_reads_as_it_does():
    from deepdive.book.claims import reread_reason

    frame = built_claims()
    for _, claim in frame.iterrows():
        assert claim["reason"] == reread_reason(claim), claim["claim_id"]
    withheld = frame[frame["verdict"] == "withheld"]
    assert withheld["reason"].str.contains("interval").all()  # never "a side was noisy" alone


def test_every_page_read_the_builds_one_tie_band_and_cpu_peak():
    """One measurement, one verdict: the band and the CPU's peak come from the build's
    calibration, not from each page."""
    import pandas as pd

    from deepdive.book import calibration

    saved = calibration.Calibration.from_json(
        (ROOT / "_build" / "results" / calibration.FILE_NAME).read_text())
    frame = built_claims()
    cpu = frame["device"].map(lambda d: bool(re.search(r"cores?\)$", d)))
    assert (frame.loc[cpu, "build_band"] == saved.tie_band("cpu").width).all()
    assert (frame["tie_band"] >= frame["build_band"] - 1e-12).all()
    assert (frame["decision_band"] >= frame["tie_band"] - 1e-12).all()
    if cpu.all():  # MFU on a CPU divides by the build's one peak, on every page
        peaks = {f"{dtype} {p['flops_per_s']:.6g}" for dtype, p in saved.peaks.items()}
        for chapter in ("04_gpt_training", "05_vit_training"):  # chapter 3 uses no peak
            used = pd.read_csv(ROOT / "_build" / "results" / f"{chapter}.csv")
            rows = used[used["experiment"] == "peak"]
            assert not rows.empty, f"{chapter} saved no peak"
            assert {f"{v} {x:.6g}" for v, x in zip(rows["variant"], rows["value"],
                                                     strict=True)} <= peaks, chapter


def test_no_two_claims_make_one_comparison():
    frame = built_claims()
    assert not frame["question"].duplicated().any()
    # The GPT chapter makes the Inductor-against-eager claims once, under the benchmark's ids.
    gpt = frame[frame["chapter"] == "04_gpt_training"]
    assert not gpt["claim_id"].str.contains("compile_vs_eager|torch_bf16_vs_fp32").any()


def test_every_pages_provenance_records_the_allocator_regime_in_force():
    import pandas as pd

    from deepdive.core import allocator

    stamps = pd.read_csv(ROOT / "_build" / "results" / "provenance.csv")
    measuring = stamps[stamps["chapter"].isin([*EVIDENCE_CHAPTERS, "methodology"])]
    assert set(measuring["chapter"]) >= set(EVIDENCE_CHAPTERS)
    assert measuring["allocator"].str.startswith(allocator.KEPT).all(), measuring[
        ["chapter", "allocator"]]
    xla = stamps.set_index("chapter").loc["05_vit_xla"]
    if XLA_RAN:  # its routes ran torch 2.9 in the worker, and the stamp says so
        assert xla["torch"].startswith("2.9") and "(this page)" in xla["torch"]


def test_no_headline_is_a_verdict_the_allocator_regime_flips():
    frame = built_claims().set_index("claim_id")
    chapter2 = frame[frame["chapter"] == "02_jit_xla"]
    for claim_id, claim in chapter2[chapter2["headline"]].iterrows():
        assert not claim_id.startswith("defaults_"), claim_id
        twin = f"defaults_{claim_id}"
        if twin in chapter2.index:
            assert chapter2.loc[twin, "verdict"] == claim["verdict"], claim_id


def test_the_methodology_page_decided_almost_no_a_a_pair_under_load():
    import pandas as pd

    records = pd.read_csv(ROOT / "_build" / "results" / "methodology.csv")
    pairs = records[records["experiment"] == "aa_under_load"]
    assert len(pairs) >= 20
    assert pairs["value"].mean() <= 0.05
    text = " ".join(page("book/methodology").get_text().split())
    assert f"Of {len(pairs)} A/A pairs timed on the loaded machine" in text


def test_the_language_model_row_compares_each_frameworks_best_checked_step():
    import pandas as pd

    frame = built_claims().set_index("claim_id")
    guide_text = " ".join(page("notebooks/07_choosing").find(id="tbl-guide").get_text().split())
    steps = pd.read_csv(ROOT / "_build" / "results" / "04_gpt_training.csv")
    medians = steps[(steps["metric"] == "median") & steps["variant"].str.endswith(" fp32")
                    & ~steps["variant"].str.contains("A/A", regex=False)]  # controls, not steps
    for key in ("char", "vocab"):
        question = frame.loc[f"{key}_fp32_jax_vs_torch", "question"]
        named = re.search(r"JAX's best step \((.+?)\) against PyTorch's best \((.+?)\)",
                          question).groups()
        name_of_model = re.search(r"GPT training step, (.+?) \(", question).group(1)
        model = medians[medians["size"] == name_of_model]
        assert not model.empty, name_of_model
        for framework, name in zip(("jax", "torch"), named, strict=True):
            mine = model[model["framework"] == framework]
            best = mine.loc[mine["value"].idxmin(), "variant"]
            assert best == f"{name} fp32", (key, framework, best, name)
            assert name in guide_text, name  # the guide names each side's best step


def test_chapter_6_has_a_bottom_line_and_one_sentence_slides_cells():
    soup = page("notebooks/07_choosing")
    assert soup.find(id="the-bottom-line") is not None
    text = " ".join(soup.find(id="the-bottom-line").get_text().split())
    for situation in ("GPU training", "TPU", "research prototyping", "serving", "CPU-only"):
        assert situation in text


def test_no_claim_with_an_emulated_bf16_side_is_decided():
    """Emulated bf16 times the emulation: every claim with a bf16 side says whether the
    device computes bf16 natively, and none on an emulating device is decided."""
    from deepdive.book.claims import EMULATED, reread_verdict

    frame = built_claims()
    sides = frame["question"] + " " + frame["baseline"] + " " + frame["candidate"]
    named = sides.str.contains(r"\bbf16\b", case=False, regex=True)
    assert frame.loc[named, "bf16"].isin(["native", EMULATED]).all()
    emulated = frame[frame["bf16"] == EMULATED]
    assert (emulated["verdict"] == "withheld").all()
    assert all(reread_verdict(row) == "withheld" for _, row in emulated.iterrows())


def test_every_cross_framework_guide_row_is_each_sides_fastest_checked_variant():
    """The guide's rows compare each framework at its best: the claim saved the variants
    each side was the fastest of (Claims refuses a side a rival beat), and its verdict
    names both."""
    from deepdive.book import evidence
    from deepdive.book.claims import verdict_parts
    from deepdive.chapters import claim_map

    found = evidence.load_all(ROOT / "_build" / "results", claim_map.current)
    table = evidence.evidence_table(found)
    saved = found["claims"].set_index("claim_id")
    best = {item.key for item in evidence.EVIDENCE if getattr(item, "best", False)}
    needs = {item.need for item in evidence.EVIDENCE if getattr(item, "key", "") in best}
    rows = table[table["if you need"].isin(needs) & table["question"].str.contains(": ")]
    assert len(rows) >= 5
    for _, row in rows.iterrows():
        claim = saved.loc[row["claim"]]
        for side in ("baseline", "candidate"):
            among = str(claim[f"{side}_among"]).split(";")
            assert claim[side] in among and len(among) >= 2, (row["claim"], side, among)
        parts = verdict_parts(row["verdict"])
        assert {parts["fast"], parts["slow"]} == {claim["baseline"], claim["candidate"]}
