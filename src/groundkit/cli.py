"""``grk``: ingest, search, fetch and verify from the shell.

Exit codes: 0 success; 1 the command ran but found a problem (a file failed
to ingest, a citation did not verify); 2 usage or configuration error; 130
interrupted (SIGINT, Ctrl-C); 143 terminated (SIGTERM), ended the same way.
``--json`` output is stable; its shape is documented in docs/cli.md.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, ClassVar, TextIO, cast

from groundkit.errors import (
    CollectionNotFoundError,
    ConfigurationError,
    GroundkitError,
    IngestionError,
    InvalidSettingError,
    RetrievalError,
)
from groundkit.service.moments import MOMENT_EXAMPLES, parse_moment
from groundkit.utils.text import first_unencodable

if TYPE_CHECKING:
    # The rest is imported where a command uses it: `grk --version` loads none of it,
    # and `grk search` neither the ingest pipeline nor the verifier (nor httpx).
    from groundkit.collection import Collection
    from groundkit.config import ChunkingConfig
    from groundkit.contracts import (
        CollectionFailure,
        CollectionManifest,
        DeleteReport,
        FetchResult,
        FieldValue,
        IngestProgress,
        IngestReport,
        MultiSearchResponse,
        OptimizeReport,
        SearchResponse,
    )
    from groundkit.ingestion.ray_executor import RayExecutor
    from groundkit.providers.protocols import EmbedderFactory, EmbeddingProtocol
    from groundkit.retrieval.request import SearchRequest
    from groundkit.retrieval.rerank import RerankerProtocol
    from groundkit.retrieval.rewriting import GlossaryRewriter
    from groundkit.service.collections import CollectionInfo, CollectionRegistry
    from groundkit.storage.location import StoreLocation
    from groundkit.verification.verifier import VerifyReport

__all__ = ["main"]

EXIT_OK, EXIT_PROBLEM, EXIT_ERROR = 0, 1, 2
# ``grk fetch --version``: the largest version a document can have (a 64-bit integer).
_MAX_VERSION = 2**63 - 1
# ``grk ingest --jsonl``: the file (or stdin) is read whole before any line is parsed;
# more than this is refused rather than read (a device such as /dev/zero never ends).
MAX_JSONL_BYTES = 256 * 1024 * 1024
# 128 + the signal's number, as a shell reports a command a signal ended.
EXIT_INTERRUPTED, EXIT_TERMINATED = 128 + signal.SIGINT, 128 + signal.SIGTERM
_SNIPPET = 160
# Control characters (C0, DEL, C1) and the Unicode line and paragraph separators, each
# shown as the escape a Python string literal would use.
_ESCAPES = {
    code: chr(code).encode("unicode_escape").decode("ascii")
    for code in (*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029)
}
# How grk names each SearchRequest field: errors about an option name the flag, never the
# Python argument (tests/retrieval/test_request.py pins it to the fields).
SEARCH_FLAGS = {
    "query": "the query",
    "top_k": "--top-k",
    "mode": "--mode",
    "rerank": "--rerank",
    "filters": "--where",
    "as_of": "--as-of",
    "expand": "--expand",
    "mmr": "--mmr",
    "reorder": "--reorder",
    "rewrite": "--glossary",
    "min_relevance": "--min-relevance",
}
# How grk names the settings its ingest flags fill (fields of these models): a refused
# setting names the flag.
SETTING_MODELS = ("IngestConfig", "ChunkingConfig")
SETTING_FLAGS = {
    "html_extractor": "--html",
    "ocr": "--ocr",
    "ocr_languages": "--ocr-languages",
    "keep_versions": "--keep-versions",
    "keep_sources": "--keep-sources",
    "extraction_cache_bytes": "--no-extraction-cache",
    "strategy": "--chunker",
    "max_chars": "--chunk-chars",
    "overlap_chars": "--chunk-overlap",
    "contextual": "--contextual",
}
# The command that gives a collection vectors, as a message tells it.
_ADD_VECTORS = "grk ingest PATH --embedder MODEL"
_WHEN_HELP = (
    f"an ISO 8601 date or date-time such as {MOMENT_EXAMPLES}; a date is midnight UTC, "
    "a time without an offset is read as UTC"
)


# Options every command takes, before or after the command name. Given after it, an
# option replaces what was given before it; --collection and -v add up.
_COMMANDS = (
    "ingest",
    "search",
    "fetch",
    "verify",
    "delete",
    "purge",
    "optimize",
    "collections",
    "drop",
    "rebase",
    "serve",
    "inspect",
)
# What `grk serve` takes of them (it has its own --base-dir and location options).
_SERVE_GLOBALS = frozenset(
    {"index_dir", "metadata_url", "storage_uri", "base_dir", "clearance", "verbose", "quiet"}
)
# What runs a local --embedder (SentenceTransformerEmbedder's backend and quantize).
_BACKENDS = ("torch", "onnx", "onnx-int8")
_GLOBAL_DEFAULTS: dict[str, Any] = {
    "index_dir": None,  # ./.groundkit, unless $GROUNDKIT_METADATA_URL (settle_location)
    "clearance": None,
    "base_dir": None,
    "embedder": None,
    "embedding_provider": "sentence-transformers",
    "backend": None,
    "json": False,
    "quiet": False,
}


def _add_common(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """The common options; on the sub-commands they default to 'not given', so a value
    given before the command name stands unless repeated after it."""
    from groundkit.contracts import SENSITIVITY_LEVELS
    from groundkit.providers.factory import HTTP_PROVIDERS
    from groundkit.service.command import add_embedding_url_argument, add_location_arguments
    from groundkit.utils.arguments import path_arg

    def default(name: str) -> Any:
        return _GLOBAL_DEFAULTS[name] if top else argparse.SUPPRESS

    parser.add_argument(
        "--index-dir",
        type=path_arg,
        default=default("index_dir"),
        help="index directory (default ./.groundkit)",
    )
    add_location_arguments(parser, suppress=not top)
    parser.add_argument(
        "--collection",
        action="append",
        dest="collection_top" if top else "collection",
        default=None if top else argparse.SUPPRESS,
        metavar="NAME",
        help="collection name (default: default); search takes it more than once to "
        "search several collections together",
    )
    parser.add_argument(
        "--clearance",
        choices=SENSITIVITY_LEVELS,
        default=default("clearance"),
        help="hide documents labelled above this sensitivity (search, fetch, verify, collections)",
    )
    parser.add_argument(
        "--base-dir",
        type=path_arg,
        default=default("base_dir"),
        help="directory sources are relative to (stored with a new collection; default: "
        "the current directory; given later it applies to that run; 'grk rebase' moves it)",
    )
    parser.add_argument(
        "--embedder",
        default=default("embedder"),
        metavar="MODEL",
        help="embedding model for dense/hybrid: a sentence-transformers name or directory, "
        "or with --embedding-provider the server's model name (recorded with the "
        "collection; later commands reuse it)",
    )
    parser.add_argument(
        "--embedding-provider",
        choices=("sentence-transformers", *HTTP_PROVIDERS),
        default=default("embedding_provider"),
        help="who computes --embedder's vectors: a local model, or an HTTP server",
    )
    parser.add_argument(
        "--backend",
        choices=_BACKENDS,
        default=default("backend"),
        help="what runs a local --embedder: torch (default), onnx (ONNX Runtime, same "
        "vectors), or onnx-int8 (int8-quantised, faster on a CPU, its own vectors); "
        "needs pip install groundkit[onnx] (docs/embedders.md)",
    )
    add_embedding_url_argument(parser, suppress=not top)
    parser.add_argument(
        "--json",
        action="store_true",
        default=default("json"),
        help="machine-readable output on stdout (docs/cli.md)",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        dest="verbose_top" if top else "verbose",
        default=0 if top else argparse.SUPPRESS,
        help="INFO (-v) or DEBUG (-vv) logging on stderr",
    )
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=default("quiet"),
        help="errors only: no progress, no summary; results and problems still print",
    )


def _version_line() -> str:
    """What ``grk --version`` prints: the version and which BM25 kernel searches run in
    (the compiled one loads without numpy, so this loads neither)."""
    from groundkit import __version__

    try:
        importlib.import_module("groundkit.lexical._kernel")
        kernel = "compiled"
    except ImportError:  # as groundkit.lexical.bm25 finds it: searches use numpy
        kernel = "numpy (no compiled kernel installed)"
    return f"grk (groundkit) {__version__}, BM25 kernel: {kernel}"


class _VersionAction(argparse.Action):
    """argparse's ``version`` action, with the line made only when the option is given:
    making it reads the installed distribution's metadata, which every other command
    would pay for at start."""

    def __init__(self, option_strings: list[str], dest: str) -> None:
        super().__init__(
            option_strings,
            dest=argparse.SUPPRESS,
            default=argparse.SUPPRESS,
            nargs=0,
            help="show the version and the BM25 kernel in use, then exit",
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        print(_version_line())
        parser.exit()


def _relevance_arg(text: str) -> float | str:
    """``--min-relevance``: ``auto`` or a number (its range is SearchRequest's to check)."""
    if text == "auto":
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a probability between 0 and 1, or auto, not {text!r}"
        ) from None


def _parser() -> argparse.ArgumentParser:
    from groundkit.config import ChunkingConfig
    from groundkit.retrieval.context import EXPAND_KINDS
    from groundkit.retrieval.filters import FILTER_OPERATORS
    from groundkit.retrieval.request import REORDERS, SEARCH_MODES, SearchRequest
    from groundkit.retrieval.rewriting import MAX_VARIANTS_LIMIT
    from groundkit.service.command import add_serve_parser
    from groundkit.service.inspector.command import add_inspect_parser
    from groundkit.utils.arguments import path_arg, text_arg

    chunk_defaults = ChunkingConfig()
    parser = argparse.ArgumentParser(
        prog="grk",
        description="Citation-verifiable retrieval over your documents. Every result names "
        "its source and exact character offsets, and 'grk fetch' / 'grk verify' check them "
        "against the source now.",
        epilog="Options such as --index-dir, --collection or --json may come before or after "
        "the command. Exit codes: 0 ok, 1 a problem was found (a file failed, a citation "
        "did not verify), 2 a usage, configuration or storage error.",
    )
    parser.add_argument("-V", "--version", action=_VersionAction)
    _add_common(parser, top=True)
    common = argparse.ArgumentParser(add_help=False)
    _add_common(common, top=False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    ingest = sub.add_parser(
        "ingest",
        parents=[common],
        help="ingest a file, a folder or an http(s) URL",
        description="Add, update and prune the documents under PATH (a file or folder inside "
        "the base directory), or fetch a URL into a snapshot.",
    )
    # A string: Path() would fold the '//' of a URL.
    ingest.add_argument(
        "path",
        nargs="?",
        type=text_arg,
        metavar="PATH|URL",
        help="file or folder inside the base directory, or an http(s) URL",
    )
    ingest.add_argument(
        "--jsonl",
        metavar="FILE",
        default=None,
        type=text_arg,
        help="add in-memory documents instead: one JSON object a line, "
        '{"id": ..., "text": ..., "fields": {...}} (FILE "-" reads stdin)',
    )
    ingest.add_argument(
        "--html",
        choices=("full", "main-content"),
        default="full",
        help="how HTML files and pages become text: every block (full), or the article "
        "only (main-content, trafilatura: pip install groundkit[main-content])",
    )
    ingest.add_argument(
        "--ocr",
        choices=("auto", "required", "off"),
        default="auto",
        help="PDF pages with no text layer (scans): recognise them when OCR is installed "
        "(auto), fail such a PDF without it (required), or never (off); OCR needs "
        "pip install groundkit[ocr] and apt-get install tesseract-ocr",
    )
    ingest.add_argument(
        "--ocr-languages",
        default="eng",
        metavar="LANGS",
        help="tesseract languages for OCR, joined by '+' (default eng); each needs its "
        "data (apt-get install tesseract-ocr-deu for deu)",
    )
    ingest.add_argument(
        "--rebuild",
        action="store_true",
        help="if the collection's metadata file is damaged, move it aside and start the "
        "collection anew from this ingest (vectors are reused where the text is unchanged)",
    )
    ingest.add_argument(
        "--meta",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a field for every document of this ingest (repeatable); the value is typed "
        'as in front matter: 2024 is a number, true a boolean, [a, b] a list, "2024" text',
    )
    ingest.add_argument(
        "--valid-as-of",
        metavar="WHEN",
        default=None,
        help="the moment the versions this ingest writes became true (default: now), "
        f"for 'grk search --as-of'; {_WHEN_HELP}; not in the future",
    )
    ingest.add_argument(
        "--keep-versions",
        type=int,
        default=None,
        metavar="N",
        help="keep at most N past versions of each document this ingest changes "
        "(default: every one; 0: none)",
    )
    ingest.add_argument(
        "--keep-sources",
        action="store_true",
        help="keep a compressed copy of each file's extracted text with the collection, "
        "so hosts without the files can verify citations ('verified (kept copy)')",
    )
    ingest.add_argument(
        "--no-extraction-cache",
        action="store_true",
        help="extract every PDF, HTML, office and EPUB file, and keep no record of it in "
        "this host's cache directory (by default an unchanged file's extraction is read "
        "back from there)",
    )
    ingest.add_argument(
        "--chunker",
        choices=("fixed", "structure", "sentence"),
        default=None,
        help="how documents are cut: fixed (paragraphs and sentences packed to a size), "
        "structure (the same, never across a heading or page) or sentence (one chunk a "
        f"sentence, for search --expand); default {chunk_defaults.strategy} for a new "
        "collection. The first ingest binds the collection to its chunking; later ingests "
        "without chunking options reuse it",
    )
    ingest.add_argument(
        "--chunk-chars",
        type=int,
        default=None,
        metavar="N",
        help=f"the longest chunk in characters (default {chunk_defaults.max_chars})",
    )
    ingest.add_argument(
        "--chunk-overlap",
        type=int,
        default=None,
        metavar="N",
        help=f"characters shared by neighbouring chunks, at most half of --chunk-chars "
        f"(default {chunk_defaults.overlap_chars}; sentence chunks have none)",
    )
    ingest.add_argument(
        "--contextual",
        action="store_true",
        default=None,
        help="index each chunk with its document title and heading path in front (its "
        "terms and vectors; the stored text and citations are unchanged)",
    )
    ingest.add_argument(
        "--ray",
        default=None,
        metavar="auto|ADDRESS",
        help="read, chunk and embed on a Ray cluster ('auto': the one this host runs, or "
        "RAY_ADDRESS; else its host:port); this process commits. Every node must see the "
        "files at the same path. Needs groundkit[ray]",
    )
    ingest.add_argument(
        "--ray-workers",
        type=int,
        default=1,
        metavar="N",
        help="embedding workers (Ray actors, each loads the model once) with --ray (default 1)",
    )
    search = sub.add_parser(
        "search",
        parents=[common],
        help="search one collection, or several fused",
        description="Rank the chunks that answer QUERY; each result names its source, "
        "offsets and chunk id (for 'grk fetch').",
    )
    search.add_argument(
        "query", metavar="QUERY", help="what to search for; '-' reads it from stdin"
    )
    # Options that are SearchRequest fields take its defaults and descriptions.
    search.add_argument(
        "--mode",
        choices=SEARCH_MODES,
        default=SearchRequest.model_fields["mode"].default,
        help=SearchRequest.describe("mode") + " (default: bm25)",
    )
    search.add_argument(
        "--top-k", type=int, default=None, metavar="N", help=SearchRequest.describe("top_k")
    )
    search.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="FILTER",
        help="only documents that match (repeatable, all must hold): FIELD=VALUE, "
        "FIELD.OP=VALUE with OP one of " + ", ".join(FILTER_OPERATORS) + ", a JSON object; "
        "'source' is the document's path (source.prefix=docs/, 'source.glob=docs/**/*.md')",
    )
    search.add_argument(
        "--rerank",
        metavar="MODEL_OR_PATH",
        default=None,
        help="rerank the best candidates with this local cross-encoder",
    )
    search.add_argument(
        "--as-of",
        metavar="WHEN",
        default=None,
        help=SearchRequest.describe("as_of") + f": {_WHEN_HELP}",
    )
    search.add_argument(
        "--expand", choices=EXPAND_KINDS, default=None, help=SearchRequest.describe("expand")
    )
    search.add_argument(
        "--mmr", type=float, default=None, metavar="LAMBDA", help=SearchRequest.describe("mmr")
    )
    search.add_argument(
        "--reorder", choices=REORDERS, default=None, help=SearchRequest.describe("reorder")
    )
    search.add_argument(
        "--min-relevance",
        type=_relevance_arg,
        default=None,
        metavar="P|auto",
        help=SearchRequest.describe("min_relevance"),
    )
    search.add_argument(
        "--glossary",
        type=path_arg,
        default=None,
        metavar="FILE",
        help="also search the query's rephrasings from this TOML glossary ([synonyms] "
        "term = [alternatives], [[groups]] terms = [...]), fused by rank",
    )
    search.add_argument(
        "--rewrites",
        type=int,
        default=None,
        metavar="N",
        help=f"with --glossary: the most rephrasings searched, 0..{MAX_VARIANTS_LIMIT} (3)",
    )
    fetch = sub.add_parser(
        "fetch", parents=[common], help="fetch one chunk and verify it against its source"
    )
    fetch.add_argument("chunk_id", metavar="CHUNK_ID", help="a chunk id from 'grk search'")
    fetch.add_argument(
        "--version",
        type=int,
        default=None,
        metavar="N",
        help="the chunk as version N of its document had it (default: the current one, "
        "else the newest past one)",
    )
    for shaped in (search, fetch):
        shaped.add_argument(
            "--full",
            action="store_true",
            help="with --json: every field of each result, not the compact shape (docs/cli.md)",
        )
    verify = sub.add_parser(
        "verify", parents=[common], help="re-verify every chunk of a collection"
    )
    _add_receipt_arguments(verify)
    delete = sub.add_parser(
        "delete",
        parents=[common],
        help="remove documents, every version of them, their vectors and snapshots",
        description="Remove the documents named by SOURCE (a path as ingested, or a file "
        "under the base directory), URL (as ingested), --id or --record, with all their "
        "versions, vectors and snapshots. The source files stay; a later ingest of their "
        "folder adds them again.",
    )
    delete.add_argument(
        "sources",
        nargs="*",
        metavar="SOURCE|URL",
        help="a document's source: its path or URL, as search results show it",
    )
    delete.add_argument(
        "--id",
        action="append",
        default=[],
        dest="ids",
        metavar="DOCUMENT_ID",
        help="a document id from search results (repeatable)",
    )
    delete.add_argument(
        "--record",
        action="append",
        default=[],
        dest="records",
        metavar="RECORD_ID",
        help="the id a record was added with (grk ingest --jsonl; repeatable)",
    )
    delete.add_argument(
        "--erase",
        action="store_true",
        help="also remove every copy the collection's files keep: unused terms, older "
        "vector versions, old index files, free pages (rewrites the collection's files)",
    )
    purge = sub.add_parser(
        "purge",
        parents=[common],
        help="remove past document versions (what 'grk search --as-of' reaches back to)",
    )
    purge.add_argument(
        "--keep",
        type=int,
        default=0,
        metavar="N",
        help="past versions to keep for each document, the newest ones (default 0)",
    )
    sub.add_parser(
        "optimize",
        parents=[common],
        help="merge the lexical index into one segment, dropping what deletes left behind",
    )
    sub.add_parser(
        "collections",
        parents=[common],
        help="list the collections: counts, base directory, embedder, analyzer, size",
    )
    drop = sub.add_parser(
        "drop",
        parents=[common],
        help="delete a collection (its index, vectors and snapshots; never the sources)",
    )
    drop.add_argument("name", metavar="NAME", help="the collection to delete")
    drop.add_argument(
        "-y",
        "--yes",
        action="store_true",
        help="do not ask for confirmation (needed off a terminal)",
    )
    rebase = sub.add_parser(
        "rebase",
        parents=[common],
        help="record a new base directory for a collection whose sources moved",
        description="Record NEW_BASE as the directory the collection's sources are relative "
        "to. Refused when none of its sources is found there, unless --force.",
    )
    rebase.add_argument("new_base", type=path_arg, metavar="NEW_BASE", help="the sources' new home")
    rebase.add_argument(
        "--force", action="store_true", help="record it even if no source is found there"
    )
    add_serve_parser(sub)
    add_inspect_parser(sub)
    return parser


def _merge_globals(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """One namespace from the options given before and after the command name."""
    given_top = args.collection_top or []
    given_sub = getattr(args, "collection", None) or []
    args.collection = [*given_top, *given_sub] or None
    args.verbose = args.verbose_top + getattr(args, "verbose", 0)
    del args.collection_top, args.verbose_top
    if args.command in ("serve", "inspect"):
        refused = (
            ("embedder", "json")
            if args.command == "inspect"
            else ("collection", "embedder", "json")
        )
        for name in refused:
            if getattr(args, name):
                option = "--" + name
                parser.error(f"grk {args.command} does not take {option}")


def _configure_logging(verbose: int, quiet: bool) -> None:
    level = (
        logging.ERROR if quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)]
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("grk: %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("groundkit")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
    # On a terminal the status line and the spinner show progress; without one, the
    # progress log does (at a steady interval), unless -q.
    shown = not quiet and not sys.stderr.isatty()
    from groundkit.utils.heartbeat import PROGRESS_LOGGER  # asyncio: not for --version

    logging.getLogger(PROGRESS_LOGGER).setLevel(logging.INFO if shown else logging.WARNING)


class _Spinner:
    """A line redrawn every tenth of a second with the time since it began, from a
    thread of its own, so it moves while a model loads in a worker thread."""

    _FRAMES = "|/-\\"

    def __init__(self, stream: TextIO, text: str) -> None:
        self._stream = stream
        self._text = text
        self._began = time.monotonic()
        self._stop = threading.Event()
        self._drawn = 0
        self._thread = threading.Thread(target=self._spin, name="grk-spinner", daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        frame = 0
        while True:
            line = (
                f"grk: {self._text} {self._FRAMES[frame % len(self._FRAMES)]} "
                f"{time.monotonic() - self._began:.1f} s"
            )
            self._stream.write("\r" + line + " " * max(0, self._drawn - len(line)))
            self._stream.flush()
            self._drawn = len(line)
            frame += 1
            if self._stop.wait(0.1):
                return

    def stop(self) -> float:
        """Stop, clear the line, and return the seconds since it began."""
        self._stop.set()
        self._thread.join()
        self._stream.write("\r" + " " * self._drawn + "\r")
        self._stream.flush()
        return time.monotonic() - self._began


class _Progress:
    """One status line on stderr while ingesting (a terminal only): the stage at work
    with a bar, what the others have done, and the embedding rate; the model load gets
    a line of its own."""

    _VERBS: ClassVar[dict[str, str]] = {
        "discover": "found",
        "read": "reading",
        "chunk": "chunking",
        "store": "storing",
        "embed": "embedding",
    }

    def __init__(self, stream: TextIO, enabled: bool) -> None:
        self._stream = stream
        self._enabled = enabled and stream.isatty()
        self._last: dict[str, IngestProgress] = {}
        self._drawn = 0
        self._drawn_at = 0.0
        self._embed_started: float | None = None
        self._spinner: _Spinner | None = None

    def __call__(self, event: IngestProgress) -> None:
        if not self._enabled:
            return
        now = time.monotonic()
        self._last[event.stage] = event
        if event.stage == "model":
            self._clear()
            if self._spinner is not None:
                self._spinner.stop()
                self._spinner = None
            if event.finished:
                self._stream.write(f"grk: {event.detail}\n")
                self._stream.flush()
            else:
                self._spinner = _Spinner(self._stream, f"{event.detail} ...")
            return
        if event.stage == "embed" and self._embed_started is None:
            self._embed_started = now
        read = self._last.get("read")
        if event.stage != "embed" and (read is None or read.total is None or read.total < 2):
            return  # a single file: nothing worth a bar
        if now - self._drawn_at < 0.1 and not event.finished:
            return
        self._drawn_at = now
        self._draw(event, now)

    def _draw(self, event: IngestProgress, now: float) -> None:
        width = 24
        if event.total:
            filled = width * min(event.done, event.total) // event.total
            bar = "[" + "#" * filled + "-" * (width - filled) + "] "
            count = f"{event.done}/{event.total}"
        else:
            bar, count = "", str(event.done)
        line = f"{self._VERBS.get(event.stage, event.stage)} {bar}{count} {event.unit}"
        if event.stage == "embed" and self._embed_started is not None:
            elapsed = now - self._embed_started
            if elapsed > 1 and event.done:
                line += f" ({event.done / elapsed:.0f}/s)"
        context = []
        read = self._last.get("read")
        if event.stage != "read" and read is not None and read.total:
            context.append(f"files {read.done}/{read.total}")
        stored = self._last.get("store")
        if event.stage != "store" and stored is not None:
            context.append(f"stored {stored.done}")
        if context:
            line += " · " + ", ".join(context)
        padding = max(0, self._drawn - len(line))
        self._stream.write("\r" + line + " " * padding)
        self._stream.flush()
        self._drawn = len(line)

    def _clear(self) -> None:
        if self._drawn:
            self._stream.write("\r" + " " * self._drawn + "\r")
            self._drawn = 0

    def finish(self) -> None:
        if self._spinner is not None:  # the ingest ended while the model was loading
            self._spinner.stop()
            self._spinner = None
        if self._drawn:
            self._stream.write("\n")
            self._stream.flush()
            self._drawn = 0


def _shown(text: object) -> str:
    """``text`` for one line of a terminal: a newline in a file name cannot add a line to
    a report of one line per item, nor an escape sequence drive the terminal."""
    return str(text).translate(_ESCAPES)


def _snippet(text: str) -> str:
    flat = " ".join(text.split())
    return _shown(flat if len(flat) <= _SNIPPET else flat[: _SNIPPET - 1] + "…")


def _emit(data: Any) -> None:
    # Characters as they are on a UTF-8 stdout; \u escapes (still the same JSON) on one
    # that cannot write them (PYTHONIOENCODING=ascii, a Latin-1 locale).
    text = json.dumps(data, ensure_ascii=not _writes_utf8(sys.stdout), sort_keys=True, indent=2)
    sys.stdout.write(text + "\n")


def _writes_utf8(stream: Any) -> bool:
    import codecs

    try:
        return codecs.lookup(getattr(stream, "encoding", None) or "ascii").name == "utf-8"
    except LookupError:
        return False


def _stdin_bytes(what: str, limit: int = -1) -> bytes:
    """All of standard input (at most ``limit`` bytes), for ``what``; a
    ``ConfigurationError`` when there is none (closed, as ``<&-`` leaves it)."""
    stream = sys.stdin
    if stream is None:
        raise ConfigurationError(f"{what} is read from stdin, but stdin is closed")
    try:
        return stream.buffer.read(limit)
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"{what}: cannot read stdin ({exc})") from None


def _print_ingest(report: IngestReport, args: argparse.Namespace, dense: bool) -> int:
    if args.json:
        _emit(report.model_dump(mode="json"))
    elif args.quiet:
        # Errors only: the files that failed, on stderr.
        for failure in report.failed:
            print(f"grk: failed: {_shown(failure.reason)}", file=sys.stderr)
    else:
        print(
            f"added {len(report.added)}, updated {len(report.updated)}, "
            f"unchanged {len(report.unchanged)}, removed {len(report.removed)}, "
            f"failed {len(report.failed)}, skipped {report.skipped} "
            f"(generation {report.generation})"
        )
        if dense or report.chunks_embedded or report.chunks_reused:
            print(
                f"vectors: {report.chunks_embedded} chunks embedded, {report.chunks_reused} "
                f"reused, for {report.embedded} documents"
            )
        if report.generation == 0 and not report.failed and not report.unchanged:
            print("nothing to index here; no collection was created")
        for warning in report.warnings:
            print(f"  warning: {_shown(warning.source)}: {_shown(warning.reason)}")
        for failure in report.failed:
            print(f"  failed: {_shown(failure.reason)}")
        for repair in report.repairs:
            print(f"  repaired: {_shown(repair)}")
        for notice in report.notices:
            print(f"  not saved: {_shown(notice)}")
    return EXIT_PROBLEM if report.failed else EXIT_OK


def _degraded(response: SearchResponse | MultiSearchResponse) -> dict[str, str]:
    """``{collection or "": reason}`` for answers served from BM25 for want of vectors."""
    from groundkit.contracts import MultiSearchResponse

    if isinstance(response, MultiSearchResponse):
        per = response.metadata.get("per_collection", {})
        return {name: str(e["degraded"]) for name, e in per.items() if e.get("degraded")}
    reason = response.metadata.get("degraded")
    return {"": str(reason)} if reason else {}


def _print_search(
    response: SearchResponse | MultiSearchResponse,
    as_json: bool,
    rewrite: bool = False,
    *,
    full: bool = False,
) -> int:
    from groundkit.contracts import MultiSearchResponse

    multi = isinstance(response, MultiSearchResponse)
    failures = response.failures if isinstance(response, MultiSearchResponse) else []
    for name, reason in _degraded(response).items():
        # On stderr, so --json output stays one document and is still told.
        where = f"collection {name!r}: " if name else ""
        print(
            f"grk: warning: {where}{reason}; run 'grk ingest PATH' with the collection's "
            "embedder to rebuild the vectors",
            file=sys.stderr,
        )
    if as_json:
        data: dict[str, Any] = {
            "query": response.query,
            "mode": response.mode,
            "total_results": response.total_results,
            "metadata": response.metadata,
            "results": [r.to_dict(full=full) for r in response.results],
        }
        if isinstance(response, MultiSearchResponse):
            data["collections"] = response.collections
            data["failures"] = [f.model_dump(mode="json") for f in failures]
        _emit(data)
        return EXIT_PROBLEM if failures else EXIT_OK
    past = "as_of" in response.metadata
    queries = response.metadata.get("queries")
    if queries:
        print("queries: " + ", ".join(json.dumps(q, ensure_ascii=False) for q in queries))
    elif rewrite:
        print(
            f"queries: {json.dumps(response.query, ensure_ascii=False)} (the glossary has "
            "no rephrasing of it)"
        )
    if not response.results:
        print("no results" + (f" as of {response.metadata['as_of']}" if past else ""))
    for rank, r in enumerate(response.results, start=1):
        pages = r.citation.pages
        page = f" {pages}" if pages else ""
        where = f"{r.collection}: " if multi else ""
        print(
            f"{rank:>3}. {where}{_shown(r.source)} [{r.start_offset}:{r.end_offset}]{page}"
            f"{_version_mark(r.version, shown=past)}  score {r.score:.4f}"
        )
        print(f"     chunk {r.chunk_id}")
        headings = r.heading_path
        if headings:
            print(f"     under: {_shown(' > '.join(headings))}")
        best = r.evidence[0] if r.evidence else None
        if best is None:
            print(f"     {_snippet(r.content)}")
        else:
            # The sentence that answers the query, not the head of the chunk.
            print(f"     {_snippet(best.text)}  [{best.start_offset}:{best.end_offset}]")
        if r.context is not None:
            span = r.context
            folded = len(span.collapsed)
            hits = f", {folded} more hit{'' if folded == 1 else 's'} folded in" if folded else ""
            print(f"     {span.kind} [{span.start_offset}:{span.end_offset}]{hits}")
            print(f"       {_snippet(span.content)}")
    for failure in failures:
        print(
            f"  failed: collection {failure.collection!r}: {failure.error}: "
            f"{_shown(failure.detail)}"
        )
    return EXIT_PROBLEM if failures else EXIT_OK


def _version_mark(
    version: int | None, *, shown: bool = False, replaced_at: str | None = None
) -> str:
    """`` v2`` after a citation: for a document's later versions, and always when
    ``shown`` (a search of the past) or the version has been replaced."""
    if version is None or not (shown or version > 1 or replaced_at):
        return ""
    return f" v{version}" + (f" (replaced {replaced_at})" if replaced_at else "")


def _where_fetched(result: FetchResult) -> str:
    c = result.citation
    page = f" {c.pages}" if c.pages else ""
    mark = _version_mark(result.version, replaced_at=result.replaced_at)
    return f"{_shown(c.source)} [{c.start_offset}:{c.end_offset}]{page}{mark}"


def _verdict(result: FetchResult) -> str:
    """``verified``, or ``verified (kept copy)`` when the file was not on this host and
    the collection's kept copy of its text was read instead."""
    if result.read_from == "kept copy":
        return f"{result.verification} (kept copy)"
    return result.verification


def _print_fetch(result: FetchResult, as_json: bool, *, full: bool = False) -> int:
    if as_json:
        _emit(result.to_dict(full=full))
    else:
        print(f"{_where_fetched(result)}  {_verdict(result)}")
        print(f"  {_shown(result.detail)}")
        print(result.content)
    return EXIT_OK if result.verification == "verified" else EXIT_PROBLEM


def _print_verify(report: VerifyReport, as_json: bool, quiet: bool = False) -> int:
    if as_json:
        _emit(
            {
                "verified": report.verified,
                "moved": report.moved,
                "drifted": report.drifted,
                "unresolvable": report.unresolvable,
                "kept_copy": report.kept_copy,
                "problems": [p.model_dump(mode="json") for p in report.problems],
                "moved_chunks": [p.model_dump(mode="json") for p in report.relocated],
            }
        )
    else:
        if not quiet:
            print(
                f"verified {report.verified}, moved {report.moved}, drifted {report.drifted}, "
                f"unresolvable {report.unresolvable}"
                + (
                    f" ({report.kept_copy} read from kept copies: their files are not here)"
                    if report.kept_copy
                    else ""
                )
            )
        for p in [*report.relocated, *report.problems]:
            print(f"  {_verdict(p)}: {_where_fetched(p)} {_shown(p.detail)}")
    return EXIT_OK if report.ok else EXIT_PROBLEM


def _print_delete(report: DeleteReport, args: argparse.Namespace) -> int:
    erasure = report.erasure
    if args.json:
        _emit(report.model_dump(mode="json", exclude_none=True))
    elif args.quiet:
        for name in report.missing:
            print(
                f"grk: missing: {_shown(name)}: no document has this source or id",
                file=sys.stderr,
            )
        for step in erasure.unfinished if erasure is not None else ():
            print(f"grk: not erased: {step}; run the erase again", file=sys.stderr)
    else:
        print(f"deleted {len(report.deleted)}, missing {len(report.missing)}")
        for source in report.deleted:
            print(f"  deleted: {_shown(source)}")
        for name in report.missing:
            print(f"  missing: {_shown(name)}: no document has this source or id")
        if erasure is not None:
            print(
                f"erased {erasure.documents} documents ({erasure.versions} past versions, "
                f"{erasure.chunks} chunks), {erasure.terms} terms, {erasure.vector_rows} "
                f"vector rows and {erasure.vector_versions} older vector versions, "
                f"{erasure.snapshots} stored texts; rewrote {erasure.packs_written} and "
                f"removed {erasure.packs_removed} index files; the metadata store gave "
                f"back {erasure.bytes_vacuumed} bytes"
            )
            for step in erasure.unfinished:
                print(f"  not erased: {step}; run the erase again")
    unfinished = erasure is not None and not erasure.complete
    return EXIT_PROBLEM if report.missing or unfinished else EXIT_OK


def _print_purge(removed: int, args: argparse.Namespace) -> int:
    if args.json:
        _emit({"removed": removed, "keep": args.keep})
    elif not args.quiet:
        kept = "none kept" if args.keep == 0 else f"at most {args.keep} kept per document"
        print(f"removed {removed} past version(s); {kept}")
    return EXIT_OK


def _print_optimize(report: OptimizeReport, args: argparse.Namespace) -> int:
    if args.json:
        _emit(report.model_dump(mode="json"))
    elif not args.quiet:
        outcome = "merged" if report.merged else "nothing to merge"
        print(
            f"lexical index: {report.segments_before} segment(s) before, "
            f"{report.segments_after} after ({outcome})"
        )
    return EXIT_OK


def _meta_fields(items: Sequence[str]) -> dict[str, FieldValue] | None:
    """``--meta KEY=VALUE`` options as fields; a malformed one is a usage error."""
    if not items:
        return None
    from groundkit.ingestion.fields import check_fields, parse_field_value

    fields: dict[str, FieldValue] = {}
    for item in items:
        key, equals, raw = item.partition("=")
        key = key.strip()
        if not equals or not key:
            raise ConfigurationError(f"--meta {item!r}: expected KEY=VALUE")
        if key in fields:
            raise ConfigurationError(f"--meta: {key!r} is given twice")
        try:
            fields[key] = parse_field_value(raw, f"--meta {key}")
        except IngestionError as exc:
            raise ConfigurationError(str(exc)) from None
    try:
        # Checked here too, so a bad field stops grk before a collection is created.
        return check_fields(fields, "--meta")
    except IngestionError as exc:
        raise ConfigurationError(str(exc)) from None


def _unique_keys(label: str) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    """A ``json.loads`` object hook refusing a key given twice, which JSON would
    otherwise settle silently by keeping the last."""
    from groundkit.utils.json_objects import RepeatedKeyError, unique_object

    def build(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        try:
            return unique_object(pairs)
        except RepeatedKeyError as exc:
            raise ConfigurationError(f"{label}: {exc}") from None

    return build


def _where(items: Sequence[str]) -> dict[str, Any] | None:
    """``--where`` options as one filter mapping; a malformed one is a usage error."""
    if not items:
        return None
    from groundkit.contracts import SOURCE_FIELD
    from groundkit.ingestion.fields import parse_field_value
    from groundkit.retrieval.filters import MAX_FILTER_DEPTH

    out: dict[str, Any] = {}

    def add(name: str, op: str, value: object) -> None:
        conditions = out.setdefault(name, {})
        if op in conditions:
            raise ConfigurationError(f"--where: {name}.{op} is given twice")
        conditions[op] = value

    for item in items:
        if item.lstrip().startswith("{"):
            try:
                given = json.loads(item, object_pairs_hook=_unique_keys(f"--where {item!r}"))
            except json.JSONDecodeError as exc:
                raise ConfigurationError(f"--where {item!r}: not valid JSON ({exc.msg})") from None
            except ValueError as exc:
                # An integer of more digits than Python converts (4,300 by default).
                raise ConfigurationError(f"--where: {_json_value_problem(exc)}") from None
            except RecursionError:
                # Python's parser gives up on deep nesting before the filter
                # limits are checked; no valid filter comes near it.
                raise ConfigurationError(
                    f"--where: the JSON filter nests too deeply (a filter is at most "
                    f"{MAX_FILTER_DEPTH} levels: {{field: {{op: [values]}}}})"
                ) from None
            if not isinstance(given, dict):
                raise ConfigurationError(f"--where {item!r}: a JSON filter is an object")
            if not given:
                raise ConfigurationError(f"--where {item!r}: the filter has no conditions")
            for name, spec in given.items():
                if spec == {}:
                    # Refused as the library refuses it, not dropped into no filter at all.
                    raise ConfigurationError(f"--where: filter {name!r} has no conditions")
                for op, value in (spec if isinstance(spec, dict) else {"eq": spec}).items():
                    add(name, op, value)
            continue
        target, equals, raw = item.partition("=")
        name, _, op = target.strip().partition(".")
        if not equals or not name:
            raise ConfigurationError(f"--where {item!r}: expected FIELD=VALUE or FIELD.OP=VALUE")
        op = op or "eq"
        if op in ("prefix", "glob") or (name == SOURCE_FIELD and op in ("eq", "ne")):
            # Paths and patterns are text as typed: '*.md' is a glob, not YAML.
            if not raw:
                raise ConfigurationError(f"--where {target.strip()}: empty value")
            add(name, op, raw)
            continue
        try:
            value = parse_field_value(raw, f"--where {target.strip()}")
        except IngestionError as exc:
            raise ConfigurationError(str(exc)) from None
        add(name, op, value)
    return out


def _named_embedder(args: argparse.Namespace) -> EmbeddingProtocol | None:
    """The embedder ``--embedder`` (with ``--embedding-provider`` and ``--backend``) names."""
    from groundkit.providers.factory import HTTP_PROVIDERS, http_embedder

    if not args.embedder:
        if args.backend is not None:
            raise ConfigurationError(
                "--backend chooses what runs --embedder; without --embedder a collection's "
                "recorded model runs as it was recorded (int8 vectors stay int8)"
            )
        return None
    if args.embedding_provider in HTTP_PROVIDERS:
        if args.backend is not None:
            raise ConfigurationError(
                f"--backend is for a local --embedder; {args.embedding_provider} models run "
                "on their server"
            )
        return http_embedder(args.embedding_provider, args.embedder, endpoint=args.embedding_url)
    from groundkit.providers.local import SentenceTransformerEmbedder

    if args.backend == "onnx-int8":
        return SentenceTransformerEmbedder(args.embedder, backend="onnx", quantize="int8")
    return SentenceTransformerEmbedder(args.embedder, backend=args.backend or "torch")


def _location(args: argparse.Namespace, name: str) -> StoreLocation:
    from groundkit.storage.location import StoreLocation

    return StoreLocation.resolve(
        name,
        index_dir=None if args.metadata_url else args.index_dir,
        metadata_url=args.metadata_url,
        storage_uri=args.storage_uri,
    )


async def _check_collections_exist(args: argparse.Namespace) -> None:
    """Every command but ingest reads an existing collection; say how to make one."""
    if args.command in ("ingest", "collections"):
        return
    for name in args.collections:
        location = _location(args, name)
        if not await location.exists():
            raise ConfigurationError(
                f"no collection {name!r} in {location.describe_root()!r}; "
                "run 'grk ingest PATH' first"
            )


def _open(
    args: argparse.Namespace,
    name: str,
    reranker: RerankerProtocol | None,
    rewriter: GlossaryRewriter | None,
) -> Any:
    """``Collection.open`` for a command: ingest creates, the others need an existing one.

    The recorded embedder is built only where it is used: an ingest (to keep the
    vectors in step) and a dense or hybrid search; fetch, verify and BM25 search
    never load a model.
    """
    from groundkit.collection import Collection
    from groundkit.config import DEFAULT_EXTRACTION_CACHE_BYTES, IngestConfig, RetrievalConfig
    from groundkit.providers.factory import require_embedder_for_manifest

    wants_vectors = args.command == "ingest" or (args.command == "search" and args.mode != "bm25")
    notice = _ModelNotice(sys.stderr, enabled=not args.quiet)
    recorded: EmbedderFactory | None = None
    if wants_vectors:

        def recorded(manifest: CollectionManifest) -> EmbeddingProtocol:
            notice.loading(manifest.model_name)
            return require_embedder_for_manifest(manifest, endpoint=args.embedding_url)

    named = _named_embedder(args) if args.command in ("ingest", "search") else None
    chunking = _chunking(args) if args.command == "ingest" else None
    if named is not None:
        notice.loading(named.model_name)
    retrieval = None
    if rewriter is not None:
        # Every rephrasing the glossary gives is searched (the library's cap is 3).
        retrieval = RetrievalConfig(max_rewrites=rewriter.max_variants)
    return _Announced(
        Collection.open(
            location=_location(args, name),
            create=args.command == "ingest",
            rebuild_damaged=args.command == "ingest" and args.rebuild,
            base_dir=args.base_dir,
            embedder=named,
            embedder_for=recorded,
            reranker=reranker,
            rewriter=rewriter,
            retrieval=retrieval,
            chunking=chunking,
            clearance=args.clearance,
            ingest=(
                IngestConfig(
                    html_extractor=args.html,
                    ocr=args.ocr,
                    ocr_languages=args.ocr_languages,
                    keep_versions=args.keep_versions,
                    keep_sources=args.keep_sources,
                    extraction_cache_bytes=(
                        0 if args.no_extraction_cache else DEFAULT_EXTRACTION_CACHE_BYTES
                    ),
                )
                if args.command == "ingest"
                else None
            ),
        ),
        notice,
    )


class _ModelNotice:
    """A spinner with the elapsed time while a collection opens with an embedding model
    (the load takes seconds), then 'loaded MODEL in N s'; on a terminal, unless -q."""

    def __init__(self, stream: TextIO, enabled: bool) -> None:
        self._stream = stream
        self._enabled = enabled and stream.isatty()
        self._model: str | None = None
        self._spinner: _Spinner | None = None

    def loading(self, model: str) -> None:
        self.stop()
        self._model = model
        if self._enabled:
            self._spinner = _Spinner(self._stream, f"loading {model} ...")

    def stop(self) -> float:
        """Stop the spinner (the load ended, or failed); the seconds it ran."""
        spinner, self._spinner = self._spinner, None
        return spinner.stop() if spinner is not None else 0.0

    def loaded(self) -> None:
        seconds = self.stop()
        if self._enabled and self._model is not None:
            self._stream.write(f"grk: loaded {self._model} in {seconds:.1f} s\n")
            self._stream.flush()
        self._model = None


class _Announced:
    """``Collection.open(...)`` for ``async with``, telling when its model has loaded."""

    def __init__(self, opener: Any, notice: _ModelNotice) -> None:
        self._opener = opener
        self._notice = notice

    async def __aenter__(self) -> Collection:
        try:
            collection: Collection = await self._opener.__aenter__()
        except BaseException:
            self._notice.stop()
            raise
        if collection.embedder is not None:
            self._notice.loaded()
        else:
            self._notice.stop()
        return collection

    async def __aexit__(self, *exc: object) -> None:
        await self._opener.__aexit__(*exc)


async def _run_search(args: argparse.Namespace) -> int:
    import asyncio

    from groundkit.retrieval.evidence import load_evidence
    from groundkit.retrieval.multi import search_collections
    from groundkit.retrieval.rewriting import GlossaryRewriter

    request: SearchRequest = args.request
    reranker: RerankerProtocol | None = None
    if args.rerank:
        from groundkit.retrieval.rerank import CrossEncoderReranker

        reranker = CrossEncoderReranker(args.rerank)
    rewriter: GlossaryRewriter | None = None
    if args.glossary is not None:
        variants = 3 if args.rewrites is None else args.rewrites
        rewriter = await asyncio.to_thread(
            GlossaryRewriter.from_file, args.glossary, max_variants=variants
        )
    several = len(args.collections) > 1
    async with contextlib.AsyncExitStack() as stack:
        collections: list[Collection] = []
        failed: list[CollectionFailure] = []
        for name in args.collections:
            try:
                collection = await stack.enter_async_context(_open(args, name, reranker, rewriter))
                if request.mode != "bm25":
                    await _check_vectors(collection, request.mode)
            except CollectionNotFoundError:
                raise  # a name that is no collection is a mistake in the command
            except GroundkitError as exc:
                if not several:
                    raise
                # Of several, one that cannot answer is reported and the rest answer.
                failed.append(_collection_failure(name, exc))
                continue
            collections.append(collection)
        if not several:
            response: SearchResponse | MultiSearchResponse = await collections[0].search(request)
        elif not collections:
            listed = "; ".join(f"{f.collection}: {f.error}: {f.detail}" for f in failed)
            raise RetrievalError(f"no collection could be searched ({listed})")
        else:
            response = await search_collections(collections, request)
            if failed:
                order = {name: at for at, name in enumerate(args.collections)}
                every = sorted([*failed, *response.failures], key=lambda f: order[f.collection])
                response = response.model_copy(
                    update={"collections": list(args.collections), "failures": every}
                )
        # Worked out while the collections (and their embedders) are open.
        await load_evidence(response.results)
    return _print_search(response, args.json, rewrite=rewriter is not None, full=args.full)


def _collection_failure(name: str, exc: GroundkitError) -> CollectionFailure:
    from groundkit.contracts import CollectionFailure
    from groundkit.errors import kind_of

    return CollectionFailure(collection=name, error=kind_of(exc), detail=str(exc))


async def _check_vectors(collection: Collection, mode: str) -> None:
    """A dense or hybrid search needs the vectors an ingest with an embedder writes;
    without them, say which command adds them (the library's message speaks Python)."""
    if await collection.store.read_manifest() is None:
        raise ConfigurationError(
            f"--mode {mode} needs vectors, and collection {collection.name!r} has none; "
            f"add them with '{_ADD_VECTORS}' (for example --embedder all-MiniLM-L6-v2), "
            "then search again"
        )


def _check_text_arguments(args: argparse.Namespace) -> None:
    """Refuse command-line text that is not valid UTF-8, naming the argument.

    Python turns the bytes of an argument that is not UTF-8 into lone surrogates
    (U+DC80..U+DCFF), which nothing can store, hash or search for.
    """
    given: list[tuple[str, str]] = []
    if args.command == "search" and args.query != "-":
        given.append(("the query", args.query))
        given.extend(("--where", item) for item in args.where)
    elif args.command == "fetch":
        given.append(("CHUNK_ID", args.chunk_id))
    elif args.command == "ingest":
        given.extend(("--meta", item) for item in args.meta)
    elif args.command == "delete":
        given.extend(("SOURCE", item) for item in args.sources)
        given.extend(("--id", item) for item in args.ids)
        given.extend(("--record", item) for item in args.records)
    for option in ("as_of", "valid_as_of"):
        if getattr(args, option, None) is not None:
            given.append(("--" + option.replace("_", "-"), getattr(args, option)))
    _refuse_undecodable(given)


def _refuse_undecodable(given: Sequence[tuple[str, str]]) -> None:
    """``ConfigurationError`` naming the first of ``given`` (label, text) that holds a
    byte that was not UTF-8 (decoded with ``surrogateescape``) or a lone surrogate."""
    for label, text in given:
        index = first_unencodable(text)
        if index is None:
            continue
        code = ord(text[index])
        if 0xDC80 <= code <= 0xDCFF:
            raise ConfigurationError(
                f"{label} is not valid UTF-8 (byte 0x{code - 0xDC00:02x} at character {index})"
            )
        raise ConfigurationError(f"{label} holds a lone surrogate at character {index}")


def _json_value_problem(exc: ValueError) -> str:
    """What a ``ValueError`` from ``json.loads`` that is no ``JSONDecodeError`` means:
    an integer longer than Python converts, and no field holds one that long."""
    if "integer string conversion" in str(exc):
        return (
            "a JSON number has too many digits to read (fields hold 64-bit integers); "
            "quote it to keep it as text"
        )
    return f"not valid JSON ({exc})"


def read_jsonl_records(name: str) -> tuple[list[dict[str, Any]], list[int]]:
    """The records of a JSON Lines file (``-``: stdin) and the line each is on; a bad
    line (a key given twice among them) is a usage error naming its number. Blank lines
    are skipped; the records are checked by ``add_documents``."""
    from groundkit.utils.file_reads import (
        FileTooLargeError,
        NotRegularFileError,
        read_regular_file,
    )

    cap = f"the cap is {MAX_JSONL_BYTES // (1024 * 1024)} MiB"
    try:
        if name == "-":
            data = _stdin_bytes("--jsonl -", MAX_JSONL_BYTES + 1)
            if len(data) > MAX_JSONL_BYTES:
                raise ConfigurationError(f"--jsonl -: stdin holds more than {cap}")
        else:
            # A regular file only: a FIFO would wait for a writer, /dev/zero never end,
            # in a thread that no signal can stop.
            data = read_regular_file(name, MAX_JSONL_BYTES)
    except NotRegularFileError as exc:
        raise ConfigurationError(f"--jsonl {name!r}: cannot read ({exc})") from None
    except FileTooLargeError as exc:
        raise ConfigurationError(f"--jsonl {name!r}: too large ({exc}; {cap})") from None
    except OSError as exc:
        raise ConfigurationError(f"--jsonl {name!r}: cannot read ({exc.strerror or exc})") from None
    records: list[dict[str, Any]] = []
    lines: list[int] = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            item = json.loads(
                raw.decode("utf-8"), object_pairs_hook=_unique_keys(f"--jsonl line {number}")
            )
        except UnicodeDecodeError as exc:
            raise ConfigurationError(
                f"--jsonl line {number}: not valid UTF-8 (byte {exc.start})"
            ) from None
        except json.JSONDecodeError as exc:
            raise ConfigurationError(
                f"--jsonl line {number}: not valid JSON ({exc.msg} at column {exc.colno})"
            ) from None
        except ValueError as exc:
            # An integer of more digits than Python converts (4,300 by default).
            raise ConfigurationError(f"--jsonl line {number}: {_json_value_problem(exc)}") from None
        except RecursionError:
            raise ConfigurationError(f"--jsonl line {number}: JSON nested too deeply") from None
        if not isinstance(item, dict):
            raise ConfigurationError(
                f"--jsonl line {number}: expected an object with id and text, "
                f"not a JSON {type(item).__name__}"
            )
        records.append(item)
        lines.append(number)
    return records, lines


def _check_ingest_target(args: argparse.Namespace) -> None:
    if args.command == "delete" and not (args.sources or args.ids or args.records):
        raise ConfigurationError(
            "grk delete takes the documents to remove: one or more SOURCE or URL, "
            "--id DOCUMENT_ID or --record RECORD_ID"
        )
    if args.command != "ingest":
        return
    if (args.path is None) == (args.jsonl is None):
        raise ConfigurationError("grk ingest takes a PATH (or URL), or --jsonl FILE: one of them")


def _check_numbers(args: argparse.Namespace) -> None:
    """Counts that argparse reads as any integer, held to their ranges (one-line errors)."""
    from groundkit.retrieval.rewriting import MAX_VARIANTS_LIMIT

    bounds = {"keep_versions": 0, "keep": 0, "version": 1, "chunk_overlap": 0, "ray_workers": 1}
    for name, least in bounds.items():
        value = getattr(args, name, None)
        if value is not None and value < least:
            option = "--" + name.replace("_", "-")
            raise ConfigurationError(f"{option} must be at least {least}, got {value}")
    version = getattr(args, "version", None)
    if version is not None and version > _MAX_VERSION:  # in the library's words, as typed
        raise ConfigurationError(
            f"--version must be an integer from 1 to {_MAX_VERSION}, got {version}"
        )
    ranges = {"chunk_chars": (32, 100_000), "rewrites": (0, MAX_VARIANTS_LIMIT)}
    for name, (least, most) in ranges.items():
        value = getattr(args, name, None)
        if value is not None and not least <= value <= most:
            option = "--" + name.replace("_", "-")
            raise ConfigurationError(f"{option} must be from {least} to {most}, got {value}")


def _check_search_options(args: argparse.Namespace) -> None:
    """The search options that go with others, or with one collection only."""
    if args.command != "search":
        return
    if args.rewrites is not None and args.glossary is None:
        raise ConfigurationError("--rewrites goes with --glossary FILE")
    if args.rerank is not None and not args.rerank.strip():
        # Not left for the library, which would name its own rerank=True.
        raise ConfigurationError("--rerank takes a cross-encoder's model name or path, not ''")
    args.request = _search_request(args)


def _search_request(args: argparse.Namespace) -> SearchRequest:
    """The search the options ask for, checked before any collection is opened; a
    refused option is named by its flag (``SEARCH_FLAGS``)."""
    from groundkit.retrieval.request import SearchRequest, name_options

    if args.query == "-":
        read = _stdin_bytes("the query").decode("utf-8", "surrogateescape")
        _refuse_undecodable([("the query read from stdin", read)])
        args.query = read.strip()
        if not args.query:
            raise ConfigurationError("the query read from stdin is empty")
    try:
        request = SearchRequest(
            query=args.query,
            top_k=args.top_k,
            mode=args.mode,
            rerank=args.rerank is not None,
            filters=_where(args.where),
            as_of=args.as_of,
            expand=args.expand,
            mmr=args.mmr,
            reorder=args.reorder,
            rewrite=args.glossary is not None,
            min_relevance=args.min_relevance,
        )
        if len(args.collections) > 1:
            request.check_single_collection()
    except RetrievalError as exc:
        names = {**SEARCH_FLAGS, "collection": "--collection"}
        raise ConfigurationError(name_options(exc, names)) from None
    return request


def _check_output(args: argparse.Namespace) -> None:
    if getattr(args, "full", False) and not args.json:
        raise ConfigurationError("--full widens the --json output: give it with --json")


def _chunking(args: argparse.Namespace) -> ChunkingConfig | None:
    """The chunking the ingest options ask for; None when none is given (the
    collection's bound chunking, or the default for a new one)."""
    from groundkit.config import ChunkingConfig

    given = {
        "strategy": args.chunker,
        "max_chars": args.chunk_chars,
        "overlap_chars": args.chunk_overlap,
        "contextual": args.contextual,
    }
    settings = {name: value for name, value in given.items() if value is not None}
    if not settings:
        return None
    defaults = ChunkingConfig()
    strategy = settings.get("strategy", defaults.strategy)
    budget = settings.get("max_chars", defaults.max_chars)
    overlap = settings.get("overlap_chars")
    if strategy == "sentence":
        if overlap:
            raise ConfigurationError(
                f"--chunk-overlap {overlap}: sentence chunks do not overlap (leave it out, or 0)"
            )
    elif (overlap if overlap is not None else defaults.overlap_chars) * 2 > budget:
        if overlap is None:
            raise ConfigurationError(
                f"--chunk-chars {budget} is less than twice the default overlap "
                f"({defaults.overlap_chars}); give a --chunk-overlap of at most "
                f"{budget // 2}"
            )
        raise ConfigurationError(
            f"--chunk-overlap {overlap} must be at most half of --chunk-chars ({budget})"
        )
    return ChunkingConfig(**settings)


def _read_moments(args: argparse.Namespace) -> None:
    """``--as-of`` and ``--valid-as-of`` as timezone-aware datetimes (in place), checked
    with the options they go with before any collection is opened or created."""
    for name in ("as_of", "valid_as_of"):
        text = getattr(args, name, None)
        if text is None:
            continue
        option = "--" + name.replace("_", "-")
        try:
            setattr(args, name, parse_moment(text))
        except ConfigurationError as exc:
            raise ConfigurationError(f"{option} {text!r}: {exc}") from None
    valid_as_of: datetime | None = getattr(args, "valid_as_of", None)
    if valid_as_of is None:
        return
    if args.jsonl is not None:
        raise ConfigurationError("--valid-as-of goes with a PATH or URL ingest, not --jsonl")
    # The stores' rule (which also refuses a moment before year 1 in UTC), checked here
    # before anything is opened.
    from groundkit.storage.versions import version_start

    try:
        version_start(valid_as_of, time.time())
    except IngestionError as exc:
        raise ConfigurationError(f"--valid-as-of: {exc}") from None


def _ray_executor(args: argparse.Namespace) -> RayExecutor | None:
    """The Ray executor ``--ray`` asks for; refused with ``--jsonl`` (records are not
    files a cluster could read) and checked before the collection opens."""
    if getattr(args, "ray", None) is None:
        if getattr(args, "ray_workers", 1) != 1:
            raise ConfigurationError("--ray-workers goes with --ray")
        return None
    if args.jsonl is not None:
        raise ConfigurationError("--ray ingests a PATH; --jsonl records are added here")
    from groundkit.utils.url_safety import looks_like_url

    if args.path is not None and looks_like_url(args.path.strip()):
        raise ConfigurationError("--ray ingests a PATH; a URL is fetched by this process")
    if not args.ray.strip():
        raise ConfigurationError("--ray takes auto or a Ray cluster's HOST:PORT")
    from groundkit.ingestion.ray_executor import RayExecutor

    return RayExecutor(args.ray, num_workers=args.ray_workers)


async def _run(args: argparse.Namespace) -> int:
    import asyncio

    _check_ingest_target(args)
    _check_text_arguments(args)
    _check_numbers(args)
    _check_output(args)
    _read_moments(args)
    _check_search_options(args)
    if args.command == "collections":
        return await _run_collections(args)
    if args.command == "drop":
        return await _run_drop(args)
    if args.command == "verify" and (args.receipts or args.snapshot_dir) is not None:
        return await _run_receipts(args)
    await _check_collections_exist(args)
    if args.command == "search":
        return await _run_search(args)
    meta = _meta_fields(args.meta) if args.command == "ingest" else None
    if args.command == "ingest":
        _ray_executor(args)  # its options checked before the collection opens
    (name,) = args.collections
    if args.command == "rebase":
        return await _run_rebase(args, name)
    async with _open(args, name, None, None) as col:
        if args.command == "ingest" and args.jsonl is not None:
            records, lines = await asyncio.to_thread(read_jsonl_records, args.jsonl)
            # Checked here first, so each problem names its line rather than its place
            # among the records (blank lines are skipped).
            from groundkit.ingestion.records import record_documents

            record_documents(records, meta, names=[f"--jsonl line {n}" for n in lines])
            report = await col.add_documents(records, metadata=meta)
            return _print_ingest(report, args, dense=col.embedder is not None)
        if args.command == "ingest":
            progress = _Progress(sys.stderr, enabled=not args.quiet)
            try:
                report = await col.ingest(
                    args.path,
                    metadata=meta,
                    progress=progress,
                    valid_as_of=args.valid_as_of,
                    executor=_ray_executor(args),
                )
            finally:
                progress.finish()
            return _print_ingest(report, args, dense=col.embedder is not None)
        if args.command == "fetch":
            fetched = await col.fetch_chunk(args.chunk_id, args.version)
            return _print_fetch(fetched, args.json, full=args.full)
        if args.command == "delete":
            deleted = await col.delete(
                ids=args.ids, sources=args.sources, records=args.records, erase=args.erase
            )
            return _print_delete(deleted, args)
        if args.command == "purge":
            removed = await col.purge_versions(args.keep)
            return _print_purge(removed, args)
        if args.command == "optimize":
            return _print_optimize(await col.optimize(), args)
        return _print_verify(await col.verify_all(), args.json, args.quiet)


def _registry(args: argparse.Namespace) -> CollectionRegistry:
    from groundkit.service.collections import CollectionRegistry

    return CollectionRegistry(
        None if args.metadata_url else args.index_dir,
        metadata_url=args.metadata_url,
        storage_uri=args.storage_uri,
        base_dir=args.base_dir,
        clearance=args.clearance,
    )


def _size(size: int | None) -> str:
    if size is None:
        return "-"
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


async def _run_collections(args: argparse.Namespace) -> int:
    registry = _registry(args)
    try:
        names = await registry.names()
        if args.collection:
            missing = [n for n in args.collections if n not in names]
            if missing:
                raise ConfigurationError(
                    f"no collection {missing[0]!r} in {registry.where!r} "
                    f"(there are: {', '.join(names) or 'none'})"
                )
            names = [n for n in names if n in args.collections]
        infos = await registry.describe_each(names, full=True)
    finally:
        await registry.close()
    damaged = any(info.status != "ok" for info in infos)
    if args.json:
        _emit({"collections": [info.model_dump(mode="json") for info in infos]})
        return EXIT_PROBLEM if damaged else EXIT_OK
    if not infos:
        if not args.quiet:
            print(f"no collections in {registry.where}; run 'grk ingest PATH' to make one")
        return EXIT_OK
    for info in infos:
        _print_collection(info)
    return EXIT_PROBLEM if damaged else EXIT_OK


def _print_collection(info: CollectionInfo) -> None:
    if info.status != "ok":
        print(f"{info.name}  damaged: {_shown(info.error or '')}")
        return
    embedder = info.embedding.model_name if info.embedding is not None else "none (bm25 only)"
    n = info.past_versions or 0
    past = f" ({n} past version{'' if n == 1 else 's'})" if n else ""
    generation = "" if info.generation is None else f", generation {info.generation}"
    print(
        f"{info.name}  {info.documents} documents{past}, {info.chunks} chunks{generation}, "
        f"{_size(info.size_bytes)}"
    )
    print(f"  base:     {_shown(str(info.base_dir))}")
    print(f"  embedder: {embedder}")
    print(f"  analyzer: {info.analyzer or 'none yet'}")
    if info.vectors_missing:
        print(
            f"  vectors missing: {info.vectors_missing} chunks (an ingest was interrupted or "
            "is running; 'grk ingest PATH' completes them)"
        )
    if info.vector_problem:
        print(
            f"  vectors unusable: {_shown(info.vector_problem)} (dense and hybrid searches "
            "answer from BM25; 'grk ingest PATH' rebuilds them)"
        )
    if info.vector_cache:
        print(f"  vector cache: {_shown(info.vector_cache)}")


async def _run_drop(args: argparse.Namespace) -> int:
    import asyncio

    location = _location(args, args.name)
    if not await location.exists():
        raise ConfigurationError(f"no collection {args.name!r} in {location.describe_root()!r}")
    if not args.yes:
        if sys.stdin is None or not sys.stdin.isatty():
            raise ConfigurationError(
                f"dropping {args.name!r} deletes its index, vectors and snapshots; "
                "pass --yes to confirm"
            )
        answer = await asyncio.to_thread(
            input,
            f"Delete collection {args.name!r} in {location.describe_root()} (its index, "
            "vectors and snapshots; the source files stay)? [y/N] ",
        )
        if answer.strip().lower() not in ("y", "yes"):
            print("not dropped", file=sys.stderr)
            return EXIT_PROBLEM
    await location.drop()
    if args.json:
        _emit({"dropped": args.name})
    elif not args.quiet:
        print(f"dropped collection {args.name!r}")
    return EXIT_OK


async def _run_rebase(args: argparse.Namespace, name: str) -> int:
    from groundkit.collection import Collection

    async with Collection.open(location=_location(args, name), create=False) as col:
        before = col.base_dir
        found, checked = await col.rebase(args.new_base, force=args.force)
        if args.json:
            _emit(
                {
                    "collection": name,
                    "base_dir": str(col.base_dir),
                    "previous": str(before),
                    "sources_found": found,
                    "sources_checked": checked,
                }
            )
        elif not args.quiet:
            print(
                f"collection {name!r}: base directory {_shown(str(col.base_dir))} "
                f"(was {_shown(str(before))})"
            )
            print(f"  {found} of {checked} sources checked are there")
    return EXIT_OK


def _add_receipt_arguments(verify: argparse.ArgumentParser) -> None:
    from groundkit.utils.arguments import path_arg

    verify.add_argument(
        "--receipts",
        type=path_arg,
        default=None,
        metavar="FILE",
        help="check the receipts in FILE (Web Annotations from to_annotation(): a JSON array "
        "or JSON Lines) against the sources under --base-dir instead; no index is opened",
    )
    verify.add_argument(
        "--snapshot-dir",
        type=path_arg,
        default=None,
        metavar="DIR",
        help="with --receipts: where URL and record receipts' stored texts are (a "
        "collection's <index-dir>/<name>.snapshots)",
    )


async def _run_receipts(args: argparse.Namespace) -> int:
    """``grk verify --receipts FILE``: each receipt's verdict; 1 unless all verify."""
    from groundkit.verification.receipts import check_receipts, read_receipts

    if args.receipts is None:
        raise ConfigurationError("--snapshot-dir goes with --receipts FILE")
    receipts = await read_receipts(args.receipts)
    base = args.base_dir if args.base_dir is not None else Path.cwd()
    results = await check_receipts(receipts, base, snapshot_dir=args.snapshot_dir)
    tally = {v: 0 for v in ("verified", "moved", "drifted", "unresolvable")}
    for result in results:
        tally[result.verification] += 1
    if args.json:
        _emit(
            {
                "receipts": len(results),
                **tally,
                "results": [
                    {"receipt": r.number, **result.model_dump(mode="json")}
                    for r, result in zip(receipts, results, strict=True)
                ],
            }
        )
    else:
        if not args.quiet:
            kept = sum(result.read_from == "kept copy" for result in results)
            also = f", {kept} read from kept copies" if kept else ""
            print(
                ", ".join(f"{v} {n}" for v, n in tally.items())
                + f" ({len(results)} receipts{also})"
            )
        for r, result in zip(receipts, results, strict=True):
            if not result.ok:
                print(
                    f"  {_verdict(result)}: receipt {r.number}: "
                    f"{_where_fetched(result)} {result.detail}"
                )
    return EXIT_OK if tally["verified"] == len(results) else EXIT_PROBLEM


def _in_flags(exc: GroundkitError) -> str:
    """``exc``'s message, a refused setting said as the flag that gave it."""
    if (
        not isinstance(exc, InvalidSettingError)
        or exc.setting not in SETTING_MODELS
        or not exc.problems
        or any(field not in SETTING_FLAGS for field, _, _ in exc.problems)
    ):
        return str(exc)
    return "; ".join(
        f"{SETTING_FLAGS[field]} {value!r}: {reason.removeprefix('Value error, ')}"
        for field, reason, value in exc.problems
    )


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[list[int]]:
    """SIGTERM (``kill``, a service manager, a container stopping) ends grk the way
    Ctrl-C does: whatever handles SIGINT at that moment gets it (``asyncio.run``'s
    handler cancels the command, which closes what it opened; outside the loop,
    ``KeyboardInterrupt``). The list yielded gets the signal's number, so the exit
    code can say which one it was. Only in the main thread (where signals are
    handled); the previous handler is put back on the way out."""
    received: list[int] = []

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler):
            handler(signal.SIGINT, frame)
        else:  # SIGINT ignored (a background job) or left to the OS
            raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield received
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None) -> int:
    with _sigterm_as_interrupt() as received:
        try:
            return _main(argv)
        except KeyboardInterrupt:
            if received:
                print("grk: terminated", file=sys.stderr)
                return EXIT_TERMINATED
            print("grk: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED


class _Output:
    """Standard output for the length of a command. A write that fails does not stop the
    command, so its exit code stands: when the reader went away (``grk verify | head``)
    the rest of the output is dropped, which is no error; when the output could not be
    written (a full disk, ``> /dev/full``, stdout closed with ``>&-``) ``failure`` says
    why, and grk reports it (exit 2) rather than end in a traceback or, stdout closed,
    succeed with its output lost."""

    def __init__(self, stream: TextIO | None) -> None:
        self.stream = stream
        self.failure: str | None = None
        self._dropping = False  # the reader went away, or the output failed

    def write(self, text: str) -> int:
        if self.stream is None:
            if text and self.failure is None:
                self.failure = "cannot write the output: standard output is closed"
        elif not self._dropping:
            try:
                return self.stream.write(text)
            except OSError as exc:
                self._lost(exc)
        return len(text)

    def flush(self) -> None:
        if self.stream is not None and not self._dropping:
            try:
                self.stream.flush()
            except OSError as exc:
                self._lost(exc)

    def isatty(self) -> bool:
        return self.stream is not None and self.stream.isatty()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)

    def _lost(self, exc: OSError) -> None:
        """Drop the rest of the output; a reader that went away (EPIPE) is no failure.
        The descriptor is pointed at the null device, so that the interpreter's own
        flush at exit does not fail again with a traceback."""
        self._dropping = True
        if not isinstance(exc, BrokenPipeError):
            reason = exc.strerror or type(exc).__name__
            self.failure = f"cannot write the output: {reason}"
        with contextlib.suppress(OSError, ValueError, AttributeError):
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, self.stream.fileno())  # type: ignore[union-attr]
            finally:
                os.close(null)


def _main(argv: Sequence[str] | None) -> int:
    """``_command`` with standard output guarded (``_Output``): a failed write is one
    ``grk: error:`` line and exit 2, a reader gone leaves the command's exit code."""
    real = sys.stdout
    output = _Output(real)
    sys.stdout = cast(TextIO, output)
    try:
        try:
            code = _command(argv)
        except SystemExit:  # argparse: --help, --version or a usage error
            output.flush()
            if output.failure is None:
                raise
            code = EXIT_ERROR
        output.flush()
    finally:
        sys.stdout = real
    if output.failure is not None:
        with contextlib.suppress(OSError, ValueError):
            print(f"grk: error: {output.failure}", file=sys.stderr)
        return EXIT_ERROR
    return code


def _command(argv: Sequence[str] | None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    if given in (["-V"], ["--version"]):
        # What the parser's version action prints, without building the parser (which
        # imports what every command's options are checked against).
        print(_version_line())
        return EXIT_OK
    # Model loading draws progress bars on stderr; the CLI has its own output.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    # Stored text is printed as it is: a terminal or pipe that cannot encode a character
    # (PYTHONIOENCODING=ascii, a Latin-1 locale) gets an escape, not a traceback.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and not _writes_utf8(stream):
            with contextlib.suppress(OSError, ValueError):
                reconfigure(errors="backslashreplace")
    parser = _parser()
    args = parser.parse_args(argv)
    _merge_globals(parser, args)
    from groundkit.service.command import settle_location

    settle_location(parser, args)
    _configure_logging(args.verbose, args.quiet)
    if args.command == "drop" and args.collection:
        parser.error("grk drop takes the collection's name, not --collection")
    if args.command not in ("serve", "drop", "inspect"):
        args.collections = list(dict.fromkeys(args.collection or ["default"]))
        if len(args.collections) > 1 and args.command not in ("search", "collections"):
            parser.error(f"{args.command} takes one --collection")
    if args.command in ("serve", "inspect") and isinstance(sys.stdout, _Output):
        sys.stdout = sys.stdout.stream  # the server's own
    try:
        if args.command == "serve":
            from groundkit.service.command import run_serve

            return run_serve(args)
        if args.command == "inspect":
            from groundkit.service.inspector.command import run_inspect

            return run_inspect(args)
        import asyncio

        return asyncio.run(_run(args))
    except GroundkitError as exc:
        print(f"grk: error: {_in_flags(exc)}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError as exc:
        # Not a write to sys.stdout (``_Output`` keeps those from raising): a pipe the
        # command itself used. It did not finish, so it cannot say it succeeded.
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (no flush at exit)
        with contextlib.suppress(OSError, ValueError):
            print(f"grk: error: a pipe closed under the command ({exc})", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
