"""``grk inspect``: its options, and the inspector served by uvicorn until stopped."""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from groundkit.contracts import SENSITIVITY_LEVELS
from groundkit.errors import ConfigurationError
from groundkit.service.transport import (
    DEFAULT_HOST,
    TOKEN_ENV,
    check_binding,
    netloc,
    serve_asgi,
)

if TYPE_CHECKING:
    from groundkit.service.collections import CollectionRegistry

__all__ = ["DEFAULT_INSPECT_PORT", "INSPECT_EXTRA_HINT", "add_inspect_parser", "run_inspect"]

DEFAULT_INSPECT_PORT = 8765
INSPECT_EXTRA_HINT = (
    "grk inspect needs the 'inspect' extra: pip install groundkit[inspect] "
    "(PDF pages also need groundkit[pdf])"
)


def add_inspect_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``inspect`` on the ``grk`` sub-command parser."""
    from groundkit.service.command import add_embedding_url_argument, add_location_arguments
    from groundkit.utils.arguments import path_arg

    inspect = sub.add_parser(
        "inspect",
        help="a local web page to search a collection and see each citation in its source",
        description="Serve the citation inspector: search, each result highlighted where it "
        "stands in its source (PDF pages rendered with the cited lines boxed) with its "
        "verification verdict, and answers checked sentence by sentence. Binds to "
        f"{DEFAULT_HOST}; any other address needs a token (--token or {TOKEN_ENV}).",
    )
    inspect.add_argument(
        "index_dir_arg",
        nargs="?",
        type=path_arg,
        default=None,
        metavar="INDEX_DIR",
        help="index directory (default: --index-dir, else ./.groundkit)",
    )
    inspect.add_argument(
        "--index-dir",
        default=argparse.SUPPRESS,
        type=path_arg,
        help="index directory (./.groundkit)",
    )
    inspect.add_argument(
        "--collection",
        action="append",
        default=argparse.SUPPRESS,
        metavar="NAME",
        help="show only this collection (repeatable; default: every one)",
    )
    inspect.add_argument(
        "--base-dir",
        type=path_arg,
        default=argparse.SUPPRESS,
        help="directory sources are relative to (default: the one stored with each collection)",
    )
    add_location_arguments(inspect, suppress=True)
    add_embedding_url_argument(inspect, suppress=True)
    inspect.add_argument(
        "--host", default=DEFAULT_HOST, help=f"address to listen on ({DEFAULT_HOST})"
    )
    inspect.add_argument(
        "--port",
        type=int,
        default=DEFAULT_INSPECT_PORT,
        help=f"port ({DEFAULT_INSPECT_PORT}; 0 picks a free one)",
    )
    inspect.add_argument(
        "--token",
        default=None,
        help=f"token the browser presents once (?token=), required off loopback. Prefer "
        f"{TOKEN_ENV}: command lines are visible to other users of the machine",
    )
    inspect.add_argument(
        "--clearance",
        choices=SENSITIVITY_LEVELS,
        default=argparse.SUPPRESS,
        help="never show documents labelled above this sensitivity",
    )
    inspect.add_argument(
        "-v", "--verbose", action="count", default=argparse.SUPPRESS, help="more log output"
    )
    inspect.add_argument(
        "-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="errors only"
    )


def run_inspect(args: argparse.Namespace) -> int:
    """Serve the inspector until the process is stopped; 0 on a clean end."""
    from groundkit.providers.factory import embedder_for_manifest
    from groundkit.service.collections import CollectionRegistry
    from groundkit.service.command import route_third_party_logs

    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV) or None
    check_binding("http", args.host, token)
    if not 0 <= args.port <= 65535:
        raise ConfigurationError(f"--port must be from 0 to 65535, got {args.port}")
    index_dir = args.index_dir_arg if args.index_dir_arg is not None else args.index_dir
    registry = CollectionRegistry(
        None if args.metadata_url else index_dir,
        metadata_url=args.metadata_url,
        storage_uri=args.storage_uri,
        base_dir=args.base_dir,
        embedder_for=functools.partial(embedder_for_manifest, endpoint=args.embedding_url),
        clearance=args.clearance,
    )
    quiet = bool(args.quiet)
    route_third_party_logs()

    def ready(url: str) -> None:
        if not quiet:
            print(f"grk: citation inspector at {url}", file=sys.stderr, flush=True)

    asyncio.run(_inspect(registry, args.collection, args.host, args.port, token, ready=ready))
    return 0


async def _inspect(
    registry: CollectionRegistry,
    collections: Sequence[str] | None,
    host: str,
    port: int,
    token: str | None,
    *,
    ready: Callable[[str], None],
) -> None:
    try:
        names = await registry.names()
        if not names:
            raise ConfigurationError(
                f"no collections in {registry.where!r}; run 'grk ingest PATH' first"
            )
        missing = [c for c in collections or () if c not in names]
        if missing:
            raise ConfigurationError(
                f"no collection {missing[0]!r} in {registry.where!r} (it has {', '.join(names)})"
            )
        await serve_inspector(
            registry, collections=collections, host=host, port=port, token=token, ready=ready
        )
    finally:
        await registry.close()


async def serve_inspector(
    registry: CollectionRegistry,
    *,
    collections: Sequence[str] | None = None,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_INSPECT_PORT,
    token: str | None = None,
    ready: Callable[[str], None] | None = None,
) -> None:
    """Serve the inspector over ``registry`` until the process is stopped.

    ``ready`` gets the address to open once it accepts requests: with ``?token=`` when
    a token is set (the browser trades it for a cookie on its first request).
    """
    check_binding("http", host, token)
    try:
        import uvicorn  # noqa: F401  # extra: inspect (serve_asgi runs it)

        from groundkit.service.inspector.access import InspectorGate
        from groundkit.service.inspector.app import build_app
    except ImportError as exc:
        raise ConfigurationError(INSPECT_EXTRA_HINT) from exc
    app = InspectorGate(build_app(registry, collections=collections), token=token, host=host)

    def started(server: Any) -> None:
        if ready is not None:
            ready(_address(server, host, port, token))

    await serve_asgi(app, host, port, lifespan="off", started=started)


def _address(server: Any, host: str, port: int, token: str | None) -> str:
    """The URL to open: the bound port (``--port 0`` picks one), the token once."""
    for listener in getattr(server, "servers", ()):
        for sock in getattr(listener, "sockets", ()):
            port = int(sock.getsockname()[1])
            break
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    if host == "::":
        shown = "::1"
    url = f"http://{netloc(shown, port)}/"
    return url + (f"?token={quote(token, safe='')}" if token is not None else "")
