"""The MCP server (``grk serve``): search and verified fetches for LLM hosts.

Importing this package does not import the ``mcp`` SDK; building or running a
server does, and raises ``ConfigurationError`` naming the ``serve`` extra when
it is missing. The tool result shapes live in ``groundkit.service.server``,
the transports and the token gate in ``groundkit.service.transport``. Each name
here is imported from its module on first use, so ``grk`` commands that take
nothing of the server (``grk search``) do not load it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from groundkit.utils.lazy import lazy_names as _lazy_names

if TYPE_CHECKING:
    from groundkit.service.collections import CollectionInfo, CollectionRegistry
    from groundkit.service.server import build_server
    from groundkit.service.transport import run_server

# The public names each module defines; imported on first use.
__getattr__, __dir__ = _lazy_names(
    __name__,
    globals(),
    {
        "groundkit.service.collections": ("CollectionInfo", "CollectionRegistry"),
        "groundkit.service.server": ("build_server",),
        "groundkit.service.transport": ("run_server",),
    },
)

__all__ = ["CollectionInfo", "CollectionRegistry", "build_server", "run_server"]
