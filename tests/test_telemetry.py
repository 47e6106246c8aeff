"""Spans through the allowlist only; a sentinel query never reaches a span or a log record."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from opentelemetry.trace import StatusCode

from groundkit import (
    Collection,
    ConfigurationError,
    RerankerNotConfiguredError,
    RetrievalConfig,
    RetrievalError,
    RetrievalResult,
    SearchMode,
)
from groundkit.telemetry import SPAN_ATTRIBUTES, SPAN_NAMES, span_attributes, traced
from tests.otel_support import Captured, capture
from tests.support import SMALL_CHUNKS, ToyEmbedder, write_tree

# Appears in every query and in one document; must never be seen on a span or
# in an INFO-or-above log record.
SENTINEL = "zqxsentinelvq"
DOC_SECRET = "plumbobsecret"
FILES = {
    "tea.md": (
        f"Green tea {SENTINEL} is steeped at eighty degrees.\n\nBlack tea wants boiling water.\n"
    ),
    "secret.txt": f"The vault code is {DOC_SECRET} and the tea is {SENTINEL} green.\n",
    "bread.txt": "Sourdough rises slowly overnight because wild yeast ferments the dough.\n",
}


class EchoingFailingReranker:
    """A reranker whose error quotes the query, the worst case for a leak."""

    model_name = "echo-fail"

    async def rerank(
        self, query: str, results: Sequence[RetrievalResult], top_k: int | None = None
    ) -> list[RetrievalResult]:
        raise RuntimeError(f"cannot score {query!r} against {results[0].content!r}")


class ReversingReranker:
    model_name = "reverse"

    async def rerank(
        self, query: str, results: Sequence[RetrievalResult], top_k: int | None = None
    ) -> list[RetrievalResult]:
        out = list(reversed(results))
        return out if top_k is None else out[:top_k]


def assert_no_leak(captured: Captured) -> None:
    for secret in (SENTINEL, DOC_SECRET):
        assert captured.leaks(secret) == [], secret


def test_allowlist_drops_unknown_keys_and_wrong_shapes() -> None:
    kept = span_attributes(
        {
            "collection": "docs-1",
            "mode": "hybrid",
            "top_k": 5,
            "query": SENTINEL,
            "content": SENTINEL,
            "source": f"https://example.com/?q={SENTINEL}",
            "result_count": None,
        }
    )
    assert kept == {
        "groundkit.collection": "docs-1",
        "groundkit.mode": "hybrid",
        "groundkit.top_k": 5,
    }
    shaped = span_attributes(
        {
            "mode": SENTINEL,
            "stage": f"bm25 {SENTINEL}",
            "collection": f"{SENTINEL} with spaces",
            "top_k": SENTINEL,
            "result_count": -1,
            "rerank": "yes",
            "duration_ms": float("nan"),
            "failure_kind": f"Error: {SENTINEL}",
            "verification": SENTINEL,
        }
    )
    assert shaped == {}
    assert all(key == key.strip() and " " not in key for key in SPAN_ATTRIBUTES)


def test_a_failure_records_its_kind_and_status_but_not_its_message() -> None:
    with (
        capture() as captured,
        pytest.raises(ValueError),
        traced("groundkit.fetch_chunk", collection="c"),
    ):
        raise ValueError(f"bad input {SENTINEL}")
    (span,) = captured.named("groundkit.fetch_chunk")
    assert span.attributes is not None
    assert span.attributes["groundkit.failure_kind"] == "ValueError"
    assert span.attributes["groundkit.collection"] == "c"
    assert float(span.attributes["groundkit.duration_ms"]) >= 0.0  # type: ignore[arg-type]
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description is None
    assert list(span.events) == []
    assert_no_leak(captured)


def test_the_library_never_imports_the_sdk() -> None:
    code = (
        "import sys, groundkit, groundkit.telemetry, groundkit.service; "
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_span_names_are_the_documented_ones() -> None:
    expected = {
        "groundkit.retrieve.search",
        "groundkit.rerank",
        "groundkit.ingest",
        "groundkit.ingest.document",
        "groundkit.fetch_chunk",
    }
    assert expected == SPAN_NAMES


async def test_ingest_search_fetch_spans_carry_counts_not_text(tmp_path: Path) -> None:
    write_tree(tmp_path / "docs", FILES)
    (tmp_path / "docs" / "broken.txt").write_bytes(b"\xff\xfe" + SENTINEL.encode())
    with capture() as captured:
        async with Collection.open(
            tmp_path / "idx", "notes", base_dir=tmp_path, chunking=SMALL_CHUNKS
        ) as col:
            report = await col.ingest(tmp_path / "docs")
            response = await col.search(f"green tea {SENTINEL}", 3)
            fetched = await col.fetch_chunk(response.results[0].chunk_id)
    assert len(report.failed) == 1 and fetched.verification == "verified"

    (run,) = captured.named("groundkit.ingest")
    assert run.attributes is not None
    assert run.attributes["groundkit.collection"] == "notes"
    assert run.attributes["groundkit.documents.added"] == 3
    assert run.attributes["groundkit.documents.failed"] == 1
    documents = captured.named("groundkit.ingest.document")
    assert len(documents) == 4
    assert all(d.parent is not None and d.parent.span_id == run.context.span_id for d in documents)
    outcomes = sorted(str((d.attributes or {})["groundkit.outcome"]) for d in documents)
    assert outcomes == ["added", "added", "added", "failed"]
    (failed,) = [d for d in documents if (d.attributes or {})["groundkit.outcome"] == "failed"]
    assert failed.status.status_code is StatusCode.ERROR
    assert (failed.attributes or {})["groundkit.failure_kind"] == "IngestionError"

    (search,) = captured.named("groundkit.retrieve.search")
    attributes = dict(search.attributes or {})
    assert attributes["groundkit.mode"] == "bm25"
    assert attributes["groundkit.stage"] == "bm25"
    assert attributes["groundkit.top_k"] == 3
    assert attributes["groundkit.result_count"] == len(response.results)
    assert set(attributes) <= {"groundkit." + key for key in SPAN_ATTRIBUTES}

    (fetch,) = captured.named("groundkit.fetch_chunk")
    assert (fetch.attributes or {})["groundkit.verification"] == "verified"
    # The capture works: the retriever's INFO record was seen.
    assert any(r.name.startswith("groundkit") for r in captured.records)
    assert_no_leak(captured)


@pytest.mark.parametrize("mode", ["bm25", "dense", "hybrid"])
async def test_sentinel_query_leaks_nowhere_in_any_mode(tmp_path: Path, mode: SearchMode) -> None:
    write_tree(tmp_path / "docs", FILES)
    with capture() as captured:
        async with Collection.open(
            tmp_path / "idx",
            base_dir=tmp_path,
            chunking=SMALL_CHUNKS,
            embedder=ToyEmbedder(),
            reranker=ReversingReranker(),
        ) as col:
            await col.ingest(tmp_path / "docs")
            found = await col.search(f"{SENTINEL} green tea", 3, mode=mode)
            reranked = await col.search(f"{SENTINEL} green tea", 2, mode=mode, rerank=True)
            fetched = await col.fetch_chunk(found.results[0].chunk_id)
    # The sentinel really went through: it was the query and is in the results.
    assert found.query.startswith(SENTINEL)
    assert any(SENTINEL in r.content for r in found.results)
    assert reranked.metadata["stage"] == "rerank" and fetched.verification == "verified"
    searches = captured.named("groundkit.retrieve.search")
    assert [(s.attributes or {}).get("groundkit.mode") for s in searches] == [mode, mode]
    (rerank,) = captured.named("groundkit.rerank")
    assert rerank.parent is not None and rerank.parent.span_id == searches[1].context.span_id
    assert_no_leak(captured)


async def test_sentinel_leaks_nowhere_on_failure_paths(tmp_path: Path) -> None:
    write_tree(tmp_path / "docs", FILES)
    with capture() as captured:
        async with Collection.open(
            tmp_path / "idx",
            base_dir=tmp_path,
            chunking=SMALL_CHUNKS,
            reranker=EchoingFailingReranker(),
            retrieval=RetrievalConfig(rerank_depth=4),
        ) as col:
            await col.ingest(tmp_path / "docs")
            empty = await col.search(f"{SENTINEL}unmatched", 5)
            with pytest.raises(RetrievalError, match="top_k"):
                await col.search(SENTINEL, 0)
            with pytest.raises(RetrievalError, match="mode"):
                await col.search(SENTINEL, 3, mode=SENTINEL)  # type: ignore[arg-type]
            # Dense without the dense extras configured: refused with the install hint.
            with pytest.raises(ConfigurationError, match=r"groundkit\[dense"):
                await col.search(SENTINEL, 3, mode="dense")
            with pytest.raises(RetrievalError, match=r"echo-fail.*RuntimeError"):
                await col.search(f"{SENTINEL} tea", 3, rerank=True)
            with pytest.raises(RetrievalError, match="no chunk"):
                await col.fetch_chunk(SENTINEL)
        async with Collection.open(tmp_path / "idx", base_dir=tmp_path) as plain:
            with pytest.raises(RerankerNotConfiguredError):
                await plain.search(SENTINEL, rerank=True)
    assert empty.results == []
    kinds = [
        (s.attributes or {}).get("groundkit.failure_kind")
        for s in captured.named("groundkit.retrieve.search")
    ]
    assert kinds == [
        None,
        "RetrievalError",
        "RetrievalError",
        "ConfigurationError",
        "RetrievalError",
        "RerankerNotConfiguredError",
    ]
    (rerank,) = captured.named("groundkit.rerank")
    assert (rerank.attributes or {})["groundkit.failure_kind"] == "RetrievalError"
    assert rerank.status.status_code is StatusCode.ERROR
    (fetch,) = captured.named("groundkit.fetch_chunk")
    assert (fetch.attributes or {})["groundkit.failure_kind"] == "RetrievalError"
    assert_no_leak(captured)


async def test_url_ingest_puts_no_url_on_a_span_or_in_a_log(tmp_path: Path) -> None:
    from groundkit.ingestion.url_loader import UrlLoader
    from groundkit.utils.url_safety import AddressPolicy
    from tests.sources import Route, Site

    site = Site()
    site.routes["/page.txt"] = Route(
        body=b"Tidal lagoons store the sea.\n", headers={"Content-Type": "text/plain"}
    )
    loader = UrlLoader(policy=AddressPolicy.allowing("127.0.0.0/8"), timeout=5.0)
    try:
        with capture() as captured:
            async with Collection.open(
                tmp_path / "idx", base_dir=tmp_path, url_loader=loader
            ) as col:
                added = await col.ingest(site.url(f"/page.txt?topic={SENTINEL}"))
                failed = await col.ingest(site.url(f"/{SENTINEL}.txt?q={SENTINEL}"))
    finally:
        site.close()
    assert len(added.added) == 1 and SENTINEL in added.added[0]
    assert len(failed.failed) == 1
    runs = captured.named("groundkit.ingest")
    assert [(r.attributes or {}).get("groundkit.documents.added") for r in runs] == [1, 0]
    assert (runs[1].attributes or {})["groundkit.documents.failed"] == 1
    assert_no_leak(captured)


async def test_embedding_requests_log_no_url_credentials() -> None:
    from groundkit import OllamaEmbedder
    from tests.providers.embedding_server import EmbeddingServer

    server = EmbeddingServer()
    password = "hunter2-" + SENTINEL
    try:
        url = server.url.replace("http://", f"http://user:{password}@")
        with capture() as captured:
            async with OllamaEmbedder("m", base_url=url, dimensions=8) as embedder:
                await embedder.embed_query(f"what is {SENTINEL}")
        sent = server.requests[0].headers.get("Authorization", "")
    finally:
        server.close()
    assert sent.startswith("Basic ")  # the credentials still reach the server
    assert any(r.name == "httpx" for r in captured.records)  # httpx did log the request
    assert captured.leaks(password) == [] and captured.leaks(SENTINEL) == []
