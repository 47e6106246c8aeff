"""Receipts: citations carried as W3C Web Annotations, checked back with no index.

``Citation.to_annotation`` (and ``RetrievalResult``/``FetchResult.to_annotation``)
writes one; this module reads them (a JSON array, one JSON object, or JSON Lines),
writes files of them, and checks them against a source tree. A check reads the
source the way every other entry point does (``sources.read_source``), looks for
the exact text where the offsets lost it (``verdict.find_again``, with the receipt's
prefix and suffix standing for the indexed context when the text is there more
than once) and lets ``verdict.judge`` decide, so a receipt gets the verdict
``Collection.verify`` gives the same citation.

A receipt that cannot be read as a citation raises ``ReceiptError`` naming it
(its place in the file, and the line for JSON Lines) and what is wrong; nothing
is checked until every receipt of a file reads.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

from groundkit.config import DEFAULT_MAX_FILE_BYTES
from groundkit.contracts import (
    STORED_TEXT_CLASSES,
    Citation,
    FetchResult,
    SourceClass,
    checked_citation,
)
from groundkit.errors import ConfigurationError, InvalidQueryError, ReceiptError, RetrievalError
from groundkit.storage.snapshots import SnapshotLocation
from groundkit.utils.annotation import ANNOTATION_CONTEXT, PREFIX, content_hash
from groundkit.utils.durable import write_atomically
from groundkit.utils.file_reads import NotRegularFileError, read_regular_file
from groundkit.utils.json_objects import unique_object
from groundkit.utils.path_safety import base_directory
from groundkit.utils.text import describe_unencodable
from groundkit.verification.anchoring import CONTEXT_CHARS, Anchor
from groundkit.verification.sources import check_read_options, read_source, source_key
from groundkit.verification.verdict import find_again, judge

__all__ = [
    "Receipt",
    "check_receipts",
    "dump_receipts",
    "parse_receipt",
    "parse_receipts",
    "read_receipts",
    "write_receipts",
]

_SOURCE_CLASSES: tuple[str, ...] = get_args(SourceClass)
# The groundkit terms a receipt's target may carry, and the JSON type of each.
_TERMS: dict[str, type] = {
    "sourceClass": str,
    "extractor": str,
    "documentId": str,
    "chunkId": str,
    "version": int,
    "page": int,
    "endPage": int,
    "collection": str,
    "link": str,
    "contentHash": str,
    # [[page, x0, y0, x1, y1], ...]: where the span stands on its PDF pages.
    "rects": list,
}
_JSON_LINES_SUFFIXES = (".jsonl", ".ndjson")


@dataclass(frozen=True, slots=True)
class Receipt:
    """One receipt read back: the citation, the exact text it stands for, and the
    source text around it when the receipt carried it."""

    citation: Citation
    exact: str
    prefix: str | None = None
    suffix: str | None = None
    # Its place in the file it was read from (1-based).
    number: int = 1


class _Bad(Exception):
    """What is wrong with a receipt, before it is given its number."""


def _types(value: object) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _one(value: object, what: str) -> dict[str, Any]:
    items = _types(value)
    if len(items) != 1 or not isinstance(items[0], dict):
        raise _Bad(f"{what} must be one JSON object")
    return items[0]


def _text(holder: Mapping[str, Any], key: str, where: str, *, required: bool) -> str | None:
    value = holder.get(key)
    if value is None:
        if required:
            raise _Bad(f"{where} has no {key!r}")
        return None
    if not isinstance(value, str):
        raise _Bad(f"{where} {key!r} must be a string, not {type(value).__name__}")
    # JSON's \ud800 escapes read as lone surrogates, which no source text holds.
    problem = describe_unencodable(value, f"{where} {key!r}")
    if problem is not None:
        raise _Bad(problem)
    return value


def _named(value: object) -> str:
    """``value`` as a message may show it (SPEC 8.4): a number, or a short one-line
    string; anything else by its type alone (a receipt may hold a document's text)."""
    if isinstance(value, int | float) and len(repr(value)) <= 24:  # True and False too
        return repr(value)
    if isinstance(value, str) and len(value) <= 32 and value.isprintable():
        return repr(value)
    if isinstance(value, str):
        return f"a string of {len(value):,} characters"
    return "null" if value is None else f"a {type(value).__name__}"


def _offset(holder: Mapping[str, Any], key: str) -> int:
    value = holder.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _Bad(
            f"the TextPositionSelector {key!r} must be a whole number >= 0, not {_named(value)}"
        )
    return value


def _selectors(target: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for selector in _types(target.get("selector")):
        if not isinstance(selector, dict):
            raise _Bad("each selector must be a JSON object")
        kinds = _types(selector.get("type"))
        for kind in ("TextQuoteSelector", "TextPositionSelector"):
            if kind in kinds:
                found.setdefault(kind, []).append(selector)
    picked = []
    for kind in ("TextQuoteSelector", "TextPositionSelector"):
        got = found.get(kind, [])
        if len(got) != 1:
            raise _Bad(f"the target needs exactly one {kind}, it has {len(got)}")
        picked.append(got[0])
    return picked[0], picked[1]


def _terms(target: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, kind in _TERMS.items():
        value = target.get(PREFIX + name)
        if value is None:
            continue
        if not isinstance(value, kind) or isinstance(value, bool):
            raise _Bad(f"{PREFIX}{name} must be a {kind.__name__}, not {type(value).__name__}")
        out[name] = value
    return out


def _receipt(annotation: object, number: int) -> Receipt:
    if not isinstance(annotation, dict):
        raise _Bad(f"a receipt is a JSON object, not {type(annotation).__name__}")
    if ANNOTATION_CONTEXT not in _types(annotation.get("@context")):
        raise _Bad(f"its @context does not name {ANNOTATION_CONTEXT!r}")
    if "Annotation" not in _types(annotation.get("type")):
        raise _Bad("its type is not 'Annotation'")
    target = _one(annotation.get("target"), "its target")
    source = _text(target, "source", "the target", required=True)
    if not source:
        raise _Bad("the target's source is empty")
    quote, position = _selectors(target)
    exact = _text(quote, "exact", "the TextQuoteSelector", required=True)
    assert exact is not None
    if not exact:
        # An empty span is found at every offset of every file: it would always verify.
        raise _Bad("the TextQuoteSelector 'exact' is empty: a receipt stands for some text")
    prefix = _text(quote, "prefix", "the TextQuoteSelector", required=False)
    suffix = _text(quote, "suffix", "the TextQuoteSelector", required=False)
    start, end = _offset(position, "start"), _offset(position, "end")
    if end - start != len(exact):
        raise _Bad(
            f"the TextPositionSelector spans {start}..{end} ({end - start} characters) but "
            f"the exact text has {len(exact)}"
        )
    terms = _terms(target)
    expected = terms.get("contentHash")
    if expected is not None and expected != content_hash(exact):
        raise _Bad(
            "its exact text does not hash to its groundkit:contentHash (the text was "
            "changed after the receipt was made)"
        )
    source_class = terms.get("sourceClass", "text")
    if source_class not in _SOURCE_CLASSES:
        raise _Bad(
            f"groundkit:sourceClass {_named(source_class)} is not one of "
            f"{', '.join(_SOURCE_CLASSES)}"
        )
    if source_class in STORED_TEXT_CLASSES and not terms.get("documentId"):
        raise _Bad(
            f"a {source_class!r} receipt needs groundkit:documentId (its text is read from "
            "the collection's snapshot store by document id)"
        )
    try:
        citation = Citation(
            document_id=terms.get("documentId", ""),
            chunk_id=terms.get("chunkId", ""),
            source=source,
            source_class=source_class,
            extractor=terms.get("extractor"),
            start_offset=start,
            end_offset=end,
            page=terms.get("page"),
            version=terms.get("version"),
            end_page=terms.get("endPage"),
            rects=terms.get("rects", ()),
        )
    except InvalidQueryError as exc:
        raise _Bad(str(exc).removeprefix("invalid Citation: ")) from None
    return Receipt(citation, exact, prefix or None, suffix or None, number)


def parse_receipt(annotation: object, number: int = 1, *, line: int | None = None) -> Receipt:
    """``annotation`` (a dict from ``to_annotation``, or parsed JSON) as a receipt;
    ``ReceiptError`` naming it by ``number`` (and ``line``) when it is not one."""
    try:
        return _receipt(annotation, number)
    except _Bad as exc:
        where = f"receipt {number}" + (f" (line {line})" if line is not None else "")
        raise ReceiptError(f"{where}: {exc}", number=number) from None


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_no_constant, object_pairs_hook=unique_object)
_BLANK = re.compile(r"[ \t\n\r]*")


def _past_blanks(text: str, at: int) -> int:
    found = _BLANK.match(text, at)
    return at if found is None else found.end()


def _too_deep() -> ReceiptError:
    # Python's parser gives up about a thousand levels down; no receipt is that deep.
    return ReceiptError(
        "the receipts file is nested too deeply to hold receipts (JSON arrays or "
        "objects inside each other, hundreds of levels down)"
    )


def _load(text: str) -> Any:
    try:
        return _DECODER.decode(text)
    except RecursionError:
        raise _too_deep() from None


def _not_json(number: int, line: int, exc: ValueError) -> ReceiptError:
    return ReceiptError(
        f"receipt {number} (line {line}) is not JSON: {exc}; a receipts file is a JSON "
        "array or JSON Lines (one annotation per line)",
        number=number,
    )


def _array_error(text: str) -> ReceiptError:
    """What is wrong with ``text``, a JSON array that did not parse, named by the receipt
    it is in: the array is read item by item, as the whole parse would have."""
    at = _past_blanks(text, 0) + 1  # past "["
    number = 1
    while True:
        at = _past_blanks(text, at)
        if number == 1 and text.startswith("]", at):
            at += 1
            break
        line = text.count("\n", 0, at) + 1
        try:
            _, at = _DECODER.raw_decode(text, at)
        except RecursionError:
            return _too_deep()
        except ValueError as exc:
            return _not_json(number, line, exc)
        at = _past_blanks(text, at)
        if text.startswith("]", at):
            at += 1
            break
        if not text.startswith(",", at):
            line = text.count("\n", 0, at) + 1
            return _not_json(number, line, ValueError("expected ',' or ']' after it"))
        at, number = at + 1, number + 1
    line = text.count("\n", 0, at) + 1
    return ReceiptError(f"the receipts file holds text after its JSON array (line {line})")


def parse_receipts(text: str) -> list[Receipt]:
    """The receipts in ``text``: a JSON array of annotations, one annotation, or JSON
    Lines (one per line; blank lines skipped)."""
    out: list[Receipt] = []
    try:
        whole = _load(text)
    except ValueError as exc:
        if text.lstrip(" \t\n\r").startswith("["):
            raise _array_error(text) from None
        first = text.lstrip(" \t\n\r").split("\n", 1)[0]
        try:
            if first:
                _load(first)
        except ValueError:
            # Not JSON Lines either: one annotation written over several lines.
            starts = text.count("\n", 0, len(text) - len(text.lstrip())) + 1
            raise _not_json(1, starts, exc) from None
    else:
        items = whole if isinstance(whole, list) else [whole]
        out = [parse_receipt(item, n) for n, item in enumerate(items, 1)]
        if not out:
            raise ReceiptError("the receipts file holds no receipt (an empty array)")
        return out
    # JSON Lines ends a line at "\n" only: a JSON string may hold U+2028, U+2029 or U+0085
    # unescaped (``json.dumps(ensure_ascii=False)`` writes them so), which
    # ``str.splitlines`` would take for line ends.
    for line_number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        number = len(out) + 1
        try:
            item = _load(line)
        except ValueError as exc:
            raise _not_json(number, line_number, exc) from None
        out.append(parse_receipt(item, number, line=line_number))
    if not out:
        raise ReceiptError("the receipts file holds no receipt")
    return out


def _file(path: object, what: str) -> Path:
    """``path`` as a ``Path``; ``InvalidQueryError`` for what names no file."""
    if not isinstance(path, str | os.PathLike) or isinstance(os.fspath(path), bytes):
        raise InvalidQueryError(
            f"the receipts file to {what} is a path (str or os.PathLike), not {type(path).__name__}"
        )
    if "\x00" in os.fspath(path):
        raise InvalidQueryError(f"the receipts file to {what} has a NUL character in its name")
    return Path(path)


def _iterable(items: object, what: str) -> None:
    """``ReceiptError`` for ``items`` that are no list of receipts (``None``, a number,
    one annotation given bare)."""
    if isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
        raise ReceiptError(
            f"{what} takes a list of receipts (annotations as Citation.to_annotation() "
            f"gives, or Receipt objects), not {type(items).__name__}"
        )


async def read_receipts(path: Path | str) -> list[Receipt]:
    """The receipts in the file at ``path`` (``parse_receipts``)."""
    where = _file(path, "read")
    try:
        # A regular file only: a FIFO would wait for a writer for ever, /dev/zero never end.
        data = await asyncio.to_thread(read_regular_file, where)
    except NotRegularFileError:
        raise ConfigurationError(
            f"cannot read receipts file {str(where)!r}: not a regular file"
        ) from None
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read receipts file {str(where)!r}: {exc.strerror or exc}"
        ) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ReceiptError(f"receipts file {str(where)!r} is not UTF-8") from None
    return parse_receipts(text)


def dump_receipts(annotations: Iterable[Mapping[str, Any]], *, lines: bool = True) -> str:
    """``annotations`` as JSON Lines (default) or as one JSON array; ``ReceiptError``
    naming the first that is no mapping or holds what JSON cannot (NaN, an object)."""
    _iterable(annotations, "writing receipts")
    items: list[dict[str, Any]] = []
    for number, annotation in enumerate(annotations, 1):
        if not isinstance(annotation, Mapping):
            raise ReceiptError(
                f"receipt {number} is a {type(annotation).__name__}, not an annotation "
                "(a mapping, as Citation.to_annotation() gives)",
                number=number,
            )
        item = dict(annotation)
        try:
            # Encoded as the file will be: a lone surrogate passes json.dumps and then
            # fails the UTF-8 write.
            json.dumps(item, ensure_ascii=False, allow_nan=False).encode("utf-8")
        except (TypeError, ValueError, RecursionError) as exc:
            raise ReceiptError(
                f"receipt {number} cannot be written as JSON: {exc}", number=number
            ) from None
        items.append(item)
    if lines:
        return "".join(json.dumps(a, ensure_ascii=False, allow_nan=False) + "\n" for a in items)
    return json.dumps(items, ensure_ascii=False, allow_nan=False, indent=2) + "\n"


async def write_receipts(path: Path | str, annotations: Iterable[Mapping[str, Any]]) -> None:
    """Write ``annotations`` to ``path``: JSON Lines for a ``.jsonl``/``.ndjson`` name,
    a JSON array otherwise. The file is replaced whole (written beside it, then
    renamed), so a crash leaves the old file or the new one, never half of one."""
    where = _file(path, "write")
    text = dump_receipts(annotations, lines=where.suffix.lower() in _JSON_LINES_SUFFIXES)
    try:
        await asyncio.to_thread(write_atomically, where, [text.encode("utf-8")])
    except OSError as exc:
        raise ConfigurationError(
            f"cannot write receipts file {str(where)!r}: {exc.strerror or exc}"
        ) from None


def _made(receipt: Receipt, number: int) -> Receipt:
    """A ``Receipt`` built by hand, checked as one read from a file is: a citation that
    passes ``Citation``'s checks and an exact text as long as its span."""
    citation, exact = receipt.citation, receipt.exact
    if not isinstance(citation, Citation) or not isinstance(exact, str):
        raise ReceiptError(
            f"receipt {number}: a Receipt holds a Citation and its exact text (a str), not "
            f"{type(citation).__name__} and {type(exact).__name__}",
            number=number,
        )
    try:
        checked_citation(citation)
    except InvalidQueryError as exc:
        raise ReceiptError(f"receipt {number}: {exc}", number=number) from None
    if citation.end_offset - citation.start_offset != len(exact):
        raise ReceiptError(
            f"receipt {number}: its citation spans {citation.start_offset}.."
            f"{citation.end_offset} but its exact text has {len(exact)} characters",
            number=number,
        )
    if not exact:
        raise ReceiptError(
            f"receipt {number}: its exact text is empty: a receipt stands for some text",
            number=number,
        )
    return receipt


async def _anchor(receipt: Receipt, text: str) -> Anchor | None:
    """Found again as a collection finds it, with the receipt's prefix and suffix for
    the indexed context."""

    async def around() -> tuple[str, str] | None:
        if not (receipt.prefix or receipt.suffix):
            return None
        # Only the CONTEXT_CHARS nearest the text count, as a collection's context: each
        # occurrence weighed searches them, so a 4 MB prefix cost seconds per receipt.
        prefix, suffix = receipt.prefix or "", receipt.suffix or ""
        return prefix[max(0, len(prefix) - CONTEXT_CHARS) :], suffix[:CONTEXT_CHARS]

    return await find_again(receipt.exact, receipt.citation, text, around)


async def check_receipts(
    receipts: Sequence[Receipt | Mapping[str, Any]],
    allowed_base_dir: Path | str,
    *,
    snapshot_dir: SnapshotLocation | None = None,
    max_bytes: int | None = DEFAULT_MAX_FILE_BYTES,
) -> list[FetchResult]:
    """The verdict on each receipt, in order, against its source as it reads now.

    ``receipts`` are ``Receipt`` objects or annotations (parsed first; a malformed
    one raises ``ReceiptError`` before anything is read). Sources are read from
    ``allowed_base_dir`` (``snapshot_dir`` for URL and record receipts), each once.
    Never raises for a source problem: that is the verdict.
    """
    _iterable(receipts, "check_receipts")
    parsed = [
        _made(r, n) if isinstance(r, Receipt) else parse_receipt(r, n)
        for n, r in enumerate(receipts, 1)
    ]
    base = base_directory(allowed_base_dir, "allowed_base_dir")
    check_read_options(snapshot_dir, max_bytes)
    texts: dict[tuple[str, str, str | None, str], str | RetrievalError] = {}
    out: list[FetchResult] = []
    for receipt in parsed:
        citation = receipt.citation
        key = source_key(citation)
        if key not in texts:
            try:
                texts[key] = await read_source(
                    citation, base, snapshot_dir=snapshot_dir, max_bytes=max_bytes
                )
            except RetrievalError as exc:
                texts[key] = exc
        text = texts[key]
        if isinstance(text, RetrievalError):
            out.append(judge(receipt.exact, citation, None, text))
            continue
        out.append(judge(receipt.exact, citation, text, None, await _anchor(receipt, text)))
    return out
