"""Where an ingest's per-file work runs: the seam between the driver and its executor.

The driver (``Indexer``) discovers the files, binds the collection and commits;
an executor reads, extracts, chunks and analyses each file, and may embed its
chunks, then hands the results back in discovery order. ``LocalExecutor`` does
this in the calling process; ``groundkit.ingestion.ray_executor.RayExecutor``
does it on a Ray cluster. Either way one committer writes, so every invariant of
a local ingest holds (adr/0060-distributed-ingest-on-ray.md).
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from groundkit.config import AnalyzerConfig, ChunkingConfig, IngestConfig
from groundkit.contracts import Chunk, Document, FieldValue
from groundkit.errors import IngestionError
from groundkit.lexical.analyzer import ANALYZER_VERSION, Analyzer
from groundkit.providers.factory import EmbedderRecipe
from groundkit.storage.protocols import DocumentState
from groundkit.utils.hashing import sha256_text

__all__ = [
    "FileOutcome",
    "FilePreparer",
    "IngestExecutor",
    "IngestPlan",
    "LocalExecutor",
    "PreparedFile",
]

FileOutcome = Literal["prepared", "unchanged", "failed"]
# Which of these chunk hashes already have stored vectors (asked on the driver).
StoredHashes = Callable[[Sequence[str]], Awaitable[set[str]]]


@dataclass(frozen=True, slots=True)
class IngestPlan:
    """Everything an executor needs to prepare a run's files, picklable as a whole.

    ``files`` are absolute paths in discovery order; ``known`` the stored state of
    the sources this run may touch (an unchanged document is skipped where it is
    read). ``analyzer_version`` is the analyzer version the collection is bound
    to (an earlier one for a collection built before the current). ``embedder``
    is set when the executor is to embed (it says how to rebuild the collection's
    embedder); ``stored_hashes`` then tells it which chunk texts already have
    vectors, which it does not embed again.
    """

    files: tuple[str, ...]
    base_dir: str
    ingest: IngestConfig
    chunking: ChunkingConfig
    analyzer: AnalyzerConfig
    fields: Mapping[str, FieldValue]
    known: Mapping[str, DocumentState]
    analyzer_version: int = ANALYZER_VERSION
    embedder: EmbedderRecipe | None = None
    identity: tuple[str, str, int] | None = None
    stored_hashes: StoredHashes | None = field(default=None, compare=False)


@dataclass(slots=True)
class PreparedFile:
    """One file's result: prepared (document, chunks, terms), unchanged (with its
    document when ``keep_sources`` asks for its text), or failed.

    ``vectors`` maps chunk content hashes to vectors the executor computed;
    hashes it did not embed (already stored) are looked up by the committer.
    """

    source: str
    outcome: FileOutcome
    document: Document | None = None
    chunks: list[Chunk] = field(default_factory=list)
    terms: list[list[str]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    hashes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    reason: str = ""
    vectors: dict[str, npt.NDArray[np.float32]] | None = None


@runtime_checkable
class IngestExecutor(Protocol):
    """Runs a plan's per-file work and yields one ``PreparedFile`` per file, in
    ``plan.files`` order. A failure of one file is a ``failed`` result, never an
    exception; an exception means the run as a whole cannot go on."""

    def run(self, plan: IngestPlan) -> AsyncIterator[PreparedFile]: ...


class LocalExecutor:
    """Prepares each file in this process, one at a time off the event loop; the
    committer embeds (the same work as an ingest without an executor)."""

    def __repr__(self) -> str:
        return "LocalExecutor()"

    async def run(self, plan: IngestPlan) -> AsyncIterator[PreparedFile]:
        preparer = FilePreparer(plan)
        for path in plan.files:
            yield await asyncio.to_thread(preparer.prepare, path)


class FilePreparer:
    """Reads and prepares the files of one plan; built once per process (or Ray task)."""

    def __init__(self, plan: IngestPlan) -> None:
        from groundkit.ingestion.dispatch import RoutingLoader

        self._plan = plan
        self._loader = RoutingLoader(plan.ingest)
        self._analyzer = Analyzer(plan.analyzer, version=plan.analyzer_version)

    def prepare(self, path: str) -> PreparedFile:
        """Load, check and prepare one file (blocking: it runs its own event loop for the
        loader); the rules of a local ingest, applied where the file is read."""
        from groundkit.ingestion.files import unportable_name
        from groundkit.ingestion.indexer import (
            _unchanged,
            _with_fields,
            index_texts,
            prepare_document,
        )
        from groundkit.utils.path_safety import printable_path, to_relative

        plan = self._plan
        base = Path(plan.base_dir)
        file = Path(path)
        source = to_relative(file, base)
        try:
            bad_name = unportable_name(source)
            if bad_name is not None:
                source = printable_path(source)
                raise bad_name
            if not os.access(file, os.R_OK):
                raise IngestionError(
                    f"{source}: cannot be read on host {socket.gethostname()!r} at "
                    f"{printable_path(path)!r}; every node must see the source tree at "
                    "the same path"
                )
            loaded = asyncio.run(self._loader.load(file, base_dir=base))
            document = _with_fields(loaded, dict(plan.fields))
            notes = list(document.notes)
            if _unchanged(document, plan.known):
                # Its text only when the driver keeps copies (it checks the stored one).
                kept = document if plan.ingest.keep_sources else None
                return PreparedFile(
                    source=document.source, outcome="unchanged", document=kept, notes=notes
                )
            document, chunks, terms = prepare_document(document, plan.chunking, self._analyzer)
        except IngestionError as exc:
            return PreparedFile(source=source, outcome="failed", reason=str(exc))
        texts = index_texts(chunks, document.metadata, plan.chunking)
        return PreparedFile(
            source=document.source,
            outcome="prepared",
            document=document,
            chunks=chunks,
            terms=terms,
            texts=texts,
            hashes=[sha256_text(t) for t in texts],
            notes=notes,
        )
