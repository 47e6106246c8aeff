"""What a benchmark process holds in memory, read from ``/proc/self``, in MB.

``VmRSS`` counts every resident page the process maps once, its own or shared;
``RssAnon`` is the part that is its own heap (it goes when the process goes);
``RssFile`` is file pages mapped in, which live in the page cache and which any
other process mapping the same file uses too. ``Pss`` (``smaps_rollup``) shares
each page out among the processes mapping it: two processes touching the same
file pages are charged half of them each.

``memory_snapshot`` adds the same two figures for the mappings of one directory's
files alone (an index's files), from ``/proc/self/smaps``.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["mappings_under", "memory_snapshot"]

_STATUS_FIELDS = ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem")
_ROLLUP_FIELDS = ("Pss", "Pss_Anon", "Pss_File")


def _kb_fields(path: str, wanted: tuple[str, ...]) -> dict[str, float]:
    out = dict.fromkeys(wanted, float("nan"))
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError:
        return out
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name in out:
            out[name] = int(rest.split()[0]) / 1024
    return out


def _mapping_path(header: str) -> str | None:
    """The file of an smaps mapping header line (``addr perms offset dev inode path``)."""
    parts = header.split(maxsplit=5)
    return parts[5] if len(parts) == 6 else None


def mappings_under(directory: Path) -> tuple[int, float, float]:
    """``(mappings, Rss MB, Pss MB)`` of this process's mappings of files under
    ``directory``."""
    prefix = str(directory.resolve()).rstrip("/") + "/"
    count, rss_kb, pss_kb = 0, 0, 0
    inside = False
    try:
        text = Path("/proc/self/smaps").read_text(encoding="utf-8")
    except OSError:
        return 0, float("nan"), float("nan")
    for line in text.splitlines():
        head = line.split(maxsplit=1)[0] if line else ""
        if head and not head.endswith(":"):  # a mapping header
            path = _mapping_path(line)
            inside = path is not None and path.startswith(prefix)
            count += inside
        elif inside and head in ("Rss:", "Pss:"):
            value = int(line.split()[1])
            if head == "Rss:":
                rss_kb += value
            else:
                pss_kb += value
    return count, rss_kb / 1024, pss_kb / 1024


def memory_snapshot(index_dir: Path | None = None) -> dict[str, float]:
    """This process's memory now: ``/proc/self/status`` and ``smaps_rollup`` fields, and
    with ``index_dir`` ``index_rss``/``index_pss`` (its files' mappings alone)."""
    out = _kb_fields("/proc/self/status", _STATUS_FIELDS)
    out.update(_kb_fields("/proc/self/smaps_rollup", _ROLLUP_FIELDS))
    if index_dir is not None:
        _, out["index_rss"], out["index_pss"] = mappings_under(index_dir)
    return out
