"""Extractions remembered on this host, so an unchanged file is not extracted again.

Extraction is deterministic: the same bytes through an extractor of the same run
identity (its identity plus the settings its output depends on, such as a PDF
extractor's OCR engine) give the same ``Extraction``. An ingest of a folder still
reads every file to find out whether it changed; for a text file that costs a hash,
for a PDF a pdfium run over every page and for a scanned one OCR of every page
(seconds a page). So ingest keeps each whole extraction, keyed by the SHA-256 of the
bytes and the run identity (and the charset a server declared for a fetched page),
and a later ingest of the same bytes reads it back instead (adr/0088-extraction-cache.md).

Only ingest reads it. A citation check runs the extractor again (within one process
it may reuse that process's own text, extraction/memo.py): what verifies a citation
never comes from a file an earlier run left on disk, so a damaged or planted record
can at worst make an ingest store a text that its citations' checks then find drifted,
or page geometry that unpacks but is malformed inside, which fails the searches that
draw its rectangles as damaged stored geometry does. What the store checks on every
row read (page offsets, headings, the geometry's shape) is checked on every record.

Checked, never trusted. Records live in the user's cache directory
(``$GROUNDKIT_CACHE_DIR/extractions/``), in a folder that must be the user's own and
writable by no one else; a record that is not the user's own regular file, is larger
than the bound, fails its SHA-256, names other bytes or another run identity, or does
not hold a well-formed extraction is a miss, and is removed. Records are written whole
by rename; the folder is bounded in bytes (least recently used first out: a hit
refreshes the record's time). A cache that cannot be read or written is no error: the
file is extracted, as without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import logging
import os
import platform
import re
import sys
import threading
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from groundkit.config import DEFAULT_EXTRACTION_CACHE_BYTES
from groundkit.contracts import valid_outline, valid_page_starts
from groundkit.extraction.base import BaseExtractor, Extraction, ExtractorProtocol
from groundkit.utils.cache_dir import UNUSABLE_CACHE, default_cache_root
from groundkit.utils.geometry import blobs_unpack, check_geometry
from groundkit.utils.hashing import sha256_bytes
from groundkit.utils.private_files import (
    oldest_first,
    open_private_folder,
    read_private,
    write_private,
    written_names,
)

__all__ = [
    "ExtractionCache",
    "cached_extraction",
    "code_fingerprint",
    "extraction_cache",
    "run_identity",
    "stored_fields",
]

logger = logging.getLogger("groundkit.extraction")

_FOLDER = "extractions"
_MAGIC = b"GKX1"
_DIGEST = 32
# What a record may unpack to: the largest text an extraction may hold (256 Mi
# characters, extraction/base.py), escaped, with room for page geometry.
_MAX_UNPACKED = 2 << 30
# One record may take this share of the folder's bound at most, so a single huge
# file cannot push every other record out.
_MAX_SHARE = 4
# The names this module writes: records and their temporary files.
_RECORD = re.compile(r"[0-9a-f]{64}\.gkx")
_OURS = re.compile(r"\.?[0-9a-f]{64}\.gkx(?:\.[0-9a-f]{8}\.tmp)?")


def run_identity(extractor: ExtractorProtocol, charset: str | None = None) -> str | None:
    """What besides the bytes an extraction by ``extractor`` depends on, or None for an
    extractor that does not say (one not built on ``BaseExtractor``), or when the code
    doing it cannot be named (``code_fingerprint``): never cached."""
    code = _running_code()
    if not isinstance(extractor, BaseExtractor) or code is None:
        return None
    return f"{extractor.run_identity}\x00charset={charset or ''}\x00code={code}"


def code_fingerprint(sources: Iterable[Path]) -> str | None:
    """A hash of the named source files (None when one cannot be read).

    A record outlives the process and the installation that wrote it, and an
    extractor's identity names the libraries, not every rule of groundkit's own that
    shapes the text (how HTML bytes are decoded, for one): an upgrade of groundkit that
    changes a rule must not be answered with text the old rule made."""
    digest = hashlib.sha256()
    try:
        for path in sorted(sources):
            data = path.read_bytes()
            digest.update(f"{path.name}\x00{len(data)}\x00".encode())
            digest.update(data)
    except OSError:
        return None
    return digest.hexdigest()[:16]


@functools.cache
def _running_code() -> str | None:
    """This process's extraction code: the Python running it (the HTML extractor parses
    with its ``html.parser`` and decodes with its codecs) and the hash of groundkit's
    extraction sources and the geometry encoder they use."""
    here = Path(__file__).parent
    found = code_fingerprint([*here.glob("*.py"), here.parent / "utils" / "geometry.py"])
    if found is None:
        return None
    return f"{sys.implementation.name}-{platform.python_version()}+{found}"


class ExtractionCache:
    """Whole extractions kept in ``root`` (default: ``default_cache_root()/extractions``,
    read at each use), at most ``max_bytes`` of records."""

    def __init__(
        self, root: Path | None = None, *, max_bytes: int = DEFAULT_EXTRACTION_CACHE_BYTES
    ) -> None:
        self._root = root
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        # The folder's size as this process last counted it, plus what it wrote since.
        self._counted: dict[str, int] = {}

    @property
    def folder(self) -> Path:
        return (default_cache_root() if self._root is None else self._root) / _FOLDER

    @staticmethod
    def key(run: str, digest: bytes) -> str:
        """The record name for bytes whose SHA-256 is ``digest`` under ``run``."""
        named = hashlib.sha256(b"groundkit-extraction\x00" + run.encode("utf-8", "surrogatepass"))
        named.update(b"\x00" + digest)
        return named.hexdigest()

    def get(self, run: str, digest: bytes) -> Extraction | None:
        """The extraction recorded for these bytes under ``run``, if a whole and
        well-formed record of exactly them is there (blocking)."""
        name = f"{self.key(run, digest)}.gkx"
        try:
            folder = open_private_folder(self.folder)
        except UNUSABLE_CACHE:
            return None
        try:
            try:
                raw = read_private(folder, name, self.max_bytes)
                found = None if raw is None else _parse(raw, run, digest)
            except MemoryError:  # the file is extracted instead, as without the cache
                raw = found = None
            if raw is None:
                return None
            if found is None:
                logger.debug("extraction record %s is not used: damaged or foreign", name)
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=folder)
                return None
            with contextlib.suppress(OSError, NotImplementedError):
                # Used now: the last to go when the folder is over its bound.
                os.utime(name, dir_fd=folder, follow_symlinks=False)
            return found
        finally:
            os.close(folder)

    def put(self, run: str, digest: bytes, extraction: Extraction) -> bool:
        """Record ``extraction`` for these bytes under ``run`` (blocking); False when it
        was not written (too large for the bound, or the folder unusable)."""
        record = _record(run, digest, extraction)
        if record is None or len(record) * _MAX_SHARE > self.max_bytes:
            return False
        name = f"{self.key(run, digest)}.gkx"
        try:
            path = self.folder
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
            folder = open_private_folder(path)
        except UNUSABLE_CACHE as exc:
            logger.debug("extraction record not written: %s", exc)
            return False
        try:
            write_private(folder, name, record)
            self._bound(folder, str(path), len(record), keep=name)
        except OSError as exc:
            logger.debug("extraction record not written: %s", exc)
            return False
        finally:
            os.close(folder)
        return True

    def _bound(self, folder: int, where: str, added: int, *, keep: str) -> None:
        """Keep the folder within ``max_bytes``: counted once per process, then kept up
        to date with what this process writes; over the bound, counted again (other
        processes write too) and the records used longest ago removed down to 80%."""
        with self._lock:
            counted = self._counted.get(where)
            if counted is not None and counted + added <= self.max_bytes:
                self._counted[where] = counted + added
                return
            aged = oldest_first(folder, written_names(folder, _OURS))
            total = sum(size for _, size in aged)
            if total > self.max_bytes:
                target = self.max_bytes * 4 // 5
                for name, size in aged:
                    if total <= target:
                        break
                    if name == keep:
                        continue
                    with contextlib.suppress(OSError):
                        os.unlink(name, dir_fd=folder)
                        total -= size
            self._counted[where] = total


def stored_fields(extraction: Extraction) -> dict[str, Any]:
    """An extraction's fields as a record stores them (JSON values); what an extractor
    returns must fit (``ExtractorConformance``)."""
    return {
        "text": extraction.text,
        "page_starts": list(extraction.page_starts),
        "title": extraction.title,
        "info": dict(extraction.info),
        "info_error": extraction.info_error,
        "headings": [list(h) for h in extraction.headings],
        "geometry": None if extraction.geometry is None else dict(extraction.geometry),
        "identity": extraction.identity,
        "unread": extraction.unread,
    }


def _record(run: str, digest: bytes, extraction: Extraction) -> bytes | None:
    body = {"run": run, "bytes_sha256": digest.hex(), **stored_fields(extraction)}
    try:
        encoded = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
        packed = zlib.compress(encoded.encode("utf-8", "surrogatepass"), 3)
    except (TypeError, ValueError, RecursionError):  # geometry that is not JSON
        return None
    except MemoryError:
        # The record is a few copies of the text at once: in a process near its memory
        # limit it is not kept, and the extraction it was made from still stands.
        return None
    return _MAGIC + hashlib.sha256(packed).digest() + packed


def _parse(raw: bytes, run: str, digest: bytes) -> Extraction | None:
    """The extraction a record holds, or None unless it is a whole, well-formed record
    of exactly these bytes under ``run``."""
    head = len(_MAGIC) + _DIGEST
    if len(raw) < head or not raw.startswith(_MAGIC):
        return None
    packed = raw[head:]
    if hashlib.sha256(packed).digest() != raw[len(_MAGIC) : head]:
        return None
    try:
        inflater = zlib.decompressobj()
        data = inflater.decompress(packed, _MAX_UNPACKED)
        if inflater.unconsumed_tail or not inflater.eof:
            return None
        body = json.loads(data.decode("utf-8", "surrogatepass"))
    except (zlib.error, ValueError, RecursionError, MemoryError):
        return None
    if (
        not isinstance(body, dict)
        or body.get("run") != run
        or body.get("bytes_sha256") != digest.hex()
    ):
        return None
    return _extraction(body)


def _extraction(body: Mapping[str, Any]) -> Extraction | None:
    text, starts, headings = body.get("text"), body.get("page_starts"), body.get("headings")
    info, geometry = body.get("info"), body.get("geometry")
    optional = [body.get(k) for k in ("title", "info_error", "identity", "unread")]
    # What the store's readers check on every row (storage/_rows.py) is checked here
    # too: a record that passed its checksum but holds values no extractor writes is a
    # miss, not stored metadata that fails every later search of the collection.
    if (
        not isinstance(text, str)
        or not valid_page_starts(starts)
        or not isinstance(info, dict)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in info.items())
        or not valid_outline(headings)
        or not (
            geometry is None or (check_geometry(geometry, len(starts)) and blobs_unpack(geometry))
        )
        or not all(v is None or isinstance(v, str) for v in optional)
    ):
        return None
    title, info_error, identity, unread = optional
    return Extraction(
        text=text,
        page_starts=tuple(starts),
        title=title,
        info=info,
        info_error=info_error,
        headings=tuple((h[0], h[1], h[2]) for h in headings),
        geometry=geometry,
        identity=identity,
        unread=unread,
    )


async def cached_extraction(
    extractor: ExtractorProtocol,
    data: bytes,
    cache: ExtractionCache | None,
    *,
    charset: str | None = None,
) -> Extraction:
    """``extractor``'s extraction of ``data``, read from ``cache`` when these bytes were
    extracted under the same run identity before; recorded there when extracted now.
    Failures are raised and never recorded."""
    run = None if cache is None else run_identity(extractor, charset)
    if cache is None or run is None:
        return await extractor.extract_bytes(data, charset=charset)
    digest = await sha256_bytes(data)
    found = await asyncio.to_thread(cache.get, run, digest)
    if found is not None:
        return found
    extraction = await extractor.extract_bytes(data, charset=charset)
    await asyncio.to_thread(cache.put, run, digest, extraction)
    return extraction


_caches: dict[int, ExtractionCache] = {}
_caches_lock = threading.Lock()


def extraction_cache(max_bytes: int) -> ExtractionCache | None:
    """The process's cache for a bound of ``max_bytes`` (None: 0, no cache); one
    object per bound, so its count of the folder is shared by every loader."""
    if max_bytes <= 0:
        return None
    with _caches_lock:
        found = _caches.get(max_bytes)
        if found is None:
            found = _caches[max_bytes] = ExtractionCache(max_bytes=max_bytes)
        return found
