"""Running awaitables side by side without leaving any of them behind.

``asyncio.gather`` returns at the first failure and lets the other awaitables run
on: after the search has already raised they keep reading a store the caller may
be closing, and whatever they raise later is nobody's to handle. These helpers
cancel the rest at the first failure and wait for them before raising it, so a
search is over, every part of it, when it returns or raises.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

__all__ = ["all_or_nothing", "both"]

_A = TypeVar("_A")
_B = TypeVar("_B")
_T = TypeVar("_T")


async def all_or_nothing(*awaitables: Awaitable[_T]) -> list[_T]:
    """The results of ``awaitables`` run concurrently, in order.

    When one raises, the others are cancelled and awaited, every exception is
    retrieved, and the first failure (in argument order) is raised. When the
    caller is cancelled, so is every awaitable, before the cancellation goes on.
    """
    results: list[_T] = await _run(list(awaitables))
    return results


async def both(first: Awaitable[_A], second: Awaitable[_B]) -> tuple[_A, _B]:
    """``all_or_nothing`` for two awaitables of different result types."""
    a, b = await _run([first, second])
    return a, b


async def _run(awaitables: list[Awaitable[Any]]) -> list[Any]:
    tasks = [asyncio.ensure_future(a) for a in awaitables]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    except BaseException:
        await _cancel(tasks)
        raise
    failures = [error for task in tasks if task.done() and (error := _error_of(task)) is not None]
    if failures:
        await _cancel(tasks)
        raise failures[0]
    return [task.result() for task in tasks]


def _error_of(task: asyncio.Future[Any]) -> BaseException | None:
    """The task's exception, marked as retrieved; None if it succeeded or was cancelled."""
    if task.cancelled():
        return None
    return task.exception()


async def _cancel(tasks: Sequence[asyncio.Future[Any]]) -> None:
    """Cancel whatever is still running and wait until all of it has stopped."""
    for task in tasks:
        task.cancel()
    # return_exceptions: every outcome is retrieved here, none reported as lost.
    await asyncio.gather(*tasks, return_exceptions=True)
