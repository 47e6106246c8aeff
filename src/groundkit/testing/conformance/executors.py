"""A conformance suite any ``IngestExecutor`` must pass.

Subclass it with a ``Test*`` class that provides an ``executor`` fixture yielding the
executor to test::

    class TestMyExecutor(IngestExecutorConformance):
        @pytest.fixture
        def executor(self):
            return MyExecutor(...)

The driver commits whatever an executor yields, in the order it yields it, so the
suite pins what makes that safe: one result per file in the plan's order, the
unchanged check and the per-file failures applied where the file is read, the
call's fields applied, and a collection ingested through the executor equal to one
ingested without it. BM25 only: no model is needed.
"""

from __future__ import annotations

from pathlib import Path

from groundkit.collection import Collection
from groundkit.config import AnalyzerConfig, ChunkingConfig, IngestConfig
from groundkit.ingestion.executor import IngestExecutor, IngestPlan, LocalExecutor, PreparedFile
from groundkit.storage.protocols import DocumentState

__all__ = ["IngestExecutorConformance"]

_FILES = {
    "docs/a.md": "# Refunds\n\nRefunds are paid within fourteen days of the return.\n",
    "docs/b.md": "---\ntitle: Shipping\n---\n# Shipping\n\nParcels leave on Mondays.\n",
    "docs/sub/c.txt": "Warranty claims need the receipt and the serial number.\n",
    "docs/sub/d.md": "# Batteries\n\n" + "Charge the battery fully before storing it. " * 80,
    "docs/empty.md": "   \n",
}


def _corpus(base: Path) -> list[str]:
    for name, text in _FILES.items():
        path = base / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return sorted(str(base / name) for name in _FILES)


def _plan(base: Path, files: list[str], **changes: object) -> IngestPlan:
    plan = IngestPlan(
        files=tuple(files),
        base_dir=str(base),
        ingest=IngestConfig(),
        chunking=ChunkingConfig(),
        analyzer=AnalyzerConfig(),
        fields={},
        known={},
    )
    return IngestPlan(**{**{f: getattr(plan, f) for f in plan.__dataclass_fields__}, **changes})


async def _results(executor: IngestExecutor, plan: IngestPlan) -> list[PreparedFile]:
    return [item async for item in executor.run(plan)]


def _shape(items: list[PreparedFile]) -> list[tuple[object, ...]]:
    """What the committer uses of each result (vectors aside)."""
    return [
        (
            i.source,
            i.outcome,
            i.document.content_hash if i.document else None,
            i.document.metadata if i.document else None,
            [c.chunk_id for c in i.chunks],
            i.terms,
            i.hashes,
            i.notes,
        )
        for i in items
    ]


class IngestExecutorConformance:
    """Behaviour shared by every ingest executor."""

    def test_is_an_ingest_executor(self, executor: IngestExecutor) -> None:
        assert isinstance(executor, IngestExecutor)

    async def test_one_result_per_file_in_order_as_the_local_executor_gives(
        self, executor: IngestExecutor, tmp_path: Path
    ) -> None:
        files = _corpus(tmp_path)
        plan = _plan(tmp_path, files)
        got = await _results(executor, plan)
        assert [i.source for i in got] == [Path(f).relative_to(tmp_path).as_posix() for f in files]
        assert _shape(got) == _shape(await _results(LocalExecutor(), plan))
        outcomes = {i.source: i.outcome for i in got}
        assert outcomes["docs/empty.md"] == "failed"
        assert sum(o == "prepared" for o in outcomes.values()) == 4

    async def test_a_failure_is_a_result_naming_its_file(
        self, executor: IngestExecutor, tmp_path: Path
    ) -> None:
        files = _corpus(tmp_path)
        missing = str(tmp_path / "docs" / "gone.md")
        got = await _results(executor, _plan(tmp_path, [*files, missing]))
        last = got[-1]
        assert last.outcome == "failed" and last.source == "docs/gone.md"
        assert "docs/gone.md" in last.reason
        assert all(i.outcome == "prepared" for i in got[:-1] if i.source != "docs/empty.md")

    async def test_unchanged_files_are_skipped_where_they_are_read(
        self, executor: IngestExecutor, tmp_path: Path
    ) -> None:
        files = _corpus(tmp_path)
        first = await _results(executor, _plan(tmp_path, files))
        known = {
            i.source: DocumentState(
                content_hash=i.document.content_hash,
                source_class=i.document.source_class,
                extractor=i.document.extractor,
                metadata=dict(i.document.metadata),
            )
            for i in first
            if i.document is not None
        }
        again = await _results(executor, _plan(tmp_path, files, known=known))
        assert {i.source for i in again if i.outcome == "unchanged"} == set(known)
        assert all(not i.chunks for i in again)

    async def test_the_call_fields_are_applied(
        self, executor: IngestExecutor, tmp_path: Path
    ) -> None:
        files = _corpus(tmp_path)
        got = await _results(executor, _plan(tmp_path, files, fields={"team": "support"}))
        for item in got:
            if item.document is not None:
                assert item.document.metadata["fields"]["team"] == "support"

    async def test_a_collection_ingested_through_it_equals_a_local_ingest(
        self, executor: IngestExecutor, tmp_path: Path
    ) -> None:
        _corpus(tmp_path)
        found: list[list[tuple[str, float]]] = []
        reports = []
        for name, chosen in (("plain", None), ("executor", executor)):
            async with Collection.open(index_dir=tmp_path / name, base_dir=tmp_path) as col:
                reports.append(await col.ingest(tmp_path / "docs", executor=chosen))
                hits = await col.search("battery refunds parcels", top_k=10)
                found.append([(h.chunk_id, h.score) for h in hits.results])
                assert (await col.verify_all()).ok
        plain, through = reports
        assert (through.added, through.failed) == (plain.added, plain.failed)
        assert found[0] == found[1] and found[0]
