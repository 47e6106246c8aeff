"""Provider tests run offline: the hub must never be asked for a model."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.providers.embedding_server import EmbeddingServer

# Set at import, before anything can import huggingface_hub and read them.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"


@pytest.fixture(scope="module")
def _server_process() -> Iterator[EmbeddingServer]:
    server = EmbeddingServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def server(_server_process: EmbeddingServer) -> EmbeddingServer:
    """The shared 127.0.0.1 server, with its script and request log cleared."""
    _server_process.reset()
    return _server_process
