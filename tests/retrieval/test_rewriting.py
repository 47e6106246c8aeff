"""Deterministic query rewriting: the glossary rules, its TOML file, and ``queries_for``."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from groundkit.errors import ConfigurationError
from groundkit.retrieval.rewriting import (
    GlossaryRewriter,
    QueryRewriterProtocol,
    normalise_query,
    queries_for,
)
from groundkit.testing.conformance import RewriterConformance

MEDICAL: dict[str, list[str]] = {
    "heart attack": ["myocardial infarction"],
    "MI": ["myocardial infarction", "heart attack"],
    "attack": ["assault"],
    "aspirin": ["acetylsalicylic acid", "ASA"],
}


def medical(max_variants: int = 3) -> GlossaryRewriter:
    return GlossaryRewriter(MEDICAL, max_variants=max_variants)


class TestGlossaryConformance(RewriterConformance):
    @pytest.fixture
    def rewriter_factory(self) -> Callable[[], QueryRewriterProtocol]:
        return lambda: GlossaryRewriter(MEDICAL | {"café": ["coffee house"]}, max_variants=5)

    def sample_queries(self) -> Sequence[str]:
        return [
            "heart attack symptoms",
            "MI and aspirin",
            "HEART ATTACK",
            "mi",
            "Aspirin  after   a heart attack",
            "un café, s'il vous plaît",
        ]


class TestEmptyGlossaryConformance(RewriterConformance):
    @pytest.fixture
    def rewriter_factory(self) -> Callable[[], QueryRewriterProtocol]:
        return lambda: GlossaryRewriter({})


# --- matching ---------------------------------------------------------------------------


def test_single_term_each_alternative_in_order() -> None:
    assert medical().variants("MI treatment") == [
        "myocardial infarction treatment",
        "heart attack treatment",
    ]


def test_whole_words_only() -> None:
    rewriter = medical()
    assert rewriter.variants("MIT admissions") == []
    assert rewriter.variants("attacker tactics") == []
    assert rewriter.variants("aspirins") == []
    assert rewriter.variants("semi-MI") == ["semi-myocardial infarction", "semi-heart attack"]
    assert rewriter.variants("(MI)") == ["(myocardial infarction)", "(heart attack)"]


def test_word_boundaries_follow_unicode_word_characters() -> None:
    rewriter = GlossaryRewriter({"tea": ["chai"]})
    assert rewriter.variants("éttea") == []
    assert rewriter.variants("tea_time") == []
    assert rewriter.variants("tea-time") == ["chai-time"]


def test_terms_of_punctuation_match_at_non_word_edges() -> None:
    rewriter = GlossaryRewriter({"C++": ["cplusplus"], ".NET": ["dotnet"]})
    assert rewriter.variants("learn C++ and .NET") == [
        "learn cplusplus and .NET",
        "learn C++ and dotnet",
        "learn cplusplus and dotnet",
    ]
    assert rewriter.variants("learn C++x") == []


def test_case_insensitive_match_keeps_the_rest_of_the_query() -> None:
    rewriter = medical()
    assert rewriter.variants("Heart ATTACK in Winter") == ["myocardial infarction in Winter"]
    assert rewriter.variants("mi") == ["myocardial infarction", "heart attack"]
    assert rewriter.variants("ASPIRIN dose") == ["acetylsalicylic acid dose", "ASA dose"]


def test_phrase_whitespace_may_be_any_run() -> None:
    assert medical().variants("heart \t attack") == ["myocardial infarction"]


def test_rest_of_the_query_is_byte_identical() -> None:
    query = "  Was   it a heart attack?\t(really)  "
    [variant] = medical().variants(query)
    assert variant == "  Was   it a myocardial infarction?\t(really)  "
    start = query.index("heart attack")
    assert variant[:start] == query[:start]
    assert variant.endswith(query[start + len("heart attack") :])


def test_longest_phrase_wins_over_the_word_inside_it() -> None:
    assert medical().variants("heart attack") == ["myocardial infarction"]
    assert medical().variants("an attack") == ["an assault"]


def test_longest_phrase_wins_over_an_earlier_overlap() -> None:
    rewriter = GlossaryRewriter(
        {"new york": ["NY"], "york city hall": ["city hall of york"], "new": ["fresh"]}
    )
    # "york city hall" is longer than "new york", so it is chosen; "new" still fits.
    assert rewriter.variants("new york city hall") == [
        "fresh york city hall",
        "new city hall of york",
        "fresh city hall of york",
    ]


def test_overlapping_occurrences_of_one_term() -> None:
    rewriter = GlossaryRewriter({"a a": ["b"]})
    assert rewriter.variants("a a a") == ["b a"]


def test_matches_are_taken_left_to_right() -> None:
    rewriter = medical(max_variants=10)
    assert rewriter.variants("aspirin after MI") == [
        "acetylsalicylic acid after MI",
        "ASA after MI",
        "aspirin after myocardial infarction",
        "aspirin after heart attack",
        "acetylsalicylic acid after myocardial infarction",
    ]


def test_each_occurrence_is_replaced_alone() -> None:
    rewriter = GlossaryRewriter({"mi": ["myocardial infarction"]}, max_variants=5)
    assert rewriter.variants("MI or mi") == [
        "myocardial infarction or mi",
        "MI or myocardial infarction",
        "myocardial infarction or myocardial infarction",
    ]


def test_no_match_and_blank_queries() -> None:
    rewriter = medical()
    assert rewriter.variants("what is the weather") == []
    assert rewriter.variants("") == []
    assert rewriter.variants("   \n") == []


def test_combined_variant_only_when_there_is_room() -> None:
    query = "aspirin after MI"
    assert medical(max_variants=4).variants(query) == medical(max_variants=10).variants(query)[:4]
    assert len(medical(max_variants=10).variants(query)) == 5


def test_max_variants_caps() -> None:
    query = "aspirin after MI"
    assert medical(max_variants=0).variants(query) == []
    assert medical(max_variants=1).variants(query) == ["acetylsalicylic acid after MI"]
    assert len(medical(max_variants=2).variants(query)) == 2
    assert medical().max_variants == 3


@pytest.mark.parametrize("bad", [-1, 11, 2.5, "3", None, True])
def test_max_variants_out_of_range(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="max_variants"):
        GlossaryRewriter(MEDICAL, max_variants=bad)  # type: ignore[arg-type]


def test_variants_equal_to_the_query_or_an_earlier_one_are_dropped() -> None:
    rewriter = GlossaryRewriter(
        {
            "colour": ["Color", "color", "hue"],
            "hue": ["COLOR"],
        },
        max_variants=10,
    )
    # colour -> Color, color (dup of Color), hue; hue -> COLOR (dup); combined dup.
    assert rewriter.variants("colour hue") == [
        "Color hue",
        "hue hue",
        "colour COLOR",
        "Color COLOR",
    ]
    # Alternatives differing only in case or spacing give one variant.
    same = GlossaryRewriter({"x": ["a b", "A  B", "c"]})
    assert same.variants("x") == ["a b", "c"]


def test_single_match_combined_variant_is_a_duplicate() -> None:
    assert medical(max_variants=10).variants("heart attack") == ["myocardial infarction"]


async def test_rewrite_is_variants() -> None:
    rewriter = medical()
    for query in ("MI", "aspirin after MI", "nothing here"):
        assert await rewriter.rewrite(query) == rewriter.variants(query)


def test_unicode_terms_and_queries() -> None:
    rewriter = GlossaryRewriter({"Straße": ["road"], "東京": ["Tokyo"], "ÉCOLE": ["school"]})
    assert rewriter.variants("STRASSE") == []  # no full case folding inside a match
    assert rewriter.variants("die straße") == ["die road"]
    assert rewriter.variants("東京 天気") == ["Tokyo 天気"]
    assert rewriter.variants("une école") == ["une school"]


# --- identity ---------------------------------------------------------------------------


def test_identity_is_stable_and_tracks_configuration() -> None:
    identity = medical().identity
    assert re.fullmatch(r"glossary:[0-9a-f]{12}", identity)
    assert medical().identity == identity
    assert GlossaryRewriter(dict(reversed(MEDICAL.items()))).identity == identity
    assert medical(max_variants=4).identity != identity
    changed = MEDICAL | {"MI": ["heart attack", "myocardial infarction"]}
    assert GlossaryRewriter(changed).identity != identity
    assert repr(medical()).startswith("GlossaryRewriter(4 terms")


def test_protocol_is_runtime_checkable() -> None:
    assert isinstance(medical(), QueryRewriterProtocol)
    assert not isinstance(object(), QueryRewriterProtocol)


# --- mapping validation -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        ({"": ["x"]}, "''"),
        ({"  ": ["x"]}, "'  '"),
        ({3: ["x"]}, "3"),
        ({"MI": "myocardial infarction"}, "'MI'.*list of strings"),
        ({"MI": []}, "'MI'.*must not be empty"),
        ({"MI": ["ok", ""]}, "'MI'.*''"),
        ({"MI": ["ok", 4]}, "'MI'.*4"),
        ({"MI": ["mi"]}, "'MI'.*maps to itself"),
        ({"heart attack": ["Heart  Attack"]}, "'heart attack'.*maps to itself"),
        ({"MI": ["x"], "mi": ["y"]}, "'MI' and 'mi'"),
        ({"MI": None}, "'MI'"),
        ({"MI": ["ok", "\ud800"]}, "'MI'.*lone surrogate"),
        ({"M\udfffI": ["ok"]}, "glossary term.*lone surrogate"),
    ],
)
def test_bad_mappings_name_the_entry(mapping: Mapping[object, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        GlossaryRewriter(mapping)  # type: ignore[arg-type]


def test_mapping_must_be_a_mapping() -> None:
    with pytest.raises(ConfigurationError, match="mapping"):
        GlossaryRewriter([("MI", ["x"])])  # type: ignore[arg-type]


def test_mapping_is_copied() -> None:
    source = {"MI": ["myocardial infarction"]}
    rewriter = GlossaryRewriter(source)
    source["MI"].append("heart attack")
    assert rewriter.variants("MI") == ["myocardial infarction"]
    assert rewriter.mapping == {"MI": ("myocardial infarction",)}


# --- from_file --------------------------------------------------------------------------

TERMS = """\
# terms.toml
[synonyms]
"heart attack" = ["myocardial infarction"]
MI = ["myocardial infarction", "heart attack"]
"""


def write(tmp_path: Path, text: str | bytes, name: str = "terms.toml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_from_file_happy_path(tmp_path: Path) -> None:
    path = write(tmp_path, TERMS)
    loaded = GlossaryRewriter.from_file(path)
    direct = GlossaryRewriter(
        {
            "heart attack": ["myocardial infarction"],
            "MI": ["myocardial infarction", "heart attack"],
        }
    )
    assert loaded.identity == direct.identity
    assert loaded.variants("MI risk") == ["myocardial infarction risk", "heart attack risk"]
    assert GlossaryRewriter.from_file(str(path), max_variants=1).variants("MI") == [
        "myocardial infarction"
    ]


def test_from_file_groups(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        TERMS
        + """
[[groups]]
terms = ["car", "automobile", "motor vehicle"]

[[groups]]
terms = ["mi", "cardiac infarct"]
""",
    )
    rewriter = GlossaryRewriter.from_file(path, max_variants=10)
    assert rewriter.mapping == {
        "heart attack": ("myocardial infarction",),
        "MI": ("myocardial infarction", "heart attack", "cardiac infarct"),
        "car": ("automobile", "motor vehicle"),
        "automobile": ("car", "motor vehicle"),
        "motor vehicle": ("car", "automobile"),
        "cardiac infarct": ("mi",),
    }
    assert rewriter.variants("Motor Vehicle tax") == ["car tax", "automobile tax"]


def test_from_file_groups_only_and_empty(tmp_path: Path) -> None:
    groups = write(tmp_path, '[[groups]]\nterms = ["a", "b", "c"]\n', "g.toml")
    assert GlossaryRewriter.from_file(groups).mapping == {
        "a": ("b", "c"),
        "b": ("a", "c"),
        "c": ("a", "b"),
    }
    empty = write(tmp_path, "# nothing yet\n", "e.toml")
    assert GlossaryRewriter.from_file(empty).variants("a b c") == []


def test_from_file_missing(tmp_path: Path) -> None:
    path = tmp_path / "absent.toml"
    with pytest.raises(ConfigurationError, match=r"absent\.toml.*does not exist") as caught:
        GlossaryRewriter.from_file(path)
    assert caught.value.__cause__ is None


def test_from_file_unreadable(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot be read") as caught:
        GlossaryRewriter.from_file(tmp_path)
    assert str(tmp_path) in str(caught.value)


def test_from_file_not_utf8(tmp_path: Path) -> None:
    path = write(tmp_path, b'[synonyms]\ncaf\xe9 = ["coffee"]\n')
    with pytest.raises(ConfigurationError, match=r"terms\.toml.*not UTF-8"):
        GlossaryRewriter.from_file(path)


def test_from_file_bad_toml(tmp_path: Path) -> None:
    path = write(tmp_path, "[synonyms\nMI = [")
    with pytest.raises(ConfigurationError, match=r"terms\.toml.*not valid TOML") as caught:
        GlossaryRewriter.from_file(path)
    assert caught.value.__cause__ is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[aliases]\nMI = ["x"]\n', r"unknown top-level keys \['aliases'\]"),
        ('title = "x"\n', "unknown top-level keys"),
        ('synonyms = ["MI"]\n', r"\[synonyms\] must be a table"),
        ('[synonyms]\nMI = "myocardial infarction"\n', r"\[synonyms\] 'MI'.*a string"),
        ("[synonyms]\nMI = [1, 2]\n", r"\[synonyms\] 'MI'.*array of strings"),
        ("[synonyms]\nMI = {a = 1}\n", r"\[synonyms\] 'MI'.*a table"),
        ('[synonyms]\nMI = ["mi"]\n', "'MI'.*maps to itself"),
        ("[synonyms]\nMI = []\n", "'MI'.*must not be empty"),
        ('[synonyms]\n"" = ["x"]\n', "non-empty"),
        ('[synonyms]\nMI = ["x"]\nmi = ["y"]\n', "'MI' and 'mi'"),
        ('groups = "a"\n', "groups must be an array of tables"),
        ("groups = [1]\n", r"\[\[groups\]\] #1 must be a table"),
        ('[[groups]]\nwords = ["a", "b"]\n', r"\[\[groups\]\] #1 must hold exactly one key"),
        ('[[groups]]\nterms = ["a", "b"]\nx = 1\n', "exactly one key"),
        ('[[groups]]\nterms = "a"\n', r"#1 terms must be an array of strings"),
        ('[[groups]]\nterms = ["a", 2]\n', "array of strings"),
        ('[[groups]]\nterms = ["a", "b"]\n[[groups]]\nterms = ["c"]\n', "#2 needs at least two"),
        ('[[groups]]\nterms = ["a", "A"]\n', "#1 lists the same term twice"),
        ('[[groups]]\nterms = ["a", ""]\n', "non-empty"),
    ],
)
def test_from_file_wrong_shapes(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigurationError, match=message) as caught:
        GlossaryRewriter.from_file(path)
    assert str(path) in str(caught.value)


def test_from_file_bad_max_variants_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, TERMS)
    with pytest.raises(ConfigurationError, match=r"terms\.toml.*max_variants"):
        GlossaryRewriter.from_file(path, max_variants=11)


# --- queries_for ------------------------------------------------------------------------


def test_queries_for_puts_the_query_first() -> None:
    assert queries_for("MI", ["myocardial infarction", "heart attack"], 5) == [
        "MI",
        "myocardial infarction",
        "heart attack",
    ]


def test_queries_for_dedupes_and_drops_blanks() -> None:
    got = queries_for("Heart  Attack", ["heart attack", "", "  ", "MI", "mi", "B", "b "], 10)
    assert got == ["Heart  Attack", "MI", "B"]


def test_queries_for_caps_at_one_plus_limit() -> None:
    variants = ["a", "a", "b", "c", "d"]
    assert queries_for("q", variants, 0) == ["q"]
    assert queries_for("q", variants, 2) == ["q", "a", "b"]
    assert queries_for("q", [], 3) == ["q"]


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_queries_for_bad_limit(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="limit"):
        queries_for("q", ["a"], bad)  # type: ignore[arg-type]


async def test_queries_for_with_a_rewriter() -> None:
    rewriter = medical()
    query = "aspirin after MI"
    assert queries_for(query, await rewriter.rewrite(query), 2) == [
        query,
        "acetylsalicylic acid after MI",
        "ASA after MI",
    ]


# --- properties -------------------------------------------------------------------------

_WORDS = ["heart", "attack", "MI", "mi", "aspirin", "ASA", "tea", "the", "a", "Straße", "東京"]
_SEPARATORS = [" ", "  ", "\t", ", ", "-", "(", ")", "?", ""]
_query = st.lists(
    st.one_of(st.sampled_from(_WORDS), st.sampled_from(_SEPARATORS), st.text(max_size=3)),
    max_size=8,
).map("".join)
_glossary = st.dictionaries(
    st.sampled_from(["heart attack", "MI", "attack", "tea", "a", "the", "Straße", "a a"]),
    st.lists(st.sampled_from(["cardiac", "heart attack", "chai", "MI", "x y", "road"]), min_size=1),
    max_size=5,
).filter(
    lambda g: all(
        normalise_query(alt) != normalise_query(k) for k, alts in g.items() for alt in alts
    )
)


@given(_glossary, _query, st.integers(min_value=0, max_value=10))
def test_variants_are_deterministic_and_never_the_query(
    glossary: dict[str, list[str]], query: str, max_variants: int
) -> None:
    rewriter = GlossaryRewriter(glossary, max_variants=max_variants)
    got = rewriter.variants(query)
    assert got == rewriter.variants(query)
    assert got == GlossaryRewriter(dict(glossary), max_variants=max_variants).variants(query)
    assert len(got) <= max_variants
    keys = [normalise_query(v) for v in got]
    assert normalise_query(query) not in keys
    assert len(set(keys)) == len(keys)
    assert all(v.strip() for v in got)
    assert queries_for(query, got, max_variants) == [query, *got]
