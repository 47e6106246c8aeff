"""Rendered PDF pages kept in memory, least recently used out first, within a byte budget.

Keyed by what makes the image: the file (path, modification time, size), the page and
the scale, so an edited PDF is rendered anew rather than served stale.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable

from groundkit.extraction.pdf_pages import PageImage

__all__ = ["DEFAULT_BUDGET_BYTES", "PageCache"]

DEFAULT_BUDGET_BYTES = 64 * 1024 * 1024


class PageCache:
    """A bounded LRU of ``PageImage`` by key; an image over the budget is not kept."""

    def __init__(self, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> None:
        self.budget = budget_bytes
        self._items: OrderedDict[Hashable, PageImage] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> PageImage | None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, key: Hashable, image: PageImage) -> None:
        size = len(image.png)
        if size > self.budget:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= len(old.png)
            self._items[key] = image
            self._bytes += size
            while self._bytes > self.budget:
                _, dropped = self._items.popitem(last=False)
                self._bytes -= len(dropped.png)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)
