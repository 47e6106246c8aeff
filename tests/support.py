"""Helpers shared by the test modules (fixtures live in conftest.py)."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from groundkit import ChunkingConfig, Citation, RetrievalResult, check_citation
from groundkit.lexical import Analyzer
from groundkit.testing.conformance.helpers import make_document as make_document

# Small chunks so every document yields several spans with non-trivial offsets.
SMALL_CHUNKS = ChunkingConfig(max_chars=80, overlap_chars=20)

CORPUS: dict[str, str] = {
    "energy/solar.md": (
        "# Solar power\n\n"
        "Solar panels convert sunlight into electricity. Photovoltaic cells are made of "
        "silicon wafers.\n\n"
        "Panel efficiency drops when the cells get hot. Cleaning dust off the panels "
        "restores their output.\n"
    ),
    "energy/wind.txt": (
        "Wind turbines turn the kinetic energy of moving air into electricity.\n\n"
        "Offshore wind farms see stronger and steadier winds than onshore sites do.\n"
    ),
    "kitchen/tea.rst": (
        "Green tea is steeped at about eighty degrees. Boiling water makes green tea "
        "bitter.\n\nBlack tea tolerates boiling water and a longer steep.\n"
    ),
    "kitchen/bread.txt": (
        "Sourdough bread rises slowly because wild yeast ferments the dough overnight. "
        "A hot oven and steam give the loaf its crust.\n"
    ),
    "notes/东京.txt": (
        "東京は日本の首都です。人口はとても多い。\n\n富士山は日本で一番高い山です。\n"
    ),
    "notes/launch.md": (
        "Rocket launch 🚀 at dawn over the ocean. The crowd cheered 🎉 loudly.\r\n\r\n"
        "Carriage returns stay in the text, so offsets still line up after the launch.\r\n"
    ),
}

QUERIES = ("solar panels electricity", "boiling water tea", "rocket launch", "東京", "wind farms")


@contextlib.contextmanager
def fifo_at(path: Path) -> Iterator[Path]:
    """Replace ``path`` with a FIFO for the block; afterwards, any reader a regression
    left blocked on it is let go (a writer opens and closes it), so a failing test
    cannot leave a worker thread, and the test run, hanging."""
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    try:
        yield path
    finally:
        release_readers(path)


def release_readers(path: Path) -> None:
    """Open ``path`` (a FIFO) for writing and close it until no reader waits on it."""
    for _ in range(1000):
        try:
            if not stat.S_ISFIFO(os.stat(path).st_mode):
                return  # gone, or a regular file again
        except FileNotFoundError:
            return
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:  # ENXIO: nobody has it open for reading
            if exc.errno in (errno.ENXIO, errno.ENOENT):
                return
            raise
        os.close(fd)


def write_tree(root: Path, files: Mapping[str, str | bytes]) -> None:
    """Write ``files`` (relative path -> text or raw bytes) under ``root``."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        data = content.encode("utf-8") if isinstance(content, str) else content
        path.write_bytes(data)


def whole_file_citation(source: str, text: str) -> Citation:
    """A citation of all of ``text``, the text file at ``source`` (a hand-made one, as a
    receipt or a caller may hold)."""
    return Citation(
        document_id="d",
        chunk_id="c",
        source=source,
        source_class="text",
        extractor=None,
        start_offset=0,
        end_offset=len(text),
    )


async def assert_all_verify(results: Iterable[RetrievalResult], base_dir: Path) -> int:
    """Every result's citation must read back as its content; returns how many were checked."""
    count = 0
    for result in results:
        assert result.content, result
        assert (await check_citation(result.citation, result.content, base_dir)).ok, result.citation
        count += 1
    return count


def assert_highlighted(results: Iterable[RetrievalResult], query: str, base_dir: Path) -> None:
    """Each result's highlights mark query terms of its content, and the same text in its file.

    Results of a BM25 search matched at least one term, so each has a highlight.
    """
    analyzer = Analyzer()
    wanted = set(analyzer.terms(query))
    for result in results:
        assert result.highlights is not None and len(result.highlights) > 0, result.chunk_id
        text = (base_dir / result.source).read_bytes().decode("utf-8")  # CRLF kept
        pairs = zip(result.highlights, result.source_highlights, strict=True)
        for (a, b), (source_a, source_b) in pairs:
            assert set(analyzer.terms(result.content[a:b])) & wanted, result.content[a:b]
            assert text[source_a:source_b] == result.content[a:b]


class ToyEmbedder:
    """Deterministic bag-of-words hashing embedder: fast unit tests only, not semantics."""

    provider = "toy"

    def __init__(self, dimensions: int = 64, model_name: str = "hash-64") -> None:
        self.dimensions = dimensions
        self.model_name = model_name
        self.calls = 0

    def _vector(self, text: str) -> list[float]:
        from groundkit.errors import InvalidInputError

        # Refused as the built-in embedders refuse it (EmbedderConformance).
        if not isinstance(text, str):
            raise InvalidInputError(f"toy embedder: a text is a str, not {type(text).__name__}")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidInputError("toy embedder: a text UTF-8 cannot encode") from None
        return self._hashed(text)

    def _hashed(self, text: str) -> list[float]:
        import hashlib

        out = [0.0] * self.dimensions
        for word in text.lower().split():
            digest = hashlib.sha256(word.encode("utf-8")).digest()
            out[int.from_bytes(digest[:4], "little") % self.dimensions] += 1.0
        out[0] += 0.5  # never a zero vector
        norm = sum(v * v for v in out) ** 0.5
        return [v / norm for v in out]

    async def embed_documents(self, texts: Sequence[str]) -> Any:
        import numpy as np

        from groundkit.errors import InvalidInputError

        if isinstance(texts, str):
            raise InvalidInputError("toy embedder: a list of texts, not one str")
        self.calls += 1
        return np.asarray([self._vector(t) for t in texts], dtype=np.float32).reshape(
            len(texts), self.dimensions
        )

    async def embed_query(self, text: str) -> Any:
        import numpy as np

        return np.asarray(self._vector(text), dtype=np.float32)


_SLOW_INGEST = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from groundkit import Collection, ChunkingConfig
    from tests.support import ToyEmbedder

    delay, write_batch = float(sys.argv[3]), int(sys.argv[4])

    class Slow(ToyEmbedder):
        async def embed_documents(self, texts):
            await asyncio.sleep(delay)
            return await super().embed_documents(texts)

    async def main():
        index, base = Path(sys.argv[1]), Path(sys.argv[2])
        col = await Collection.open(index, base_dir=base, embedder=Slow(),
                                    chunking=ChunkingConfig(max_chars=80, overlap_chars=20))
        col._indexer._embed_batch = 8
        if write_batch:
            col._indexer._write_batch = write_batch
        print("ready", flush=True)
        report = await col.ingest(base)
        await col.close()
        print("done", len(report.added), len(report.updated), flush=True)

    asyncio.run(main())
    """
)


def slow_dense_ingest(
    index: Path, base: Path, kill_after: float | None, *, delay: float, write_batch: int = 0
) -> bool:
    """Ingest ``base`` with a slow toy embedder (``delay`` s per batch of 8 chunks) in a
    child process; SIGKILL it ``kill_after`` seconds after it starts, unless None. True
    if it finished. ``write_batch`` (0: the default) sets how many documents a write holds."""
    repo = Path(__file__).resolve().parents[1]
    argv = [sys.executable, "-c", _SLOW_INGEST, str(index), str(base), str(delay), str(write_batch)]
    proc = subprocess.Popen(
        argv,
        cwd=repo,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(repo)},
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    if kill_after is None:
        assert proc.wait(timeout=120) == 0
        return True
    time.sleep(kill_after)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    return proc.returncode == 0
