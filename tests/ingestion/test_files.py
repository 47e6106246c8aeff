"""Discovery under a root, loading one file, and the containment checks behind both."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from groundkit import IngestConfig, IngestionError
from groundkit.config import DEFAULT_EXTENSIONS
from groundkit.extraction.sources import read_utf8
from groundkit.ingestion import FileLoader, LoaderProtocol
from groundkit.ingestion.files import discover_files
from groundkit.storage.names import document_id_for
from groundkit.utils.path_safety import PathEscapeError, ensure_within, is_within, to_relative
from tests.support import write_tree

EXTS = IngestConfig().extensions


def _rel(paths: tuple[Path, ...], root: Path) -> list[str]:
    real = Path(os.path.realpath(root))
    return [p.relative_to(real).as_posix() for p in paths]


class TestDiscovery:
    def test_recursive_sorted_by_relative_path(self, tmp_path: Path) -> None:
        root = tmp_path / "root"
        # Written in scrambled order; discovery order must not depend on it.
        write_tree(
            root,
            {
                "z.txt": "z",
                "b/c/d.md": "d",
                "a.txt": "a",
                "a/b.rst": "b",
                "B.TXT": "B",
                "b/a.md": "a",
            },
        )
        found = discover_files(root, EXTS)
        assert _rel(found.files, root) == [
            "B.TXT",
            "a.txt",
            "a/b.rst",
            "b/a.md",
            "b/c/d.md",
            "z.txt",
        ]
        assert found.skipped == 0
        assert discover_files(root, EXTS) == found

    def test_hidden_entries_skipped(self, tmp_path: Path) -> None:
        root = tmp_path / "root"
        write_tree(
            root,
            {".secret.txt": "x", ".git/config.txt": "x", "ok/.hidden/deep.md": "x", "ok/v.md": "v"},
        )
        assert _rel(discover_files(root, EXTS).files, root) == ["ok/v.md"]

    def test_unknown_extensions_counted(self, tmp_path: Path) -> None:
        root = tmp_path / "root"
        write_tree(
            root, {"a.txt": "a", "b.pdf": b"%PDF", "c.py": "x", "sub/d.csv": "1,2", "e": "e"}
        )
        found = discover_files(root, EXTS)
        assert _rel(found.files, root) == ["a.txt"]
        assert found.skipped == 4

    def test_custom_extensions(self, tmp_path: Path) -> None:
        root = tmp_path / "root"
        write_tree(root, {"a.txt": "a", "b.CSV": "1"})
        found = discover_files(root, IngestConfig(extensions=("csv",)).extensions)
        assert _rel(found.files, root) == ["b.CSV"]
        assert found.skipped == 1

    def test_symlink_out_of_root_skipped(self, tmp_path: Path) -> None:
        root = tmp_path / "root"
        outside = tmp_path / "outside"
        write_tree(root, {"in.txt": "in"})
        write_tree(outside, {"secret.txt": "secret", "dir/more.txt": "more"})
        (root / "leak.txt").symlink_to(outside / "secret.txt")
        (root / "leakdir").symlink_to(outside / "dir", target_is_directory=True)
        found = discover_files(root, EXTS)
        assert _rel(found.files, root) == ["in.txt"]
        assert found.skipped >= 1

    def test_symlink_inside_root_kept(self, tmp_path: Path) -> None:
        root = tmp_path / "root"
        write_tree(root, {"real.txt": "r"})
        (root / "alias.txt").symlink_to(root / "real.txt")
        found = discover_files(root, EXTS)
        assert [p.name for p in found.files] == ["alias.txt", "real.txt"]

    def test_single_file_root(self, tmp_path: Path) -> None:
        write_tree(tmp_path, {"one.md": "x", "two.bin": "x"})
        assert discover_files(tmp_path / "one.md", EXTS).files == (
            Path(os.path.realpath(tmp_path / "one.md")),
        )
        assert discover_files(tmp_path / "two.bin", EXTS).skipped == 1

    def test_missing_root(self, tmp_path: Path) -> None:
        with pytest.raises(IngestionError):
            discover_files(tmp_path / "nope", EXTS)


class TestPathSafety:
    def test_relative_inside(self, tmp_path: Path) -> None:
        write_tree(tmp_path, {"a/b.txt": "x"})
        assert ensure_within("a/b.txt", tmp_path) == Path(os.path.realpath(tmp_path / "a/b.txt"))

    @pytest.mark.parametrize("path", ["../x.txt", "a/../../x.txt", "/etc/passwd", "", "a\x00b"])
    def test_escapes_refused(self, tmp_path: Path, path: str) -> None:
        base = tmp_path / "base"
        base.mkdir()
        with pytest.raises(PathEscapeError):
            ensure_within(path, base)

    def test_absolute_inside_allowed(self, tmp_path: Path) -> None:
        write_tree(tmp_path, {"x.txt": "x"})
        assert ensure_within(tmp_path / "x.txt", tmp_path).name == "x.txt"

    def test_symlink_escape_refused(self, tmp_path: Path) -> None:
        base, outside = tmp_path / "base", tmp_path / "outside"
        write_tree(outside, {"s.txt": "s"})
        base.mkdir()
        (base / "link.txt").symlink_to(outside / "s.txt")
        assert not is_within(base / "link.txt", base)
        with pytest.raises(PathEscapeError):
            ensure_within("link.txt", base)

    def test_sibling_prefix_is_not_inside(self, tmp_path: Path) -> None:
        (tmp_path / "base").mkdir()
        (tmp_path / "base2").mkdir()
        assert not is_within(tmp_path / "base2", tmp_path / "base")
        assert is_within(tmp_path / "base", tmp_path / "base")

    def test_to_relative(self, tmp_path: Path) -> None:
        write_tree(tmp_path, {"d/real.txt": "r"})
        (tmp_path / "d" / "alias.txt").symlink_to(tmp_path / "d" / "real.txt")
        assert to_relative(tmp_path / "d" / "real.txt", tmp_path) == "d/real.txt"
        assert to_relative(tmp_path / "d" / "alias.txt", tmp_path) == "d/alias.txt"
        assert to_relative(tmp_path, tmp_path) == "."


class TestReadUtf8:
    def test_bytes_preserved(self, tmp_path: Path) -> None:
        write_tree(tmp_path, {"f.txt": "a\r\nb\rc\n😀"})
        assert read_utf8(tmp_path / "f.txt") == "a\r\nb\rc\n😀"

    def test_size_cap(self, tmp_path: Path) -> None:
        write_tree(tmp_path, {"f.txt": "12345"})
        assert read_utf8(tmp_path / "f.txt", 5) == "12345"
        with pytest.raises(IngestionError, match="exceeds"):
            read_utf8(tmp_path / "f.txt", 4)


class TestFileLoader:
    def test_is_a_loader(self) -> None:
        assert isinstance(FileLoader(), LoaderProtocol)

    def test_accepts_by_extension(self) -> None:
        loader = FileLoader()
        assert all(loader.accepts(Path(f"x{ext.upper()}")) for ext in DEFAULT_EXTENSIONS)
        assert not loader.accepts(Path("x.pdf"))

    async def test_load(self, tmp_path: Path) -> None:
        write_tree(tmp_path, {"sub/é.md": "# Title\r\n\r\nBody 😀\n"})
        doc = await FileLoader().load(tmp_path / "sub" / "é.md", base_dir=tmp_path)
        assert doc.source == "sub/é.md"
        assert doc.content == "# Title\r\n\r\nBody 😀\n"
        assert doc.source_class == "text"
        assert doc.extractor is None
        assert doc.document_id == document_id_for("sub/é.md")

    async def test_ids_keyed_by_source(self, tmp_path: Path) -> None:
        write_tree(tmp_path, {"a.txt": "same", "b.txt": "same"})
        a = await FileLoader().load(tmp_path / "a.txt", base_dir=tmp_path)
        b = await FileLoader().load(tmp_path / "b.txt", base_dir=tmp_path)
        assert a.document_id != b.document_id
        assert a.document_id == document_id_for("a.txt")

    async def test_refuses_outside_base(self, tmp_path: Path) -> None:
        base = tmp_path / "base"
        write_tree(tmp_path, {"outside.txt": "nope", "base/in.txt": "in"})
        with pytest.raises(IngestionError, match="refused"):
            await FileLoader().load(tmp_path / "outside.txt", base_dir=base)
        (base / "link.txt").symlink_to(tmp_path / "outside.txt")
        with pytest.raises(IngestionError, match="refused"):
            await FileLoader().load(base / "link.txt", base_dir=base)

    @pytest.mark.parametrize(
        ("content", "reason"),
        [
            (b"\xff\xfeab", "UTF-8"),
            (b"", "empty"),
            (b" \n\t\n", "empty"),
            (b"\xef\xbb\xbf", "empty"),  # a byte order mark alone is no text either
            (b"\xef\xbb\xbf \n\n", "empty"),
            (b"x" * 65, "exceeds"),
        ],
    )
    async def test_bad_files(self, tmp_path: Path, content: bytes, reason: str) -> None:
        write_tree(tmp_path, {"bad.txt": content})
        loader = FileLoader(IngestConfig(max_file_bytes=64))
        with pytest.raises(IngestionError, match=reason):
            await loader.load(tmp_path / "bad.txt", base_dir=tmp_path)

    async def test_missing_file(self, tmp_path: Path) -> None:
        with pytest.raises(IngestionError):
            await FileLoader().load(tmp_path / "gone.txt", base_dir=tmp_path)
