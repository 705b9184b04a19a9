"""The choosing chapter's bottom line: the guide summed up by situation, with what to do,
and the seed slides' verdicts beside what this build and the sources can say, one sentence
a cell.

Every sentence is built from data: the guide's rows (`deepdive.chapters.guide.guide_table`, this
build's verdicts), the dated anchors and ecosystem facts in `book/data/`. Nothing here holds
a measured value or a typed verdict; where nothing was measured, it says so.
"""

from __future__ import annotations

import pandas as pd

from deepdive.core.env import is_cpu_label

__all__ = ["FRAMEWORK_SIDES", "SITUATIONS", "bottom_line", "gpu_anchors", "serving_facts",
           "slides_verdicts", "tally", "tpu_facts"]

SITUATIONS = ("GPU training", "TPU", "research prototyping", "serving", "CPU-only")
FRAMEWORK_SIDES = ("JAX", "PyTorch")


def tally(rows: pd.DataFrame) -> str:
    """'of 7 rows that compare the frameworks, 3 favoured JAX, 2 PyTorch, 1 was a tie and
    1 was withheld' from guide rows (their `favours` and `status`)."""
    if rows.empty:
        return "no row that compares the frameworks"
    sides = rows["favours"].fillna("")
    counts = {"JAX": int((sides == "JAX").sum()), "PyTorch": int((sides == "PyTorch").sum()),
              "tie": int((sides == "even").sum()),
              "split": int(sides.str.contains(";").sum())}
    rest = len(rows) - sum(counts.values())
    parts = [f"{counts['JAX']} favoured JAX", f"{counts['PyTorch']} PyTorch"]
    parts += [f"{counts['tie']} {'was a tie' if counts['tie'] == 1 else 'were ties'}"] \
        if counts["tie"] else []
    parts += [f"{counts['split']} depended on the case"] if counts["split"] else []
    parts += [f"{rest} {'was' if rest == 1 else 'were'} withheld or not measured"] if rest else []
    noun = "row that compares" if len(rows) == 1 else "rows that compare"
    return f"of {len(rows)} {noun} the frameworks, " + _listed(parts)


def _by_kind(rows: pd.DataFrame) -> str:
    """The tally told apart for model training steps and for the rest (per-call costs,
    vmap, compiled chains), which a reader weighs differently: 'for training a model, of 2
    rows ...; for the other workloads, of 5 rows ...'."""
    training = rows["if you need"].str.startswith("training")
    parts = [f"for {kind}, {tally(part)}" for kind, part in
             (("training a model", rows[training]), ("the other workloads", rows[~training]))
             if not part.empty]
    return "; ".join(parts)


def _listed(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _measured_on(advice: pd.DataFrame, cpu: bool) -> pd.DataFrame:
    """Timed guide rows measured on a CPU (`cpu`) or on a GPU."""
    timed = advice[advice["timed"] & (advice["devices"] != "")]
    on_cpu = timed["devices"].map(
        lambda d: all(is_cpu_label(x) for x in d.split("; "))).astype(bool)
    return timed.loc[on_cpu if cpu else ~on_cpu]


def gpu_anchors(anchors: pd.DataFrame) -> str:
    """What the published GPU anchors say about PyTorch against JAX in training, from the
    numbers and notes of `book/data/published_anchors.csv`."""
    steps = anchors[(anchors["metric"] == "s per step")
                    & anchors["framework"].isin(FRAMEWORK_SIDES)]
    said = []
    for (source, workload), rows in steps.groupby(["source_key", "workload"], sort=False):
        by = rows.set_index("framework")
        if set(FRAMEWORK_SIDES) <= set(by.index):
            said.append(f"{workload.split(' (')[0]} on {rows['hardware'].iat[0]} took "
                        f"{by.loc['PyTorch', 'value']:g} s a step in PyTorch against "
                        f"{by.loc['JAX', 'value']:g} s in JAX ({source}, {rows['date'].iat[0]})")
    later = anchors[anchors["source_key"] == "algoperf-pr897"]
    if said and not later.empty:
        said[-1] += (f", a table that predates a later pull request (algoperf-pr897, "
                     f"{later['date'].iat[0].split(' ')[0]}) reporting the PyTorch ViT's "
                     "hand-written attention slow on an A100 and changing it to built-in "
                     "attention, compiled")
    seed = anchors[(anchors["source_key"] == "seed-xla-jax")
                   & anchors["framework"].str.startswith("JAX vs")]
    if not seed.empty:
        said.append("the seed article timed JAX fastest on an L4 and level with PyTorch/XLA "
                    "on an A100, with no device synchronisation in its timer (seed-xla-jax)")
    if not said:
        return "No published GPU anchor."
    sentence = "; ".join(said) + "."
    return sentence[0].upper() + sentence[1:]


def serving_facts(ecosystem: pd.DataFrame) -> str:
    """The serving row of `book/data/ecosystem.csv`, as one sentence with its date."""
    row = ecosystem[ecosystem["job"].str.startswith("serving")]
    if row.empty:
        return "No serving facts in this book's sources."
    row = row.iloc[0]
    return (f"PyTorch: {row['pytorch']}; JAX: {row['jax']} (the projects' documentation, "
            f"read {row['checked']}).")


def tpu_facts(ecosystem: pd.DataFrame) -> str:
    """What the ecosystem table says about TPUs: which kernel language lowers there, and
    which framework's compiler targets them, with the row's date."""
    row = ecosystem[ecosystem["job"].str.startswith("custom kernels")]
    if row.empty or "Mosaic on TPUs" not in row["jax"].iat[0]:
        return "No TPU facts in this book's sources."
    return ("XLA compiles JAX for TPUs and Pallas kernels lower to Mosaic there; PyTorch "
            "reaches TPUs through PyTorch/XLA, and its Triton kernels target GPUs (the "
            f"projects' documentation, read {row['checked'].iat[0]}).")


def bottom_line(advice: pd.DataFrame, anchors: pd.DataFrame,
                ecosystem: pd.DataFrame) -> pd.DataFrame:
    """One row per situation: what to do, what this build measured, what the published
    anchors and the ecosystem say, and what neither can tell."""
    on_gpu, on_cpu = _measured_on(advice, cpu=False), _measured_on(advice, cpu=True)
    gpus = "; ".join(dict.fromkeys(on_gpu["devices"]))
    cpus = "; ".join(dict.fromkeys(on_cpu["devices"]))
    if on_gpu.empty and on_cpu.empty:
        gpu_measured = cpu_measured = "Nothing: no chapter's evidence was found (the guide below)."
    else:
        gpu_measured = (f"On {gpus}, {tally(on_gpu)} (the guide below)." if not on_gpu.empty
                        else "Nothing on a GPU: this build ran on a CPU, whose results say "
                        "nothing about GPUs.")
        cpu_measured = (f"On {cpus}, at this build's small sizes, {_by_kind(on_cpu)} (the "
                        "guide below)." if not on_cpu.empty else "Nothing on a CPU in this build.")
    gpu_do = (f"Start from the side the guide's GPU rows favour ({tally(on_gpu)}), then time "
              "your own model." if not on_gpu.empty else
              "Time your own model's best compiled step in both frameworks on your GPU: this "
              "build has no GPU evidence and the anchors ran other models and versions.")
    cpu_do = ("Start from the guide's CPU rows, then time your own model: they ran small "
              "models, one thread per framework." if not on_cpu.empty else
              "Time your own model: this build measured nothing on a CPU.")
    kernels = ecosystem[ecosystem["job"].str.startswith("custom kernels")]
    tpu_do = ("Start with JAX: its compiler and its kernel language both target TPUs; "
              "PyTorch gets there through PyTorch/XLA, without its Triton kernels."
              if not kernels.empty and "Mosaic on TPUs" in kernels["jax"].iat[0]
              else "Read the vendors' documentation: this book has no TPU facts.")
    rows = {
        "GPU training": (gpu_do, gpu_measured, gpu_anchors(anchors),
                         "Which framework trains your model faster on your GPU at your "
                         "batch size."),
        "TPU": (tpu_do, "Nothing: this build had no TPU.", tpu_facts(ecosystem),
                "Speed on a TPU, for JAX or for PyTorch/XLA."),
        "research prototyping": ("Pick the toolbox your team debugs in: eager PyTorch, or "
                                 "JAX's jax.debug, checkify and disable_jit (the choosing "
                                 "chapter's debugging section).",
                                 "Not a speed question: the choosing chapter's debugging "
                                 "section runs both toolboxes on the same bugs.",
                                 "No anchor measures how fast people write correct code.",
                                 "Which framework your team writes and debugs faster."),
        "serving": ("Pick the serving engine first, then its framework.",
                    "Nothing: this build times training and micro-benchmarks, not serving.",
                    serving_facts(ecosystem),
                    "Latency and throughput of a served model in either framework."),
        "CPU-only": (cpu_do, cpu_measured, "None of this book's anchors was measured on a CPU.",
                     "Other CPUs, more threads, and larger models."),
    }
    return pd.DataFrame.from_dict(rows, orient="index", columns=[
        "what to do", "this build measured", "the published anchors and sources say",
        "neither can tell"]).rename_axis("if you are")


def slides_verdicts(advice: pd.DataFrame, unmeasured: pd.DataFrame) -> pd.DataFrame:
    """The seed slides' five verdicts, each beside one sentence of what this build says;
    `unmeasured` is the choosing chapter's table of criteria this build does not time (indexed by
    need, with a "PyTorch" column)."""
    frameworks = advice[advice["timed"]]
    devices = "; ".join(dict.fromkeys(d for d in frameworks["devices"] if d)) or "no device"
    sharded = advice[advice["if you need"].str.startswith("parameters and optimizer state")]
    if sharded.empty or sharded["status"].iat[0] in ("not measured", "missing"):
        memory = "Not measured in this build."
    else:
        memory = (sharded["this build suggests"].iat[0].split(" (")[0].rstrip(".")
                  + " (exact byte counts of parameters and optimizer state); the step time "
                  "of many real devices is not measured.")
    hubs = unmeasured.loc["pretrained models with their training code", "PyTorch"]
    rows = [("large models, custom distributed training: JAX", memory),
            ("functional style, for fewer bugs and speed: JAX",
             f"For speed, on {devices}, {tally(frameworks)} (the guide above)."),
            ("workloads on TPUs: JAX", "Not measured: this build had no TPU."),
            ("flexibility and quick prototypes: PyTorch",
             "Not a speed question: the debugging section runs both toolboxes."),
            ("the newest research code: PyTorch", f"Not measured; {hubs} (the ecosystem "
                                                  "table below).")]
    return pd.DataFrame(rows, columns=["the slides' verdict", "this build says"]).set_index(
        "the slides' verdict")
