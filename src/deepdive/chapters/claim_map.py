"""Claims that moved or were renamed when the book was reshaped, old to new.

A claim keeps its id wherever the measurement is the same; this map lists the ones that
changed chapter or id, so a reader of an older build's claims.csv (and chapter 7, which
reads every chapter's claims) can follow each to its new home.
"""

__all__ = ["MOVED", "current"]

# (old chapter, old claim id) -> (new chapter, new claim id)
MOVED: dict[tuple[str, str], tuple[str, str]] = {
    # Chapter 3's GPT benchmark (eager, aot_eager, Inductor, CUDA graphs; fp32 and bf16)
    # is now measured once, in the GPT chapter, with the JAX twin: same ids.
    **{("03_torch_compile", f"{gpt}_{what}"): ("04_gpt_training", f"{gpt}_{what}")
       for gpt in ("char", "vocab")
       for what in ("bf16_eager", *(f"{backend}_{precision}" for precision in ("fp32", "bf16")
                                    for backend in ("aot_eager", "inductor", "cudagraphs",
                                                    "inductor_reduce_overhead")))},
    # The GPT page's reduce-overhead claim made the benchmark's comparison a second time.
    **{("04_gpt_training", f"{gpt}_{precision}_reduce_overhead_vs_eager"):
       ("04_gpt_training", f"{gpt}_inductor_reduce_overhead_{precision}")
       for gpt in ("char", "vocab") for precision in ("fp32", "bf16")},
    # The id named the old pin; the comparison is the side environment's torch against the book's.
    ("05_vit_xla", "torch29_vs_torch213"): ("05_vit_xla", "xla_torch_vs_book_torch"),
}


def current(chapter: str, claim_id: str) -> tuple[str, str]:
    """Where the claim (chapter, claim_id) of an older build lives in this one."""
    return MOVED.get((chapter, claim_id), (chapter, claim_id))
