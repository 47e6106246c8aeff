"""Deterministic query rewriting: extra phrasings searched alongside the user's query.

A corpus often names a thing differently from the person asking ("heart
attack" against "myocardial infarction"), and neither lexical nor dense
retrieval bridges every such gap. A rewriter proposes alternative phrasings;
the retriever searches the original plus those (``queries_for``) and fuses the
results. ``QueryRewriterProtocol`` is the seam an application plugs its own
rewriter into (an LLM one included); the library ships only deterministic,
pure ones, so a search stays reproducible and its ``identity`` can be shown in
response metadata.

``GlossaryRewriter`` swaps whole words or phrases for the alternatives in a
glossary (a mapping or a TOML file): case-insensitively, longest phrase first
where matches overlap, leaving every other byte of the query untouched.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from groundkit.errors import ConfigurationError
from groundkit.utils.file_reads import FileTooLargeError, NotRegularFileError, read_regular_file
from groundkit.utils.text import describe_unencodable

__all__ = [
    "MAX_GLOSSARY_BYTES",
    "MAX_VARIANTS_LIMIT",
    "GlossaryRewriter",
    "QueryRewriterProtocol",
    "normalise_query",
    "queries_for",
]

MAX_VARIANTS_LIMIT = 10
# A glossary file is read whole before it is parsed; one larger than this is refused
# rather than read (a device such as /dev/zero never ends).
MAX_GLOSSARY_BYTES = 16 * 1024 * 1024
_TOP_LEVEL = frozenset({"synonyms", "groups"})
_WORD = re.compile(r"\w+")


@runtime_checkable
class QueryRewriterProtocol(Protocol):
    """What a retriever needs from a query rewriter."""

    @property
    def identity(self) -> str:
        """A short, stable description of the rewriter and its configuration."""
        ...

    async def rewrite(self, query: str) -> list[str]:
        """Alternative phrasings of ``query``, best first, never ``query`` itself."""
        ...


def normalise_query(text: str) -> str:
    """The form two phrasings are compared in: casefolded, whitespace collapsed.

    Two queries that differ only in case or spacing search for the same thing,
    so searching both would only spend time and double-count in fusion.
    """
    return " ".join(text.split()).casefold()


def queries_for(query: str, variants: Sequence[str], limit: int) -> list[str]:
    """The queries actually searched: ``query`` first, then up to ``limit`` variants.

    Variants that are empty, whitespace-only, or equal (``normalise_query``) to
    the query or to an earlier variant are dropped, so a rewriter that repeats
    itself cannot crowd out the distinct phrasings.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ConfigurationError(f"the variant limit must be an integer >= 0, got {limit!r}")
    out = [query]
    seen = {normalise_query(query)}
    for variant in variants:
        if len(out) > limit:
            break
        if not isinstance(variant, str) or not variant.strip():
            continue
        key = normalise_query(variant)
        if key in seen:
            continue
        seen.add(key)
        out.append(variant)
    return out


@dataclass(frozen=True)
class _Term:
    """One glossary key, compiled: its pattern and a cheap pre-check."""

    key: str
    alternatives: tuple[str, ...]
    pattern: re.Pattern[str]
    # The key's longest word run, lower-cased, when the key is ASCII: an ASCII
    # query that lacks it cannot match, so the regex need not run at all.
    needle: str | None


@dataclass(frozen=True)
class _Match:
    start: int
    end: int
    term: _Term


def _compile(key: str) -> re.Pattern[str]:
    """Whole-word, case-insensitive, any run of whitespace between the key's words."""
    body = r"\s+".join(re.escape(part) for part in key.split())
    return re.compile(rf"(?<!\w){body}(?!\w)", re.IGNORECASE)


def _needle(key: str) -> str | None:
    if not key.isascii():
        return None
    words = _WORD.findall(key.lower())
    return max(words, key=len) if words else None


def _validate_max_variants(max_variants: object) -> int:
    if (
        isinstance(max_variants, bool)
        or not isinstance(max_variants, int)
        or not 0 <= max_variants <= MAX_VARIANTS_LIMIT
    ):
        raise ConfigurationError(
            f"max_variants must be an integer from 0 to {MAX_VARIANTS_LIMIT}, got {max_variants!r}"
        )
    return max_variants


def _encodable(text: str, what: str) -> None:
    """ConfigurationError for text that is no UTF-8 (a lone surrogate): it could never
    be searched, stored or hashed."""
    problem = describe_unencodable(text, what)
    if problem is not None:
        raise ConfigurationError(problem)


def _validate_mapping(mapping: object) -> dict[str, tuple[str, ...]]:
    """The glossary as plain data, or a ConfigurationError naming the bad entry."""
    if not isinstance(mapping, Mapping):
        raise ConfigurationError(
            f"a glossary must be a mapping of term -> alternatives, got {type(mapping).__name__}"
        )
    out: dict[str, tuple[str, ...]] = {}
    spelled: dict[str, str] = {}
    for key, value in mapping.items():
        if not isinstance(key, str) or not key.strip():
            raise ConfigurationError(f"glossary term {key!r} must be a non-empty string")
        _encodable(key, f"glossary term {key!r}")
        folded = normalise_query(key)
        if folded in spelled:
            raise ConfigurationError(
                f"glossary terms {spelled[folded]!r} and {key!r} are the same term "
                "(matching ignores case and spacing)"
            )
        spelled[folded] = key
        if isinstance(value, str | bytes) or not isinstance(value, Sequence):
            raise ConfigurationError(
                f"glossary entry {key!r}: alternatives must be a list of strings, "
                f"got {type(value).__name__}"
            )
        if not value:
            raise ConfigurationError(f"glossary entry {key!r}: alternatives must not be empty")
        alternatives: list[str] = []
        for alternative in value:
            if not isinstance(alternative, str) or not alternative.strip():
                raise ConfigurationError(
                    f"glossary entry {key!r}: alternative {alternative!r} must be a "
                    "non-empty string"
                )
            _encodable(alternative, f"glossary entry {key!r}: alternative {alternative!r}")
            if normalise_query(alternative) == folded:
                raise ConfigurationError(
                    f"glossary entry {key!r}: maps to itself ({alternative!r})"
                )
            alternatives.append(alternative)
        out[key] = tuple(alternatives)
    return out


def _select(candidates: Iterable[_Match]) -> list[_Match]:
    """Longest match first, then leftmost; drop any that overlap a chosen one.

    Returned left to right, the order variants are generated in.
    """
    chosen: list[_Match] = []
    for match in sorted(candidates, key=lambda m: (m.start - m.end, m.start)):
        if all(match.end <= c.start or match.start >= c.end for c in chosen):
            chosen.append(match)
    return sorted(chosen, key=lambda m: m.start)


class GlossaryRewriter:
    """Rewrite a query by swapping glossary terms for their alternatives.

    For each match in query order and each of its alternatives in order, one
    variant with just that occurrence replaced; then, if ``max_variants``
    leaves room, one with every match replaced by its first alternative.
    Variants equal to the query or an earlier variant are dropped.
    """

    def __init__(self, mapping: Mapping[str, Sequence[str]], *, max_variants: int = 3) -> None:
        self._mapping = _validate_mapping(mapping)
        self._max_variants = _validate_max_variants(max_variants)
        self._terms = tuple(
            _Term(key, alternatives, _compile(key), _needle(key))
            for key, alternatives in self._mapping.items()
        )
        canonical = json.dumps(
            {
                "mapping": {key: list(alts) for key, alts in self._mapping.items()},
                "max_variants": self._max_variants,
            },
            sort_keys=True,
            ensure_ascii=False,
            separators=(",", ":"),
        )
        digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
        self._identity = f"glossary:{digest[:12]}"

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], *, max_variants: int = 3) -> GlossaryRewriter:
        """Load a TOML glossary: ``[synonyms]`` term = [alternatives], ``[[groups]]`` terms.

        Every failure (missing, not a regular file, over ``MAX_GLOSSARY_BYTES``,
        unreadable, not UTF-8, bad TOML, wrong shape) is a ConfigurationError naming the
        file. Only a regular file is read: a FIFO would wait for a writer, and a device
        never end, in a thread no signal can stop.
        """
        where = Path(path)
        try:
            raw = read_regular_file(where, MAX_GLOSSARY_BYTES)
        except FileNotFoundError:
            raise ConfigurationError(f"glossary file {str(where)!r} does not exist") from None
        except NotRegularFileError as exc:
            raise ConfigurationError(
                f"glossary file {str(where)!r} cannot be read: {exc}"
            ) from None
        except FileTooLargeError as exc:
            raise ConfigurationError(
                f"glossary file {str(where)!r} is too large: {exc} "
                f"(MAX_GLOSSARY_BYTES, {MAX_GLOSSARY_BYTES // (1024 * 1024)} MiB)"
            ) from None
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise ConfigurationError(
                f"glossary file {str(where)!r} cannot be read: {reason}"
            ) from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigurationError(
                f"glossary file {str(where)!r} is not UTF-8 (byte {exc.start})"
            ) from None
        try:
            document = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigurationError(
                f"glossary file {str(where)!r} is not valid TOML: {exc}"
            ) from None
        try:
            mapping = _mapping_from_toml(document)
            return cls(mapping, max_variants=max_variants)
        except ConfigurationError as exc:
            raise ConfigurationError(f"glossary file {str(where)!r}: {exc}") from None

    @property
    def identity(self) -> str:
        """``glossary:`` and 12 hex digits of sha256 over the mapping and max_variants."""
        return self._identity

    @property
    def max_variants(self) -> int:
        """The most variants one query yields."""
        return self._max_variants

    @property
    def mapping(self) -> dict[str, tuple[str, ...]]:
        """A copy of the validated glossary."""
        return dict(self._mapping)

    def __repr__(self) -> str:
        return (
            f"GlossaryRewriter({len(self._mapping)} terms, "
            f"max_variants={self._max_variants}, identity={self._identity!r})"
        )

    def variants(self, query: str) -> list[str]:
        """The rewrites of ``query``, best first; pure, so ``rewrite`` is this in a coroutine."""
        if self._max_variants == 0 or not query.strip():
            return []
        matches = _select(self._candidates(query))
        if not matches:
            return []
        out: list[str] = []
        seen = {normalise_query(query)}

        def offer(variant: str) -> bool:
            """Keep ``variant`` if new; True once the list is full."""
            key = normalise_query(variant)
            if key not in seen:
                seen.add(key)
                out.append(variant)
            return len(out) >= self._max_variants

        for match in matches:
            head, tail = query[: match.start], query[match.end :]
            for alternative in match.term.alternatives:
                if offer(head + alternative + tail):
                    return out
        pieces: list[str] = []
        cursor = 0
        for match in matches:
            pieces.append(query[cursor : match.start])
            pieces.append(match.term.alternatives[0])
            cursor = match.end
        pieces.append(query[cursor:])
        offer("".join(pieces))
        return out

    async def rewrite(self, query: str) -> list[str]:
        """``variants(query)``; no I/O happens, the coroutine only fits the protocol."""
        return self.variants(query)

    def _candidates(self, query: str) -> list[_Match]:
        """Every occurrence of every term, overlapping ones included."""
        lowered = query.lower() if query.isascii() else None
        found: list[_Match] = []
        for term in self._terms:
            if lowered is not None and term.needle is not None and term.needle not in lowered:
                continue
            position = 0
            while (hit := term.pattern.search(query, position)) is not None:
                found.append(_Match(hit.start(), hit.end(), term))
                position = hit.start() + 1
        return found


def _mapping_from_toml(document: Mapping[str, Any]) -> dict[str, list[str]]:
    """``[synonyms]`` then ``[[groups]]`` merged into one mapping (errors name the entry)."""
    unknown = sorted(set(document) - _TOP_LEVEL)
    if unknown:
        raise ConfigurationError(
            f"unknown top-level keys {unknown}; expected only [synonyms] and [[groups]]"
        )
    mapping: dict[str, list[str]] = {}
    synonyms = document.get("synonyms", {})
    if not isinstance(synonyms, dict):
        raise ConfigurationError(
            f"[synonyms] must be a table of term = [alternatives], got {type(synonyms).__name__}"
        )
    for key, value in synonyms.items():
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigurationError(
                f"[synonyms] {key!r} must be an array of strings, got {_toml_type(value)}"
            )
        mapping[key] = list(value)
    groups = document.get("groups", [])
    if not isinstance(groups, list):
        raise ConfigurationError(
            f"groups must be an array of tables ([[groups]]), got {_toml_type(groups)}"
        )
    spelled = {normalise_query(key): key for key in mapping}
    for number, group in enumerate(groups, start=1):
        label = f"[[groups]] #{number}"
        if not isinstance(group, dict):
            raise ConfigurationError(f"{label} must be a table, got {_toml_type(group)}")
        extra = sorted(set(group) - {"terms"})
        if extra or "terms" not in group:
            raise ConfigurationError(
                f"{label} must hold exactly one key, terms (got {sorted(group)})"
            )
        terms = group["terms"]
        if not isinstance(terms, list) or not all(isinstance(t, str) for t in terms):
            raise ConfigurationError(
                f"{label} terms must be an array of strings, got {_toml_type(terms)}"
            )
        if len(terms) < 2:
            raise ConfigurationError(f"{label} needs at least two terms, got {terms!r}")
        folded = [normalise_query(term) for term in terms]
        if len(set(folded)) != len(folded):
            raise ConfigurationError(f"{label} lists the same term twice: {terms!r}")
        for index, term in enumerate(terms):
            key = spelled.setdefault(folded[index], term)
            entry = mapping.setdefault(key, [])
            have = {normalise_query(alt) for alt in entry}
            for other in terms[:index] + terms[index + 1 :]:
                if normalise_query(other) not in have:
                    have.add(normalise_query(other))
                    entry.append(other)
    return mapping


def _toml_type(value: object) -> str:
    """How TOML would name ``value``'s type, for error messages."""
    names = {str: "a string", bool: "a boolean", int: "an integer", float: "a float"}
    names |= {list: "an array", dict: "a table"}
    return names.get(type(value), type(value).__name__)
