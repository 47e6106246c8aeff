"""Deterministic synthetic corpus for lexical benchmarks.

A vocabulary of made-up words (plus a handful of English function words at the
top) is drawn from a Zipf-Mandelbrot distribution. Each *passage* is one
paragraph of 40-110 words split into sentences; a small share of passages
carries runs of CJK characters. Passages are grouped into files so that the
groundkit chunker, run with :data:`BENCH_CHUNKING`, turns every passage into
exactly one chunk: a new file is started whenever the next passage would be
short enough to be packed into the same chunk as the previous one (such a
passage waits for a later file).

    python -m evals.synthetic --chunks 10000 --out evals/out/synthetic-10k
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from groundkit import ChunkingConfig
from groundkit.ingestion import chunk_spans

__all__ = [
    "BENCH_CHUNKING",
    "SyntheticCorpus",
    "SyntheticSpec",
    "generate",
    "parse_size",
    "size_label",
    "write_corpus",
]

# Passages are capped below this, so one passage always fits in one chunk.
BENCH_CHUNKING = ChunkingConfig(max_chars=900, overlap_chars=100)


def parse_size(token: str) -> int:
    """``"10k"`` → 10000, ``"1m"`` → 1000000, ``"2500"`` → 2500."""
    token = token.strip().lower()
    scale = {"k": 1_000, "m": 1_000_000}.get(token[-1:], 1)
    return int(float(token[:-1] if scale > 1 else token) * scale)


def size_label(n: int) -> str:
    """The short name of a corpus size, as in cache directory names (``100k``)."""
    if n % 1_000_000 == 0:
        return f"{n // 1_000_000}m"
    if n % 1_000 == 0:
        return f"{n // 1_000}k"
    return str(n)


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_FUNCTION_WORDS = _words(
    "the of and to in a is that for it as with was on be by "
    "this are or at from an not which but we have these were their than more"
)
_ONSETS = _words("b c d f g h j k l m n p r s t v w z br ch cl dr fl gr kr pl pr sh st th tr")
_VOWELS = _words("a e i o u ai ea ie io ou")
_CODAS = ("", "", "", "n", "r", "s", "l", "m", "t", "x", "nd", "st")
# A common slice of the CJK Unified Ideographs block.
_CJK_BASE = 0x4E00
_CJK_POOL = 3000


@dataclass(frozen=True)
class SyntheticSpec:
    """Everything that determines the generated corpus."""

    passages: int
    seed: int = 1234
    vocab_size: int = 50_000
    zipf_s: float = 1.07
    zipf_q: float = 2.7
    min_words: int = 40
    max_words: int = 110
    cjk_share: float = 0.03
    max_passages_per_file: int = 10
    query_min_terms: int = 2
    query_max_terms: int = 5
    query_bias: float = 0.5

    def fingerprint(self) -> str:
        raw = json.dumps(asdict(self), sort_keys=True) + repr(BENCH_CHUNKING)
        return hashlib.sha256(raw.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class SyntheticCorpus:
    """Generated files (relative path → text) and queries."""

    files: dict[str, str]
    queries: list[str]
    passages: int
    words: int


def _vocabulary(rng: np.random.Generator, size: int) -> list[str]:
    """``size`` distinct words; frequent ranks get fewer syllables."""
    words: list[str] = list(_FUNCTION_WORDS[:size])
    seen = set(words)
    rank = len(words)
    while len(words) < size:
        # 1-2 syllables for the head of the distribution, up to 4 in the tail.
        max_syll = 2 if rank < 500 else 3 if rank < 5000 else 4
        n = int(rng.integers(1, max_syll + 1))
        parts = []
        for _ in range(n):
            parts.append(_ONSETS[int(rng.integers(len(_ONSETS)))])
            parts.append(_VOWELS[int(rng.integers(len(_VOWELS)))])
        parts.append(_CODAS[int(rng.integers(len(_CODAS)))])
        word = "".join(parts)
        if word not in seen:
            seen.add(word)
            words.append(word)
            rank += 1
    return words


def _zipf(size: int, s: float, q: float) -> npt.NDArray[np.float64]:
    weights: npt.NDArray[np.float64] = 1.0 / np.power(np.arange(size, dtype=np.float64) + q, s)
    return weights / float(weights.sum())


def _cjk_run(rng: np.random.Generator, probs: npt.NDArray[np.float64]) -> str:
    length = int(rng.integers(2, 7))
    codes = rng.choice(_CJK_POOL, size=length, p=probs)
    return "".join(chr(_CJK_BASE + int(c)) for c in codes)


def _passage(
    rng: np.random.Generator,
    ids: npt.NDArray[np.int64],
    vocab: list[str],
    with_cjk: bool,
    cjk_probs: npt.NDArray[np.float64],
    limit: int,
) -> str:
    tokens = [vocab[int(i)] for i in ids]
    if with_cjk:
        for pos in rng.choice(len(tokens), size=int(rng.integers(1, 4)), replace=False):
            tokens[int(pos)] = _cjk_run(rng, cjk_probs)
    cuts = np.cumsum(rng.integers(8, 21, size=len(tokens)))
    while True:
        sentences: list[str] = []
        start = 0
        for end in cuts:
            words = tokens[start : min(int(end), len(tokens))]
            if not words:
                break
            words[0] = words[0][:1].upper() + words[0][1:]
            sentences.append(" ".join(words) + ".")
            start = int(end)
        text = " ".join(sentences)
        if len(text) <= limit:
            return text
        tokens = tokens[:-1]  # rare: drop words from the end until it fits


def _passages(spec: SyntheticSpec) -> Iterator[str]:
    rng = np.random.default_rng(spec.seed)
    vocab = _vocabulary(rng, spec.vocab_size)
    probs = _zipf(spec.vocab_size, spec.zipf_s, spec.zipf_q)
    cjk_probs = _zipf(_CJK_POOL, 1.0, 2.0)
    limit = BENCH_CHUNKING.max_chars - 20
    batch = 10_000
    for first in range(0, spec.passages, batch):
        n = min(batch, spec.passages - first)
        lengths = rng.integers(spec.min_words, spec.max_words + 1, size=n)
        flat = rng.choice(spec.vocab_size, size=int(lengths.sum()), p=probs)
        cjk = rng.random(n) < spec.cjk_share
        offsets = np.concatenate(([0], np.cumsum(lengths)))
        for i in range(n):
            yield _passage(
                rng, flat[offsets[i] : offsets[i + 1]], vocab, bool(cjk[i]), cjk_probs, limit
            )


def _queries(spec: SyntheticSpec, count: int) -> list[str]:
    """Queries of 2-5 distinct content words, biased towards frequent ones."""
    rng = np.random.default_rng(spec.seed + 1)
    vocab = _vocabulary(np.random.default_rng(spec.seed), spec.vocab_size)
    weights = np.power(_zipf(spec.vocab_size, spec.zipf_s, spec.zipf_q), spec.query_bias)
    weights[: len(_FUNCTION_WORDS)] = 0.0
    weights /= weights.sum()
    out = []
    for _ in range(count):
        n = int(rng.integers(spec.query_min_terms, spec.query_max_terms + 1))
        picked = rng.choice(spec.vocab_size, size=n, replace=False, p=weights)
        out.append(" ".join(vocab[int(i)] for i in picked))
    return out


def generate(spec: SyntheticSpec, queries: int = 200) -> SyntheticCorpus:
    """Build the corpus in memory; file names are ``NNN/pNNNNNNN.txt``."""
    files: dict[str, str] = {}
    current: list[str] = []
    words = 0
    budget = BENCH_CHUNKING.max_chars

    def flush() -> None:
        if not current:
            return
        index = len(files)
        text = "\n\n".join(current) + "\n"
        files[f"{index // 1000:03d}/p{index:07d}.txt"] = text
        current.clear()

    def fits(passage: str) -> bool:
        # The chunker would pack two neighbours into one chunk if both fit the budget.
        return not current or len(current[-1]) + 2 + len(passage) > budget

    pending: list[str] = []
    for passage in _passages(spec):
        words += passage.count(" ") + 1
        pending.append(passage)
        while True:
            pick = next((i for i, p in enumerate(pending) if fits(p)), None)
            if pick is None:
                break
            current.append(pending.pop(pick))
            if len(current) >= spec.max_passages_per_file:
                flush()
        if len(pending) > 32:  # only short passages waiting: close this file
            flush()
    while pending:
        if not fits(pending[0]) or len(current) >= spec.max_passages_per_file:
            flush()
        current.append(pending.pop(0))
    flush()
    return SyntheticCorpus(
        files=files, queries=_queries(spec, queries), passages=spec.passages, words=words
    )


def write_corpus(corpus: SyntheticCorpus, root: Path, *, check: bool = True) -> int:
    """Write the files under ``root``; with ``check``, prove one chunk per passage."""
    chunks = 0
    for rel, text in corpus.files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if check:
            chunks += len(chunk_spans(text, BENCH_CHUNKING))
    if check and chunks != corpus.passages:
        raise AssertionError(f"{chunks} chunks for {corpus.passages} passages")
    return chunks if check else corpus.passages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals.synthetic", description=__doc__)
    parser.add_argument("--chunks", type=int, default=10_000, help="passages (= chunks)")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    spec = SyntheticSpec(passages=args.chunks, seed=args.seed)
    corpus = generate(spec, args.queries)
    write_corpus(corpus, args.out / "corpus")
    (args.out / "queries.json").write_text(json.dumps(corpus.queries, indent=0), encoding="utf-8")
    print(
        f"{len(corpus.files)} files, {corpus.passages} passages, {corpus.words} words → {args.out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
