"""Texts an extractor produced, remembered by the bytes they came from.

Checking a citation into a PDF or an office file runs the recorded extractor over
the whole file again (a 500-page PDF takes about a second; a scanned one, OCR for
every page). Extraction is deterministic by identity (``ExtractorProtocol``: same
bytes and same identity, same text), so a text can be reused for exactly those
bytes: the key is the extractor identity and the SHA-256 of the file's bytes, read
anew at every check, so an edited file is never answered from memory.

The memory is per process, bounded in characters and entries, least recently used
first out; a text larger than the whole budget is not kept. Only successful
extractions are kept: a failure is met again by the next check.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from groundkit.utils.hashing import sha256_bytes

__all__ = ["ExtractedTexts", "extracted_texts"]

# About 64 MB of text held at most (a str of ASCII is a byte a character).
DEFAULT_MAX_CHARS = 64_000_000
DEFAULT_MAX_ENTRIES = 64

Key = tuple[str, bytes]


class ExtractedTexts:
    """A bounded, thread-safe LRU of extracted texts keyed by (identity, bytes' hash)."""

    def __init__(
        self, max_chars: int = DEFAULT_MAX_CHARS, max_entries: int = DEFAULT_MAX_ENTRIES
    ) -> None:
        self.max_chars = max_chars
        self.max_entries = max_entries
        self._texts: OrderedDict[Key, str] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @staticmethod
    async def key(identity: str, data: bytes) -> Key:
        return (identity, await sha256_bytes(data))

    def get(self, key: Key) -> str | None:
        with self._lock:
            text = self._texts.get(key)
            if text is None:
                self.misses += 1
                return None
            self._texts.move_to_end(key)
            self.hits += 1
            return text

    def put(self, key: Key, text: str) -> None:
        if len(text) > self.max_chars:
            return
        with self._lock:
            old = self._texts.pop(key, None)
            if old is not None:
                self._chars -= len(old)
            self._texts[key] = text
            self._chars += len(text)
            while self._chars > self.max_chars or len(self._texts) > self.max_entries:
                _, dropped = self._texts.popitem(last=False)
                self._chars -= len(dropped)

    def clear(self) -> None:
        with self._lock:
            self._texts.clear()
            self._chars = 0

    def __len__(self) -> int:
        return len(self._texts)

    async def text(self, identity: str, data: bytes, extract: Callable[[], Awaitable[str]]) -> str:
        """The text ``extract()`` gives for ``data`` under ``identity``, run only when
        these bytes were not extracted under it before (or were forgotten since)."""
        key = await self.key(identity, data)
        found = self.get(key)
        if found is not None:
            return found
        text = await extract()
        self.put(key, text)
        return text


# The process's memory of extracted texts, shared by every collection's checks.
extracted_texts = ExtractedTexts()
