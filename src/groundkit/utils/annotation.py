"""Citations as W3C Web Annotations, and links that open a browser at the passage.

A receipt is a Web Annotation (https://www.w3.org/TR/annotation-model/) whose
target is the cited source with two selectors: a ``TextQuoteSelector`` (the
exact text, with the text around it when known) and a ``TextPositionSelector``
(code-point offsets into the text the source class defines). What only
groundkit needs to read the source back (source class, extractor identity,
document version, pages, the SHA-256 of the exact text) rides on the target
under the ``groundkit:`` prefix, declared in the annotation's ``@context`` as
the model's extension rule asks. ``verification.receipts`` reads them back.

Links follow two conventions: a URL gets a text directive
(``#:~:text=``, WICG "URL Fragment Text Directives"), whose parts percent-encode
``-``, ``&`` and ``,`` because those characters delimit the directive; a PDF
gets ``#page=N`` (RFC 8118), which PDF viewers honour and text directives do
not reach.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urldefrag

from groundkit.utils.hashing import sha256_text

__all__ = [
    "ANNOTATION_CONTEXT",
    "CONTEXT",
    "GROUNDKIT_NAMESPACE",
    "PREFIX",
    "QUOTE_CONTEXT_CHARS",
    "TextDirective",
    "content_hash",
    "encode_directive_part",
    "page_link",
    "parse_text_directive",
    "text_directive",
    "text_fragment_link",
    "web_annotation",
]

# The Web Annotation JSON-LD context; the model requires it (first, as here).
ANNOTATION_CONTEXT = "http://www.w3.org/ns/anno.jsonld"
# Where the ``groundkit:`` terms are described (docs/receipts.md).
GROUNDKIT_NAMESPACE = "https://github.com/groundkit/groundkit/blob/main/docs/receipts.md#"
PREFIX = "groundkit:"
CONTEXT: list[Any] = [ANNOTATION_CONTEXT, {"groundkit": GROUNDKIT_NAMESPACE}]
# How much text either side of a span a TextQuoteSelector carries (the amount
# re-anchoring compares, ``verification.anchoring.CONTEXT_CHARS``).
QUOTE_CONTEXT_CHARS = 32
# A passage longer than this many words is linked by its first and last words.
_WHOLE_WORDS = 10
_EDGE_WORDS = 5


def content_hash(text: str) -> str:
    """``sha256:<hex>`` of ``text`` as UTF-8: what a receipt's exact text must hash to."""
    return "sha256:" + sha256_text(text)


def web_annotation(
    source: str,
    start: int,
    end: int,
    exact: str,
    *,
    prefix: str | None = None,
    suffix: str | None = None,
    extensions: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The annotation for ``exact`` at ``start``..``end`` of ``source``.

    ``extensions`` are target properties named without the ``groundkit:``
    prefix; None values are left out. The id is derived from the target, so the
    same citation gives the same annotation every run.
    """
    quote_selector: dict[str, Any] = {"type": "TextQuoteSelector", "exact": exact}
    if prefix:
        quote_selector["prefix"] = prefix
    if suffix:
        quote_selector["suffix"] = suffix
    target: dict[str, Any] = {
        "source": source,
        "selector": [
            quote_selector,
            {"type": "TextPositionSelector", "start": start, "end": end},
        ],
    }
    for name, value in (extensions or {}).items():
        if value is not None:
            target[PREFIX + name] = value
    target[PREFIX + "contentHash"] = content_hash(exact)
    key = "\x1f".join([source, str(start), str(end), target[PREFIX + "contentHash"]])
    return {
        "@context": CONTEXT,
        "id": f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, GROUNDKIT_NAMESPACE + key)}",
        "type": "Annotation",
        "target": target,
    }


# -- links -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TextDirective:
    """The parts of a ``text=`` directive, decoded: ``[prefix-,]start[,end][,-suffix]``."""

    start: str
    end: str | None = None
    prefix: str | None = None
    suffix: str | None = None


def encode_directive_part(text: str) -> str:
    """``text`` percent-encoded for a text directive: every character but ASCII letters,
    digits and ``_.~``, so ``-``, ``&`` and ``,`` (the directive's delimiters) and
    anything a URL fragment may not hold are escaped (UTF-8)."""
    return quote(text, safe="").replace("-", "%2D")


def text_directive(
    start: str, end: str | None = None, *, prefix: str | None = None, suffix: str | None = None
) -> str:
    """``text=...`` for the given parts; each part must be non-empty."""
    for name, part in (("start", start), ("end", end), ("prefix", prefix), ("suffix", suffix)):
        if part is not None and not part:
            raise ValueError(f"a text directive's {name} cannot be empty")
    parts = [encode_directive_part(start)]
    if prefix is not None:
        parts.insert(0, encode_directive_part(prefix) + "-")
    if end is not None:
        parts.append(encode_directive_part(end))
    if suffix is not None:
        parts.append("-" + encode_directive_part(suffix))
    return "text=" + ",".join(parts)


def parse_text_directive(link: str) -> TextDirective | None:
    """The first text directive of ``link``'s fragment, decoded; None when it has none.
    ``ValueError`` for a text directive that does not parse."""
    _, _, fragment = link.partition("#")
    _, marker, directives = fragment.partition(":~:")
    if not marker:
        return None
    for directive in directives.split("&"):
        if not directive.startswith("text="):
            continue
        parts = directive[len("text=") :].split(",")
        prefix = suffix = None
        if len(parts) > 1 and parts[0].endswith("-"):
            prefix = unquote(parts.pop(0)[:-1])
        if len(parts) > 1 and parts[-1].startswith("-"):
            suffix = unquote(parts.pop()[1:])
        if not 1 <= len(parts) <= 2 or not all(parts):
            raise ValueError(f"malformed text directive {directive!r}")
        decoded = [unquote(p) for p in parts]
        return TextDirective(
            decoded[0], decoded[1] if len(decoded) > 1 else None, prefix=prefix, suffix=suffix
        )
    return None


def text_fragment_link(url: str, exact: str) -> str:
    """``url`` with a text directive that highlights ``exact``: the passage itself when
    short, else its first and last words (browsers match words, whitespace collapsed).
    ``url`` as given when ``exact`` has no words."""
    words = exact.split()
    if not words:
        return url
    if len(words) <= _WHOLE_WORDS:
        directive = text_directive(" ".join(words))
    else:
        directive = text_directive(" ".join(words[:_EDGE_WORDS]), " ".join(words[-_EDGE_WORDS:]))
    # The directive follows the page's own fragment, if it has one (``#sec:~:text=``).
    return url + (":~:" if "#" in url else "#:~:") + directive


def page_link(source: str, page: int, *, is_url: bool) -> str:
    """``source#page=N``: a URL with its own fragment replaced, a path percent-encoded
    into a relative URI reference (so ``#`` or a space in a file name stays a name)."""
    base = urldefrag(source).url if is_url else quote(source, safe="/")
    return f"{base}#page={page}"
