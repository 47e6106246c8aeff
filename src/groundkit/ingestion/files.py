"""UTF-8 text files: discovery under a root and loading one file."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from groundkit.config import IngestConfig
from groundkit.contracts import FIELDS_KEY, HEADINGS_KEY, Document
from groundkit.errors import IngestionError
from groundkit.extraction.sources import read_utf8
from groundkit.ingestion.fields import read_front_matter
from groundkit.ingestion.outline import (
    Heading,
    bounded_outline,
    iter_markdown_headings,
    rst_headings,
)
from groundkit.storage.names import document_id_for
from groundkit.utils.file_reads import file_kind
from groundkit.utils.path_safety import (
    PathEscapeError,
    ensure_within,
    is_within,
    printable_path,
    to_relative,
    utf8_encodable,
)

__all__ = [
    "FRONT_MATTER_EXTENSIONS",
    "Discovery",
    "FileLoader",
    "contained_source",
    "discover_files",
    "unportable_name",
]


def unportable_name(source: str) -> IngestionError | None:
    """The failure for a source whose name is not valid UTF-8, or None when it is.

    Such a name cannot be stored, hashed into an id, put in JSON or carried by a
    citation, so the file fails on its own; the message shows the name with its
    undecodable bytes escaped (adr/0027-hostile-filesystem-entries.md).
    """
    if utf8_encodable(source):
        return None
    return IngestionError(
        f"{printable_path(source)}: the file name is not valid UTF-8 (undecodable bytes "
        "shown as \\x escapes); rename the file to ingest it"
    )


def contained_source(path: Path, base_dir: Path) -> tuple[Path, str]:
    """The real path to read and the source to record; refuses a path leaving ``base_dir``
    and a name that is not valid UTF-8. A relative ``path`` is relative to ``base_dir``,
    for the name as for the read (a citation's source is read back from there)."""
    try:
        real = ensure_within(path, base_dir)
    except PathEscapeError as exc:
        raise IngestionError(f"refused: {printable_path(str(exc))}") from None
    source = to_relative(path if path.is_absolute() else base_dir / path, base_dir)
    failure = unportable_name(source)
    if failure is not None:
        raise failure
    return real, source


@dataclass(frozen=True)
class Discovery:
    """Files found under a root, in deterministic order, plus what was passed over, and
    the folders beneath it that could not be listed (each with why), in path order."""

    files: tuple[Path, ...]
    skipped: int
    unlisted: tuple[tuple[Path, str], ...] = ()


def discover_files(root: Path, accepts: Callable[[Path], bool] | tuple[str, ...]) -> Discovery:
    """Walk ``root`` (or take it as one file), sorted by relative path.

    ``accepts`` is a loader's ``accepts`` or a tuple of extensions. Hidden
    entries are ignored; symlinked directories are not followed; symlinked
    files resolving outside ``root`` and files not accepted count as skipped.
    An accepted name is listed whatever the entry is: a FIFO or device under an
    accepted name is refused by the loader's read (a failure line), never opened.
    """
    if isinstance(accepts, tuple):
        extensions = accepts
        accepts = lambda p: p.suffix.lower() in extensions  # noqa: E731
    root = Path(os.path.realpath(root))
    if root.is_file():
        return Discovery((root,), 0) if accepts(root) else Discovery((), 1)
    if not root.is_dir():
        try:
            kind = f"a {file_kind(root.stat().st_mode)}, "
        except OSError:
            kind = ""
        raise IngestionError(f"{str(root)!r} is {kind}neither a file nor a directory")
    found: list[Path] = []
    skipped = 0
    unlisted: list[tuple[Path, str]] = []

    def on_error(exc: OSError) -> None:
        # A folder beneath the root that cannot be listed (no permission, removed while
        # walked) is passed over and named: the rest of the folder is still ingested.
        where = Path(exc.filename) if exc.filename is not None else None
        if where is None or where == root or not is_within(where, root):
            raise IngestionError(f"cannot scan {exc.filename!r}: {exc.strerror}") from exc
        unlisted.append((where, exc.strerror or str(exc)))

    for dirpath, dirnames, filenames in os.walk(root, onerror=on_error, followlinks=False):
        here = Path(dirpath)
        keep: list[str] = []
        for name in sorted(dirnames):
            sub = here / name
            if name.startswith("."):
                continue
            if sub.is_symlink():
                # Never followed: a link inside would index files twice, one outside escapes.
                skipped += 1
                continue
            keep.append(name)
        dirnames[:] = keep
        for name in filenames:
            path = here / name
            if name.startswith("."):
                continue
            if path.is_symlink() and not is_within(path, root):
                skipped += 1
                continue
            if not accepts(path):
                skipped += 1
                continue
            found.append(path)
    found.sort(key=lambda p: p.relative_to(root).as_posix())
    unlisted.sort(key=lambda item: item[0].relative_to(root).as_posix())
    return Discovery(tuple(found), skipped, tuple(unlisted))


def _about_front_matter(message: str) -> str:
    """A front matter note or failure, saying once that it is about the front matter
    (a note on a field starts ``line N:``; one on the whole block names it already)."""
    return message if message.startswith("front matter") else f"front matter {message}"


# Where a leading '---' block is front matter rather than text that happens to start so.
FRONT_MATTER_EXTENSIONS = frozenset({".md", ".markdown"})
# Files whose headings make the document's outline (``HEADINGS_KEY``), and how to read them.
_OUTLINES: dict[str, Callable[[str], Iterable[Heading]]] = {
    ".md": iter_markdown_headings,
    ".markdown": iter_markdown_headings,
    ".rst": rst_headings,
}


def _outline(
    headings_of: Callable[[str], Iterable[Heading]], text: str
) -> tuple[list[list[int | str]], str | None]:
    return bounded_outline(headings_of(text))


class FileLoader:
    """Loads UTF-8 text files (``.txt``, ``.md``, ``.markdown``, ``.rst`` by default).

    A Markdown file's front matter becomes the document's fields and stays in
    its text, so offsets still count from the top of the file. Markdown and
    reStructuredText headings become the document's outline (``HEADINGS_KEY``).
    """

    def __init__(self, config: IngestConfig | None = None) -> None:
        self.config = config or IngestConfig()

    def accepts(self, path: Path) -> bool:
        return path.suffix.lower() in self.config.extensions

    async def load(self, path: Path, *, base_dir: Path) -> Document:
        real, source = contained_source(path, base_dir)
        try:
            text = await asyncio.to_thread(
                read_utf8, real, self.config.max_file_bytes, follow_symlinks=False
            )
        except IngestionError as exc:  # not a regular file, or over the cap
            raise IngestionError(f"{source}: {exc}") from None
        except UnicodeDecodeError as exc:
            raise IngestionError(
                f"{source}: not valid UTF-8 (byte {exc.start}); convert it or exclude it"
            ) from None
        except OSError as exc:
            raise IngestionError(f"{source}: cannot read ({exc.strerror or exc})") from None
        # A byte order mark stays in the text (offsets count it) but is no text to index.
        if not text.removeprefix("\ufeff").strip():
            raise IngestionError(f"{source}: empty (no text to index)")
        metadata: dict[str, object] = {}
        notes: tuple[str, ...] = ()
        suffix = path.suffix.lower()
        headings_of = _OUTLINES.get(suffix)
        cut: str | None = None
        if headings_of is not None:
            outline, cut = await asyncio.to_thread(_outline, headings_of, text)
            if outline:
                metadata[HEADINGS_KEY] = outline
        if self.config.read_fields and suffix in FRONT_MATTER_EXTENSIONS:
            try:
                front = read_front_matter(text)
            except IngestionError as exc:  # only a sensitivity label it cannot read
                raise IngestionError(f"{source}: {_about_front_matter(str(exc))}") from None
            if front.fields:
                metadata[FIELDS_KEY] = front.fields
            notes = tuple(_about_front_matter(note) for note in front.notes)
        if cut is not None:
            notes = (*notes, cut)
        return Document(
            document_id=document_id_for(source),
            source=source,
            content=text,
            source_class="text",
            metadata=metadata,
            notes=notes,
        )
