"""``grk``: ingest, search, fetch and verify from the shell.

Exit codes: 0 success; 1 the command ran but found a problem (a file failed
to ingest, a citation did not verify); 2 usage or configuration error.
``--json`` output is stable; its shape is documented in docs/cli.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from groundkit.collection import Collection, VerifyReport
from groundkit.config import MAX_TOP_K, IngestConfig
from groundkit.contracts import (
    SENSITIVITY_LEVELS,
    CollectionManifest,
    FetchResult,
    FieldValue,
    IngestReport,
    MultiSearchResponse,
    SearchResponse,
)
from groundkit.errors import ConfigurationError, GroundkitError, IngestionError
from groundkit.ingestion.fields import check_fields, parse_field_value
from groundkit.providers.factory import (
    HTTP_PROVIDERS,
    http_embedder,
    require_embedder_for_manifest,
)
from groundkit.providers.protocols import EmbedderFactory, EmbeddingProtocol
from groundkit.retrieval.filters import FILTER_OPERATORS, MAX_FILTER_DEPTH
from groundkit.retrieval.multi import search_collections
from groundkit.retrieval.rerank import RerankerProtocol
from groundkit.retrieval.search import SEARCH_MODES
from groundkit.service.command import (
    add_embedding_url_argument,
    add_location_arguments,
    add_serve_parser,
    run_serve,
)
from groundkit.storage.location import StoreLocation
from groundkit.utils.text import first_unencodable

__all__ = ["main"]

EXIT_OK, EXIT_PROBLEM, EXIT_ERROR = 0, 1, 2
_SNIPPET = 160


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--index-dir", default=".groundkit", type=Path, help="index directory (./.groundkit)"
    )
    add_location_arguments(common)
    common.add_argument(
        "--collection",
        action="append",
        default=None,
        help="collection name (default); search takes it more than once to search several",
    )
    common.add_argument(
        "--clearance",
        choices=SENSITIVITY_LEVELS,
        default=None,
        help="hide documents labelled above this sensitivity (search, fetch, verify)",
    )
    common.add_argument(
        "--base-dir",
        type=Path,
        default=None,
        help="directory sources are relative to (stored with a new collection; default: cwd)",
    )
    common.add_argument(
        "--embedder",
        default=None,
        help="embedding model for dense/hybrid: a sentence-transformers name or directory, "
        "or with --embedding-provider the server's model name (recorded with the "
        "collection; later commands reuse it)",
    )
    common.add_argument(
        "--embedding-provider",
        choices=("sentence-transformers", *HTTP_PROVIDERS),
        default="sentence-transformers",
        help="who computes --embedder's vectors: a local model, or an HTTP server",
    )
    add_embedding_url_argument(common)
    common.add_argument("--json", action="store_true", help="machine-readable output")
    common.add_argument("-v", "--verbose", action="count", default=0, help="more log output")
    common.add_argument("-q", "--quiet", action="store_true", help="errors only, no progress")

    parser = argparse.ArgumentParser(
        prog="grk", description="Citation-verifiable retrieval over your documents."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    ingest = sub.add_parser(
        "ingest", parents=[common], help="ingest a file, a folder or an http(s) URL"
    )
    # A string: Path() would fold the '//' of a URL.
    ingest.add_argument(
        "path", nargs="?", help="file or folder inside the base directory, or a URL"
    )
    ingest.add_argument(
        "--jsonl",
        metavar="FILE",
        default=None,
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
    search = sub.add_parser("search", parents=[common], help="search a collection")
    search.add_argument("query")
    search.add_argument("--mode", choices=SEARCH_MODES, default="bm25")
    search.add_argument("--top-k", type=int, default=None, help=f"1..{MAX_TOP_K} (10)")
    search.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="FILTER",
        help="only documents whose fields match (repeatable, AND): FIELD=VALUE, "
        "FIELD.OP=VALUE with OP one of " + ", ".join(FILTER_OPERATORS) + ", or a JSON object",
    )
    search.add_argument(
        "--rerank",
        metavar="MODEL_OR_PATH",
        default=None,
        help="rerank the best candidates with this local cross-encoder",
    )
    fetch = sub.add_parser("fetch", parents=[common], help="fetch one chunk and verify it")
    fetch.add_argument("chunk_id")
    sub.add_parser("verify", parents=[common], help="re-verify every chunk of a collection")
    add_serve_parser(sub)
    return parser


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


class _Progress:
    """A one-line progress bar on stderr, shown only on a terminal."""

    def __init__(self, stream: TextIO, enabled: bool) -> None:
        self._stream = stream
        self._enabled = enabled and stream.isatty()
        self._drawn = False

    def __call__(self, done: int, total: int) -> None:
        if not self._enabled or total < 2:
            return
        width = 30
        filled = width * done // total
        bar = "#" * filled + "-" * (width - filled)
        self._stream.write(f"\r[{bar}] {done}/{total} files")
        self._stream.flush()
        self._drawn = True

    def finish(self) -> None:
        if self._drawn:
            self._stream.write("\n")
            self._stream.flush()


def _snippet(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _SNIPPET else flat[: _SNIPPET - 1] + "…"


def _emit(data: Any) -> None:
    sys.stdout.write(json.dumps(data, ensure_ascii=False, sort_keys=True, indent=2) + "\n")


def _print_ingest(report: IngestReport, as_json: bool) -> int:
    if as_json:
        _emit(report.model_dump(mode="json"))
    else:
        print(
            f"added {len(report.added)}, updated {len(report.updated)}, "
            f"unchanged {len(report.unchanged)}, removed {len(report.removed)}, "
            f"failed {len(report.failed)}, skipped {report.skipped} "
            f"(generation {report.generation})"
        )
        for failure in report.failed:
            print(f"  failed: {failure.reason}")
        for repair in report.repairs:
            print(f"  repaired: {repair}")
    return EXIT_PROBLEM if report.failed else EXIT_OK


def _degraded(response: SearchResponse | MultiSearchResponse) -> dict[str, str]:
    """``{collection or "": reason}`` for answers served from BM25 for want of vectors."""
    if isinstance(response, MultiSearchResponse):
        per = response.metadata.get("per_collection", {})
        return {name: str(e["degraded"]) for name, e in per.items() if e.get("degraded")}
    reason = response.metadata.get("degraded")
    return {"": str(reason)} if reason else {}


def _print_search(response: SearchResponse | MultiSearchResponse, as_json: bool) -> int:
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
            "results": [
                {"rank": rank, "page": r.citation.page, **r.model_dump(mode="json")}
                for rank, r in enumerate(response.results, start=1)
            ],
        }
        if isinstance(response, MultiSearchResponse):
            data["collections"] = response.collections
            data["failures"] = [f.model_dump(mode="json") for f in failures]
        _emit(data)
        return EXIT_PROBLEM if failures else EXIT_OK
    if not response.results:
        print("no results")
    for rank, r in enumerate(response.results, start=1):
        page = f" p. {r.citation.page}" if r.citation.page else ""
        where = f"{r.collection}: " if multi else ""
        print(
            f"{rank:>3}. {where}{r.source} [{r.start_offset}:{r.end_offset}]{page}"
            f"  score {r.score:.4f}"
        )
        print(f"     chunk {r.chunk_id}")
        print(f"     {_snippet(r.content)}")
    for failure in failures:
        print(f"  failed: collection {failure.collection!r}: {failure.error}: {failure.detail}")
    return EXIT_PROBLEM if failures else EXIT_OK


def _print_fetch(result: FetchResult, as_json: bool) -> int:
    if as_json:
        _emit(result.model_dump(mode="json"))
    else:
        c = result.citation
        page = f" p. {c.page}" if c.page else ""
        print(f"{c.source} [{c.start_offset}:{c.end_offset}]{page}  {result.verification}")
        print(f"  {result.detail}")
        print(result.content)
    return EXIT_OK if result.verification == "verified" else EXIT_PROBLEM


def _print_verify(report: VerifyReport, as_json: bool) -> int:
    if as_json:
        _emit(
            {
                "verified": report.verified,
                "drifted": report.drifted,
                "unresolvable": report.unresolvable,
                "problems": [p.model_dump(mode="json") for p in report.problems],
            }
        )
    else:
        print(
            f"verified {report.verified}, drifted {report.drifted}, "
            f"unresolvable {report.unresolvable}"
        )
        for p in report.problems:
            c = p.citation
            print(f"  {p.verification}: {c.source} [{c.start_offset}:{c.end_offset}] {p.detail}")
    return EXIT_OK if report.ok else EXIT_PROBLEM


def _meta_fields(items: Sequence[str]) -> dict[str, FieldValue] | None:
    """``--meta KEY=VALUE`` options as fields; a malformed one is a usage error."""
    if not items:
        return None
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


def _where(items: Sequence[str]) -> dict[str, Any] | None:
    """``--where`` options as one filter mapping; a malformed one is a usage error."""
    if not items:
        return None
    out: dict[str, Any] = {}

    def add(name: str, op: str, value: object) -> None:
        conditions = out.setdefault(name, {})
        if op in conditions:
            raise ConfigurationError(f"--where: {name}.{op} is given twice")
        conditions[op] = value

    for item in items:
        if item.lstrip().startswith("{"):
            try:
                given = json.loads(item)
            except json.JSONDecodeError as exc:
                raise ConfigurationError(f"--where {item!r}: not valid JSON ({exc.msg})") from None
            except RecursionError:
                # Python's parser gives up on deep nesting before the filter
                # limits are checked; no valid filter comes near it.
                raise ConfigurationError(
                    f"--where: the JSON filter nests too deeply (a filter is at most "
                    f"{MAX_FILTER_DEPTH} levels: {{field: {{op: [values]}}}})"
                ) from None
            if not isinstance(given, dict):
                raise ConfigurationError(f"--where {item!r}: a JSON filter is an object")
            for name, spec in given.items():
                for op, value in (spec if isinstance(spec, dict) else {"eq": spec}).items():
                    add(name, op, value)
            continue
        target, equals, raw = item.partition("=")
        name, _, op = target.strip().partition(".")
        if not equals or not name:
            raise ConfigurationError(f"--where {item!r}: expected FIELD=VALUE or FIELD.OP=VALUE")
        try:
            value = parse_field_value(raw, f"--where {target.strip()}")
        except IngestionError as exc:
            raise ConfigurationError(str(exc)) from None
        add(name, op or "eq", value)
    return out


def _named_embedder(args: argparse.Namespace) -> EmbeddingProtocol | None:
    """The embedder ``--embedder`` (and ``--embedding-provider``) names, if any."""
    if not args.embedder:
        return None
    if args.embedding_provider in HTTP_PROVIDERS:
        return http_embedder(args.embedding_provider, args.embedder, endpoint=args.embedding_url)
    from groundkit.providers.local import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder(args.embedder)


def _recorder(args: argparse.Namespace) -> EmbedderFactory:
    """Builds the embedder a bound collection recorded (an HTTP one at
    ``--embedding-url`` or ``GROUNDKIT_EMBEDDING_URL``); ``ConfigurationError`` if grk
    cannot."""

    def build(manifest: CollectionManifest) -> EmbeddingProtocol:
        return require_embedder_for_manifest(manifest, endpoint=args.embedding_url)

    return build


def _location(args: argparse.Namespace, name: str) -> StoreLocation:
    return StoreLocation.resolve(
        name,
        index_dir=None if args.metadata_url else args.index_dir,
        metadata_url=args.metadata_url,
        storage_uri=args.storage_uri,
    )


async def _check_collections_exist(args: argparse.Namespace) -> None:
    """Every command but ingest reads an existing collection; say how to make one."""
    if args.command == "ingest":
        return
    for name in args.collections:
        location = _location(args, name)
        if not await location.exists():
            raise ConfigurationError(
                f"no collection {name!r} in {location.describe_root()!r}; "
                "run 'grk ingest PATH' first"
            )


def _open(args: argparse.Namespace, name: str, reranker: RerankerProtocol | None) -> Any:
    """``Collection.open`` for a command: ingest creates, the others need an existing one.

    The recorded embedder is built only where it is used: an ingest (to keep the
    vectors in step) and a dense or hybrid search; fetch, verify and BM25 search
    never load a model.
    """
    wants_vectors = args.command == "ingest" or (args.command == "search" and args.mode != "bm25")
    recorded: EmbedderFactory | None = _recorder(args) if wants_vectors else None
    return Collection.open(
        location=_location(args, name),
        create=args.command == "ingest",
        rebuild_damaged=args.command == "ingest" and args.rebuild,
        base_dir=args.base_dir,
        embedder=_named_embedder(args) if args.command in ("ingest", "search") else None,
        embedder_for=recorded,
        reranker=reranker,
        clearance=args.clearance,
        ingest=IngestConfig(html_extractor=args.html) if args.command == "ingest" else None,
    )


async def _run_search(args: argparse.Namespace) -> int:
    filters = _where(args.where)
    reranker: RerankerProtocol | None = None
    if args.rerank:
        from groundkit.retrieval.rerank import CrossEncoderReranker

        reranker = CrossEncoderReranker(args.rerank)
    async with contextlib.AsyncExitStack() as stack:
        collections = [
            await stack.enter_async_context(_open(args, name, reranker))
            for name in args.collections
        ]
        rerank = reranker is not None
        if len(collections) == 1:
            response: SearchResponse | MultiSearchResponse = await collections[0].search(
                args.query, args.top_k, mode=args.mode, rerank=rerank, filters=filters
            )
        else:
            response = await search_collections(
                collections, args.query, args.top_k, mode=args.mode, rerank=rerank, filters=filters
            )
    return _print_search(response, args.json)


def _check_text_arguments(args: argparse.Namespace) -> None:
    """Refuse command-line text that is not valid UTF-8, naming the argument.

    Python turns the bytes of an argument that is not UTF-8 into lone surrogates
    (U+DC80..U+DCFF), which nothing can store, hash or search for.
    """
    given: list[tuple[str, str]] = []
    if args.command == "search":
        given.append(("the query", args.query))
        given.extend(("--where", item) for item in args.where)
    elif args.command == "fetch":
        given.append(("CHUNK_ID", args.chunk_id))
    elif args.command == "ingest":
        given.extend(("--meta", item) for item in args.meta)
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


def read_jsonl_records(name: str) -> list[dict[str, Any]]:
    """The records of a JSON Lines file (``-``: stdin); a bad line is a usage error
    naming its number. Blank lines are skipped; the records are checked by
    ``add_documents``."""
    try:
        data = sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
    except OSError as exc:
        raise ConfigurationError(f"--jsonl {name!r}: cannot read ({exc.strerror or exc})") from None
    records: list[dict[str, Any]] = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            item = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ConfigurationError(
                f"--jsonl line {number}: not valid UTF-8 (byte {exc.start})"
            ) from None
        except json.JSONDecodeError as exc:
            raise ConfigurationError(
                f"--jsonl line {number}: not valid JSON ({exc.msg} at column {exc.colno})"
            ) from None
        except RecursionError:
            raise ConfigurationError(f"--jsonl line {number}: JSON nested too deeply") from None
        if not isinstance(item, dict):
            raise ConfigurationError(
                f"--jsonl line {number}: expected an object with id and text, "
                f"not a JSON {type(item).__name__}"
            )
        records.append(item)
    return records


def _check_ingest_target(args: argparse.Namespace) -> None:
    if args.command != "ingest":
        return
    if (args.path is None) == (args.jsonl is None):
        raise ConfigurationError("grk ingest takes a PATH (or URL), or --jsonl FILE: one of them")


async def _run(args: argparse.Namespace) -> int:
    _check_ingest_target(args)
    _check_text_arguments(args)
    await _check_collections_exist(args)
    if args.command == "search":
        return await _run_search(args)
    meta = _meta_fields(args.meta) if args.command == "ingest" else None
    (name,) = args.collections
    async with _open(args, name, None) as col:
        if args.command == "ingest" and args.jsonl is not None:
            records = await asyncio.to_thread(read_jsonl_records, args.jsonl)
            return _print_ingest(await col.add_documents(records, metadata=meta), args.json)
        if args.command == "ingest":
            progress = _Progress(sys.stderr, enabled=not args.quiet)
            try:
                report = await col.ingest(args.path, metadata=meta, progress=progress)
            finally:
                progress.finish()
            return _print_ingest(report, args.json)
        if args.command == "fetch":
            return _print_fetch(await col.fetch_chunk(args.chunk_id), args.json)
        return _print_verify(await col.verify(), args.json)


def main(argv: Sequence[str] | None = None) -> int:
    # Model loading draws progress bars on stderr; the CLI has its own output.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    parser = _parser()
    args = parser.parse_args(argv)
    _configure_logging(args.verbose, args.quiet)
    if args.command != "serve":
        args.collections = list(dict.fromkeys(args.collection or ["default"]))
        if len(args.collections) > 1 and args.command != "search":
            parser.error(f"{args.command} takes one --collection")
    try:
        return run_serve(args) if args.command == "serve" else asyncio.run(_run(args))
    except GroundkitError as exc:
        print(f"grk: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("grk: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
