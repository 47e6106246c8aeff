"""OpenAICompatibleEmbedder against a real OpenAI-compatible server (txtai on 127.0.0.1
serving the packaged MiniLM); the stub server stays for fault injection only."""

from __future__ import annotations

import numpy as np
import pytest

from groundkit import ConfigurationError, OpenAICompatibleEmbedder, SentenceTransformerEmbedder
from tests.embedding_server import MODEL, OpenAIServer

TEXTS = [
    "Green tea is brewed at about 80 degrees.",
    "Black tea wants boiling water.",
    "The stock market fell today.",
    "東京は日本の首都です。",
]


async def test_vectors_match_the_same_model_run_locally(openai_server: OpenAIServer) -> None:
    async with OpenAICompatibleEmbedder(MODEL, base_url=openai_server.base_url) as remote:
        await remote.load()
        assert remote.dimensions == 384
        served = await remote.embed_documents(TEXTS)
        query = await remote.embed_query("how hot for green tea")
    local = SentenceTransformerEmbedder("all-MiniLM-L6-v2")
    here = await local.embed_documents(TEXTS)
    assert served.shape == here.shape == (len(TEXTS), 384)
    assert served.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(served, axis=1), 1.0, rtol=1e-5)
    # The same model on both sides: the same vectors, row by row.
    assert np.min(np.sum(served * here, axis=1)) > 0.9999
    assert float(query @ served[0]) > float(query @ served[2])


async def test_batches_come_back_in_input_order(openai_server: OpenAIServer) -> None:
    texts = [f"note number {i} about item {i * 7}" for i in range(70)]
    async with OpenAICompatibleEmbedder(
        MODEL, base_url=openai_server.base_url + "/v1", batch_size=16, dimensions=384
    ) as remote:
        batched = await remote.embed_documents(texts)
        singles = np.stack([await remote.embed_query(t) for t in texts[:5]])
    np.testing.assert_allclose(batched[:5], singles, atol=1e-5)


async def test_a_wrong_declared_size_is_refused(openai_server: OpenAIServer) -> None:
    async with OpenAICompatibleEmbedder(
        MODEL, base_url=openai_server.base_url, dimensions=768
    ) as remote:
        with pytest.raises(ConfigurationError, match="returned 384-dimensional vectors"):
            await remote.embed_documents(["x"])
