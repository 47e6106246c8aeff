"""The corpus glossary: Schwartz-Hearst long forms, counted, one long form per short form."""

from __future__ import annotations

from evals.glossary import abbreviation_glossary, long_form
from groundkit import GlossaryRewriter


def test_long_forms_are_found_by_their_initials() -> None:
    assert long_form("TNF", "levels of tumor necrosis factor ") == "tumor necrosis factor"
    assert long_form("HIV", "with human immunodeficiency virus") == "human immunodeficiency virus"
    assert long_form("NK", "killer cells and their natural killer ") == "natural killer"
    assert long_form("XYZ", "nothing that matches here") is None


def test_only_pairs_defined_often_enough_and_never_plain_words() -> None:
    texts = [
        "We measured tumor necrosis factor (TNF) and body mass index (BMI).",
        "Serum tumor necrosis factor (TNF) rose; body mass index (BMI) did not.",
        "High tumor necrosis factor (TNF) levels, odds ratio (OR) 2.1.",
        "The odds ratio (OR) was 1.5 or 1.6; odds ratio (OR) 3 or more.",
        "An odds ratio (OR) of 2 or so.",
    ]
    glossary = abbreviation_glossary(texts, min_count=3)
    assert glossary["TNF"] == ["tumor necrosis factor"]
    assert glossary["tumor necrosis factor"] == ["TNF"]
    assert "BMI" not in glossary  # defined twice only
    assert "OR" not in glossary  # "or" is a word of the text
    assert abbreviation_glossary(texts, min_count=3) == glossary
    variants = GlossaryRewriter(glossary).variants("does TNF raise risk")
    assert variants == ["does tumor necrosis factor raise risk"]


def test_the_most_frequent_long_form_wins() -> None:
    texts = ["mass spectrometry (MS) data"] * 3 + ["multiple sclerosis (MS) patients"] * 4
    assert abbreviation_glossary(texts, min_count=3)["MS"] == ["multiple sclerosis"]
