"""A glossary read off a corpus: the abbreviations its own text defines.

Writing ``long form (SF)`` is how scientific and technical text defines an
abbreviation; Schwartz and Hearst's algorithm (PSB 2003) finds the long form by
matching the short form's characters right to left against the words before the
parenthesis, the first one at the start of a word. Pairs defined at least
``min_count`` times in the corpus, each short form with its most frequent long
form, become a glossary mapping each to the other: what a user of
``GlossaryRewriter`` would write by hand for their own field, built here from the
documents alone, so an evaluation never sees its queries while making it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

__all__ = ["abbreviation_glossary", "long_form"]

_DEFINITION = re.compile(r"\((?P<short>[^()\s;,]{2,8})\)")
_WORD = re.compile(r"\S+")
_LOWER_WORD = re.compile(r"(?<![\w-])[a-z]{2,8}(?![\w-])")
# How far before a parenthesis a long form may start.
_REACH = 200


def _is_short_form(text: str) -> bool:
    return (
        text[0].isalpha()
        and sum(c.isupper() for c in text) >= 2
        and all(c.isalnum() or c in "-/" for c in text)
    )


def long_form(short: str, before: str) -> str | None:
    """The long form ``short`` abbreviates at the end of ``before``, or None.

    Each character of the short form (letters and digits, right to left) is found
    in the words before it, its first character at the start of a word; the long
    form runs from that word to the end of ``before``, within
    ``min(len + 5, 2 * len)`` words.
    """
    words = _WORD.findall(before)
    if not words:
        return None
    window = words[-min(len(short) + 5, 2 * len(short)) :]
    text = " ".join(window)
    s, at = len(short) - 1, len(text) - 1
    while s >= 0:
        c = short[s].lower()
        if not c.isalnum():
            s -= 1
            continue
        while at >= 0 and (text[at].lower() != c or (s == 0 and at > 0 and text[at - 1].isalnum())):
            at -= 1
        if at < 0:
            return None
        at -= 1
        s -= 1
    start = text.rfind(" ", 0, at + 1) + 1
    found = text[start:].strip(" ,;:")
    if len(found) <= len(short) or not found[0].isalnum():
        return None
    return found


def abbreviation_glossary(texts: Iterable[str], min_count: int = 3) -> dict[str, list[str]]:
    """``{short form: [long form], long form: [short form]}`` for the corpus's abbreviations.

    Deterministic: pairs are counted over the texts; each short form takes its most
    frequent long form (ties: the alphabetically first, but a form before its own
    prefix); a long form claimed by two short forms goes to the more frequent pair; a
    short form the text also uses as a lower-case word is left out. Matching is
    case-insensitive, so forms equal but for case count as one.
    """
    pairs: Counter[tuple[str, str]] = Counter()
    words: Counter[str] = Counter()
    for text in texts:
        words.update(_LOWER_WORD.findall(text))
        for match in _DEFINITION.finditer(text):
            short = match.group("short")
            if not _is_short_form(short):
                continue
            before = text[max(0, match.start() - _REACH) : match.start()]
            before = before[before.rfind("(") + 1 :]
            found = long_form(short, before)
            if found is not None:
                pairs[(short, " ".join(found.lower().split()))] += 1
    best: dict[str, tuple[int, str]] = {}
    totals: Counter[str] = Counter()
    for (short, found), n in pairs.items():
        key = short.lower()
        totals[key] += n
        held = best.get(key)
        if held is None or (n, _neg(found)) > (held[0], _neg(held[1])):
            best[key] = (n, found)
    spelled: dict[str, str] = {}
    for short, _ in sorted(pairs):
        spelled.setdefault(short.lower(), short)
    ranked = sorted(
        (
            (totals[key], key, found)
            for key, (_, found) in best.items()
            # A short form that is also a word of the text ("OR", "NO") would rewrite that word.
            if totals[key] >= min_count and words[key] < min_count
        ),
        key=lambda t: (-t[0], t[1]),
    )
    out: dict[str, list[str]] = {}
    taken: set[str] = set()
    for _, key, found in ranked:
        if found in taken or key in taken:
            continue
        taken.update((found, key))
        short = spelled[key]
        out[short] = [found]
        out[found] = [short]
    return out


def _neg(text: str) -> tuple[int, ...]:
    """A key under which ``max`` picks the alphabetically first of two strings, or the
    longer where one is a prefix of the other ("characteristics" over "characteristic")."""
    return tuple(-ord(c) for c in text)
