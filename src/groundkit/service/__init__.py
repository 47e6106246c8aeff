"""The MCP server (``grk serve``): search and verified fetches for LLM hosts.

Importing this package does not import the ``mcp`` SDK; building or running a
server does, and raises ``ConfigurationError`` naming the ``serve`` extra when
it is missing. The tool result shapes live in ``groundkit.service.server``,
the transports and the token gate in ``groundkit.service.transport``.
"""

from __future__ import annotations

from groundkit.service.collections import CollectionInfo, CollectionRegistry
from groundkit.service.server import build_server
from groundkit.service.transport import run_server

__all__ = ["CollectionInfo", "CollectionRegistry", "build_server", "run_server"]
