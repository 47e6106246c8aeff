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

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from groundkit.config import DEFAULT_MAX_FILE_BYTES
from groundkit.contracts import (
    Citation,
    FetchResult,
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
# Up to this many citations are judged on the event loop: fewer take less time than
# handing them to a worker thread would.
_INLINE_CITATIONS = 32


def chunk_uri(result: RetrievalResult) -> str:
    """``groundkit://<collection>/chunks/<chunk_id>``: the name a host can read the chunk by."""
    if not isinstance(result, RetrievalResult):
        raise RetrievalError(f"chunk_uri takes a RetrievalResult, not {type(result).__name__}")
    return f"groundkit://{result.collection or ''}/chunks/{result.chunk_id}"


def _title(result: RetrievalResult) -> str:
    pages = result.citation.pages
    return f"{result.source} [{result.start_offset}:{result.end_offset}]" + (
        f" {pages}" if pages else ""
    )


def _listed(results: Results) -> list[RetrievalResult]:
    if isinstance(results, SearchResponse):
        return list(results.results)
    if not isinstance(results, Sequence) or isinstance(results, str | bytes):
        raise RetrievalError(
            f"results must be a SearchResponse or a list of RetrievalResult objects, not "
            f"{type(results).__name__}"
        )
    listed = list(results)
    for r in listed:
        if not isinstance(r, RetrievalResult):
            raise RetrievalError(f"results must be RetrievalResult objects, not {type(r).__name__}")
    return listed


def _switch(citations: object) -> bool:
    """``citations=`` as the API wants it: a bool ("yes" went out as ``"enabled": "yes"``,
    which the API refuses only once the request is sent)."""
    if not isinstance(citations, bool):
        raise RetrievalError(f"citations must be True or False, not {type(citations).__name__}")
    return citations


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
    enabled = _switch(citations)
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
                "citations": {"enabled": enabled},
            }
        )
    return out


def to_anthropic_documents(results: Results, *, citations: bool = True) -> list[dict[str, Any]]:
    """Messages API plain-text ``document`` blocks, one per result, in order, for
    ``char_location`` citations (character offsets into each result's content)."""
    enabled = _switch(citations)
    return [
        {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": r.content},
            "title": _title(r),
            "context": chunk_uri(r),
            "citations": {"enabled": enabled},
        }
        for r in _listed(results)
    ]


@dataclass(frozen=True, slots=True)
class _Found:
    """One provider citation, read and mapped to a result index (or why not), not yet checked."""

    kind: str
    answer: str
    cited: str | None = None
    index: int | None = None
    unmapped: str | None = None  # why it names no result
    located: tuple[int, int] | None = None


def _as_data(message: Any) -> Any:
    dump = getattr(message, "model_dump", None)
    if not callable(dump):
        return message
    try:
        return dump(mode="json")
    except Exception as exc:  # a third-party object's own failure, reported as ours
        raise RetrievalError(
            f"could not read the {type(message).__name__} as JSON ({type(exc).__name__}: "
            f"{_shown(str(exc))}); pass the response's JSON (a dict) instead"
        ) from None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _shown(value: Any) -> str:
    """A short, safe rendering of a value from a response, for a message: never the
    repr of a deep or huge structure, nor of an integer too long to print."""
    if isinstance(value, str):
        return repr(value if len(value) <= 60 else value[:59] + "\u2026")
    if isinstance(value, int) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    if value is None or isinstance(value, int | float):
        return repr(value)
    return f"a {type(value).__name__}"


_KINDS = {list: "a list", str: "a string", int: "an integer"}


def _field(
    item: Mapping[str, Any], key: str, path: str, kind: type, *, required: bool = False
) -> Any:
    """``item[key]`` when it has the documented type; absent or null gives None unless
    ``required``; anything else is a ``RetrievalError`` naming where in the response."""
    value = item.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise RetrievalError(
            f"malformed provider response: {path}.{key} should be "
            f"{_KINDS.get(kind, kind.__name__)}, not {_shown(value)}"
        )
    return value


def _mapping(item: Any, path: str) -> Mapping[str, Any]:
    item = _as_data(item)
    if not isinstance(item, Mapping):
        raise RetrievalError(
            f"malformed provider response: {path} should be an object, not {_shown(item)}"
        )
    return item


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
        self.citations = [r.citation for r in results]
        self._tiles: dict[int, list[tuple[int, int]]] = {}
        # Per result named: the verdict on its span, as every entry point gives it.
        self._verdicts: dict[int, FetchResult] = {}

    def tiles(self, index: int) -> list[tuple[int, int]]:
        """Result ``index``'s blocks, split once however many citations name it."""
        found = self._tiles.get(index)
        if found is None:
            found = self._tiles[index] = _blocks(self.results[index].content)
        return found

    async def read(self, found: Sequence[_Found]) -> None:
        """Judge the span of every result named, reading each source once."""
        for index in sorted({f.index for f in found if f.index is not None}):
            self._verdicts[index] = await self.checker.span_verdict(self.results[index])

    def checked(self, found: _Found) -> ProviderCitation:
        """The verdict on one citation, from the spans ``read`` judged: CPU only."""
        if found.index is None:
            return self.made(found, "unmapped", found.unmapped or "it names no result")
        if found.cited is not None:
            return self.quoted(found, found.index)
        return self.span_only(found, found.index)

    def made(
        self, found: _Found, verdict: ProviderVerdict, detail: str, **more: Any
    ) -> ProviderCitation:
        return ProviderCitation(
            provider=self.provider,
            kind=found.kind,
            answer_text=found.answer,
            cited_text=found.cited,
            verdict=verdict,
            detail=detail,
            **more,
        )

    def quoted(self, found: _Found, index: int) -> ProviderCitation:
        """The cited text checked inside result ``index``'s span."""
        result = self.results[index]
        cited = found.cited or ""  # set: only citations with cited text come here
        check = self.checker.check_read(
            cited, self.citations[index], result.content, self._verdicts[index]
        )
        detail = check.detail
        if check.ok and found.located is not None:
            a, b = found.located
            if cited.strip() and cited.strip() not in result.content[a:b]:
                detail += (
                    f"; the provider located it at {a}..{b} of the result, which reads otherwise"
                )
        return self.made(
            found,
            check.verdict,
            detail,
            result_index=index,
            citation=self.citations[index],
            start_offset=check.start_offset,
            end_offset=check.end_offset,
        )

    def span_only(self, found: _Found, index: int) -> ProviderCitation:
        """No cited text: the result's span itself must still verify."""
        citation = self.citations[index]
        span = self._verdicts[index]
        if span.verification in ("drifted", "unresolvable"):
            return self.made(
                found, span.verification, span.detail, result_index=index, citation=citation
            )
        if span.verification == "moved":
            return self.made(
                found,
                "moved",
                span.detail,
                result_index=index,
                citation=citation,
                start_offset=span.current_start_offset,
                end_offset=span.current_end_offset,
            )
        return self.made(
            found,
            "verified",
            "the cited result's span holds its text now",
            result_index=index,
            citation=citation,
            start_offset=citation.start_offset,
            end_offset=citation.end_offset,
        )


async def _checked(mapper: _Mapper, read: Callable[[], list[_Found]]) -> list[ProviderCitation]:
    """Read the response (CPU, in a worker thread: it may be any size), read the
    sources it names (I/O, once each), then judge every citation (CPU, in a worker
    thread unless there are only a few)."""
    found = await asyncio.to_thread(read)
    await mapper.read(found)
    if len(found) <= _INLINE_CITATIONS:
        return [mapper.checked(f) for f in found]
    return await asyncio.to_thread(lambda: [mapper.checked(f) for f in found])


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
    text must lie inside the cited result's span as its source reads now. A
    response that does not have the documented shape (a field of the wrong
    type, a block or citation that is not an object) raises ``RetrievalError``
    naming the field; an index that names no result is an ``unmapped`` citation.
    """
    listed = _listed(results)
    mapper = _Mapper("anthropic", listed, allowed_base_dir, snapshot_dir, max_bytes)

    def read() -> list[_Found]:
        data = _as_data(message)
        blocks = data.get("content") if isinstance(data, Mapping) else None
        if not isinstance(blocks, list):
            raise RetrievalError("not a Messages API response: it has no content list")
        out: list[_Found] = []
        for i, raw in enumerate(blocks):
            block = _mapping(raw, f"content[{i}]")
            if block.get("type") != "text":
                continue
            path = f"content[{i}]"
            answer = _field(block, "text", path, str) or ""
            for k, c in enumerate(_field(block, "citations", path, list) or []):
                out.append(
                    _anthropic_one(
                        mapper,
                        _mapping(c, f"{path}.citations[{k}]"),
                        answer,
                        f"{path}.citations[{k}]",
                    )
                )
        return out

    return await _checked(mapper, read)


def _anthropic_one(mapper: _Mapper, c: Mapping[str, Any], answer: str, path: str) -> _Found:
    kind = _field(c, "type", path, str, required=True)
    cited = _field(c, "cited_text", path, str)
    results = mapper.results
    if kind == "search_result_location":
        index = _int(c.get("search_result_index"))
        if index is None or not 0 <= index < len(results):
            why = f"search_result_index {_shown(c.get('search_result_index'))} names no result"
            return _Found(kind, answer, cited, unmapped=why)
        source = _field(c, "source", path, str)
        if source is not None and source != chunk_uri(results[index]):
            why = f"search result {index} is {chunk_uri(results[index])!r}, not {_shown(source)}"
            return _Found(kind, answer, cited, unmapped=why)
        tiles = mapper.tiles(index)
        first, last = _int(c.get("start_block_index")), _int(c.get("end_block_index"))
        located = None
        if first is not None and 0 <= first < len(tiles):
            stop = last if last is not None and first < last <= len(tiles) else first + 1
            located = (tiles[first][0], tiles[stop - 1][1])
        return _Found(kind, answer, cited, index, located=located)
    if kind == "char_location":
        index = _int(c.get("document_index"))
        if index is None or not 0 <= index < len(results):
            why = f"document_index {_shown(c.get('document_index'))} names no result"
            return _Found(kind, answer, cited, unmapped=why)
        a, b = _int(c.get("start_char_index")), _int(c.get("end_char_index"))
        n = len(results[index].content)
        located = (a, b) if a is not None and b is not None and 0 <= a <= b <= n else None
        return _Found(kind, answer, cited, index, located=located)
    why = f"a {_shown(kind)} citation does not point at a result sent"
    return _Found(kind, answer, cited, unmapped=why)


def _openai_texts(data: Any) -> list[tuple[str, Mapping[str, Any]]]:
    """The ``output_text`` parts of a Responses API response, output message or part
    list, with where each is: only the documented levels are walked (response,
    output item, content part), so no nesting makes this recurse."""
    out: list[tuple[str, Mapping[str, Any]]] = []
    # (path, item, levels below it that may still hold parts)
    todo: list[tuple[str, Any, int]] = []
    if isinstance(data, list):
        todo.extend((f"[{i}]", item, 1) for i, item in enumerate(data))
    else:
        todo.append(("response", data, 2))
    at = 0
    while at < len(todo):
        path, raw, depth = todo[at]
        at += 1
        item = _as_data(raw)
        if not isinstance(item, Mapping):
            continue  # not a message or part (a reasoning summary string, say)
        if item.get("type") == "output_text":
            out.append((path, item))
            continue
        if depth == 0:
            continue
        for key in ("output", "content"):
            items = item.get(key)
            if isinstance(items, list):
                todo.extend((f"{path}.{key}[{i}]", sub, depth - 1) for i, sub in enumerate(items))
    return out


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
    An ``output_text`` part or annotation of the wrong shape raises
    ``RetrievalError`` naming the field.
    """
    listed = _listed(results)
    if file_ids is not None and not isinstance(file_ids, Mapping):
        raise RetrievalError(
            f"file_ids must map uploaded file ids to chunk ids, not {type(file_ids).__name__}"
        )
    ids = dict(file_ids or {})
    for file_id, chunk_id in ids.items():
        if not isinstance(file_id, str) or not isinstance(chunk_id, str):
            raise RetrievalError(
                "file_ids must map uploaded file ids (str) to chunk ids (str); "
                f"found a {type(file_id).__name__} mapped to a {type(chunk_id).__name__}"
            )
    mapper = _Mapper("openai", listed, allowed_base_dir, snapshot_dir, max_bytes)
    by_chunk = {r.chunk_id: i for i, r in reversed(list(enumerate(listed)))}
    by_source = {r.source: i for i, r in reversed(list(enumerate(listed)))}

    def read() -> list[_Found]:
        data = _as_data(response)
        if not isinstance(data, Mapping | list):
            # Not a response at all (None, its output_text string): saying "no
            # citations" would read as an answer that cites nothing.
            raise RetrievalError(
                f"not a Responses API response, output message or list of them: "
                f"{_shown(data)}; pass the response object or its JSON"
            )
        if (
            isinstance(data, Mapping)
            and data  # {}: a response with nothing in it
            and not (data.get("type") == "output_text" or "output" in data or "content" in data)
        ):
            # A Chat Completions response (``choices``) or anything else: none of its
            # annotations would be read, and "no citations" would be a false answer.
            hint = " (a Chat Completions response: its annotations are not read)"
            raise RetrievalError(
                "not a Responses API response, output message or output_text part: it has "
                f"no 'output' or 'content'{hint if 'choices' in data else ''}"
            )
        out: list[_Found] = []
        for path, part in _openai_texts(data):
            text = _field(part, "text", path, str) or ""
            for k, raw in enumerate(_field(part, "annotations", path, list) or []):
                where = f"{path}.annotations[{k}]"
                note = _mapping(raw, where)
                kind = _field(note, "type", where, str, required=True)
                if kind == "file_citation":
                    file_id = _field(note, "file_id", where, str)
                    if file_id is not None and file_id in ids:
                        index = by_chunk.get(ids[file_id])
                    else:
                        index = by_source.get(_field(note, "filename", where, str))
                    answer = text
                elif kind == "url_citation":
                    index = by_source.get(_field(note, "url", where, str))
                    a, b = _int(note.get("start_index")), _int(note.get("end_index"))
                    ok = a is not None and b is not None and 0 <= a <= b <= len(text)
                    answer = text[a:b] if ok else text
                else:
                    why = f"a {_shown(kind)} annotation names no result"
                    out.append(_Found(kind, text, unmapped=why))
                    continue
                why = "no result sent has this file or URL"
                out.append(
                    _Found(kind, answer, index=index, unmapped=why if index is None else None)
                )
        return out

    return await _checked(mapper, read)


def citations_of(found: Iterable[ProviderCitation]) -> list[Citation]:
    """The groundkit citations of the mapped, verified provider citations."""
    return [f.citation for f in found if f.ok and f.citation is not None]
