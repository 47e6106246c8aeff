"""Using the async API as if it were blocking, or the blocking one as if it were async,
is a ``TypeError`` that shows the right forms, and leaves nothing behind."""

from __future__ import annotations

import gc
import warnings
from pathlib import Path

import pytest

import groundkit
import groundkit.sync as gks

RIGHT_FORMS = (
    "async with groundkit.Collection.open(...) as col:",
    "col = await groundkit.Collection.open(...)",
    "with groundkit.sync.Collection.open(...) as col:",
)


def assert_shows_the_right_forms(message: str) -> None:
    for form in RIGHT_FORMS:
        assert form in message


@pytest.mark.parametrize("name", ["search", "ingest", "name", "base_dir", "retriever"])
def test_a_forgotten_await_names_the_forms(tmp_path: Path, name: str) -> None:
    opener = groundkit.Collection.open(tmp_path / "idx")
    with pytest.raises(TypeError, match=f"not awaited: .{name} was asked") as caught:
        getattr(opener, name)
    assert_shows_the_right_forms(str(caught.value))


def test_a_plain_with_names_the_forms(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="plain 'with'") as caught:  # noqa: SIM117
        with groundkit.Collection.open(tmp_path / "idx"):  # type: ignore[attr-defined]
            pass
    assert_shows_the_right_forms(str(caught.value))
    # Nothing ran: no collection, no index directory.
    assert not (tmp_path / "idx").exists()


def test_misuse_leaves_no_unawaited_coroutine_behind(tmp_path: Path) -> None:
    gc.collect()  # what earlier tests left for the collector is not this test's
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opener = groundkit.Collection.open(tmp_path / "idx")
        with pytest.raises(TypeError):
            opener.search  # type: ignore[attr-defined]  # noqa: B018 - the misuse under test
        with pytest.raises(TypeError), opener:  # type: ignore[attr-defined]
            pass
        del opener
        gc.collect()
    assert [str(w.message) for w in caught] == []


def test_other_names_are_still_plain_attribute_errors(tmp_path: Path) -> None:
    opener = groundkit.Collection.open(tmp_path / "idx")
    # What asyncio and duck typing probe: absent, as on any coroutine, not an error.
    assert not hasattr(opener, "cr_code")
    assert not hasattr(opener, "no_such_thing")
    assert not hasattr(opener, "_private")


async def test_the_opener_still_opens_the_three_ways(tmp_path: Path) -> None:
    col = await groundkit.Collection.open(tmp_path / "idx")
    await col.close()
    async with groundkit.Collection.open(tmp_path / "idx") as col:
        assert not col.closed
    assert col.closed


async def test_async_with_on_a_blocking_collection_shows_the_async_form(tmp_path: Path) -> None:
    blocking = gks.Collection.open(tmp_path / "idx")
    with pytest.raises(TypeError, match="is blocking") as caught:
        async with blocking:  # type: ignore[attr-defined]
            pass
    assert "async with groundkit.Collection.open(...) as col:" in str(caught.value)
    # Closed on the way out: nothing is left open for the exit hook to warn about.
    assert blocking.closed and blocking.aio.closed
    assert "now closed" in str(caught.value)


async def test_awaiting_a_blocking_collection_shows_the_async_form(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="is blocking") as caught:
        await gks.Collection.open(tmp_path / "idx")  # type: ignore[misc]
    assert "async with groundkit.Collection.open(...) as col:" in str(caught.value)
    assert "now closed" in str(caught.value)


def test_a_blocking_collection_is_still_a_plain_context_manager(tmp_path: Path) -> None:
    with gks.Collection.open(tmp_path / "idx") as col:
        assert col.generation() == 0
    assert col.closed
