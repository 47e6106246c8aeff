"""``Verifier``: a collection's citations checked against its sources.

``Collection`` hands out one per call (``Collection._verifier()``): it knows where the
sources are (base directory, snapshot store, read cap), which chunks the caller may see
(clearance), and how to compare unquoted sentences (embedder or analyzer). Every
collection-level entry point (``verify``, ``fetch_chunk``, ``verify_answer``, the CLI,
the MCP tools) goes through it, and it decides nothing itself: ``verdict.judge`` does.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from groundkit.contracts import (
    STORED_TEXT_CLASSES,
    AnswerReport,
    Citation,
    FetchResult,
    MultiSearchResponse,
    RetrievalResult,
    SearchResponse,
    checked_citation,
)
from groundkit.errors import ChunkNotFoundError, InvalidQueryError, RetrievalError
from groundkit.lexical.analyzer import Analyzer
from groundkit.providers.protocols import EmbeddingProtocol
from groundkit.retrieval.search import result_from_row
from groundkit.storage.names import check_snapshot_id
from groundkit.storage.protocols import MetadataStoreProtocol, SnapshotStore, StoredChunk
from groundkit.storage.snapshots import NamedTexts, kept_name, text_name
from groundkit.utils.path_safety import PathEscapeError
from groundkit.utils.text import describe_unencodable
from groundkit.verification.anchoring import Anchor, ChunkIndex, splits
from groundkit.verification.answers import AnswerChecker
from groundkit.verification.claims import ClaimJudge
from groundkit.verification.sources import read_source, source_key
from groundkit.verification.verdict import dated, find_again, judge, judge_stored

__all__ = ["Verifier", "VerifyReport"]

# A source's text (or why it could not be read) by what reading it depends on
# (``source_key``).
_SourceMemo = dict[tuple[str, str, str | None, str], "str | RetrievalError"]


@dataclass
class VerifyReport:
    """Outcome of re-verifying every chunk of a collection."""

    verified: int = 0
    # Intact, but elsewhere in the source now (still true; re-ingest for new offsets).
    moved: int = 0
    drifted: int = 0
    unresolvable: int = 0
    problems: list[FetchResult] = field(default_factory=list)
    relocated: list[FetchResult] = field(default_factory=list)
    # Chunks whose file is not on this host, checked against the collection's kept
    # copy of its text (``FetchResult.read_from == "kept copy"``; counted in the above).
    kept_copy: int = 0

    @property
    def ok(self) -> bool:
        """Every chunk verified: a moved one is still true, but its citation is stale."""
        return self.moved == 0 and self.drifted == 0 and self.unresolvable == 0


@dataclass(frozen=True)
class Verifier:
    """What one collection needs to check a citation, and the checks."""

    name: str
    store: MetadataStoreProtocol
    base_dir: Path
    snapshots: SnapshotStore | None
    max_bytes: int | None
    visible: Callable[[StoredChunk], bool]
    embedder: EmbeddingProtocol | None = None
    analyzer: Analyzer | None = None
    # Under a clearance, whether a document's stored metadata admits reading its source
    # (None: no clearance). A past version's chunk may be admitted while the document
    # now holds a version above the clearance: its source is then not read at all.
    admits: Callable[[Mapping[str, Any]], bool] | None = None
    # The chunks of the document whose context was read last, indexed: a verifier lives
    # for one call, and ``verify_all`` goes document by document, so text repeated
    # throughout a long document reads its chunks once, not once per chunk, and finds
    # each chunk's context in log time (it was quadratic in the chunks).
    _chunks: dict[str, ChunkIndex] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def hidden(self, chunk_id: str) -> ChunkNotFoundError:
        """Unknown and above-the-clearance read exactly alike: no existence leak."""
        return ChunkNotFoundError(f"no chunk {chunk_id!r} in collection {self.name!r}")

    async def fetch(self, stored: StoredChunk) -> FetchResult:
        """``stored`` checked against its source as it reads now."""
        return (await self.fetch_read(stored))[0]

    async def fetch_read(self, stored: StoredChunk) -> tuple[FetchResult, str | None]:
        """``fetch``, with the source text the verdict was reached on (None when the
        source could not be read)."""
        citation = stored.citation
        try:
            text = await self.read(citation)
        except RetrievalError as exc:
            return judge_stored(stored, citation, None, exc), None
        anchor = await self.anchor(stored.content, citation, text, stored)
        return judge_stored(stored, citation, text, None, anchor), text

    async def verify(
        self,
        target: RetrievalResult | FetchResult | Citation,
        content: str | None,
        read: _SourceMemo | None = None,
    ) -> FetchResult:
        """One result, or a citation with the text it stands for (else the stored text).

        ``read``: sources already read in this call, by what reading depends on, so a
        batch of results reads each source once (``verify_each``)."""
        expected: str | None
        if content is not None and not isinstance(content, str):
            raise InvalidQueryError(
                f"content= is the text the citation stands for (a str), not "
                f"{type(content).__name__}"
            )
        if isinstance(target, RetrievalResult | FetchResult):
            if content is not None:
                raise InvalidQueryError("content= is for a bare citation; a result carries its own")
            other = target.collection if isinstance(target, RetrievalResult) else None
            if other is not None and other != self.name:
                raise RetrievalError(
                    f"the result is from collection {other!r}; verify it with that collection"
                )
            citation, expected = target.citation, target.content
        elif isinstance(target, Citation):
            citation, expected = checked_citation(target), content
        else:
            raise InvalidQueryError(
                f"verify takes a RetrievalResult, FetchResult or Citation, not "
                f"{type(target).__name__}"
            )
        stored = await self.store.get_chunk(citation.chunk_id)
        if stored is not None and not self.visible(stored):
            raise self.hidden(citation.chunk_id)
        if expected is None:
            if stored is None:
                raise ChunkNotFoundError(
                    f"no chunk {citation.chunk_id!r} in collection {self.name!r}; pass "
                    "content= (the text the citation stands for) to check it anyway"
                )
            expected = stored.content
        # The stored chunk the citation names, when it holds the text checked: for a past
        # one, the verdict names its version and when it was replaced.
        named = await self._row_named(citation, stored)
        same = named if named is not None and named.content == expected else None
        try:
            text = await self._read_once(citation, read)
        except RetrievalError as exc:
            result = judge(expected, citation, None, exc)
        else:
            anchor = await self.anchor(expected, citation, text, same)
            result = judge(expected, citation, text, None, anchor)
        return result if same is None or same.valid_to is None else dated(result, same, note=False)

    async def verify_each(
        self, targets: Sequence[RetrievalResult | FetchResult]
    ) -> list[FetchResult]:
        """``verify`` on each of ``targets``, in order, each source read once."""
        read: _SourceMemo = {}
        return [await self.verify(target, None, read) for target in targets]

    async def _read_once(self, citation: Citation, read: _SourceMemo | None) -> str:
        if read is None:
            return await self.read(citation)
        key = source_key(citation)
        if key not in read:
            try:
                read[key] = await self.read(citation)
            except RetrievalError as exc:
                read[key] = exc
        found = read[key]
        if isinstance(found, RetrievalError):
            raise found
        return found

    async def verify_all(self) -> VerifyReport:
        """Every chunk the caller may see, each source read once."""
        report = VerifyReport()
        current: tuple[str, str | None, RetrievalError | None] | None = None
        async for batch in self.store.iter_chunks():
            # Each citation made once: a PDF's carries rectangles read from its geometry.
            cited = [(s, s.citation) for s in batch if self.visible(s)]
            texts = await self.named_texts(c for _, c in cited)
            for stored, citation in cited:
                if current is None or current[0] != citation.source:
                    try:
                        text = await self.read(citation, texts)
                        current = (citation.source, text, None)
                    except RetrievalError as exc:
                        current = (citation.source, None, exc)
                _, source_text, error = current
                anchor = (
                    None
                    if source_text is None
                    else await self.anchor(stored.content, citation, source_text, stored)
                )
                result = judge_stored(stored, citation, source_text, error, anchor)
                if result.read_from == "kept copy":
                    report.kept_copy += 1
                if result.verification == "verified":
                    report.verified += 1
                elif result.verification == "moved":
                    report.moved += 1
                    report.relocated.append(result)
                else:
                    if result.verification == "drifted":
                        report.drifted += 1
                    else:
                        report.unresolvable += 1
                    report.problems.append(result)
        return report

    async def verify_answer(
        self,
        answer: str,
        cited: SearchResponse | MultiSearchResponse | Sequence[RetrievalResult] | Sequence[str],
        *,
        markers: Mapping[str, str] | None = None,
        marker_pattern: str | re.Pattern[str] | None = None,
        supported_threshold: float | None = None,
        weak_threshold: float | None = None,
        claim_judge: ClaimJudge | None = None,
    ) -> AnswerReport:
        """``answer`` checked sentence by sentence against this collection's ``cited``."""
        if isinstance(cited, str | bytes):
            raise RetrievalError(
                "cited must be the SearchResponse, results or chunk ids the answer was "
                "written from, not one string"
            )
        given: Any = cited
        # A multi-collection response too: its results are checked against this
        # collection's sources only once each is known to be this collection's.
        if isinstance(cited, SearchResponse | MultiSearchResponse):
            given = list(cited.results)
        elif isinstance(cited, Sequence):
            given = list(cited)
            if given and all(isinstance(r, str) for r in given):
                given = await self.results_for(given)
        for result in given if isinstance(given, list) else ():
            other = getattr(result, "collection", None)
            if other is not None and other != self.name:
                raise RetrievalError(
                    f"a cited result is from collection {other!r}; check the answer with "
                    "that collection (an answer citing several collections: "
                    "groundkit.verify_answer, which reads every citation under the one "
                    "base directory it is given, so only when they share it)"
                )
        stored: dict[str, StoredChunk] = {}
        if isinstance(given, list):
            stored = await self._refuse_hidden([r.citation.chunk_id for r in given if _cites(r)])
        checker = AnswerChecker(
            self.base_dir,
            snapshot_dir=await self.named_texts(
                r.citation for r in (given if isinstance(given, list) else ()) if _cites(r)
            ),
            max_bytes=self.max_bytes,
            embedder=self.embedder,
            analyzer=self.analyzer,
            supported_threshold=supported_threshold,
            weak_threshold=weak_threshold,
            locator=self.locate,
            claim_judge=claim_judge,
            reader=None if self.admits is None else self.read,
        )
        report = await checker.check(answer, given, markers=markers, marker_pattern=marker_pattern)
        # A past chunk's verdict names its version and when it was replaced, as
        # ``fetch_chunk`` and ``verify`` give them.
        citations = []
        for checked in report.citations:
            named = await self._row_named(checked.citation, stored.get(checked.citation.chunk_id))
            if named is None or named.valid_to is None or named.content != checked.content:
                citations.append(checked)
            else:
                citations.append(dated(checked, named, note=False))
        return report.model_copy(update={"citations": citations})

    async def _row_named(
        self, citation: Citation, stored: StoredChunk | None
    ) -> StoredChunk | None:
        """The stored row of ``citation``'s chunk in the version it names (``stored``, the
        chunk's current or newest row, when it names none or that one); None when that
        version's row is gone or hidden from this handle."""
        if stored is None or citation.version is None or stored.version == citation.version:
            return stored
        row = await self.store.get_chunk(citation.chunk_id, citation.version)
        return row if row is not None and self.visible(row) else None

    async def _check_readable(self, citation: Citation) -> None:
        """Under a clearance, read only the source of a stored document that the clearance
        admits as it stands now, and only as that document's: a chunk of an older, admitted
        version must not show what the source holds today, and a citation made by hand
        must not name an admitted document with another file's source (any file of the
        base directory, labelled or not, would then be read)."""
        if self.admits is None:
            return
        found = await self.store.find_documents(sources=[citation.source])
        document = found[0] if found else None
        if (
            document is None
            or document.source != citation.source
            or document.document_id != citation.document_id
            or document.source_class != citation.source_class
            or not self.admits(document.metadata)
        ):
            raise RetrievalError(
                f"not read: the source of chunk {citation.chunk_id!r} is not readable "
                "at this collection's clearance"
            )

    async def _refuse_hidden(self, chunk_ids: list[str]) -> dict[str, StoredChunk]:
        """The stored chunks ``chunk_ids`` name (current, else their newest past version);
        ``ChunkNotFoundError`` for one the clearance hides, as ``verify`` gives: a result
        object carried in from another handle must not let this one check text it may
        not read."""
        if not chunk_ids:
            return {}
        wanted = list(dict.fromkeys(chunk_ids))
        rows = dict(await self.store.get_chunks_by_ids(wanted))
        found: dict[str, StoredChunk] = {}
        for chunk_id in wanted:
            # A past version's chunk (an as_of result) is not among the current rows.
            stored = rows.get(chunk_id) or await self.store.get_chunk(chunk_id)
            if stored is not None and not self.visible(stored):
                raise self.hidden(chunk_id)
            if stored is not None:
                found[chunk_id] = stored
        return found

    async def results_for(self, chunk_ids: list[str]) -> list[RetrievalResult]:
        """Chunks by id, as results (score 0), in the order given: the current chunk of
        each id, else its newest past one (an ``as_of`` result), as ``fetch_chunk`` reads it."""
        for chunk_id in chunk_ids:
            problem = describe_unencodable(chunk_id, "a chunk id")
            if problem is not None:
                raise RetrievalError(problem)
        rows = dict(await self.store.get_chunks_by_ids(chunk_ids))
        for chunk_id in dict.fromkeys(chunk_ids):
            if chunk_id not in rows:
                past = await self.store.get_chunk(chunk_id)
                if past is not None:
                    rows[chunk_id] = past
        missing = [c for c in chunk_ids if c not in rows or not self.visible(rows[c])]
        if missing:
            raise ChunkNotFoundError(
                f"no chunk {missing[0]!r} in collection {self.name!r}"
                + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
            )
        return [result_from_row(rows[c], 0.0, collection=self.name) for c in chunk_ids]

    async def read(self, citation: Citation, texts: SnapshotStore | None = None) -> str:
        """The whole source text ``citation`` is measured against, as it reads now;
        ``RetrievalError`` (so ``unresolvable``) for one the clearance may not read."""
        await self._check_readable(citation)
        snapshots = texts or await self.named_texts([citation])
        return await read_source(
            citation, self.base_dir, snapshot_dir=snapshots, max_bytes=self.max_bytes
        )

    async def named_texts(self, citations: Iterable[Citation]) -> SnapshotStore | None:
        """The snapshot store, read through the names the current rows of the URL and
        record documents among ``citations`` give their texts (``NamedTexts``): a
        citation is checked against exactly the text its document was committed with.
        A file's kept copy is likewise the one its current row names, looked up only
        when the file cannot be read here."""
        if self.snapshots is None:
            return None
        # A citation is the caller's data: an id that cannot name a stored text (a
        # forged ``../x``) is left to the read, which refuses it as unresolvable.
        wanted = {
            c.source: c.document_id
            for c in citations
            if c.source_class in STORED_TEXT_CLASSES and _names_a_text(c.document_id)
        }
        names: dict[str, str] = {}
        if wanted:
            states = await self.store.document_states(sources=list(wanted))
            names = {
                document_id: text_name(document_id, states[source].content_hash)
                for source, document_id in wanted.items()
                if source in states
            }
        return NamedTexts(self.snapshots, names, kept=self._kept_name)

    async def _kept_name(self, document_id: str) -> str | None:
        """The kept copy a file document's current row names (None without a row)."""
        found = await self.store.find_documents(document_ids=[document_id], sources=[])
        for record in found:
            if record.document_id == document_id and record.source_class not in (
                STORED_TEXT_CLASSES
            ):
                return kept_name(document_id, record.content_hash)
        return None

    async def locate(self, content: str, citation: Citation, text: str) -> Anchor | None:
        """``anchor`` for a cited span known by its citation alone (an answer's): the
        stored chunk it names gives the indexed context when one is needed."""

        async def stored_chunk() -> StoredChunk | None:
            stored = await self.store.get_chunk(citation.chunk_id)
            if stored is None or stored.content != content or not self.visible(stored):
                return None
            return stored

        async def neighbours() -> tuple[str, str] | None:
            stored = await stored_chunk()
            return None if stored is None else await self._context(stored)

        if await _cut_when_indexed(content, citation, text, stored_chunk):
            return None
        return await find_again(content, citation, text, neighbours)

    async def anchor(
        self, content: str, citation: Citation, text: str, stored: StoredChunk | None
    ) -> Anchor | None:
        """Where ``content`` is in ``text`` now when the cited span lost it (None while
        the span holds it). When the text is there more than once, the indexed context
        of ``stored`` (its neighbouring chunks, which overlap it) is read to tell the
        occurrences apart; only then, so a verified or plainly moved span costs no read."""

        async def neighbours() -> tuple[str, str] | None:
            return None if stored is None else await self._context(stored)

        async def stored_chunk() -> StoredChunk | None:
            return stored if stored is not None and stored.content == content else None

        if await _cut_when_indexed(content, citation, text, stored_chunk):
            return None
        return await find_again(content, citation, text, neighbours)

    async def _context(self, stored: StoredChunk) -> tuple[str, str] | None:
        """The indexed text around a current chunk (its neighbours overlap it)."""
        if not stored.current:
            return None
        chunks = self._chunks.get(stored.document_id)
        if chunks is None:
            rows = await self.store.get_chunks_for_documents([stored.document_id])
            chunks = ChunkIndex(rows.get(stored.document_id, []))
            self._chunks.clear()
            self._chunks[stored.document_id] = chunks
        return chunks.context(stored.start_offset, stored.end_offset)


async def _cut_when_indexed(
    content: str,
    citation: Citation,
    text: str,
    stored_chunk: Callable[[], Awaitable[StoredChunk | None]],
) -> bool:
    """Whether the cited span holds ``content`` though it cuts a letter, because the
    source is, byte for byte, the text its chunk was indexed from.

    A span that separates a letter from a mark now following it reads as changed
    (``span_holds``), but chunkers that cut long unspaced runs made such spans before
    they kept letters whole: on an unchanged source that cut is not an edit. Only the
    document's hash can tell the two apart, so it is computed in that case alone."""
    start, end = citation.start_offset, citation.end_offset
    if end > len(text) or text[start:end] != content or not splits(text, start, end):
        return False
    stored = await stored_chunk()
    if stored is None:
        return False
    digest = await asyncio.to_thread(lambda: hashlib.sha256(text.encode("utf-8")).hexdigest())
    return digest == stored.document_hash


def _cites(result: object) -> bool:
    """Whether ``result`` carries a citation (a result of this collection, checked)."""
    return isinstance(getattr(result, "citation", None), Citation)


def _names_a_text(document_id: str) -> bool:
    """Whether ``document_id`` can name a snapshot or record text at all."""
    try:
        check_snapshot_id(document_id)
    except PathEscapeError:
        return False
    return True
