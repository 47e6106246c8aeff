"""The analyzer: one deterministic text-to-terms function for documents and queries."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from groundkit import AnalyzerConfig, ConfigurationError
from groundkit.lexical import Analyzer
from groundkit.lexical.analyzer import ANALYZER_VERSION, ENGLISH_STOPWORDS


def test_lowercases() -> None:
    analyzer = Analyzer(AnalyzerConfig(stem_language=None, stopwords=False))
    assert analyzer.terms("HeLLo WORLD Äpfel") == ["hello", "world", "äpfel"]


def test_stems_english() -> None:
    analyzer = Analyzer()
    assert analyzer.terms("running connections quickly") == ["run", "connect", "quick"]
    # Document and query forms meet on the same stem.
    assert analyzer.terms("connected") == analyzer.terms("connection")


def test_no_stemming_when_disabled() -> None:
    analyzer = Analyzer(AnalyzerConfig(stem_language=None))
    assert analyzer.terms("running connections") == ["running", "connections"]


def test_stop_words_removed() -> None:
    analyzer = Analyzer()
    assert analyzer.terms("the cat and the hat is in a box") == ["cat", "hat", "box"]
    assert analyzer.terms("The AND") == []
    # Words that matter in claims are not stop words.
    assert analyzer.terms("more less without") == ["more", "less", "without"]


def test_stop_words_kept_when_disabled() -> None:
    analyzer = Analyzer(AnalyzerConfig(stopwords=False, stem_language=None))
    assert analyzer.terms("the cat") == ["the", "cat"]


def test_stopword_list_is_lowercase_and_small() -> None:
    assert all(w == w.lower() for w in ENGLISH_STOPWORDS)
    assert {"the", "a", "and", "of"} <= ENGLISH_STOPWORDS
    assert "not" in ENGLISH_STOPWORDS


def test_punctuation_and_underscores_split() -> None:
    analyzer = Analyzer(AnalyzerConfig(stem_language=None, stopwords=False))
    assert analyzer.terms("foo_bar, baz-qux! (x42)") == ["foo", "bar", "baz", "qux", "x42"]


def test_min_token_chars() -> None:
    analyzer = Analyzer(AnalyzerConfig(stem_language=None, stopwords=False, min_token_chars=3))
    assert analyzer.terms("go to the market") == ["the", "market"]


class TestCJK:
    def test_unigrams_then_bigrams_per_run(self) -> None:
        assert Analyzer().terms("東京大学") == ["東", "京", "大", "学", "東京", "京大", "大学"]

    def test_single_character_run(self) -> None:
        assert Analyzer().terms("猫") == ["猫"]

    def test_runs_are_separate(self) -> None:
        assert Analyzer().terms("東京 大阪") == ["東", "京", "東京", "大", "阪", "大阪"]

    def test_mixed_scripts(self) -> None:
        assert Analyzer().terms("Running東京Tokyo") == ["run", "東", "京", "東京", "tokyo"]

    def test_kana_and_hangul(self) -> None:
        assert Analyzer().terms("ひらがな") == ["ひ", "ら", "が", "な", "ひら", "らが", "がな"]
        assert Analyzer().terms("한국어") == ["한", "국", "어", "한국", "국어"]

    def test_query_matches_document_fragment(self) -> None:
        analyzer = Analyzer()
        document = set(analyzer.terms("東京は日本の首都です。"))
        assert set(analyzer.terms("首都")) <= document


def test_non_latin_words_are_not_stemmed() -> None:
    assert Analyzer().terms("Бегущие") == ["бегущие"]


def test_digits_kept() -> None:
    assert Analyzer().terms("in 2024 there were 3 cats") == ["2024", "were", "3", "cat"]


class TestIdentity:
    def test_default_identity(self) -> None:
        assert Analyzer().identity == Analyzer(AnalyzerConfig()).identity
        assert Analyzer().identity.startswith("groundkit-analyzer/")

    @pytest.mark.parametrize(
        "config",
        [
            AnalyzerConfig(stem_language=None),
            AnalyzerConfig(stem_language="german"),
            AnalyzerConfig(stopwords=False),
            AnalyzerConfig(min_token_chars=2),
        ],
    )
    def test_identity_changes_with_config(self, config: AnalyzerConfig) -> None:
        assert Analyzer(config).identity != Analyzer().identity

    def test_equal_config_equal_identity(self) -> None:
        config = AnalyzerConfig(stem_language="french", stopwords=False, min_token_chars=2)
        assert Analyzer(config).identity == Analyzer(config.model_copy()).identity


# -- Unicode words: marks stay in their word, spellings meet in NFKC ------------------


@pytest.mark.parametrize(
    ("text", "terms"),
    [
        ("हिन्दी भाषा", ["हिन्दी", "भाषा"]),  # vowel signs and virama (Mn, Mc)
        ("مُحَمَّد", ["مُحَمَّد"]),  # Arabic harakat
        ("שָׁלוֹם", ["שָׁלוֹם"]),  # Hebrew points
        ("தமிழ் ಕನ್ನಡ", ["தமிழ்", "ಕನ್ನಡ"]),
        ("İstanbul", ["i\u0307stanbul"]),  # lowercasing adds a combining dot
    ],
)
def test_combining_marks_stay_in_their_word(text: str, terms: list[str]) -> None:
    assert Analyzer(AnalyzerConfig(stem_language=None)).terms(text) == terms


def test_spellings_of_one_word_give_one_term() -> None:
    analyzer = Analyzer()
    composed, decomposed = "café", "cafe\u0301"
    assert analyzer.terms(decomposed) == analyzer.terms(composed) == ["café"]
    # Ligatures and fullwidth forms fold to their letters, then stem as usual.
    assert analyzer.terms("\ufb01nding \uff46\uff49\uff4e\uff44\uff49\uff4e\uff47") == [
        "find",
        "find",
    ]
    # A stop word in fullwidth letters is still a stop word.
    assert analyzer.terms("\uff34\uff28\uff25 cat") == ["cat"]


def test_spans_cover_a_word_with_its_marks() -> None:
    analyzer = Analyzer()
    text = "Un cafe\u0301 noir, हिन्दी."
    wanted = set(analyzer.terms("café हिन्दी"))
    assert _marked(text, analyzer.spans(text, wanted)) == ["cafe\u0301", "हिन्दी"]


def test_marks_table_matches_the_unicode_database() -> None:
    """Every listed code point is a mark, outside the CJK runs; on the Unicode version
    the table was written from, every such mark is listed."""
    import re
    import sys
    import unicodedata

    from groundkit.lexical import _marks
    from groundkit.lexical.analyzer import _cjk_run

    _CJK_RUN = _cjk_run()
    listed = re.compile(f"[{_marks.BMP_MARKS}{_marks.ASTRAL_MARKS}]")
    every = [chr(cp) for cp in range(sys.maxunicode + 1)]
    found = [c for c in every if listed.match(c)]
    assert all(unicodedata.category(c).startswith("M") and not _CJK_RUN.match(c) for c in found)
    if unicodedata.unidata_version == _marks.UNICODE_VERSION:
        marks = [
            c for c in every if unicodedata.category(c).startswith("M") and not _CJK_RUN.match(c)
        ]
        assert found == marks


_ASCII_TEXT = st.text(st.characters(max_codepoint=0x7F), max_size=60)


@pytest.mark.parametrize("version", [1, 2])
@given(text=_ASCII_TEXT)
def test_ascii_text_gives_what_the_full_pattern_gives(version: int, text: str) -> None:
    """ASCII text skips the full pattern (its compile is paid only for other text):
    on ASCII the two find the same tokens, for either version, in either case."""
    from groundkit.lexical.analyzer import _ASCII_TOKEN, _token_pattern

    full = _token_pattern(version)
    for variant in (text, text.lower()):
        assert [m.span() for m in _ASCII_TOKEN.finditer(variant)] == [
            m.span() for m in full.finditer(variant)
        ]


def test_ascii_text_never_compiles_the_full_pattern() -> None:
    from groundkit.lexical.analyzer import _token_pattern

    _token_pattern.cache_clear()
    analyzer = Analyzer()
    assert analyzer.terms("Running cats, 42 of them") == ["run", "cat", "42", "them"]
    assert analyzer.spans("Running cats", {"cat"}) == [(8, 12)]
    assert _token_pattern.cache_info().currsize == 0
    assert analyzer.terms("Caf\u00e9 cats") == ["caf\u00e9", "cat"]
    assert _token_pattern.cache_info().currsize == 1


@given(
    ascii_text=_ASCII_TEXT,
    other=st.text(st.characters(min_codepoint=0x80, max_codepoint=0x2FFF), min_size=1, max_size=3),
)
def test_terms_and_spans_do_not_depend_on_the_pattern_chosen(ascii_text: str, other: str) -> None:
    """The same words with one non-ASCII word added (full pattern) give the ASCII
    words' terms and spans the ASCII text alone gave."""
    analyzer = Analyzer()
    mixed = f"{ascii_text} \u00b7{other}\u00b7"
    extra = analyzer.terms(f"\u00b7{other}\u00b7")
    assert analyzer.terms(mixed) == analyzer.terms(ascii_text) + extra
    wanted = set(analyzer.terms(ascii_text))
    ascii_spans = analyzer.spans(ascii_text, wanted)
    assert analyzer.spans(mixed, wanted)[: len(ascii_spans)] == ascii_spans


class TestVersions:
    def test_version_one_splits_at_marks_as_it_always_did(self) -> None:
        first = Analyzer(version=1)
        assert first.identity.startswith("groundkit-analyzer/1;")
        assert first.terms("हिन्दी cafe\u0301") == ["ह", "न", "द", "cafe"]
        assert first.terms("running \ufb01ne") == ["run", "\ufb01ne"]

    def test_current_is_the_newest(self) -> None:
        assert Analyzer().version == ANALYZER_VERSION == 2
        assert Analyzer().identity.startswith("groundkit-analyzer/2;")

    def test_unknown_version_is_refused(self) -> None:
        with pytest.raises(ConfigurationError, match="analyzer version 7"):
            Analyzer(version=7)

    def test_matching_keeps_the_bound_version(self) -> None:
        config = AnalyzerConfig(stopwords=False)
        current = Analyzer(config)
        bound = Analyzer(config, version=1).identity
        assert current.matching(bound).version == 1
        assert current.matching(bound).config == config
        assert current.matching(None) is current
        assert current.matching(current.identity) is current
        # Another configuration is not matched: the binding check refuses it.
        assert current.matching(Analyzer(version=1).identity) is current


def test_unknown_stem_language() -> None:
    with pytest.raises(ConfigurationError, match="klingon"):
        Analyzer(AnalyzerConfig(stem_language="klingon"))


def test_other_stem_language() -> None:
    assert Analyzer(AnalyzerConfig(stem_language="german")).terms("Häuser") == ["haus"]


@given(st.text())
def test_deterministic_and_cache_independent(text: str) -> None:
    warm = Analyzer()
    warm.terms(text)
    assert warm.terms(text) == Analyzer().terms(text)
    assert all(term and term == term.lower() for term in warm.terms(text))
    assert warm.terms_many([text, text]) == [warm.terms(text)] * 2


# -- spans: where the terms of a query occur ---------------------------------------


def _marked(text: str, spans: list[tuple[int, int]]) -> list[str]:
    return [text[a:b] for a, b in spans]


def test_spans_mark_what_the_terms_match() -> None:
    analyzer = Analyzer()
    text = "Running, the runner RUNS; a run-off. Connections connected."
    wanted = set(analyzer.terms("runs connection"))
    spans = analyzer.spans(text, wanted)
    assert _marked(text, spans) == ["Running", "RUNS", "run", "Connections", "connected"]
    # Stop words and absent terms mark nothing.
    assert analyzer.spans(text, set(analyzer.terms("the a"))) == []
    assert analyzer.spans(text, set()) == []
    assert analyzer.spans("", {"run"}) == []


def test_spans_of_cjk_grams_are_merged() -> None:
    analyzer = Analyzer()
    text = "東京は日本の首都です。京都も。"
    spans = analyzer.spans(text, set(analyzer.terms("東京")))
    assert _marked(text, spans) == ["東京", "京"]
    assert analyzer.spans(text, {"日本", "本の"}) == [(3, 6)]


def test_spans_when_lowercasing_changes_the_length() -> None:
    analyzer = Analyzer()
    text = "İzmir hosts the Istanbul ferry, İ."
    assert len(text.lower()) != len(text)
    spans = analyzer.spans(text, set(analyzer.terms("ferry hosts")))
    assert _marked(text, spans) == ["hosts", "ferry"]


_WORDS = st.sampled_from(
    [
        "Running",
        "runs",
        "the",
        "Cat",
        "cats",
        "東京",
        "日本",
        "x",
        "İ",
        "connected",
        "a",
        "42",
        "cafe\u0301",
        "café",
        "हिन्दी",
        "\ufb01ne",
        "\uff34\uff48\uff45",
    ]
)


@given(
    st.lists(st.tuples(_WORDS, st.sampled_from([" ", ", ", "\n", "-", ""])), max_size=12),
    st.lists(_WORDS, min_size=1, max_size=3),
)
def test_spans_cover_exactly_the_matching_terms(
    pieces: list[tuple[str, str]], query: list[str]
) -> None:
    analyzer = Analyzer()
    text = "".join(word + sep for word, sep in pieces)
    wanted = set(analyzer.terms(" ".join(query)))
    spans = analyzer.spans(text, wanted)
    assert spans == sorted(spans)
    assert all(0 <= a < b <= len(text) for a, b in spans)
    assert all(b1 < a2 for (_, b1), (a2, _) in itertools.pairwise(spans))
    marked = {t for a, b in spans for t in analyzer.terms(text[a:b])} & wanted
    assert marked == set(analyzer.terms(text)) & wanted
