"""``grk serve``: its options and how it runs (kept here so cli.py stays small)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from groundkit.contracts import SENSITIVITY_LEVELS
from groundkit.errors import ConfigurationError
from groundkit.providers.factory import EMBEDDING_API_KEY_ENV, EMBEDDING_URL_ENV
from groundkit.service.transport import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    TOKEN_ENV,
    Transport,
    check_binding,
    run_server,
)
from groundkit.storage.location import METADATA_URL_ENV, STORAGE_URI_ENV
from groundkit.utils.arguments import path_arg

if TYPE_CHECKING:
    # What serving takes is imported when grk serve runs: the other commands build
    # their parser from this module and need none of it.
    from groundkit.service.collections import CollectionRegistry

__all__ = [
    "add_embedding_url_argument",
    "add_location_arguments",
    "add_serve_parser",
    "path_arg",
    "route_third_party_logs",
    "run_serve",
]


def add_serve_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``serve`` on the ``grk`` sub-command parser."""
    serve = sub.add_parser(
        "serve",
        help="serve an index directory's collections to LLM hosts over MCP",
        description="Serve every collection in --index-dir over the Model Context Protocol: "
        "tools search, search_collections, fetch_chunk, verify_answer and list_collections.",
    )
    # Defaults come from grk's own options (they may also be given before 'serve').
    serve.add_argument(
        "--index-dir",
        default=argparse.SUPPRESS,
        type=path_arg,
        help="index directory (./.groundkit)",
    )
    serve.add_argument(
        "--base-dir",
        type=path_arg,
        default=argparse.SUPPRESS,
        help="directory sources are relative to (default: the one stored with each collection)",
    )
    add_location_arguments(serve, suppress=True)
    add_embedding_url_argument(serve, suppress=True)
    serve.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    # None when not given: over stdio either is refused, never ignored.
    serve.add_argument(
        "--host", default=None, help=f"HTTP address ({DEFAULT_HOST}; --transport http only)"
    )
    serve.add_argument(
        "--port", type=int, default=None, help=f"HTTP port ({DEFAULT_PORT}; --transport http only)"
    )
    serve.add_argument(
        "--token",
        default=None,
        help=f"bearer token every HTTP request must carry; required off loopback. Prefer "
        f"{TOKEN_ENV}: command lines are visible to other users of the machine",
    )
    serve.add_argument(
        "--rerank",
        metavar="MODEL_OR_PATH",
        default=None,
        help="local cross-encoder for search(rerank=true); loaded on first use",
    )
    serve.add_argument(
        "--glossary",
        type=path_arg,
        default=None,
        metavar="FILE",
        help="TOML glossary ([synonyms] term = [alternatives], [[groups]] terms = [...]) "
        "for search(rewrite=true): the query's rephrasings are searched too, fused by rank",
    )
    serve.add_argument(
        "--clearance",
        choices=SENSITIVITY_LEVELS,
        default=argparse.SUPPRESS,
        help="never return documents labelled above this sensitivity, from any tool",
    )
    serve.add_argument(
        "-v", "--verbose", action="count", default=argparse.SUPPRESS, help="more log output"
    )
    serve.add_argument(
        "-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="errors only"
    )


def add_location_arguments(parser: argparse.ArgumentParser, *, suppress: bool = False) -> None:
    """``--metadata-url`` and ``--storage-uri`` (shared collections), for grk and grk serve.

    ``suppress``: no default (a sub-command's copy of an option grk itself takes)."""
    parser.add_argument(
        "--metadata-url",
        default=argparse.SUPPRESS if suppress else None,
        help=f"PostgreSQL URL of shared collections, instead of --index-dir (default "
        f"${METADATA_URL_ENV}; prefer the variable: it keeps the password off the command line)",
    )
    parser.add_argument(
        "--storage-uri",
        default=argparse.SUPPRESS if suppress else None,
        help=f"where shared collections keep vectors and snapshots: a shared directory or "
        f"s3://bucket/prefix, configured by the AWS_* variables (default ${STORAGE_URI_ENV})",
    )


def settle_location(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Where the collections are, from the flags as given, the environment filling in
    what no flag said: an explicit ``--index-dir`` (or ``grk inspect INDEX_DIR``) names a
    local collection, whole, even when ``$GROUNDKIT_METADATA_URL`` and
    ``$GROUNDKIT_STORAGE_URI`` are set; both flags at once are a usage error, never one
    of them dropped without a word."""
    given = getattr(args, "index_dir_arg", None)
    if given is not None and args.index_dir is not None and Path(given) != Path(args.index_dir):
        parser.error("give the index directory once: INDEX_DIR or --index-dir")
    index_dir = given if given is not None else args.index_dir
    if index_dir is not None and args.metadata_url is not None:
        parser.error("give --index-dir or --metadata-url, not both")
    if index_dir is None and args.metadata_url is None:
        args.metadata_url = os.environ.get(METADATA_URL_ENV) or None
    if args.storage_uri is None and index_dir is None:
        args.storage_uri = os.environ.get(STORAGE_URI_ENV) or None
    args.index_dir = Path(".groundkit") if index_dir is None else index_dir
    if hasattr(args, "index_dir_arg"):
        args.index_dir_arg = None
    if args.metadata_url is None:
        # A file there holds no collections: saying "no collections" (or failing to
        # create one inside it) would hide the mistaken path.
        flag = "INDEX_DIR" if given is not None else "--index-dir"
        with contextlib.suppress(OSError):  # one that cannot be looked up: said when opened
            if args.index_dir.exists() and not args.index_dir.is_dir():
                parser.error(f"{flag} {str(args.index_dir)!r} is not a directory")


def add_embedding_url_argument(parser: argparse.ArgumentParser, *, suppress: bool = False) -> None:
    """``--embedding-url``: where collections bound to an HTTP embedder find its server.

    ``suppress``: no default (a sub-command's copy of an option grk itself takes)."""
    parser.add_argument(
        "--embedding-url",
        default=argparse.SUPPRESS if suppress else os.environ.get(EMBEDDING_URL_ENV) or None,
        metavar="URL",
        help=f"base URL of the embedding server of collections bound to an openai-compatible "
        f"or ollama model (default ${EMBEDDING_URL_ENV}; never stored; its key, if any, only "
        f"from ${EMBEDDING_API_KEY_ENV})",
    )


def run_serve(args: argparse.Namespace) -> int:
    """Serve until stdin closes (stdio) or the process is stopped (http); 0 on a clean end."""
    from groundkit.providers.factory import embedder_for_manifest
    from groundkit.retrieval.rerank import CrossEncoderReranker
    from groundkit.retrieval.rewriting import GlossaryRewriter
    from groundkit.service.collections import CollectionRegistry

    transport: Transport = args.transport
    if transport == "stdio":
        given = [flag for flag in ("host", "port") if getattr(args, flag, None) is not None]
        if given:
            flags = " and ".join(f"--{flag}" for flag in given)
            verb = "apply" if len(given) > 1 else "applies"
            raise ConfigurationError(
                f"{flags} {verb} to --transport http only; over stdio there is no address"
            )
    host: str = DEFAULT_HOST if args.host is None else args.host
    port: int = DEFAULT_PORT if args.port is None else args.port
    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV) or None
    check_binding(transport, host, token)
    if not 1 <= port <= 65535:
        raise ConfigurationError(f"--port must be from 1 to 65535, got {port}")
    rewriter = GlossaryRewriter.from_file(args.glossary) if args.glossary is not None else None
    registry = CollectionRegistry(
        None if args.metadata_url else args.index_dir,
        metadata_url=args.metadata_url,
        storage_uri=args.storage_uri,
        base_dir=args.base_dir,
        reranker=CrossEncoderReranker(args.rerank) if args.rerank else None,
        embedder_for=functools.partial(embedder_for_manifest, endpoint=args.embedding_url),
        clearance=args.clearance,
        rewriter=rewriter,
    )
    route_third_party_logs()
    asyncio.run(_serve(registry, transport, host, port, token, quiet=args.quiet))
    return 0


async def _serve(
    registry: CollectionRegistry,
    transport: Transport,
    host: str,
    port: int,
    token: str | None,
    *,
    quiet: bool,
) -> None:
    names = await registry.names()
    if not names:
        raise ConfigurationError(
            f"no collections in {registry.where!r}; run 'grk ingest PATH' first"
        )

    def ready(where: str) -> None:
        if not quiet:
            # stderr: on stdio, stdout carries the protocol.
            print(
                f"grk: serving {len(names)} collection(s) ({', '.join(names)}) over MCP: {where}",
                file=sys.stderr,
                flush=True,
            )

    try:
        await run_server(
            registry, transport=transport, host=host, port=port, token=token, ready=ready
        )
    finally:
        await registry.close()


def route_third_party_logs() -> None:
    """Let the MCP SDK's and uvicorn's records out through grk's handler and level
    (grk serve and grk inspect)."""
    ours = logging.getLogger("groundkit")
    root = logging.getLogger()
    root.handlers[:] = list(ours.handlers)
    root.setLevel(ours.level)
