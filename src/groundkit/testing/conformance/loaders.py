"""A conformance suite any ``LoaderProtocol`` implementation must pass.

Subclass it with a ``Test*`` class that provides a ``loader_factory`` fixture
returning a zero-argument callable that builds a fresh, identically configured
loader, and a ``sample_files`` fixture: ``(relative path, bytes)`` of at least one
file it accepts and loads (a path may name subfolders). Optionally override
``rejected_names`` with file names it must not accept and ``damaged_files`` with
accepted files it must fail::

    class TestMyLoader(LoaderConformance):
        @pytest.fixture
        def loader_factory(self):
            return lambda: MyLoader(...)

        @pytest.fixture
        def sample_files(self):
            return [("notes/a.xyz", b"..."), ("b.xyz", b"...")]

        @pytest.fixture
        def rejected_names(self):
            return ["image.png"]

The ingest walks a folder with ``accepts`` and stores what ``load`` gives under its
``source``; a citation is later checked by reading that source again (the file, or
the extractor the document names re-run on it). So the suite pins: ``accepts`` by
name only, without touching the disk; a ``Document`` whose source is the file's path
relative to ``base_dir``, whose id is derived from it, and whose text is exactly
what verification reads back; the same document on every load; files outside
``base_dir`` refused; and every failure (a missing file, damaged bytes, an odd relative
path) an ``IngestionError`` on one line, never another exception.
"""

from __future__ import annotations

import builtins
import io
import json
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from groundkit.contracts import (
    FIELDS_KEY,
    GEOMETRY_KEY,
    HEADINGS_KEY,
    PAGE_STARTS_KEY,
    Citation,
    Document,
)
from groundkit.errors import IngestionError, RetrievalError
from groundkit.extraction.base import Extraction
from groundkit.ingestion.fields import check_fields
from groundkit.ingestion.protocols import LoaderProtocol
from groundkit.storage.names import document_id_for
from groundkit.testing.conformance.extractors import (
    _check_geometry,
    _check_headings,
    _check_page_starts,
    _noise,
    _refuses,
    _suspends,
)
from groundkit.utils.text import describe_unencodable
from groundkit.verification.sources import read_source, resolve_citation

__all__ = ["LoaderConformance", "check_document"]

Factory = Callable[[], LoaderProtocol]
Samples = Sequence[tuple[str, bytes]]

# Classes a file's document may have: its text read as it is, or extracted from it.
_FILE_CLASSES = frozenset({"text", "extracted"})
# What reading, listing or resolving a path goes through.
_FILE_ACCESS: tuple[tuple[Any, str], ...] = (
    (os, "stat"),
    (os, "lstat"),
    (os, "open"),
    (os, "access"),
    (os, "scandir"),
    (os, "listdir"),
    (os, "readlink"),
    (builtins, "open"),
    (io, "open"),
)


@contextmanager
def _file_access() -> Iterator[list[str]]:
    """Every call this thread makes to read, list or resolve a path while the block
    runs (the calls still go through), recorded by name."""
    caller = threading.get_ident()
    touched: list[str] = []

    def recorder(original: Callable[..., Any], name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() == caller:
                touched.append(f"{name}({', '.join(map(repr, args))})")
            return original(*args, **kwargs)

        return call

    with pytest.MonkeyPatch.context() as patch:
        for module, name in _FILE_ACCESS:
            patch.setattr(module, name, recorder(getattr(module, name), name))
        yield touched


def _write(base: Path, name: str, data: bytes) -> Path:
    path = base / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _relative(name: str) -> str:
    return PurePosixPath(Path(name).as_posix()).as_posix()


def check_document(document: object, source: str) -> None:
    """What a loaded file's ``Document`` must be for ``source`` (its path relative to
    the base directory, POSIX): ``AssertionError`` naming the first rule broken."""
    assert isinstance(document, Document), f"a {type(document).__name__}, not a Document"
    assert document.source == source, (
        f"source {document.source!r} is not the path relative to base_dir, {source!r}"
    )
    # Removals and re-ingests find a document by the id its source gives.
    assert document.document_id == document_id_for(source), (
        f"document_id {document.document_id!r} is not document_id_for({source!r})"
    )
    assert document.source_class in _FILE_CLASSES, (
        f"a file's document is 'text' or 'extracted', not {document.source_class!r}"
    )
    content = document.content
    assert content.strip(), f"{source}: a loaded document has text"
    problem = describe_unencodable(content, f"{source}: its text")
    assert problem is None, problem
    notes = document.notes
    assert isinstance(notes, tuple) and all(isinstance(n, str) for n in notes), notes
    metadata = document.metadata
    try:
        json.dumps(metadata)
    except (TypeError, ValueError) as exc:
        raise AssertionError(f"{source}: metadata is not JSON: {exc}") from None
    starts = metadata.get(PAGE_STARTS_KEY, [])
    outline = metadata.get(HEADINGS_KEY, [])
    assert isinstance(starts, list) and isinstance(outline, list), (starts, outline)
    assert all(isinstance(h, list) and len(h) == 3 for h in outline), outline
    as_extraction = Extraction(
        text=content,
        page_starts=tuple(starts),
        headings=tuple((h[0], h[1], h[2]) for h in outline),
        geometry=metadata.get(GEOMETRY_KEY),
    )
    try:
        _check_page_starts(as_extraction)
        _check_headings(as_extraction)
        _check_geometry(as_extraction)
    except AssertionError as exc:
        raise AssertionError(f"{source}: {exc}") from None
    if FIELDS_KEY in metadata:
        try:
            check_fields(metadata[FIELDS_KEY], source)
        except IngestionError as exc:
            raise AssertionError(f"{source}: the ingest would refuse its fields: {exc}") from None


async def _loaded_or_refused(
    loader: LoaderProtocol, path: Path, base: Path, what: str
) -> Document | None:
    """The document ``loader`` loads from ``path``, or None when it refuses the file with
    an ``IngestionError`` (the file fails alone); any other exception fails the test."""
    try:
        return await loader.load(path, base_dir=base)
    except IngestionError:
        return None
    except Exception as exc:
        escaped = type(exc).__name__
        raise AssertionError(f"{what}: {escaped} escaped, not an IngestionError") from exc


async def _verified_text(document: Document, base: Path) -> str:
    """The source's whole text as a citation check reads it from the file now (the
    span of the whole document must resolve to the loaded text as well)."""
    citation = Citation(
        document_id=document.document_id,
        chunk_id=f"{document.document_id}#0",
        source=document.source,
        source_class=document.source_class,
        extractor=document.extractor,
        start_offset=0,
        end_offset=len(document.content),
    )
    try:
        span = await resolve_citation(citation, base)
        assert span == document.content, f"{document.source}: its whole span reads otherwise"
        return str(await read_source(citation, base))
    except RetrievalError as exc:
        raise AssertionError(f"{document.source}: its citation does not resolve: {exc}") from None


class LoaderConformance:
    """Behaviour shared by every loader."""

    @pytest.fixture
    def loader(self, loader_factory: Factory) -> LoaderProtocol:
        """One instance from the implementer's factory."""
        return loader_factory()

    @pytest.fixture
    def rejected_names(self) -> Sequence[str]:
        """File names the loader must not accept; override with some."""
        return ()

    @pytest.fixture
    def damaged_files(self) -> Samples:
        """``(relative path, bytes)`` the loader accepts by name and must fail to load;
        override with some."""
        return ()

    def test_satisfies_the_protocol(self, loader: LoaderProtocol, sample_files: Samples) -> None:
        assert isinstance(loader, LoaderProtocol)
        assert sample_files, "sample_files must hold at least one file"
        for name, data in sample_files:
            assert isinstance(name, str) and name and isinstance(data, bytes), name
            assert not Path(name).is_absolute() and ".." not in Path(name).parts, name

    def test_accepts_its_files_by_name(
        self,
        loader: LoaderProtocol,
        loader_factory: Factory,
        sample_files: Samples,
        rejected_names: Sequence[str],
        tmp_path: Path,
    ) -> None:
        """The walk asks ``accepts`` of every entry: its answer must depend on the name
        alone, the same for a path that does not exist, on every call and instance."""
        fresh = loader_factory()
        for root in (tmp_path / "absent", Path("relative")):
            for name, _ in sample_files:
                path = root / name
                assert loader.accepts(path) is True, f"{path} is a sample yet not accepted"
                assert loader.accepts(path) is True and fresh.accepts(path) is True, path
            for name in rejected_names:
                path = root / name
                assert loader.accepts(path) is False, f"{path} is accepted"
                assert fresh.accepts(path) is False, path

    def test_accepts_touches_no_file(
        self,
        loader: LoaderProtocol,
        sample_files: Samples,
        rejected_names: Sequence[str],
        tmp_path: Path,
    ) -> None:
        """By name only: no stat, no open, no resolving of links, for the files that
        exist as for those that do not."""
        base = tmp_path / "base"
        for name, data in sample_files:
            _write(base, name, data)
        names = [name for name, _ in sample_files] + list(rejected_names)
        expected = [loader.accepts(tmp_path / "absent" / name) for name in names]
        with _file_access() as touched:
            got = [loader.accepts(base / name) for name in names]
            again = [loader.accepts(tmp_path / "absent" / name) for name in names]
        assert not touched, f"accepts() touched the disk: {touched[:5]}"
        assert got == expected == again, (
            f"accepts() answers by more than the name: {got} for existing files, "
            f"{expected} and {again} for the same names where nothing exists"
        )

    async def test_load_gives_a_document_sourced_relative_to_base_dir(
        self, loader: LoaderProtocol, sample_files: Samples, tmp_path: Path
    ) -> None:
        base = tmp_path / "base"
        for name, data in sample_files:
            path = _write(base, name, data)
            document = await loader.load(path, base_dir=base)
            check_document(document, _relative(name))

    async def test_same_file_same_document(
        self,
        loader: LoaderProtocol,
        loader_factory: Factory,
        sample_files: Samples,
        tmp_path: Path,
    ) -> None:
        """An unchanged file must load as the same document, or every re-ingest would
        replace it (and its citations' versions)."""
        base = tmp_path / "base"
        fresh = loader_factory()
        for name, data in sample_files:
            path = _write(base, name, data)
            first = (await loader.load(path, base_dir=base)).model_dump()
            again = (await loader.load(path, base_dir=base)).model_dump()
            assert again == first, f"{name}: loads differently the second time"
            again = (await fresh.load(path, base_dir=base)).model_dump()
            assert again == first, f"{name}: a new instance loads it differently"
            # The same bytes under a base directory elsewhere: the same document.
            other = tmp_path / "elsewhere"
            moved = _write(other, name, data)
            again = (await loader.load(moved, base_dir=other)).model_dump()
            assert again == first, f"{name}: loads differently under another base_dir"

    async def test_the_text_is_what_verification_reads(
        self, loader: LoaderProtocol, sample_files: Samples, tmp_path: Path
    ) -> None:
        """A citation's offsets are checked against the source read again (the file's
        UTF-8, or the named extractor re-run): that must be the loaded text exactly."""
        base = tmp_path / "base"
        for name, data in sample_files:
            path = _write(base, name, data)
            document = await loader.load(path, base_dir=base)
            assert await _verified_text(document, base) == document.content, (
                f"{name}: the text verification reads differs from the loaded text"
            )

    async def test_a_file_outside_base_dir_is_refused(
        self, loader: LoaderProtocol, sample_files: Samples, tmp_path: Path
    ) -> None:
        """Containment: a path that leaves ``base_dir`` (by ``..``, absolutely or by a
        link) is refused, whatever it holds."""
        base = tmp_path / "base"
        base.mkdir()
        name, data = sample_files[0]
        outside = _write(tmp_path / "outside", name, data)
        candidates = [outside, base / ".." / "outside" / name]
        link = base / Path(name).name
        try:
            link.symlink_to(outside)
        except (OSError, NotImplementedError):
            pass
        else:
            candidates.append(link)
        for path in candidates:
            await _refuses(loader.load(path, base_dir=base), f"loading {path} from {base}")

    async def test_an_unreadable_path_is_an_ingestion_error(
        self, loader: LoaderProtocol, sample_files: Samples, tmp_path: Path
    ) -> None:
        """A file gone since the walk, or a directory under an accepted name."""
        base = tmp_path / "base"
        name, _ = sample_files[0]
        directory = base / "folder" / name
        directory.mkdir(parents=True)
        for path, what in ((base / "gone" / name, "a missing file"), (directory, "a directory")):
            await _refuses(loader.load(path, base_dir=base), f"loading {what}")

    async def test_a_relative_path_loads_its_file_or_fails_typed(
        self, loader: LoaderProtocol, sample_files: Samples, tmp_path: Path
    ) -> None:
        """A relative ``path`` (from the working directory, or from ``base_dir``): the
        document of the file it names there, or an ``IngestionError``; never another
        exception, never a document read from one file and named after another."""
        base = tmp_path / "base"
        name, data = sample_files[0]
        _write(base, name, data)
        with pytest.MonkeyPatch.context() as patch:
            patch.chdir(tmp_path)
            for path in (Path("base") / name, Path(name)):
                document = await _loaded_or_refused(
                    loader, path, base, f"loading the relative path {path}"
                )
                if document is not None:
                    check_document(document, _relative(name))

    async def test_damaged_files_are_ingestion_errors(
        self, loader: LoaderProtocol, damaged_files: Samples, tmp_path: Path
    ) -> None:
        if not damaged_files:
            pytest.skip("no damaged_files given")
        base = tmp_path / "base"
        for name, data in damaged_files:
            path = _write(base, name, data)
            assert loader.accepts(path), f"{name} is not accepted, so it is no damaged file"
            refused = await _refuses(loader.load(path, base_dir=base), name)
            # The reason goes into a one-line failure report.
            assert "Traceback" not in str(refused) and "\n" not in str(refused), str(refused)

    async def test_mangled_files_fail_typed_or_load_well(
        self, loader: LoaderProtocol, sample_files: Samples, tmp_path: Path
    ) -> None:
        """Empty, cut short or noise under an accepted name: an ``IngestionError`` (the
        file fails alone) or a well-formed document; never another exception."""
        base = tmp_path / "base"
        for index, (name, data) in enumerate(sample_files):
            size = len(data)
            variants = {
                "empty": b"",
                "its first half": data[: size // 2],
                "its first 64 bytes": data[:64],
                "noise": _noise(2048),
            }
            for how, variant in variants.items():
                relative = f"mangled{index}/{how.replace(' ', '-')}/{name}"
                path = _write(base, relative, variant)
                document = await _loaded_or_refused(loader, path, base, f"{name}, {how}")
                if document is not None:
                    check_document(document, _relative(relative))

    async def test_loading_leaves_the_event_loop_free(
        self, loader: LoaderProtocol, sample_files: Samples, tmp_path: Path
    ) -> None:
        """Reading and extracting are blocking work: checked by whether the call ever
        yields, not by timing."""
        base = tmp_path / "base"
        name, data = max(sample_files, key=lambda item: len(item[1]))
        path = _write(base, name, data)
        assert await _suspends(loader.load(path, base_dir=base)), (
            f"{name}: load ran to the end without yielding the event loop"
        )
