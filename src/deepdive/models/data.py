"""Training text for the GPT benchmark: tiny-shakespeare, or a labelled synthetic stand-in.

Chapter 4 trains nanoGPT's Shakespeare-char model. The text is downloaded once and cached;
without a network the loader says so and returns a synthetic character stream with the
same alphabet size, so the benchmark still runs (timings depend on shapes, not on text).
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["SHAKESPEARE_CHARS", "SHAKESPEARE_URL", "CharCorpus", "batches", "shakespeare_chars"]

# The file nanoGPT's shakespeare_char preparation downloads.
SHAKESPEARE_URL = (
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
)
SHAKESPEARE_CHARS = 65  # distinct characters in tiny-shakespeare (nanoGPT's vocab_size)


@dataclass(frozen=True)
class CharCorpus:
    """A character corpus encoded as integers, and where it came from."""

    tokens: np.ndarray
    vocab_size: int
    source: str  # "downloaded", "cache" or "synthetic"
    note: str


def shakespeare_chars(cache_dir: Path | str, url: str = SHAKESPEARE_URL,
                      timeout_s: float = 10.0, synthetic_chars: int = 1_000_000) -> CharCorpus:
    """tiny-shakespeare as character ids, from `cache_dir` or downloaded into it.

    When the download fails, returns a synthetic stream of `synthetic_chars` characters
    drawn uniformly (seeded) from a 65-symbol alphabet, and `note` says why. Check
    `source` before quoting a loss: random text has nothing to learn.
    """
    cached = Path(cache_dir) / "tinyshakespeare.txt"
    if cached.is_file():
        return _encode(cached.read_text(encoding="utf-8"), "cache", f"read from {cached}")
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            text = response.read().decode("utf-8")
    except (urllib.error.URLError, OSError, TimeoutError) as error:
        reason = getattr(error, "reason", error)
        rng = np.random.default_rng(0)
        tokens = rng.integers(0, SHAKESPEARE_CHARS, size=synthetic_chars, dtype=np.int64)
        return CharCorpus(tokens, SHAKESPEARE_CHARS, "synthetic",
                          f"could not download {url} ({reason}); using {synthetic_chars:,} "
                          f"random characters over a {SHAKESPEARE_CHARS}-symbol alphabet")
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(text, encoding="utf-8")
    return _encode(text, "downloaded", f"downloaded from {url}, cached at {cached}")


def _encode(text: str, source: str, note: str) -> CharCorpus:
    if not text:
        raise ValueError("the corpus is empty")
    alphabet = sorted(set(text))
    index = {ch: i for i, ch in enumerate(alphabet)}
    tokens = np.fromiter((index[ch] for ch in text), dtype=np.int64, count=len(text))
    return CharCorpus(tokens, len(alphabet), source, note)


def batches(tokens: np.ndarray, batch_size: int, block_size: int, seed: int = 0):
    """Endless (inputs, targets) pairs of shape (batch_size, block_size), as nanoGPT samples
    them: random windows, targets shifted by one. Deterministic for a given `seed`."""
    if tokens.ndim != 1 or len(tokens) <= block_size:
        raise ValueError(f"need a 1-D token array longer than block_size={block_size}, "
                         f"got shape {tokens.shape}")
    rng = np.random.default_rng(seed)
    offsets = np.arange(block_size)
    while True:
        starts = rng.integers(0, len(tokens) - block_size, size=batch_size)
        window = starts[:, None] + offsets
        yield tokens[window], tokens[window + 1]
