"""The adversarial citation suite's table: every case, the verdict it must get, what it got.

    python -m evals.adversarial [--embedder NAME] [--out docs/quality.md]

Runs ``groundkit.testing.adversarial`` twice, comparing unquoted sentences by shared
terms and with the embedder, and writes both verdicts per case (section
``adversarial``). The same suite runs in CI (tests/verification/test_adversarial.py).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from evals.beir import offline_models
from evals.machine import command_line, machine_lines, markdown_table, write_section
from groundkit import SentenceTransformerEmbedder
from groundkit.testing.adversarial import AdversarialReport, run_adversarial

SECTION = "adversarial"


async def _reports(embedder_name: str) -> tuple[AdversarialReport, AdversarialReport | None]:
    with tempfile.TemporaryDirectory(prefix="groundkit-adversarial-") as tmp:
        terms = await run_adversarial(Path(tmp) / "terms")
        if not embedder_name:
            return terms, None
        embedder = SentenceTransformerEmbedder(embedder_name)
        return terms, await run_adversarial(Path(tmp) / "embedding", embedder=embedder)


def render(terms: AdversarialReport, dense: AdversarialReport | None, embedder: str) -> list[str]:
    def mark(got: str, expected: str) -> str:
        return got if got == expected else f"**{got}** (missed)"

    rows = []
    for n, o in enumerate(terms.outcomes):
        row = [o.case.name, o.case.family, o.case.expected, mark(o.got, o.case.expected)]
        if dense is not None:
            d = dense.outcomes[n]
            row.append(mark(d.got, d.case.expected))
        rows.append(row)
    header = ["case", "family", "must read", "terms"] + (
        [f"embedding ({embedder})"] if dense is not None else []
    )
    caught = [r for r in (terms, dense) if r is not None]
    attacks = sum(1 for o in terms.outcomes if o.case.family != "benign")
    return [
        "## Adversarial citations",
        "",
        f"Produced by `{command_line()}`.",
        "",
        "`groundkit.testing.adversarial` builds answers meant to fool a citation check from a",
        "three-document corpus it ingests (a fresh collection per case) and says the verdict",
        "each sentence must get: fabricated, spliced and misattributed quotes and claims,",
        "tampered numbers, units, negations and directions, sources edited or deleted after",
        "the answer, look-alike letters and bidirectional controls. Benign variations (Unicode",
        "forms, line breaks, zero-width characters, typographic dashes, a line added above",
        "the cited passage) must still read as faithful. CI runs the same suite with both",
        "methods.",
        "",
        markdown_table(header, rows),
        "",
        f"{attacks} attacks and {len(terms.outcomes) - attacks} benign cases; "
        + ", ".join(
            f"{sum(o.passed for o in r.outcomes)} of {len(r.outcomes)} read as they must "
            f"({'terms' if r is terms else 'embedding'})"
            for r in caught
        )
        + ".",
        "",
        "What the suite cannot show: a contradiction worded without a number, negation or",
        "direction word reads `supported` with the default rule judge (the SciFact figures",
        "above measure how often); a quote check compares text, so a faithful quote of a false",
        "source is `quoted`.",
        "",
        "Machine:",
        "",
        *machine_lines(),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedder", default="all-MiniLM-L6-v2", help="'' for terms only")
    parser.add_argument("--out", type=Path, help="the page whose 'adversarial' section to write")
    args = parser.parse_args(argv)
    offline_models()
    terms, dense = asyncio.run(_reports(args.embedder))
    page = render(terms, dense, args.embedder)
    print("\n".join(page))
    if args.out:
        write_section(args.out, SECTION, page)
    return 0 if terms.ok and (dense is None or dense.ok) else 1


if __name__ == "__main__":
    raise SystemExit(main())
