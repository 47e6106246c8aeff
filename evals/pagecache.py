"""Dropping files from the page cache, and checking that it happened, for cold-open timings.

``evict`` asks the kernel to forget the cached pages of some files
(``posix_fadvise(..., POSIX_FADV_DONTNEED)``): no root needed, only our own files
are touched, nothing else on the machine loses its cache. Dirty pages cannot be
dropped, so each file is synced first. Pages some process still has mapped stay.

``resident_share`` says how much of some files is in the page cache right now
(``mincore(2)`` over a private mapping that is never touched), and ``probe``
writes a large scratch file and times reading it warm and again after ``evict``:
the evidence a report prints before it calls any number "cold".

    python -m evals.pagecache [--dir evals/out] [--mb 256]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import mmap
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["EvictionProbe", "evict", "probe", "resident_pages", "resident_share", "warm"]

_PAGE = mmap.PAGESIZE
_READ_STEP = 1 << 24


def evict(paths: Iterable[Path]) -> int:
    """Drop the cached pages of every existing file in ``paths``; how many were dropped.

    Files that do not exist are skipped (a WAL that is not there, say)."""
    done = 0
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except (FileNotFoundError, IsADirectoryError):
            continue
        try:
            with contextlib.suppress(OSError):
                os.fsync(fd)  # dirty pages would stay in the cache
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            done += 1
        finally:
            os.close(fd)
    return done


def _libc_mincore() -> Callable[..., int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        func = libc.mincore
    except (OSError, AttributeError):
        return None
    func.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
    func.restype = ctypes.c_int
    mincore: Callable[..., int] = func
    return mincore


def resident_pages(path: Path) -> tuple[int, int] | None:
    """``(pages in the page cache, pages)`` of ``path``; None if it cannot be told.

    The file is mapped privately and never read through the mapping, so asking
    does not bring any page in."""
    mincore = _libc_mincore()
    size = path.stat().st_size
    if mincore is None:
        return None
    if size == 0:
        return 0, 0
    pages = -(-size // _PAGE)
    with open(path, "rb") as handle:
        view = mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_COPY)
    try:
        window = (ctypes.c_char * size).from_buffer(view)
        try:
            flags = (ctypes.c_ubyte * pages)()
            if mincore(ctypes.addressof(window), size, flags) != 0:
                return None
        finally:
            del window
    finally:
        view.close()
    # Only the lowest bit of each byte means something (resident); the rest are zero.
    return pages - bytes(flags).count(0), pages


def resident_share(paths: Iterable[Path]) -> float | None:
    """Share (0-1) of the pages of the existing ``paths`` that are in the page cache;
    None if it cannot be told (no ``mincore``)."""
    resident = total = 0
    for path in paths:
        if not path.is_file():
            continue
        counted = resident_pages(path)
        if counted is None:
            return None
        resident += counted[0]
        total += counted[1]
    return resident / total if total else 0.0


def warm(paths: Iterable[Path]) -> None:
    """Read every existing file of ``paths`` once, so the page cache holds it."""
    for path in paths:
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            _read_all(path)


def _read_all(path: Path) -> float:
    started = time.perf_counter()
    with open(path, "rb", buffering=0) as handle:
        while handle.read(_READ_STEP):
            pass
    return time.perf_counter() - started


@dataclass(frozen=True)
class EvictionProbe:
    """A warm and a cold read of one scratch file, and what ``mincore`` said in between."""

    mb: int
    warm_s: float
    cold_s: float
    resident_before: float | None
    resident_after: float | None

    @property
    def slowdown(self) -> float:
        return self.cold_s / self.warm_s if self.warm_s > 0 else float("nan")

    @property
    def confirmed(self) -> bool:
        """Eviction worked: ``mincore`` saw the pages go (or, where it cannot be asked,
        the second read was at least twice as slow)."""
        if self.resident_before is not None and self.resident_after is not None:
            return self.resident_before > 0.9 and self.resident_after < 0.01
        return self.slowdown >= 2.0

    def describe(self) -> str:
        def share(value: float | None) -> str:
            return "n/a" if value is None else f"{value:.0%}"

        outcome = "confirmed" if self.confirmed else "NOT confirmed"
        return (
            f"page-cache eviction {outcome}: a {self.mb} MB scratch file read in "
            f"{self.warm_s * 1000:.0f} ms warm and {self.cold_s * 1000:.0f} ms after "
            f"`posix_fadvise(DONTNEED)` ({self.slowdown:.1f}× slower); resident pages "
            f"(mincore) {share(self.resident_before)} before, {share(self.resident_after)} after"
        )


def probe(directory: Path, mb: int = 256) -> EvictionProbe:
    """Write ``mb`` MB under ``directory``, read it warm, evict it, read it cold."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f".pagecache-probe-{os.getpid()}"
    block = os.urandom(1 << 20)
    try:
        with open(path, "wb") as handle:
            for _ in range(mb):
                handle.write(block)
            handle.flush()
            os.fsync(handle.fileno())
        _read_all(path)  # every page in the cache
        warm = _read_all(path)
        before = resident_share([path])
        evict([path])
        after = resident_share([path])
        cold = _read_all(path)
        return EvictionProbe(mb, warm, cold, before, after)
    finally:
        path.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals.pagecache", description=__doc__)
    parser.add_argument("--dir", type=Path, default=Path("evals") / "out")
    parser.add_argument("--mb", type=int, default=256)
    args = parser.parse_args(argv)
    result = probe(args.dir, args.mb)
    print(result.describe())
    return 0 if result.confirmed else 1


if __name__ == "__main__":
    raise SystemExit(main())
