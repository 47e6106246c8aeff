"""Results in the shapes LLM providers cite, and their citations mapped back and checked.

Anthropic's Messages API cites ``search_result`` content blocks by index and
block range (``search_result_location``) and plain-text ``document`` blocks by
character range (``char_location``); OpenAI's Responses API annotates output
text with ``file_citation`` (a file id or name) and ``url_citation`` (a URL).
The provider's offsets point into what was sent, not into the source; here each
one is mapped back to the groundkit result it stands for and checked against
that result's span as the source reads now, so a citation is only trusted when
it is true of the source.

No provider SDK is imported: messages are read as the JSON their documented
schemas describe (an SDK object is dumped first), so this works with any client.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from groundkit.config import DEFAULT_MAX_FILE_BYTES
from groundkit.contracts import (
    Citation,
    ProviderCitation,
    ProviderVerdict,
    RetrievalResult,
    SearchResponse,
)
from groundkit.errors import RetrievalError
from groundkit.storage.snapshots import SnapshotLocation
from groundkit.utils.sentences import sentence_tiles
from groundkit.verification.quotes import QuoteChecker

__all__ = [
    "chunk_uri",
    "from_anthropic_citations",
    "from_openai_annotations",
    "to_anthropic_documents",
    "to_anthropic_search_results",
]

Results = SearchResponse | Sequence[RetrievalResult]


def chunk_uri(result: RetrievalResult) -> str:
    """``groundkit://<collection>/chunks/<chunk_id>``: the name a host can read the chunk by."""
    return f"groundkit://{result.collection or ''}/chunks/{result.chunk_id}"


def _title(result: RetrievalResult) -> str:
    pages = result.citation.pages
    return f"{result.source} [{result.start_offset}:{result.end_offset}]" + (
        f" {pages}" if pages else ""
    )


def _listed(results: Results) -> list[RetrievalResult]:
    listed = list(results.results if isinstance(results, SearchResponse) else results)
    for r in listed:
        if not isinstance(r, RetrievalResult):
            raise RetrievalError(f"results must be RetrievalResult objects, not {type(r).__name__}")
    return listed


def _blocks(content: str) -> list[tuple[int, int]]:
    """The sentence tiles a result is sent as: together they are its content exactly."""
    return sentence_tiles(content) or [(0, len(content))]


def to_anthropic_search_results(
    results: Results, *, citations: bool = True
) -> list[dict[str, Any]]:
    """Messages API ``search_result`` blocks, one per result, in order.

    Each result's content goes as one text block per sentence (the blocks
    concatenate to the content), so a ``search_result_location`` citation's
    block range maps back to exact offsets. ``source`` is the chunk's
    ``groundkit://`` URI; ``title`` names the file and offsets.
    """
    out: list[dict[str, Any]] = []
    for r in _listed(results):
        out.append(
            {
                "type": "search_result",
                "source": chunk_uri(r),
                "title": _title(r),
                "content": [
                    {"type": "text", "text": r.content[a:b]} for a, b in _blocks(r.content)
                ],
                "citations": {"enabled": citations},
            }
        )
    return out


def to_anthropic_documents(results: Results, *, citations: bool = True) -> list[dict[str, Any]]:
    """Messages API plain-text ``document`` blocks, one per result, in order, for
    ``char_location`` citations (character offsets into each result's content)."""
    return [
        {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": r.content},
            "title": _title(r),
            "context": chunk_uri(r),
            "citations": {"enabled": citations},
        }
        for r in _listed(results)
    ]


def _as_data(message: Any) -> Any:
    dump = getattr(message, "model_dump", None)
    return dump(mode="json") if callable(dump) else message


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class _Mapper:
    def __init__(
        self,
        provider: Literal["anthropic", "openai"],
        results: list[RetrievalResult],
        base_dir: Path | str,
        snapshot_dir: SnapshotLocation | None,
        max_bytes: int | None,
    ) -> None:
        self.provider = provider
        self.results = results
        self.checker = QuoteChecker(base_dir, snapshot_dir=snapshot_dir, max_bytes=max_bytes)

    def made(
        self, kind: str, answer: str, verdict: ProviderVerdict, detail: str, **found: Any
    ) -> ProviderCitation:
        return ProviderCitation(
            provider=self.provider,
            kind=kind,
            answer_text=answer,
            verdict=verdict,
            detail=detail,
            **found,
        )

    def unmapped(self, kind: str, answer: str, cited: str | None, why: str) -> ProviderCitation:
        return self.made(kind, answer, "unmapped", why, cited_text=cited)

    async def quoted(
        self,
        kind: str,
        answer: str,
        cited: str,
        index: int,
        located: tuple[int, int] | None,
    ) -> ProviderCitation:
        """The cited text checked inside result ``index``'s span."""
        result = self.results[index]
        check = await self.checker.check(cited, result)
        detail = check.detail
        if check.ok and located is not None:
            a, b = located
            if cited.strip() and cited.strip() not in result.content[a:b]:
                detail += (
                    f"; the provider located it at {a}..{b} of the result, which reads otherwise"
                )
        return self.made(
            kind,
            answer,
            check.verdict,
            detail,
            cited_text=cited,
            result_index=index,
            citation=result.citation,
            start_offset=check.start_offset,
            end_offset=check.end_offset,
        )

    async def span_only(self, kind: str, answer: str, index: int) -> ProviderCitation:
        """No cited text: the result's span itself must still verify."""
        result = self.results[index]
        citation = result.citation
        span = await self.checker.span_verdict(result)
        if span.verification in ("drifted", "unresolvable"):
            return self.made(
                kind, answer, span.verification, span.detail, result_index=index, citation=citation
            )
        if span.verification == "moved":
            return self.made(
                kind,
                answer,
                "moved",
                span.detail,
                result_index=index,
                citation=citation,
                start_offset=span.current_start_offset,
                end_offset=span.current_end_offset,
            )
        return self.made(
            kind,
            answer,
            "verified",
            "the cited result's span holds its text now",
            result_index=index,
            citation=citation,
            start_offset=citation.start_offset,
            end_offset=citation.end_offset,
        )


async def from_anthropic_citations(
    message: Any,
    results: Results,
    allowed_base_dir: Path | str,
    *,
    snapshot_dir: SnapshotLocation | None = None,
    max_bytes: int | None = DEFAULT_MAX_FILE_BYTES,
) -> list[ProviderCitation]:
    """Every citation in a Messages API response, mapped to ``results`` and checked.

    ``message`` is the response (an ``anthropic.types.Message`` or its JSON);
    ``results`` are what was sent, in the same order, by
    ``to_anthropic_search_results`` or ``to_anthropic_documents``. The cited
    text must lie inside the cited result's span as its source reads now.
    """
    listed = _listed(results)
    mapper = _Mapper("anthropic", listed, allowed_base_dir, snapshot_dir, max_bytes)
    data = _as_data(message)
    blocks = data.get("content") if isinstance(data, Mapping) else None
    if not isinstance(blocks, list):
        raise RetrievalError("not a Messages API response: it has no content list")
    out: list[ProviderCitation] = []
    for block in blocks:
        if not isinstance(block, Mapping) or block.get("type") != "text":
            continue
        answer = str(block.get("text") or "")
        for c in block.get("citations") or []:
            if not isinstance(c, Mapping):
                continue
            out.append(await _anthropic_one(mapper, c, answer))
    return out


async def _anthropic_one(mapper: _Mapper, c: Mapping[str, Any], answer: str) -> ProviderCitation:
    kind = str(c.get("type"))
    cited = c.get("cited_text")
    cited = cited if isinstance(cited, str) else None
    results = mapper.results
    if kind == "search_result_location":
        index = _int(c.get("search_result_index"))
        if index is None or not 0 <= index < len(results):
            return mapper.unmapped(
                kind, answer, cited, f"search_result_index {index!r} names no result"
            )
        result = results[index]
        source = c.get("source")
        if source is not None and source != chunk_uri(result):
            return mapper.unmapped(
                kind,
                answer,
                cited,
                f"search result {index} is {chunk_uri(result)!r}, not {source!r}",
            )
        tiles = _blocks(result.content)
        first, last = _int(c.get("start_block_index")), _int(c.get("end_block_index"))
        located = None
        if first is not None and 0 <= first < len(tiles):
            stop = last if last is not None and first < last <= len(tiles) else first + 1
            located = (tiles[first][0], tiles[stop - 1][1])
        if cited is None:
            return await mapper.span_only(kind, answer, index)
        return await mapper.quoted(kind, answer, cited, index, located)
    if kind == "char_location":
        index = _int(c.get("document_index"))
        if index is None or not 0 <= index < len(results):
            return mapper.unmapped(kind, answer, cited, f"document_index {index!r} names no result")
        a, b = _int(c.get("start_char_index")), _int(c.get("end_char_index"))
        n = len(results[index].content)
        located = (a, b) if a is not None and b is not None and 0 <= a <= b <= n else None
        if cited is None:
            return await mapper.span_only(kind, answer, index)
        return await mapper.quoted(kind, answer, cited, index, located)
    return mapper.unmapped(
        kind, answer, cited, f"a {kind} citation does not point at a result sent"
    )


def _openai_texts(data: Any) -> Iterable[Mapping[str, Any]]:
    """The ``output_text`` parts of a Responses API response, output message or part list."""
    if isinstance(data, Mapping):
        if data.get("type") == "output_text":
            yield data
            return
        for key in ("output", "content"):
            items = data.get(key)
            if isinstance(items, list):
                for item in items:
                    yield from _openai_texts(item)
    elif isinstance(data, list):
        for item in data:
            yield from _openai_texts(_as_data(item))


async def from_openai_annotations(
    response: Any,
    results: Results,
    allowed_base_dir: Path | str,
    *,
    file_ids: Mapping[str, str] | None = None,
    snapshot_dir: SnapshotLocation | None = None,
    max_bytes: int | None = DEFAULT_MAX_FILE_BYTES,
) -> list[ProviderCitation]:
    """The ``file_citation`` and ``url_citation`` annotations of a Responses API
    response (or output message), mapped to ``results`` and checked.

    These annotations carry no cited text, so the check is that the result they
    stand for still reads as indexed. A ``file_citation`` maps through
    ``file_ids`` (uploaded file id -> chunk id) or else by ``filename`` equal to
    a result's source; a ``url_citation`` by its URL equal to a result's source.
    """
    listed = _listed(results)
    mapper = _Mapper("openai", listed, allowed_base_dir, snapshot_dir, max_bytes)
    by_chunk = {r.chunk_id: i for i, r in reversed(list(enumerate(listed)))}
    by_source = {r.source: i for i, r in reversed(list(enumerate(listed)))}
    out: list[ProviderCitation] = []
    for part in _openai_texts(_as_data(response)):
        text = str(part.get("text") or "")
        for note in part.get("annotations") or []:
            if not isinstance(note, Mapping):
                continue
            kind = str(note.get("type"))
            index: int | None = None
            answer = text
            if kind == "file_citation":
                file_id = str(note.get("file_id"))
                if file_ids is not None and file_id in file_ids:
                    index = by_chunk.get(file_ids[file_id])
                else:
                    index = by_source.get(str(note.get("filename")))
            elif kind == "url_citation":
                index = by_source.get(str(note.get("url")))
                a, b = _int(note.get("start_index")), _int(note.get("end_index"))
                if a is not None and b is not None and 0 <= a <= b <= len(text):
                    answer = text[a:b]
            else:
                out.append(
                    mapper.unmapped(kind, text, None, f"a {kind} annotation names no result")
                )
                continue
            if index is None:
                out.append(
                    mapper.unmapped(kind, answer, None, "no result sent has this file or URL")
                )
                continue
            out.append(await mapper.span_only(kind, answer, index))
    return out


def citations_of(found: Iterable[ProviderCitation]) -> list[Citation]:
    """The groundkit citations of the mapped, verified provider citations."""
    return [f.citation for f in found if f.ok and f.citation is not None]
