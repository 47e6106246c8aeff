"""The MCP server (``grk serve``): search and verified fetches for LLM hosts.

Importing this package does not import the ``mcp`` SDK; building or running a
server does, and raises ``ConfigurationError`` naming the ``serve`` extra when
it is missing.
"""

from __future__ import annotations

from groundkit.service.collections import (
    CollectionInfo,
    CollectionRegistry,
    EmbedderFactory,
    sentence_transformer_embedder,
)
from groundkit.service.server import (
    CitedResult,
    CollectionList,
    FetchedChunk,
    SearchOutput,
    build_server,
)
from groundkit.service.transport import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    TOKEN_ENV,
    BearerTokenGate,
    check_binding,
    run_server,
)

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "TOKEN_ENV",
    "BearerTokenGate",
    "CitedResult",
    "CollectionInfo",
    "CollectionList",
    "CollectionRegistry",
    "EmbedderFactory",
    "FetchedChunk",
    "SearchOutput",
    "build_server",
    "check_binding",
    "run_server",
    "sentence_transformer_embedder",
]
