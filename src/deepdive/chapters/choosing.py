"""The choosing chapter's readings (and the intro's): where the evidence comes from, what
it found, and the sentences and tables the pages show around the guide.

Every sentence here is built from the saved claims (`deepdive.chapters.evidence`, decided by the
book's one verdict rule), the guide's rows (`deepdive.chapters.guide`) or the dated files in
`book/data/`; nothing holds a measured value or a typed verdict. Every ratio is stated one
way, PyTorch's time over JAX's (`deepdive.chapters.guide.RATIO`).
"""

from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path

import pandas as pd

from deepdive.chapters import evidence, guide
from deepdive.core.env import is_cpu_label

__all__ = ["ALL_FOUND", "DECIDED", "UNMEASURED", "at_a_glance", "batched_note", "has_pallas_triton",
           "pallas_backend", "pallas_launch", "pallas_ran", "releases_measured",
           "claims_figure", "data_dir", "evidence_dir", "evidence_status", "findings",
           "glance_counts", "guide_counts", "guide_scope", "kernels_ran", "measured_in",
           "provenance_tables", "short_errors", "short_traceback", "sizes_run", "slides_readings",
           "source_notes", "what_to_do"]

DECIDED = ("faster", "slower", "tie")
ALL_FOUND = ("The results of every measuring page (every chapter before this one, with the "
             "PyTorch/XLA page) were found.")
# What the slides weigh and this build does not time: both sides, from the sources and the
# chapters (the ecosystem table's sources; the debugging section of this chapter).
UNMEASURED = pd.DataFrame([
    {"if you need": "pretrained models with their training code",
     "PyTorch": "transformers 5 ships its models for PyTorch only",
     "JAX": "no Flax models in transformers 5 (the ViT chapter writes its JAX ViT and ports "
            "the weights); KerasHub's models run on a JAX backend",
     "source": "hf-transformers-v5-migration; keras-hub; the ViT chapter"},
    {"if you need": "TPUs, or custom kernels that also run on TPUs",
     "PyTorch": "TPUs through PyTorch/XLA; Triton kernels target GPUs",
     "JAX": "XLA compiles for TPUs, and Pallas kernels lower to Mosaic there",
     "source": "seed-xla-jax; jax-pallas-docs; this chapter"},
    {"if you need": "step-through debugging while prototyping",
     "PyTorch": "eager: pdb on real tensors (on a GPU, errors surface at the next sync); "
                "under torch.compile a breakpoint breaks the graph",
     "JAX": "under jit: jax.debug.print, jax.debug.breakpoint, checkify; jax.disable_jit "
            "runs op by op for pdb",
     "source": "torch-cuda-semantics; the jit and torch.compile chapters; this chapter"},
    {"if you need": "to know why a compiled step is slow or recompiles",
     "PyTorch": "TORCH_LOGS: graph breaks, guards, recompilations",
     "JAX": "jax.log_compiles, and jax_explain_cache_misses for why a call recompiled",
     "source": "the jit and torch.compile chapters"},
]).set_index("if you need")


def data_dir() -> Path:
    """The dated files shipped with the book (`book/data/`): under the book's root found
    from the working directory, else beside this package's source tree (a kernel started
    elsewhere, as nbconvert does with a copied notebook)."""
    from deepdive.core.env import book_root

    for root in (book_root(), Path(__file__).resolve().parents[3]):
        if (root / "book" / "data").is_dir():
            return root / "book" / "data"
    raise FileNotFoundError(f"no book/data under {book_root()} or beside {__file__}")


def evidence_dir(results: Path, environ=os.environ) -> tuple[Path, str | None]:
    """Where the evidence is read from: this build's `results`, or with DEEPDIVE_EVIDENCE
    set (a folder, an address, or "published"), another build's files fetched beside it.
    Returns the folder and the source (None for this build's own)."""
    source = environ.get("DEEPDIVE_EVIDENCE")
    if not source:
        return Path(results), None
    if source == evidence.PUBLISHED:
        from deepdive.core.env import book_root

        source = evidence.published_results(book_root())
    source = source.rstrip("/") + "/"
    return evidence.fetch(source, Path(results).parent / "evidence-read"), source


def source_notes(source: str | None) -> tuple[str, str]:
    """(where the evidence was read, the note shown above it): this build's files, or
    another build's, with the warning that "this build" then means that one."""
    if source:
        return (f"the files another build saved, fetched from {source}",
                evidence.other_build_note(source))
    return ("the files every chapter before this one saved in this build's _build/results/",
            "> Measured by this build: every chapter before this one ran in it, or was "
            "served from its execution cache, as the provenance table says.")


def measured_in(stamp, this_build: str, this_commit: str, source: str | None,
                outside: str, uncommitted: str) -> str:
    """Which build measured a chapter, from its provenance stamp."""
    if source:
        return "another build, read from DEEPDIVE_EVIDENCE"
    if stamp["build_id"] == outside:
        return "a run outside make book"
    if stamp["build_id"] == this_build:
        return "this build"
    same = stamp["commit"].removesuffix(uncommitted) == this_commit.removesuffix(uncommitted)
    return ("an earlier build (served from the cache)" if same
            else "an earlier build at another commit (served from the cache)")


def provenance_tables(directory: Path, source: str | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per chapter the guide reads, every stamp saved): the build, commit, time,
    machine and versions that measured each, and which build that was ("measured in")."""
    from deepdive.book import provenance

    this_build, this_commit = provenance.build_id(), provenance.commit()
    stamps = provenance.load(directory).fillna("not recorded (older stamp)")
    stamps["measured in"] = [measured_in(row, this_build, this_commit, source,
                                         provenance.OUTSIDE_BUILD, provenance.UNCOMMITTED)
                             for _, row in stamps.iterrows()]
    read = pd.DataFrame({"chapter": list(evidence.CHAPTERS)}).merge(stamps, how="left")
    read["measured in"] = read["measured in"].fillna("MISSING: not run")
    return read, stamps


def evidence_status(table: pd.DataFrame, directory: Path) -> tuple[str, str | None]:
    """The sentence under the provenance table, and a loud warning (Markdown) or None."""
    missing = sorted(table.loc[table["favours"] == evidence.MISSING, "chapter"].unique())
    if not missing:
        return (ALL_FOUND, None)
    names = ", ".join(missing)
    return (f"MISSING RESULTS: {names} saved nothing in {directory}; the rows from those "
            "chapters are empty and the guide cannot use them. "
            + evidence.HOW_TO_GET.replace("`", ""),  # plain text: {glue:text} shows backticks
            f"> **WARNING: results missing for {names}.** The evidence rows from those "
            "chapters are empty. " + evidence.HOW_TO_GET)


def _verdict_word(row) -> str:
    noisy = "; noisy, size uncertain" if "noisy, size uncertain" in str(row.get("result")) else ""
    if row["verdict"] == "tie":
        return "tie" + noisy
    if row["favours"] in ("JAX", "PyTorch"):
        return f"{row['favours']} faster{noisy}"
    if row["verdict"] == "exact byte counts":
        return f"memory, not time: {row['favours']} (exact byte counts)"
    return str(row["favours"])


def _ratio(row) -> str:
    if row.get("torch_over_jax") != row.get("torch_over_jax"):  # NaN: not timed
        return ""
    return (f"{row['torch_over_jax']:.2f} [{row['torch_over_jax_low']:.2f}, "
            f"{row['torch_over_jax_high']:.2f}]")


def at_a_glance(table: pd.DataFrame) -> pd.DataFrame:
    """The book's decided verdicts of PyTorch against JAX, one row each, scoped: the
    workload and its size, what ran on each side, the verdict, the ratio (PyTorch time /
    JAX time, 95% interval), the device and the scale. The memory row's byte counts hold
    on any device. Withheld and unmeasured rows are left out (`findings` counts them)."""
    decided = table[table["verdict"].isin(DECIDED) | (table["verdict"] == "exact byte counts")]
    rows = [{"workload and size": guide.scope_of(r["question"]),
             "compared": (f"{r['candidate']} vs {r['baseline']}" if r["candidate"] == r["candidate"]
                          and r["candidate"] else r["result"].split(": ", 1)[-1]),
             "verdict": _verdict_word(r), guide.RATIO: _ratio(r),
             "device": r["device"], "scale": r["scale"]} for _, r in decided.iterrows()]
    return pd.DataFrame(rows, columns=["workload and size", "compared", "verdict", guide.RATIO,
                                       "device", "scale"])


def findings(advice: pd.DataFrame, table: pd.DataFrame) -> str:
    """The findings box: one bullet per guide row (what this build suggests, its status and
    its ratios), then how many claims were decided, and on which device and scale."""
    if table.empty or (table["favours"] == evidence.MISSING).all():
        return "- No evidence to read yet: " + evidence.HOW_TO_GET
    bullets = []
    for _, row in advice.iterrows():
        bullets.append(f"- **{row['if you need']}** ({row['status']}): "
                       f"{row['this build suggests']}")
    bullets.append(f"- {glance_counts(table)}")
    return "\n".join(bullets)


def glance_counts(table: pd.DataFrame) -> str:
    """'Of 13 timed comparisons, 12 were decided and 1 withheld; measured on <device>,
    small scale.' from the evidence table (its claims' re-decided verdicts)."""
    if table.empty or "verdict" not in table:
        return "No timed comparison was found in this build's claims."
    timed = table[table["ratio"].notna() & table["verdict"].isin((*DECIDED, "withheld"))]
    decided = int(timed["verdict"].isin(DECIDED).sum())
    devices = ", ".join(dict.fromkeys(d for d in table["device"] if d)) or "no device"
    scales = ", ".join(dict.fromkeys(s for s in table["scale"] if s)) or "no"
    return (f"Of {len(timed)} timed comparisons, {decided} were decided and "
            f"{len(timed) - decided} withheld; measured on {devices}, {scales} scale.")


def what_to_do(situations: pd.DataFrame) -> str:
    """The bottom line's "what to do" column as Markdown bullets, one per situation."""
    return "\n".join(f"- **{situation}**: {row['what to do']}"
                     for situation, row in situations.iterrows())


def guide_counts(advice: pd.DataFrame) -> str:
    """'The guide's 8 rows, by status: decided, 5; ...'."""
    statuses = advice["status"].value_counts() if not advice.empty else pd.Series(dtype=int)
    noun = "row" if len(advice) == 1 else "rows"
    return f"The guide's {len(advice)} {noun}, by status: " + "; ".join(
        f"{status}, {int(statuses.get(status, 0))}" for status in guide.STATUSES) + "."


def guide_scope(table: pd.DataFrame) -> str:
    """What the guide's rows describe: this CPU and its small models, a GPU, or nothing."""
    devices = list(dict.fromkeys(d for d in table.get("device", []) if d))
    if not devices:
        return "This build has no evidence to scope."
    scales = ", ".join(dict.fromkeys(s for s in table["scale"] if s))
    if all(is_cpu_label(d) for d in devices):
        return (f"Every measured row of this build ran on a CPU ({', '.join(devices)}), at "
                f"scale {scales}: those rows describe this CPU and these small models only; "
                "for GPUs, read the published anchors. The distributed chapter simulates its "
                "devices on the CPU when it has fewer GPUs than it needs, and its rows say so.")
    return (f"This build measured on {', '.join(devices)}: the rows describe that device, at "
            "the sizes each row names; rows whose scope says simulated devices ran on the CPU.")


def batched_note(claims: pd.DataFrame | None, chapter: str = "01_vmap") -> str:
    """The vmap row's PyTorch side beside PyTorch's hand-batched ops, where the vmap
    chapter timed them: its `*_compile_vs_batched` claims, re-decided."""
    from deepdive.book.claims import describe, reread_verdict

    if claims is None:
        return "The vmap chapter saved no claims in this build."
    rows = claims[(claims["chapter"] == chapter)
                  & claims["claim_id"].str.endswith("_compile_vs_batched")]
    if rows.empty:
        return "The vmap chapter did not time PyTorch's hand-batched ops in this build."
    said = [f"{r['claim_id'].split('_')[0]}: {reread_verdict(r)}, {describe(r).split(';')[0]}"
            for _, r in rows.iterrows()]
    return ("The vmap row's PyTorch side is torch.compile of the vmapped function; the vmap "
            "chapter also timed it against PyTorch's hand-batched ops (torch.compile(vmap) "
            f"over hand-batched, speed-up of the compiled vmap): {'; '.join(said)}.")


def pallas_backend(platform: str, has_triton_backend: bool,
                   compute_capability: tuple[int, int] | None) -> str | None:
    """Chapter 7: where the Pallas kernel runs. "interpret" off a GPU (CPUs have no Pallas
    compiler; on a TPU the one-row block breaks Mosaic's block rule); on a GPU, "triton"
    while JAX still ships Pallas's Triton backend (deprecated since JAX 0.11.0), so that both
    kernels lower to Triton; once it is gone, "mosaic_gpu" on Hopper and newer (compute
    capability 9.0 and up, what Mosaic GPU is written for), and None below that: Pallas then
    has no GPU backend there, and the page says so instead of running it."""
    if platform != "gpu":
        return "interpret"
    if has_triton_backend:
        return "triton"
    if compute_capability is not None and tuple(compute_capability) >= (9, 0):
        return "mosaic_gpu"
    return None


def pallas_ran(backend: str | None, platform: str, device_kind: str) -> str:
    """How the Pallas side ran, for the kernels' table (`pallas_backend`'s choice)."""
    names = {"interpret": f"interpret=True (XLA on the {platform.upper()})",
             "triton": f"Triton backend, {device_kind}",
             "mosaic_gpu": f"Mosaic GPU backend, {device_kind}"}
    if backend not in names:
        return (f"not run: this JAX has no Pallas backend for {device_kind} (the Triton "
                "backend is gone and Mosaic GPU needs Hopper or newer)")
    return names[backend]


def releases_measured(folder: Path) -> str:
    """The intro's line on what measured its verdicts, read from the pages' stamps
    (`provenance.csv` in `folder`): the torch and jax releases, the device and the scale.
    A page that names two torch versions (the PyTorch/XLA page's worker and its own) counts
    by its own; the device is the one most pages ran on."""
    from deepdive.book import provenance

    stamps = provenance.load(folder)
    if stamps is None or stamps.empty:
        return "No page has saved results in this build yet."

    def own(version: str) -> str:  # "2.9.0 (routes, in the worker); 2.15.0 (this page)"
        return version.split(";")[-1].replace("(this page)", "").strip().split("+")[0]

    def listed(values) -> str:
        return " and ".join(sorted({own(str(v)) for v in values}))

    device = stamps["device"].mode().iat[0]
    scale = listed(stamps["scale"])
    return (f"These verdicts were measured with torch {listed(stamps['torch'])} and jax "
            f"{listed(stamps['jax'])}, on {device}, at {scale} scale (each page's own stamp is "
            "on the Reproduce page).")


def has_pallas_triton() -> bool:
    """Whether this JAX still ships Pallas's Triton backend (deprecated since JAX 0.11.0)."""
    import importlib.util

    return importlib.util.find_spec("jax.experimental.pallas.triton") is not None


def pallas_launch(backend: str) -> dict:
    """`pallas_call` keywords for a backend `pallas_backend` chose."""
    if backend == "interpret":
        return {"interpret": True}
    if backend == "triton":
        from jax.experimental.pallas import triton as pallas_triton

        return {"compiler_params": pallas_triton.CompilerParams()}
    if backend == "mosaic_gpu":
        from jax.experimental.pallas import mosaic_gpu as plgpu

        return {"compiler_params": plgpu.CompilerParams()}
    raise ValueError(f"backend must be 'interpret', 'triton' or 'mosaic_gpu', got {backend!r}")


def kernels_ran(ran: dict[str, str]) -> str:
    """Whether the two kernels ran interpreted or compiled, and so why they are not timed."""
    skipped = [name for name, how in ran.items() if how.startswith("not run")]
    if skipped:
        return (f"On this build {' and '.join(skipped)} did not run ({ran[skipped[0]]}), so "
                "there is no pair to compare.")
    interpreted = [name for name, how in ran.items() if "interpret" in how]
    if len(interpreted) == len(ran):
        return ("On this build both kernels ran in their interpreters, which check a kernel's "
                "logic and indexing but neither its speed nor what a compiler accepts, so "
                "they are not timed.")
    if interpreted:
        return (f"On this build {' and '.join(interpreted)} ran in an interpreter and the "
                "other was compiled, so they are not timed against each other.")
    return ("On this build both kernels were compiled for the GPU; this chapter checks them "
            "and does not time them.")


def slides_readings(anchors: pd.DataFrame, tolerance: float = 0.5) -> tuple[pd.DataFrame, str]:
    """The slides' stated Inductor speed-ups beside three readings of their own table (the
    step-time ratio, the time saved, the MFU ratio), and whether the statements match."""
    slides = anchors[anchors["source_key"] == "seed-pytorch2-slides"]

    def mean(metric, workload, variant):
        rows = slides[(slides["metric"] == metric) & (slides["workload"] == workload)
                      & (slides["variant"] == variant)]
        return float(rows["value"].iloc[0])

    stated = slides[slides["metric"].str.startswith("speedup")].set_index("workload")["value"]
    step, mfu, eager, inductor = ("ms per iteration (mean)", "MFU % (mean)", "eager",
                                  "torch.compile, inductor")
    readings = pd.DataFrame({
        "stated by the slides (%)": stated.astype(float),
        "eager / inductor - 1 (%)": [100 * (mean(step, w, eager) / mean(step, w, inductor) - 1)
                                     for w in stated.index],
        "time saved (%)": [100 * (1 - mean(step, w, inductor) / mean(step, w, eager))
                           for w in stated.index],
        "MFU inductor / eager - 1 (%)": [100 * (mean(mfu, w, inductor) / mean(mfu, w, eager) - 1)
                                         for w in stated.index]})
    matches = readings.drop(columns="stated by the slides (%)").sub(
        readings["stated by the slides (%)"], axis=0).abs().le(tolerance).any(axis=1)
    if matches.all():
        return readings, "The stated percentages match one of these readings of the table."
    if not matches.any():
        return readings, ("The stated percentages match none of these readings, so the "
                          "table, not the summary, is the anchor.")
    return readings, ("The stated percentages match a reading for some rows only, so the "
                      "table, not the summary, is the anchor.")


def sizes_run(table: pd.DataFrame, groups=("lm_fp32", "vit_fp32")) -> str:
    """The model sizes and devices this build trained, to set beside the anchors'."""
    if table.empty:
        return "nothing yet (build the GPT and ViT chapters)"
    ran = [guide.scope_of(q) for g in groups
           for q in table.loc[(table["group"] == g) & (table["device"] != ""), "question"]]
    return "; ".join(dict.fromkeys(ran)) or "nothing yet (build the GPT and ViT chapters)"


def short_traceback(etype, value, lines: int = 4) -> list[str]:
    """The error a cell meant to fail shows: its type and the first `lines` lines of its
    message, with the kernel's temporary cell paths named "<cell>", and how many lines were
    left out. An IPython custom exception handler returns it (`set_custom_exc`), so the
    cell still raises the same exception; only the frames inside the frameworks and the
    message's tail are not printed."""
    message = re.sub(r"/tmp/ipykernel_\d+/\d+\.py", "<cell>", str(value)).rstrip().splitlines()
    shown = [f"{etype.__name__}: {message[0] if message else ''}", *message[1:lines]]
    rest = len(message) - len(shown)
    return shown + ([f"[... {rest} more lines of the message]"] if rest > 0 else [])


def short_errors(shell, lines: int = 4) -> None:
    """Make an IPython `shell` show every error as `short_traceback` does (the cells that
    fail on purpose): the cell still fails, and its error output (type, value, the short
    traceback) is sent as any error's is, which a custom handler must do itself."""
    def show(_shell, etype, value, tb, tb_offset=None):
        stb = short_traceback(etype, value, lines)
        shell._showtraceback(etype, value, stb)  # IPython's hook that sends the error output
        return stb

    shell.set_custom_exc((Exception,), show)


# Coloured by the side the verdict favours, so that the colour reads the same way as the
# axis (PyTorch time over JAX time) on every row.
COLOURS = {"JAX": ("C0", "JAX"), "PyTorch": ("C1", "PyTorch"), "even": ("0.4", "tie"),
           evidence.WITHHELD: ("C3", "withheld")}


def claims_figure(table: pd.DataFrame, source: str | None):
    """Every timed claim as PyTorch time / JAX time with its 95% interval and its own tie
    band (grey), coloured by the side its verdict favours; None when nothing is timed."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    from deepdive.book import plots

    timed = table[table["ratio"].notna() & table["low"].notna()].reset_index(drop=True)
    if timed.empty:
        return None
    fig, ax = plt.subplots(figsize=(9.5, 0.45 * len(timed) + 1.2))
    for i, row in timed.iterrows():
        band = row.get("decision_band", row["tie_band"])  # the band the verdict was decided against
        band = row["tie_band"] if band != band else band
        ax.plot([1 / (1 + band), 1 + band], [i, i], color="0.85",
                linewidth=8, solid_capstyle="butt")
        ratio, low, high = (row[k] for k in evidence.ONE_WAY)
        ax.errorbar(ratio, i, fmt="o", color=COLOURS[row["favours"]][0], capsize=3,
                    xerr=[[ratio - low], [high - ratio]])
    for colour, label in COLOURS.values():  # legend entries, one per side
        ax.errorbar([], [], fmt="o", color=colour, label=label)
    ax.axvline(1, color="0.3", linewidth=1)
    ax.set_xscale("log")
    span = [t for t in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100)
            if timed["torch_over_jax_low"].min() / 2 <= t <= timed["torch_over_jax_high"].max() * 2]
    ax.set_xticks(span, [f"{t:g}" for t in span])
    ax.xaxis.set_minor_formatter(NullFormatter())  # no "0.56x10^-1" between the labels
    ax.set_yticks(range(len(timed)), [textwrap.fill(f"{r.key}: {r.candidate} vs {r.baseline}", 70)
                                      for r in timed.itertuples()], fontsize=6)
    ax.invert_yaxis()
    ax.legend(fontsize=7, loc="lower right", title="verdict favours", title_fontsize=7)
    ax.set(title="each claim, one way: PyTorch time over JAX time",
           xlabel=f"{guide.RATIO} (log scale); above 1: JAX took less time")
    plots.caption(fig, f"Read from {source or '_build/results/'}claims.csv · measured on "
                  + ", ".join(dict.fromkeys(timed["device"])) + " · scale "
                  + ", ".join(dict.fromkeys(timed["scale"])))
    fig.subplots_adjust(bottom=0.9 / fig.get_figheight())  # room for the caption, no more
    return fig
