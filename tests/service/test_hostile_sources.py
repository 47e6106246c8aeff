"""A source replaced by a FIFO, fetched over MCP: each request fails at once, and healthy
requests in flight beside many of them still succeed (none waits for a free worker)."""

from __future__ import annotations

import asyncio

from groundkit.service import CollectionRegistry
from tests.service.conftest import Served
from tests.service.test_server import call, connected
from tests.support import fifo_at

# More FIFO fetches than the default thread pool has workers on a small host.
IN_FLIGHT = 16


async def test_fetch_of_a_fifo_source_fails_promptly_and_healthy_fetches_go_on(
    served: Served,
) -> None:
    async with connected(CollectionRegistry(served.index)) as client:
        solar = (await call(client, "search", query="solar panels", top_k=1))["results"][0]
        wind = (await call(client, "search", query="wind turbines", top_k=1))["results"][0]
        assert solar["citation"]["source"] == "docs/energy/solar.md"
        assert wind["citation"]["source"] == "docs/energy/wind.txt"
        with fifo_at(served.source(solar["citation"]["source"])):
            requests = [
                call(client, "fetch_chunk", chunk_id=solar["citation"]["chunk_id"])
                for _ in range(IN_FLIGHT)
            ]
            requests += [
                call(client, "fetch_chunk", chunk_id=wind["citation"]["chunk_id"]) for _ in range(4)
            ]
            answers = await asyncio.wait_for(asyncio.gather(*requests), 30)
            # And once more on its own, after the burst.
            last = await asyncio.wait_for(
                call(client, "fetch_chunk", chunk_id=wind["citation"]["chunk_id"]), 10
            )
    refused, healthy = answers[:IN_FLIGHT], [*answers[IN_FLIGHT:], last]
    for answer in refused:
        assert answer["verification"] == "unresolvable"
        assert answer["detail"] == (
            "cannot check source 'docs/energy/solar.md': it is not a regular file (FIFO); "
            "only regular files are read"
        )
    assert all(a["verification"] == "verified" for a in healthy)
    assert all(a["content"] == wind["content"] for a in healthy)
