"""evals.bench_postgres runs end to end on a tiny corpus and drops what it wrote."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from evals import bench_postgres


def test_bench_runs_and_cleans_up(postgres_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_postgres.main(["--dsn", postgres_dsn, "--sizes", "300", "--queries", "8"]) == 0
    table = capsys.readouterr().out
    assert "| 300 | SQLite | 300 |" in table
    assert "| 300 | PostgreSQL | 300 |" in table

    async def leftovers() -> list[str]:
        conn = await asyncpg.connect(postgres_dsn)
        try:
            rows = await conn.fetch(
                "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'gk_bench-%'"
            )
        finally:
            await conn.close()
        return [row[0] for row in rows]

    assert asyncio.run(leftovers()) == []
