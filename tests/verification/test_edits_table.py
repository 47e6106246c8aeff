"""One edit, one verdict: every entry point judges a cited span the same way.

Rows are edits made to the source of a cited chunk after it was indexed; columns are
the ways a user checks that citation. Every cell must give the row's verdict and the
same place for the cited text now (``where``: the cited offsets when verified, the
current ones when moved, none otherwise). Entry points that return the span's own
``FetchResult`` must also agree with ``Collection.verify`` on its current offsets,
similarity and reason.

One corpus per edit: the first cell of a row builds it (real files, a real PDF, a
real HTTP server on 127.0.0.1, real records), makes the edit, asks every entry point
once and keeps what each said; the row's other cells read it.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import unicodedata
import warnings
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import groundkit.sync as gks
from groundkit import (
    ChunkingConfig,
    Collection,
    FetchResult,
    IngestConfig,
    QuoteCheck,
    RetrievalError,
    RetrievalResult,
    UrlLoader,
    check_citation,
    check_quote,
    resolve_citation,
    verify_answer,
)
from groundkit.cli import main as grk_main
from groundkit.service import CollectionRegistry, build_server
from groundkit.utils.url_safety import AddressPolicy
from groundkit.verification.quotes import QuoteChecker
from groundkit.verification.sources import read_source
from groundkit.verification.verdict import verify_citation
from tests.sources import Route, Site, make_pdf

KETTLE = "Kettles boil water at one hundred degrees at sea level."
CITED = "Oolong leaves unfurl slowly in the café's water, just below boiling."
MATCHA = "Matcha is whisked, never steeped, at seventy degrees."
NOTES = f"{KETTLE}\n\n{CITED}\n\n{MATCHA}\n"
IN_FRONT = "A line put in front of everything.\n\n"
FIRST_PAGE = "Photovoltaic panels convert sunlight on the first page."
NEW_PAGE = "A page inserted in front of the others."
# One chunk per sentence: the cited chunk is exactly CITED, whatever moves around it.
SENTENCES = ChunkingConfig(strategy="sentence")


def _write(name: str, data: str | bytes) -> Callable[[Path], None]:
    def edit(base: Path) -> None:
        raw = data.encode("utf-8") if isinstance(data, str) else data
        (base / name).write_bytes(raw)

    return edit


def _unlink(name: str) -> Callable[[Path], None]:
    return lambda base: (base / name).unlink()


@dataclass(frozen=True)
class Edit:
    """A row: the source cited, the edit made to it, and the verdict it must get."""

    verdict: str
    source: str  # "text" (notes.md), "pdf" (report.pdf), "url" or "record"
    file_edit: Callable[[Path], None] | None = None
    served_after: str | None = None  # url: the page served and re-ingested
    record_after: str | None = None  # record: the text it is re-added with
    keep_sources: bool = False  # ingested with IngestConfig(keep_sources=True)
    read_from: str | None = None  # where every entry point must say it read the text


# The table. Each row's verdict holds in every column.
EDITS: dict[str, Edit] = {
    "no edit": Edit("verified", "text"),
    "line prepended": Edit("moved", "text", _write("notes.md", IN_FRONT + NOTES)),
    "paragraph moved": Edit(
        "moved", "text", _write("notes.md", f"{KETTLE}\n\n{MATCHA}\n\n{CITED}\n")
    ),
    "span edited": Edit("drifted", "text", _write("notes.md", NOTES.replace("slowly", "quickly"))),
    "span deleted": Edit("drifted", "text", _write("notes.md", f"{KETTLE}\n\n{MATCHA}\n")),
    "file deleted": Edit("unresolvable", "text", _unlink("notes.md")),
    "file deleted, kept copy present": Edit(
        "verified", "text", _unlink("notes.md"), keep_sources=True, read_from="kept copy"
    ),
    "pdf deleted, kept copy present": Edit(
        "verified", "pdf", _unlink("report.pdf"), keep_sources=True, read_from="kept copy"
    ),
    "file edited, kept copy present": Edit(
        "drifted",
        "text",
        _write("notes.md", NOTES.replace("slowly", "quickly")),
        keep_sources=True,
        read_from="file",
    ),
    "md now holds a PDF": Edit("unresolvable", "text", _write("notes.md", make_pdf([CITED]))),
    "pdf now holds text": Edit("unresolvable", "pdf", _write("report.pdf", NOTES)),
    "UTF-8 to UTF-16": Edit("unresolvable", "text", _write("notes.md", NOTES.encode("utf-16"))),
    # A combining mark put right after the span joins its last character: the cited
    # text's code points are all there, but it now ends inside a letter (SPEC 5.5).
    "mark added after the span": Edit(
        "drifted", "text", _write("notes.md", NOTES.replace(CITED, CITED + "\u0308"))
    ),
    "line prepended, mark after the span": Edit(
        "drifted", "text", _write("notes.md", IN_FRONT + NOTES.replace(CITED, CITED + "\u0308"))
    ),
    "NFC to NFD": Edit("drifted", "text", _write("notes.md", unicodedata.normalize("NFD", NOTES))),
    "PDF page inserted": Edit(
        "moved", "pdf", _write("report.pdf", make_pdf([NEW_PAGE, FIRST_PAGE, CITED]))
    ),
    "URL snapshot changed": Edit("moved", "url", served_after=IN_FRONT + NOTES),
    "record re-added": Edit("drifted", "record", record_after=NOTES.replace("slowly", "quickly")),
}


@dataclass(frozen=True)
class Seen:
    """What one entry point said: its verdict and where it puts the cited text now."""

    verdict: str
    where: tuple[int, int] | None
    detail: str = ""
    # The span's own verdict, where the entry point returns one.
    span: FetchResult | None = None
    # Where the source's text was read, as the entry point reports it.
    read_from: str | None = None


def of_fetch(result: FetchResult) -> Seen:
    c = result.citation
    where = {
        "verified": (c.start_offset, c.end_offset),
        "moved": (result.current_start_offset, result.current_end_offset),
    }.get(result.verification)
    return Seen(result.verification, where, result.detail, result, result.read_from)  # type: ignore[arg-type]


def of_wire(payload: dict[str, Any]) -> Seen:
    """A FetchResult as the CLI and the MCP tools print it (``collection`` is theirs)."""
    fields = {k: v for k, v in payload.items() if k != "collection"}
    return of_fetch(FetchResult.model_validate(fields))


def of_quote(check: QuoteCheck) -> Seen:
    where = (check.start_offset, check.end_offset) if check.found else None
    return Seen(check.verdict, where, check.detail, read_from=check.read_from)  # type: ignore[arg-type]


def of_sentence(sentence: Any) -> Seen:
    """An answer sentence quoting the whole cited chunk: its quote's verdict when it was
    checked, else the sentence's own (drifted, unresolvable)."""
    if isinstance(sentence, dict):
        quotes = [QuoteCheck.model_validate(q) for q in sentence["quotes"]]
        verdict, detail = sentence["verdict"], sentence["detail"]
    else:
        quotes, verdict, detail = sentence.quotes, sentence.verdict, sentence.detail
    if verdict == "quoted":
        return of_quote(quotes[0])
    return Seen(verdict, None, detail, read_from=quotes[0].read_from if quotes else None)


@dataclass
class Case:
    """One row's corpus, after its edit: what the columns need."""

    col: Collection
    hit: RetrievalResult
    base: Path
    index: Path
    client: Any = None
    sync: gks.SyncCollection | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def quote(self) -> str:
        return self.hit.content

    @property
    def answer(self) -> str:
        # Curly quotes: a PDF's chunk may hold a line break, which straight quotes may not.
        return f"The notes say \u201c{self.hit.content}\u201d [1]"


def grk(*argv: str) -> dict[str, Any]:
    """``grk ARGV --json`` in-process (the real CLI code, its own event loop)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        grk_main([*argv, "--json"])
    payload: dict[str, Any] = json.loads(out.getvalue())
    return payload


def cli_common(case: Case) -> list[str]:
    return ["--index-dir", str(case.index), "--base-dir", str(case.base)]


async def mcp(case: Case, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await case.client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    content: dict[str, Any] = result.structured_content
    return content


async def _grk_fetch(c: Case) -> Seen:
    version = str(c.hit.citation.version)
    # The full shape, read back as the FetchResult it is (the compact one leaves out fields).
    argv = ["fetch", c.hit.chunk_id, "--version", version, "--full", *cli_common(c)]
    return of_wire(await asyncio.to_thread(grk, *argv))


async def _grk_verify(c: Case) -> Seen:
    report = await asyncio.to_thread(grk, "verify", *cli_common(c))
    for listed in [*report["problems"], *report["moved_chunks"]]:
        if listed["citation"]["chunk_id"] == c.hit.chunk_id:
            return of_wire(listed)
    assert report["verified"] >= 1
    # Verified chunks are counted, not listed: all of them read from kept copies, or none.
    kept = report["kept_copy"] == report["verified"]
    assert kept or report["kept_copy"] == 0, report
    read_from = "kept copy" if kept else "file"
    return Seen("verified", (c.hit.start_offset, c.hit.end_offset), read_from=read_from)


async def _langchain(c: Case) -> Seen:
    from groundkit.integrations.langchain import citation_of, to_document

    document = to_document(c.hit)
    return of_fetch(await c.col.verify(citation_of(document), content=document.page_content))


def _snapshots(c: Case) -> Any:
    return c.col.snapshots


# The columns: every entry point that gives a verdict on a cited span.
COLUMNS: dict[str, Callable[[Case], Awaitable[Seen]]] = {
    "Collection.verify(result)": lambda c: _fetch(c.col.verify(c.hit)),
    "Collection.verify(citation, content=)": lambda c: _fetch(
        c.col.verify(c.hit.citation, content=c.hit.content)
    ),
    "Collection.fetch_chunk": lambda c: _fetch(
        c.col.fetch_chunk(c.hit.chunk_id, c.hit.citation.version)
    ),
    "check_citation": lambda c: _fetch(
        check_citation(c.hit.citation, c.hit.content, c.base, snapshot_dir=_snapshots(c))
    ),
    "check_quote": lambda c: _quote(
        check_quote(c.quote, c.hit, c.base, snapshot_dir=_snapshots(c))
    ),
    "QuoteChecker.check": lambda c: _quote(
        QuoteChecker(c.base, snapshot_dir=_snapshots(c)).check(c.quote, c.hit)
    ),
    "verify_answer: citations": lambda c: _cited(
        verify_answer(c.answer, [c.hit], c.base, snapshot_dir=_snapshots(c))
    ),
    "verify_answer: sentence": lambda c: _said(
        verify_answer(c.answer, [c.hit], c.base, snapshot_dir=_snapshots(c))
    ),
    "Collection.verify_answer: citations": lambda c: _cited(c.col.verify_answer(c.answer, [c.hit])),
    "Collection.verify_answer: sentence": lambda c: _said(c.col.verify_answer(c.answer, [c.hit])),
    "grk fetch": _grk_fetch,
    "grk verify": _grk_verify,
    "MCP fetch_chunk": lambda c: _wire(
        mcp(c, "fetch_chunk", chunk_id=c.hit.chunk_id, version=c.hit.citation.version, full=True)
    ),
    "MCP verify_answer: citations": lambda c: _wire_cited(
        mcp(c, "verify_answer", answer=c.answer, chunk_ids=[c.hit.chunk_id])
    ),
    "MCP verify_answer: sentence": lambda c: _wire_said(
        mcp(c, "verify_answer", answer=c.answer, chunk_ids=[c.hit.chunk_id])
    ),
    "langchain citation_of + Collection.verify": _langchain,
    "sync check_citation": lambda c: _fetch(
        asyncio.to_thread(
            gks.check_citation, c.hit.citation, c.hit.content, c.base, snapshot_dir=_snapshots(c)
        )
    ),
    "sync check_quote": lambda c: _quote(
        asyncio.to_thread(gks.check_quote, c.quote, c.hit, c.base, snapshot_dir=_snapshots(c))
    ),
    "SyncCollection.verify": lambda c: _fetch(asyncio.to_thread(_sync(c).verify, c.hit)),
    "SyncCollection.fetch_chunk": lambda c: _fetch(
        asyncio.to_thread(_sync(c).fetch_chunk, c.hit.chunk_id, c.hit.citation.version)
    ),
    "SyncCollection.verify_answer: citations": lambda c: _cited(
        asyncio.to_thread(_sync(c).verify_answer, c.answer, [c.hit])
    ),
}

# Cells that do not exist: ``grk verify`` re-checks the chunks a collection holds now,
# and a re-ingested URL or re-added record replaced the cited chunk with new ones; the
# MCP verify_answer takes chunk ids, which name current chunks only.
NOT_APPLICABLE = {
    (edit, column)
    for edit, row in EDITS.items()
    if row.source in {"url", "record"}
    for column in (
        "grk verify",
        "MCP verify_answer: citations",
        "MCP verify_answer: sentence",
    )
}


def _sync(c: Case) -> gks.SyncCollection:
    assert c.sync is not None
    return c.sync


async def _fetch(pending: Awaitable[FetchResult]) -> Seen:
    return of_fetch(await pending)


async def _quote(pending: Awaitable[QuoteCheck]) -> Seen:
    return of_quote(await pending)


async def _cited(pending: Awaitable[Any]) -> Seen:
    report = await pending
    (span,) = report.citations
    return of_fetch(span)


async def _said(pending: Awaitable[Any]) -> Seen:
    report = await pending
    (sentence,) = report.sentences
    return of_sentence(sentence)


async def _wire(pending: Awaitable[dict[str, Any]]) -> Seen:
    return of_wire(await pending)


async def _wire_cited(pending: Awaitable[dict[str, Any]]) -> Seen:
    (span,) = (await pending)["citations"]
    return of_wire(span)


async def _wire_said(pending: Awaitable[dict[str, Any]]) -> Seen:
    (sentence,) = (await pending)["sentences"]
    return of_sentence(sentence)


# -- the yes/no primitives ---------------------------------------------------------
# ``verify_citation`` (deprecated) answers True or False and ``resolve_citation`` returns
# the text at the offsets; both raise when the source cannot be read (or is now too
# short for the span). They cannot say moved; they must not contradict the verdict.

PROJECTED = {
    "verified": {"verified"},
    "moved": {"not verified"},
    "drifted": {"not verified", "drifted"},
    "unresolvable": {"unresolvable"},
}


async def _yes_no(c: Case) -> dict[str, str]:
    said: dict[str, str] = {}
    snapshots = c.col.snapshots
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            held = await verify_citation(
                c.hit.citation, c.hit.content, c.base, snapshot_dir=snapshots
            )
            said["verify_citation"] = "verified" if held else "not verified"
        except RetrievalError as exc:
            said["verify_citation"] = str(exc.verdict)
    try:
        span = await resolve_citation(c.hit.citation, c.base, snapshot_dir=snapshots)
        said["resolve_citation"] = "verified" if span == c.hit.content else "not verified"
    except RetrievalError as exc:
        said["resolve_citation"] = str(exc.verdict)
    return said


# -- building a row ------------------------------------------------------------------


@dataclass
class Row:
    seen: dict[str, Seen | str]  # a str: the entry point raised (its message)
    yes_no: dict[str, str]
    now: str | None  # the cited source's text as it reads now, when it can be read
    hit: RetrievalResult


async def _cited_hit(col: Collection, source: str) -> RetrievalResult:
    for result in (await col.search("oolong leaves unfurl")).results:
        if result.source == source or (source == "record" and result.source_class == "record"):
            return result
    raise AssertionError(f"no hit in {source}")


async def _build(name: str, root: Path, site: Site) -> Row:
    edit = EDITS[name]
    base, index = root / "base", root / "index"
    base.mkdir(parents=True)
    loader = UrlLoader(policy=AddressPolicy.allowing("127.0.0.0/8"), timeout=5.0)
    route = f"/{name.replace(' ', '-')}.txt"
    site.routes[route] = Route(body=NOTES.encode(), headers={"Content-Type": "text/plain"})
    opened = Collection.open(
        index,
        base_dir=base,
        chunking=SENTENCES,
        url_loader=loader,
        ingest=IngestConfig(keep_sources=edit.keep_sources),
    )
    async with opened as col:
        if edit.source == "text":
            (base / "notes.md").write_text(NOTES, encoding="utf-8")
            await col.ingest(base)
            source = "notes.md"
        elif edit.source == "pdf":
            (base / "report.pdf").write_bytes(make_pdf([FIRST_PAGE, CITED]))
            await col.ingest(base)
            source = "report.pdf"
        elif edit.source == "url":
            source = site.url(route)
            await col.ingest(source)
        else:
            await col.add_documents([{"id": "note-1", "text": NOTES}])
            source = "record"
        hit = await _cited_hit(col, source)
        assert " ".join(hit.content.split()) == CITED, hit.content
        if edit.file_edit is not None:
            edit.file_edit(base)
        if edit.served_after is not None:
            site.routes[route] = Route(
                body=edit.served_after.encode(), headers={"Content-Type": "text/plain"}
            )
            assert not (await col.ingest(source)).failed
        if edit.record_after is not None:
            await col.add_documents([{"id": "note-1", "text": edit.record_after}])
        case = Case(col=col, hit=hit, base=base, index=index)
        seen: dict[str, Seen | str] = {}
        registry = CollectionRegistry(index)
        try:
            from mcp import Client

            async with Client(build_server(registry)) as client:
                case.client = client
                case.sync = await asyncio.to_thread(gks.Collection.open, index, base_dir=base)
                try:
                    for column, ask in COLUMNS.items():
                        if (name, column) in NOT_APPLICABLE:
                            continue
                        try:
                            seen[column] = await ask(case)
                        except Exception as exc:  # a cell that raised shows why in its test
                            seen[column] = f"{type(exc).__name__}: {exc}"
                finally:
                    await asyncio.to_thread(case.sync.close)
        finally:
            await registry.close()
        yes_no = await _yes_no(case)
        try:
            now: str | None = await read_source(
                hit.citation, base, snapshot_dir=await col._verifier().named_texts([hit.citation])
            )
        except RetrievalError:
            now = None
    return Row(seen, yes_no, now, hit)


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    served = Site()
    try:
        yield served
    finally:
        served.close()


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory, site: Site) -> Callable[[str], Row]:
    """Each row built once, on first use, on an event loop of its own."""
    built: dict[str, Row] = {}

    def row(name: str) -> Row:
        if name not in built:
            root = tmp_path_factory.mktemp("edit")
            with ThreadPoolExecutor(1) as pool:
                built[name] = pool.submit(asyncio.run, _build(name, root, site)).result()
        return built[name]

    return row


CELLS = [
    pytest.param(edit, column, id=f"{edit} | {column}")
    for edit in EDITS
    for column in COLUMNS
    if (edit, column) not in NOT_APPLICABLE
]


@pytest.mark.parametrize(("edit", "column"), CELLS)
def test_every_entry_point_gives_the_same_verdict(
    rows: Callable[[str], Row], edit: str, column: str
) -> None:
    row = rows(edit)
    seen, reference = row.seen[column], row.seen["Collection.verify(result)"]
    assert isinstance(seen, Seen), seen
    assert isinstance(reference, Seen), reference
    assert seen.verdict == EDITS[edit].verdict, seen.detail
    assert seen.where == reference.where, seen.detail
    if seen.span is not None:
        # The span's own verdict: the same current offsets, similarity and reason.
        ours, theirs = seen.span, reference.span
        assert theirs is not None
        keys = ("verification", "current_start_offset", "current_end_offset", "similarity")
        assert [getattr(ours, k) for k in keys] == [getattr(theirs, k) for k in keys]
        assert theirs.detail in ours.detail
    elif seen.verdict in {"drifted", "unresolvable"}:
        assert reference.detail in seen.detail  # quotes and sentences give the span's reason


@pytest.mark.parametrize("edit", [e for e, row in EDITS.items() if row.read_from is not None])
def test_every_entry_point_says_where_it_read_the_text(
    rows: Callable[[str], Row], edit: str
) -> None:
    row = rows(edit)
    for column, seen in row.seen.items():
        assert isinstance(seen, Seen), (column, seen)
        if seen.read_from is None and column.endswith("sentence"):
            # A sentence tells where its source was read through its quotes; one that
            # is not quoted (its span drifted) leaves that to the report's citations.
            assert seen.verdict != "quoted"
            continue
        assert seen.read_from == EDITS[edit].read_from, (column, seen.detail)
        if seen.read_from == "kept copy" and column != "grk verify":
            assert "kept copy" in seen.detail, (column, seen.detail)


@pytest.mark.parametrize("edit", EDITS)
def test_where_the_text_is_now_is_right(rows: Callable[[str], Row], edit: str) -> None:
    row = rows(edit)
    reference = row.seen["Collection.verify(result)"]
    assert isinstance(reference, Seen)
    citation = row.hit.citation
    if reference.verdict == "verified":
        assert reference.where == (citation.start_offset, citation.end_offset)
    if reference.verdict == "moved":
        assert reference.where is not None and row.now is not None
        start, end = reference.where
        assert row.now[start:end] == row.hit.content and start != citation.start_offset
    if reference.verdict in {"drifted", "unresolvable"}:
        assert reference.where is None
    if edit == "NFC to NFD":
        span = reference.span
        assert span is not None and "Unicode normalization changed" in span.detail
        assert span.current_start_offset is not None and span.current_end_offset is not None
        assert row.now is not None
        current = row.now[span.current_start_offset : span.current_end_offset]
        assert unicodedata.normalize("NFC", current) == row.hit.content


@pytest.mark.parametrize("edit", EDITS)
def test_the_yes_no_primitives_do_not_contradict_it(rows: Callable[[str], Row], edit: str) -> None:
    row = rows(edit)
    for name, said in row.yes_no.items():
        if name == "resolve_citation" and edit == "mark added after the span":
            # It returns the code points at the offsets, which are all still there; only
            # the letter they end in changed, which a verdict tells and a slice cannot.
            continue
        assert said in PROJECTED[EDITS[edit].verdict], (name, said)
