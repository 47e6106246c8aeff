"""One verdict for a cited span: ``judge`` is the only place it is decided.

Every entry point (``Collection.verify``, ``fetch_chunk``, ``check_citation``,
``check_quote``, ``verify_answer``, ``grk verify``, the MCP tools, the framework
helpers) reads the source, looks for the text when the span lost it
(``locate``), and hands both here, so one edit reads the same everywhere
(adr/0056-one-verdict.md).
"""

from __future__ import annotations

import asyncio
import functools
import warnings
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, ParamSpec, TypedDict, TypeVar, Unpack

from groundkit.config import DEFAULT_MAX_FILE_BYTES
from groundkit.contracts import Citation, FetchResult, Verification, checked_citation
from groundkit.errors import InvalidQueryError, RetrievalError
from groundkit.storage._rows import iso_time
from groundkit.storage.protocols import StoredChunk
from groundkit.storage.snapshots import SnapshotLocation
from groundkit.utils.path_safety import base_directory
from groundkit.verification.anchoring import (
    MAX_COMPARED_CHARS,
    MAX_OCCURRENCES,
    Anchor,
    reanchor,
    splits,
)
from groundkit.verification.sources import (
    SourceText,
    check_read_options,
    read_source,
    slice_span,
)

__all__ = ["check_citation", "dated", "judge", "judge_stored", "locate", "verify_citation"]

# Said in the reason of every verdict read from a kept copy (``FetchResult.read_from``).
KEPT_COPY_NOTE = " (read from the collection's kept copy of its text: the file is not on this host)"

P = ParamSpec("P")
T = TypeVar("T")


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
    if span_holds(content, citation, text):
        return None
    return reanchor(text, content, citation.start_offset, prefix=prefix, suffix=suffix)


def span_holds(content: str, citation: Citation, text: str) -> bool:
    """Whether ``text`` reaches the cited span and holds ``content`` there, whole letters
    only. A span past the end of ``text`` does not hold even empty content: slicing
    would say it does; nor does one a combining mark now follows ("no" + U+0308 reads
    "nö"): its words changed though its code points did not."""
    start, end = citation.start_offset, citation.end_offset
    return end <= len(text) and text[start:end] == content and not splits(text, start, end)


async def find_again(
    content: str,
    citation: Citation,
    text: str,
    context: Callable[[], Awaitable[tuple[str, str] | None]],
) -> Anchor | None:
    """``locate`` for every entry point that has some indexed context (a collection's
    neighbouring chunks, a receipt's prefix and suffix): the text looked for on its own
    (off the event loop: sources can be long), and only when it is there more than once
    is ``context`` read and the search run again with it."""
    start = citation.start_offset
    if span_holds(content, citation, text):
        return None
    anchor = await asyncio.to_thread(reanchor, text, content, start)
    if anchor.outcome != "ambiguous":
        return anchor
    around = await context()
    if around is None:
        return anchor
    prefix, suffix = around
    return await asyncio.to_thread(reanchor, text, content, start, prefix=prefix, suffix=suffix)


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
    read_from = text.read_from if isinstance(text, SourceText) else None
    # Never silent: a verdict read from the kept copy says so in its reason too.
    note = KEPT_COPY_NOTE if read_from == "kept copy" else ""

    def made(verification: Verification, detail: str, **found: Any) -> FetchResult:
        return FetchResult(
            content=content,
            citation=citation,
            verification=verification,
            detail=detail + note,
            read_from=read_from,
            **found,
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
    if anchor.outcome == "renormalized":
        return made(
            "drifted",
            f"{where} changed: the source's Unicode normalization changed (the indexed text "
            f"is at {anchor.start}..{anchor.end} now in a canonically equivalent form, not the "
            "same code points, and offsets count code points); re-ingest for current offsets",
            current_start_offset=anchor.start,
            current_end_offset=anchor.end,
            similarity=anchor.similarity,
        )
    if anchor.outcome == "ambiguous":
        # Occurrences are counted up to a cap: past it, the count is a floor.
        count = anchor.occurrences
        times = f"at least {count}" if count >= MAX_OCCURRENCES else str(count)
        return made(
            "drifted",
            f"{where} changed; the indexed text appears {times} times in the "
            "source now and nothing tells which is the cited one (not guessed)",
        )
    change = (
        f"{citation.source!r} is now {len(text)} characters long; the citation ends at "
        f"{citation.end_offset}"
        if citation.end_offset > len(text)
        else f"{where} changed since it was indexed"
    )
    if len(content) > MAX_COMPARED_CHARS:
        change += (
            f"; no closest passage is looked for: the indexed text is {len(content)} "
            f"characters, more than {MAX_COMPARED_CHARS}"
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
    return dated(judge(stored.content, citation, text, error, anchor), stored)


def dated(result: FetchResult, stored: StoredChunk, *, note: bool = True) -> FetchResult:
    """``result`` (a verdict on ``stored``'s text) naming the chunk's version and, for a
    past one, when it was replaced; ``note=False`` leaves the detail as every other
    entry point words it (checks without the store cannot say it)."""
    if stored.valid_to is None:
        return result.model_copy(update={"version": stored.version})
    replaced_at = iso_time(stored.valid_to)
    if not note:
        return result.model_copy(update={"version": stored.version, "replaced_at": replaced_at})
    return result.model_copy(
        update={
            "version": stored.version,
            "replaced_at": replaced_at,
            "detail": f"{result.detail} (this chunk is from version {stored.version} of the "
            f"document, replaced at {replaced_at})",
        }
    )


def _check_arguments(call: str, citation: object, name: str, content: object) -> None:
    """``InvalidQueryError`` unless ``citation`` is a well-formed ``Citation`` and
    ``content`` (the argument ``name``) a str: a bad argument raises, not a verdict."""
    if not isinstance(citation, Citation):
        raise InvalidQueryError(f"{call} takes a Citation, not {type(citation).__name__}")
    checked_citation(citation)
    if not isinstance(content, str):
        raise InvalidQueryError(
            f"{name} must be the text the citation stands for (a str), not {type(content).__name__}"
        )


async def check_citation(
    citation: Citation,
    content: str,
    base_dir: Path | str,
    *,
    snapshot_dir: SnapshotLocation | None = None,
    max_bytes: int | None = DEFAULT_MAX_FILE_BYTES,
) -> FetchResult:
    """Whether the source still holds ``content`` at ``citation``'s span, as it reads now.

    The same verdict and current offsets as ``Collection.verify(citation,
    content=...)``: ``verified``, ``moved`` (intact elsewhere:
    ``current_start_offset``/``current_end_offset``), ``drifted`` (with the
    closest passage and its ``similarity`` when there is one) or
    ``unresolvable`` (the source cannot be read as it was ingested; ``detail``
    says why). Never raises for a source problem. Without a collection there is
    no indexed context, so text now repeated in the source is reported as
    ambiguous (drifted) where a collection may still tell which is the cited one.
    ``snapshot_dir`` is needed for URL and record citations (a collection's
    ``snapshots``); ``max_bytes`` is the read cap the collection ingested with.
    """
    _check_arguments("check_citation", citation, "content", content)
    base = base_directory(base_dir, "base_dir")  # a bad argument raises, not a verdict
    check_read_options(snapshot_dir, max_bytes)
    try:
        text = await read_source(citation, base, snapshot_dir=snapshot_dir, max_bytes=max_bytes)
    except RetrievalError as exc:
        return judge(content, citation, None, exc)
    return judge(content, citation, text, None, locate(content, citation, text))


def deprecation(name: str, replacement: str) -> str:
    """The warning an alias kept for one release gives."""
    return f"{name} is deprecated and will be removed in the next release; use {replacement}"


def deprecated_alias(
    function: Callable[P, Awaitable[T]], name: str, replacement: str
) -> Callable[P, Coroutine[Any, Any, T]]:
    """``function`` under the old ``name``, warning (``DeprecationWarning``, pointed at
    the caller) that ``replacement`` is the one to use."""

    @functools.wraps(function)
    async def alias(*args: P.args, **kwargs: P.kwargs) -> T:
        warnings.warn(deprecation(name, replacement), DeprecationWarning, stacklevel=2)
        return await function(*args, **kwargs)

    alias.__name__ = alias.__qualname__ = name
    alias.__doc__ = f"Deprecated alias, kept for one release: use ``{replacement}``.\n\n" + (
        function.__doc__ or ""
    )
    return alias


class SpanOptions(TypedDict, total=False):
    """Keywords of ``verify_citation``."""

    # <index_dir>/<collection>.snapshots: needed for URL and record citations.
    snapshot_dir: SnapshotLocation | None
    # The read cap the collection ingested with (``IngestConfig.max_file_bytes``).
    max_bytes: int | None


async def citation_holds(
    citation: Citation,
    expected_content: str,
    allowed_base_dir: Path | str,
    **options: Unpack[SpanOptions],
) -> bool:
    """True when the source holds ``expected_content`` at the cited span (``verified``;
    ``moved`` and ``drifted`` are False). A source that cannot be read raises
    ``RetrievalError(verdict="unresolvable")`` and one now too short for the span
    raises with ``verdict="drifted"``, as ``verify_citation`` always did. Its arguments
    are checked as ``check_citation`` checks them (``InvalidQueryError``)."""
    _check_arguments("verify_citation", citation, "expected_content", expected_content)
    check_read_options(options.get("snapshot_dir"), options.get("max_bytes"))
    text = await read_source(
        citation,
        base_directory(allowed_base_dir, "allowed_base_dir"),
        snapshot_dir=options.get("snapshot_dir"),
        max_bytes=options.get("max_bytes", DEFAULT_MAX_FILE_BYTES),
    )
    slice_span(text, citation)  # a source now too short for the span raises
    result = judge(expected_content, citation, text, None, locate(expected_content, citation, text))
    return result.verification == "verified"


verify_citation = deprecated_alias(
    citation_holds, "verify_citation", "check_citation(citation, content, base_dir).ok"
)
