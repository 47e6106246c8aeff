"""Text → index terms. One analyzer for documents and queries alike.

Lowercase Unicode word tokens, combining marks kept inside the word and each
token brought to NFKC (so a decomposed "café", a ligature or fullwidth letters
give the terms their usual spelling does); CJK runs become unigrams plus
bigrams (they carry no spaces to split on); Latin-script words lose English
stop words and are Snowball-stemmed. The identity string is persisted with an
index so a collection is never queried with terms produced by a different
analyzer; a collection built by an earlier version keeps that version
(adr/0085-unicode-words.md).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection, Iterable
from functools import cache, lru_cache

from groundkit.config import AnalyzerConfig
from groundkit.errors import ConfigurationError
from groundkit.lexical._marks import ASTRAL_MARKS, BMP_MARKS

__all__ = ["ANALYZER_VERSION", "ENGLISH_STOPWORDS", "Analyzer", "bound_analyzer"]

# 1: tokens were runs of ``\w`` (a combining mark split a word), not normalised.
# 2: combining marks stay in their word; each non-ASCII token is NFKC-normalised.
ANALYZER_VERSION = 2
_VERSIONS = (1, 2)

# Han, Hiragana, Katakana, Hangul and their compatibility blocks.
_CJK = (
    "\u3040-\u30ff\u3100-\u312f\u3130-\u318f\u31a0-\u31ff\u3400-\u4dbf"
    "\u4e00-\u9fff\ua960-\ua97f\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f"
)
# Version 1's tokens, compiled for the collections bound to it only (a pattern with
# these classes takes milliseconds to compile, which every process would pay).
_TOKEN_V1_PATTERN = rf"[{_CJK}]+|[^\W_{_CJK}]+"
# A word is word characters with the combining marks among and after them. An
# astral mark is looked for only at an astral character: the engine scans a class's
# astral ranges one by one, which would cost every other character about a hundred
# tests (with the guard, tokenizing English costs 1.25x what it did without marks).
_MARK = rf"(?:[{BMP_MARKS}]|(?=[\U00010000-\U0010ffff])[{ASTRAL_MARKS}])"
_TOKEN_PATTERN = rf"[{_CJK}]+|[^\W_{_CJK}]+(?:{_MARK}+[^\W_{_CJK}]*)*"
# On ASCII text every version's pattern finds exactly these runs (no CJK, no marks,
# and its word characters less "_" are letters and digits). Most queries are ASCII,
# and the full patterns take milliseconds to compile, which a new process would pay
# before its first answer; this one compiles in microseconds.
_ASCII_TOKEN = re.compile(r"[0-9A-Za-z]+")
# What ``Analyzer.identity`` writes.
_IDENTITY = re.compile(
    r"groundkit-analyzer/(\d{1,3});stem=([^;]+);stop=(english|none);min=(\d{1,3})"
)
# Latin script (Basic Latin through Latin Extended-B) plus digits: stemmable.
_LATIN = re.compile(r"[0-9a-z\u00c0-\u024f]+")

# Lucene's classic English stop set: short, so negations and quantities that
# matter in claims ("more", "less", "without") survive.
ENGLISH_STOPWORDS: frozenset[str] = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "for",
        "if",
        "in",
        "into",
        "is",
        "it",
        "no",
        "not",
        "of",
        "on",
        "or",
        "such",
        "that",
        "the",
        "their",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "will",
        "with",
    ]
)


class Analyzer:
    """Deterministic tokenizer/stemmer; cheap to build, safe to share."""

    def __init__(
        self, config: AnalyzerConfig | None = None, *, version: int = ANALYZER_VERSION
    ) -> None:
        if version not in _VERSIONS:
            raise ConfigurationError(
                f"unknown analyzer version {version!r}; this groundkit has {list(_VERSIONS)}"
            )
        self.config = config or AnalyzerConfig()
        self.version = version
        self._stopwords = ENGLISH_STOPWORDS if self.config.stopwords else frozenset()
        self._stem = _stemmer(self.config.stem_language)
        self._normalise = version >= 2
        self._cache: dict[str, str] = {}

    @property
    def identity(self) -> str:
        c = self.config
        stop = "english" if c.stopwords else "none"
        return (
            f"groundkit-analyzer/{self.version};stem={c.stem_language or 'none'};"
            f"stop={stop};min={c.min_token_chars}"
        )

    def matching(self, bound: str | None) -> Analyzer:
        """This analyzer, or the earlier version of it a collection is bound to.

        A collection keeps the analyzer version that produced its stored terms: an
        upgrade must not refuse it, nor analyse its queries another way. Any other
        identity is left for the binding check to refuse."""
        if bound is None or bound == self.identity:
            return self
        for version in _VERSIONS:
            earlier = Analyzer(self.config, version=version)
            if earlier.identity == bound:
                return earlier
        return self

    def _pattern(self, text: str) -> re.Pattern[str]:
        # ``isascii`` reads a flag the string carries: no scan.
        return _ASCII_TOKEN if text.isascii() else _token_pattern(self.version)

    def terms(self, text: str) -> list[str]:
        """Index terms of ``text`` in order of appearance (repeats kept)."""
        out: list[str] = []
        append = out.append
        cache = self._cache
        stop = self._stopwords
        minimum = self.config.min_token_chars
        lowered = text.lower()
        for token in self._pattern(lowered).findall(lowered):
            # Every CJK range starts at or above U+3040: most tokens skip the regex.
            if token[0] >= "\u3040" and _cjk_run().match(token):
                out.extend(_cjk_grams(token))
                continue
            if len(token) < minimum or token in stop:
                continue
            term = cache.get(token)
            if term is None:
                term = self._learn(token)
            if term:
                append(term)
        return out

    def _learn(self, token: str) -> str:
        """The term of a lowercase, non-CJK token ("" when its normal form is a stop
        word), remembered (up to a cap) for next time."""
        word = token
        if self._normalise and not token.isascii():
            # NFKC composes a decomposed accent and folds ligatures and fullwidth
            # forms; it can give capitals back (a black-letter H), hence lower again.
            word = unicodedata.normalize("NFKC", token).lower()
            if word in self._stopwords:
                word = ""
        term = self._stem(word) if word and _LATIN.fullmatch(word) else word
        if len(self._cache) < 500_000:
            self._cache[token] = term
        return term

    def terms_many(self, texts: Iterable[str]) -> list[list[str]]:
        return [self.terms(t) for t in texts]

    def spans(self, text: str, wanted: Collection[str]) -> list[tuple[int, int]]:
        """``(start, end)`` offsets in ``text`` of the tokens whose terms are in ``wanted``.

        Tokens are found and turned into terms exactly as ``terms`` does, so a
        span marks what a search matched: "Running" for the query "runs".
        A CJK gram marks its characters. Sorted; overlapping or touching spans
        are merged.
        """
        if not wanted:
            return []
        lowered = text.lower()
        if len(lowered) != len(text):
            # Lowercasing changed the length (a dotted capital I, say), so offsets
            # into the lowered text would be wrong: tokenise the original instead.
            return self._spans_by_token(text, wanted)
        found: list[tuple[int, int]] = []
        cache = self._cache
        stop = self._stopwords
        minimum = self.config.min_token_chars
        for match in self._pattern(lowered).finditer(lowered):
            token = match.group()
            # Every CJK range starts at or above U+3040: most tokens skip the regex.
            if token[0] >= "\u3040" and _cjk_run().match(token):
                found.extend(_gram_spans(token, match.start(), wanted))
            elif len(token) >= minimum and token not in stop:
                term = cache.get(token)
                if term is None:
                    term = self._learn(token)
                if term and term in wanted:
                    found.append(match.span())
        return _merged(found)

    def _spans_by_token(self, text: str, wanted: Collection[str]) -> list[tuple[int, int]]:
        found: list[tuple[int, int]] = []
        for match in self._pattern(text).finditer(text):
            token = match.group()
            if _cjk_run().match(token):
                found.extend(_gram_spans(token, match.start(), wanted))
            elif any(term in wanted for term in self.terms(token)):
                found.append((match.start(), match.end()))
        return _merged(found)


@cache
def _token_pattern(version: int) -> re.Pattern[str]:
    """The full token pattern of ``version``, compiled at the first non-ASCII text."""
    return re.compile(_TOKEN_PATTERN if version >= 2 else _TOKEN_V1_PATTERN)


@cache
def _cjk_run() -> re.Pattern[str]:
    return re.compile(rf"[{_CJK}]")


def bound_analyzer(bound: str | None, analyzer: Analyzer, *, configured: bool) -> Analyzer:
    """The analyzer for a collection bound to the identity ``bound``: ``analyzer`` at the
    version the collection keeps. When no settings were ``configured``, the analyzer
    ``bound`` names instead (as a collection opened without chunking settings is
    chunked as it is bound to), so a collection made with other settings can be
    searched where none can be given (``grk``, the MCP server). A mismatch is left for
    the binding check to refuse."""
    if not configured:
        named = _analyzer_of(bound)
        if named is not None:
            return named
    return analyzer.matching(bound)


def _analyzer_of(identity: str | None) -> Analyzer | None:
    """The analyzer whose ``identity`` this is, or None when no analyzer of this
    groundkit has it."""
    if identity is None:
        return None
    found = _IDENTITY.fullmatch(identity)
    if found is None:
        return None
    version, stem, stop, minimum = found.groups()
    try:
        config = AnalyzerConfig(
            stem_language=None if stem == "none" else stem,
            stopwords=stop == "english",
            min_token_chars=int(minimum),
        )
        analyzer = Analyzer(config, version=int(version))
    except (ConfigurationError, ValueError):  # a language or bound this one lacks
        return None
    return analyzer if analyzer.identity == identity else None


def _gram_spans(run: str, start: int, wanted: Collection[str]) -> list[tuple[int, int]]:
    """Spans of the unigrams and bigrams of a CJK ``run`` (at ``start``) that are wanted."""
    found = [(start + i, start + i + 1) for i, char in enumerate(run) if char in wanted]
    found.extend(
        (start + i, start + i + 2) for i in range(len(run) - 1) if run[i : i + 2] in wanted
    )
    return found


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def _cjk_grams(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    grams = list(run)
    grams.extend(run[i : i + 2] for i in range(len(run) - 1))
    return grams


@lru_cache(maxsize=8)
def _stemmer_cached(language: str):  # type: ignore[no-untyped-def]
    import Stemmer

    try:
        return Stemmer.Stemmer(language)
    except KeyError as exc:
        raise ConfigurationError(
            f"unknown stemming language {language!r}; choose one of "
            f"{sorted(Stemmer.algorithms())} or None"
        ) from exc


def _stemmer(language: str | None):  # type: ignore[no-untyped-def]
    if language is None:
        return lambda word: word
    stemmer = _stemmer_cached(language)
    return stemmer.stemWord
