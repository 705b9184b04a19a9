"""Chapter 6's bottom line: the guide summed up by situation, and the seed slides' verdicts
beside what this build and the sources can say, one sentence a cell.

Every sentence is built from data: the guide's rows (`deepdive.guide.guide_table`, this
build's verdicts), the dated anchors and ecosystem facts in `book/data/`. Nothing here holds
a measured value or a typed verdict; where nothing was measured, it says so.
"""

from __future__ import annotations

import pandas as pd

from deepdive.env import is_cpu_label

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
    seed = anchors[(anchors["source_key"] == "seed-xla-jax")
                   & anchors["framework"].str.startswith("JAX vs")]
    if not seed.empty:
        said.append("the seed article timed JAX fastest on an L4 and level with PyTorch/XLA "
                    "on an A100, with no device synchronisation in its timer (seed-xla-jax)")
    if not said:
        return "No published GPU anchor."
    sentence = _listed(said) + "."
    return sentence[0].upper() + sentence[1:]


def serving_facts(ecosystem: pd.DataFrame) -> str:
    """The serving row of `book/data/ecosystem.csv`, as one sentence with its date."""
    row = ecosystem[ecosystem["job"].str.startswith("serving")]
    if row.empty:
        return "No serving facts in this book's sources."
    row = row.iloc[0]
    return (f"PyTorch: {row['pytorch']}; JAX: {row['jax']} (the projects' documentation, "
            f"read {row['checked']}).")


def bottom_line(advice: pd.DataFrame, anchors: pd.DataFrame,
                ecosystem: pd.DataFrame) -> pd.DataFrame:
    """One row per situation: what this build measured, what the published anchors say,
    and what neither can tell."""
    on_gpu, on_cpu = _measured_on(advice, cpu=False), _measured_on(advice, cpu=True)
    gpus = "; ".join(dict.fromkeys(on_gpu["devices"]))
    cpus = "; ".join(dict.fromkeys(on_cpu["devices"]))
    if on_gpu.empty and on_cpu.empty:
        gpu_measured = cpu_measured = "Nothing: no chapter's evidence was found (the guide above)."
    else:
        gpu_measured = (f"On {gpus}, {tally(on_gpu)} (the guide above)." if not on_gpu.empty
                        else "Nothing on a GPU: this build ran on a CPU, whose results say "
                        "nothing about GPUs.")
        cpu_measured = (f"On {cpus}, at this build's small sizes, {_by_kind(on_cpu)} (the "
                        "guide above)." if not on_cpu.empty else "Nothing on a CPU in this build.")
    rows = {
        "GPU training": (gpu_measured, gpu_anchors(anchors),
                         "Which framework trains your model faster on your GPU at your "
                         "batch size: the anchors ran other models, GPUs and versions."),
        "TPU": ("Nothing: this build had no TPU.",
                "None of this book's anchors was measured on a TPU.",
                "Speed on a TPU, where XLA compiles for JAX and for PyTorch/XLA alike."),
        "research prototyping": ("Not a speed question: the debugging section above runs "
                                 "both toolboxes on the same bugs.",
                                 "No anchor measures how fast people write correct code.",
                                 "Which framework your team writes and debugs faster."),
        "serving": ("Nothing: this build times training and micro-benchmarks, not serving.",
                    serving_facts(ecosystem),
                    "Latency and throughput of a served model in either framework."),
        "CPU-only": (cpu_measured, "None of this book's anchors was measured on a CPU.",
                     "Other CPUs, more threads than this build's one per framework, and "
                     "larger models."),
    }
    return pd.DataFrame.from_dict(rows, orient="index", columns=[
        "this build measured", "the published anchors say", "neither can tell"]).rename_axis(
        "if you are")


def slides_verdicts(advice: pd.DataFrame, unmeasured: pd.DataFrame) -> pd.DataFrame:
    """The seed slides' five verdicts, each beside one sentence of what this build says;
    `unmeasured` is chapter 6's table of criteria this build does not time (indexed by
    need, with a "PyTorch" column)."""
    frameworks = advice[advice["timed"]]
    devices = "; ".join(dict.fromkeys(d for d in frameworks["devices"] if d)) or "no device"
    sharded = advice[advice["if you need"].str.startswith("parameters and optimizer state")]
    if sharded.empty or sharded["status"].iat[0] in ("not measured", "missing"):
        memory = "Not measured in this build."
    else:
        memory = (sharded["this build suggests"].iat[0].split(" (")[0].rstrip(".")
                  + " (exact byte counts); the step time of many real devices is not measured.")
    hubs = unmeasured.loc["pretrained models with their training code", "PyTorch"]
    rows = [("large models, custom distributed training: JAX", memory),
            ("functional style, for fewer bugs and speed: JAX",
             f"For speed, on {devices}, {tally(frameworks)} (the guide above)."),
            ("workloads on TPUs: JAX", "Not measured: this build had no TPU."),
            ("flexibility and quick prototypes: PyTorch",
             "Not a speed question: the debugging section above runs both toolboxes."),
            ("the newest research code: PyTorch", f"Not measured; {hubs} (the ecosystem "
                                                  "table above).")]
    return pd.DataFrame(rows, columns=["the slides' verdict", "this build says"]).set_index(
        "the slides' verdict")
