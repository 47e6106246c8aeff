"""One verdict for a cited span: ``judge`` is the only place it is decided.

Every entry point (``Collection.verify``, ``fetch_chunk``, ``verify_citation``,
``check_quote``, ``verify_answer``, ``grk verify``, the MCP tools, the framework
helpers) reads the source, looks for the text when the span lost it
(``anchoring``), and hands both here, so one edit reads the same everywhere.
"""

from __future__ import annotations

from typing import Any

from groundkit.contracts import Citation, FetchResult, Verification
from groundkit.errors import RetrievalError
from groundkit.storage._rows import iso_time
from groundkit.storage.protocols import StoredChunk
from groundkit.verification.anchoring import Anchor, reanchor

__all__ = ["judge", "judge_stored", "locate"]


def locate(
    content: str,
    citation: Citation,
    text: str,
    *,
    prefix: str | None = None,
    suffix: str | None = None,
) -> Anchor | None:
    """None while the cited span of ``text`` holds ``content``; else where it is now
    (``prefix``/``suffix``, the indexed text around it, tell repeats apart)."""
    start = citation.start_offset
    if text[start : citation.end_offset] == content:
        return None
    return reanchor(text, content, start, prefix=prefix, suffix=suffix)


def judge(
    content: str,
    citation: Citation,
    text: str | None,
    error: RetrievalError | None,
    anchor: Anchor | None = None,
) -> FetchResult:
    """The verdict on ``content`` cited at ``citation`` in ``text`` (the source now).

    ``text`` is None when the source could not be read (``error`` says why);
    ``anchor`` is None when the span still holds ``content``, else what looking
    for it found."""
    if text is None:
        assert error is not None
        return FetchResult(
            content=content,
            citation=citation,
            verification=error.verdict or "unresolvable",
            detail=str(error),
        )
    where = f"{citation.source!r} [{citation.start_offset}:{citation.end_offset}]"

    def made(verification: Verification, detail: str, **found: Any) -> FetchResult:
        return FetchResult(
            content=content, citation=citation, verification=verification, detail=detail, **found
        )

    if anchor is None:
        return made("verified", "the source holds this text at the cited offsets")
    if anchor.outcome == "moved":
        return made(
            "moved",
            f"{where} changed, but the indexed text is intact at {anchor.start}..{anchor.end} "
            "now (moved since it was indexed; re-ingest for current offsets)",
            current_start_offset=anchor.start,
            current_end_offset=anchor.end,
            similarity=1.0,
        )
    if anchor.outcome == "ambiguous":
        return made(
            "drifted",
            f"{where} changed; the indexed text appears {anchor.occurrences} times in the "
            "source now and nothing tells which is the cited one (not guessed)",
        )
    change = (
        f"{citation.source!r} is now {len(text)} characters long; the citation ends at "
        f"{citation.end_offset}"
        if citation.end_offset > len(text)
        else f"{where} changed since it was indexed"
    )
    if anchor.start is None or not anchor.similarity:
        return made("drifted", change)
    return made(
        "drifted",
        f"{change}; the closest passage is at {anchor.start}..{anchor.end} "
        f"({anchor.similarity:.0%} similar)",
        current_start_offset=anchor.start,
        current_end_offset=anchor.end,
        similarity=anchor.similarity,
    )


def judge_stored(
    stored: StoredChunk,
    citation: Citation,
    text: str | None,
    error: RetrievalError | None,
    anchor: Anchor | None = None,
) -> FetchResult:
    """``judge`` for a stored chunk, naming its version and, for a past one, when it was
    replaced."""
    result = judge(stored.content, citation, text, error, anchor)
    if stored.valid_to is None:
        return result.model_copy(update={"version": stored.version})
    replaced_at = iso_time(stored.valid_to)
    return result.model_copy(
        update={
            "version": stored.version,
            "replaced_at": replaced_at,
            "detail": f"{result.detail} (this chunk is from version {stored.version} of the "
            f"document, replaced at {replaced_at})",
        }
    )
