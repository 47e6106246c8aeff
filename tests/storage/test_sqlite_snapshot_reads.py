"""Reads on a connection of their own ride out SQLite's transient faults, and only those.

The catch-up read a search makes after a write (``lexical_delta``) and the read of
confirmed vectors open a fresh read-only connection each time. Under many writers
and processes SQLite's first read on such a connection can fail for a moment with an
I/O error; the read is tried again. Faults are injected at the driver (a connection
class whose ``BEGIN`` fails), everything else is a real SQLite file.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from groundkit import StorageError
from groundkit.storage import SQLiteMetadataStore
from groundkit.storage import sqlite as sqlite_module
from groundkit.testing.conformance.helpers import put

PAUSES = sqlite_module._SNAPSHOT_PAUSES_S
TRIES = len(PAUSES) + 1  # the first try and one after each pause
SQLITE_IOERR_SHORT_READ = 522  # an extended I/O error code: SQLITE_IOERR | (2 << 8)


def _fault(code: int, name: str, message: str) -> sqlite3.OperationalError:
    exc = sqlite3.OperationalError(message)
    exc.sqlite_errorcode = code
    exc.sqlite_errorname = name
    return exc


class _Faults:
    """Makes the next ``count`` snapshot connections fail at ``BEGIN`` with ``fault``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        self.fault: Callable[[], sqlite3.OperationalError] = lambda: _fault(
            SQLITE_IOERR_SHORT_READ, "SQLITE_IOERR_SHORT_READ", "disk I/O error"
        )
        self.begun = 0
        faults = self

        class Flaky(sqlite3.Connection):
            def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
                if sql == "BEGIN":
                    faults.begun += 1
                    if faults.count > 0:
                        faults.count -= 1
                        raise faults.fault()
                return super().execute(sql, *args)

        real: Callable[..., sqlite3.Connection] = sqlite3.connect

        def connect(database: Any, *args: Any, **kwargs: Any) -> sqlite3.Connection:
            if kwargs.get("uri") and str(database).endswith("?mode=ro"):
                kwargs["factory"] = Flaky
            return real(database, *args, **kwargs)

        monkeypatch.setattr(sqlite3, "connect", connect)
        monkeypatch.setattr(sqlite_module, "_SNAPSHOT_PAUSES_S", (0.001,) * len(PAUSES))


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteMetadataStore]:
    opened = await SQLiteMetadataStore.open(tmp_path / "meta.sqlite3")
    try:
        await put(opened, "a.txt", ["alpha beta", "gamma"])
        yield opened
    finally:
        await opened.close()


@pytest.fixture
def faults(monkeypatch: pytest.MonkeyPatch) -> _Faults:
    return _Faults(monkeypatch)


async def test_a_transient_io_error_is_tried_again(
    store: SQLiteMetadataStore, faults: _Faults
) -> None:
    expected = await store.lexical_delta(0, 0)
    vectors = await store.confirmed_vectors()
    faults.begun = 0
    faults.count = TRIES - 1  # every try but the last fails
    delta = await store.lexical_delta(0, 0)
    assert faults.begun == TRIES
    assert delta.live_chunks == expected.live_chunks == 2
    assert delta.generation == expected.generation
    assert [p.keys.tolist() for p in delta.postings] == [p.keys.tolist() for p in expected.postings]
    faults.count = 2
    assert await store.confirmed_vectors() == vectors


async def test_a_lasting_io_error_is_a_storage_error_naming_it(
    store: SQLiteMetadataStore, faults: _Faults
) -> None:
    faults.count = TRIES
    with pytest.raises(StorageError, match=r"disk I/O error \(SQLITE_IOERR_SHORT_READ\)"):
        await store.lexical_delta(0, 0)
    assert faults.begun == TRIES
    faults.count = TRIES
    with pytest.raises(StorageError, match="could not read confirmed vectors"):
        await store.confirmed_vectors()
    assert (await store.lexical_delta(0, 0)).live_chunks == 2  # the store still works


async def test_other_errors_are_not_tried_again(
    store: SQLiteMetadataStore, faults: _Faults
) -> None:
    faults.fault = lambda: _fault(sqlite3.SQLITE_BUSY, "SQLITE_BUSY", "database is locked")
    faults.count = 1
    faults.begun = 0
    with pytest.raises(StorageError, match="database is locked"):
        await store.lexical_delta(0, 0)
    assert faults.begun == 1  # busy was already waited for by SQLite's own timeout
    faults.fault = lambda: _fault(sqlite3.SQLITE_ERROR, "SQLITE_ERROR", "no such table: x")
    faults.count = 1
    faults.begun = 0
    with pytest.raises(StorageError, match="no such table"):
        await store.confirmed_vectors()
    assert faults.begun == 1
