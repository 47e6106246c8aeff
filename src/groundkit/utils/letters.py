"""Where letters begin: the one rule for what a cut may not separate.

Under NFC a combining mark belongs to the letter before it, and some starters
compose backwards (Hangul vowels and final consonants, some Indic vowel signs).
A chunk edge or a cited span that falls between a letter and such a character
cuts the letter: "no" followed by U+0308 reads "nö". Chunking never cuts there,
and a citation check refuses a span that does (SPEC 5.5).
"""

from __future__ import annotations

import unicodedata

__all__ = ["LOOKBACK", "composes", "inside_letter"]

# Composing looks back one letter at most (a Hangul syllable of three jamo, an Indic
# two-part vowel): this much text before a character decides as the whole would.
LOOKBACK = 32


def composes(piece: str, char: str) -> bool:
    """Whether ``char`` joins what is before it under NFC: a combining mark, or a
    starter that composes backwards (Hangul vowels and final consonants, some Indic
    vowel signs; none is below U+0900)."""
    if unicodedata.combining(char):
        return True
    if ord(char) < 0x0900:
        return False
    return len(unicodedata.normalize("NFC", piece + char)) <= len(
        unicodedata.normalize("NFC", piece)
    )


def inside_letter(text: str, at: int, floor: int = 0) -> bool:
    """Whether a cut of ``text`` at ``at`` separates ``text[at]`` from the letter before
    it (looking back no further than ``floor``). Whitespace and the text's ends are
    always boundaries: a mark after a space starts a chunk or span."""
    return (
        floor < at < len(text)
        and not text[at - 1].isspace()
        and composes(text[max(floor, at - LOOKBACK) : at], text[at])
    )
