"""all_or_nothing / both: concurrent parts of one search never outlive it."""

from __future__ import annotations

import asyncio
import gc

import pytest

from groundkit.retrieval._tasks import all_or_nothing, both


class Part:
    """One concurrent part: returns ``value`` after ``delay``, or raises, or never ends."""

    def __init__(self, value: int = 0, *, delay: float = 0.0, error: Exception | None = None):
        self.value, self.delay, self.error = value, delay, error
        self.cancelled = False

    async def run(self) -> int:
        try:
            if self.delay < 0:
                await asyncio.Event().wait()
            await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        if self.error is not None:
            raise self.error
        return self.value


def others() -> list[asyncio.Task[object]]:
    current = asyncio.current_task()
    return [t for t in asyncio.all_tasks() if t is not current]


async def test_results_come_back_in_argument_order() -> None:
    parts = [Part(1, delay=0.02), Part(2), Part(3, delay=0.01)]
    assert await all_or_nothing(*(p.run() for p in parts)) == [1, 2, 3]
    assert await both(Part(4).run(), Part(5, delay=0.01).run()) == (4, 5)


async def test_a_failure_cancels_and_awaits_the_rest() -> None:
    slow, failing = Part(delay=-1), Part(error=ValueError("boom"))
    with pytest.raises(ValueError, match="boom"):
        await asyncio.wait_for(both(slow.run(), failing.run()), 5)
    assert slow.cancelled
    assert others() == []


async def test_the_first_failure_in_argument_order_is_raised_and_every_one_retrieved(
    caplog: pytest.LogCaptureFixture,
) -> None:
    first, second = Part(error=KeyError("first")), Part(error=ValueError("second"))
    with pytest.raises(KeyError):
        await all_or_nothing(first.run(), second.run())
    await asyncio.sleep(0)
    gc.collect()  # an unretrieved task exception is reported when the task is collected
    assert "never retrieved" not in caplog.text


async def test_cancelling_the_caller_cancels_every_part() -> None:
    parts = [Part(delay=-1), Part(delay=-1)]
    task = asyncio.ensure_future(all_or_nothing(*(p.run() for p in parts)))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert all(p.cancelled for p in parts)
    assert others() == []
