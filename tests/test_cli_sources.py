"""grk with PDF, HTML and URL sources."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals.scanned import scanned_pdf
from tests.ocr_support import real_engine
from tests.sources import HTML_PAGE, Route, Site, make_pdf
from tests.support import write_tree
from tests.test_cli import common, run

PAGE_WORDS = ("photovoltaic", "turbines", "hydroelectric", "geothermal")


# Pages longer than the default chunk budget, so each page is its own chunks.
LONG_PAGES = [f"{word} " + "Filler text about energy policy. " * 60 for word in PAGE_WORDS]


def test_pdf_and_html_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pdf = make_pdf(LONG_PAGES)
    write_tree(
        tmp_path / "docs",
        {"report.pdf": pdf, "guide.html": HTML_PAGE.encode("cp1252"), "x.bin": b"\0"},
    )
    code, out, _ = run(capsys, "ingest", str(tmp_path / "docs"), *common(tmp_path), "--json")
    assert code == 0
    report = json.loads(out)
    assert report["added"] == ["docs/guide.html", "docs/report.pdf"]
    assert report["skipped"] == 1

    code, out, _ = run(capsys, "search", "geothermal", *common(tmp_path), "--json", "--full")
    hit = json.loads(out)["results"][0]
    cited = hit["citation"]
    assert (cited["source"], cited["source_class"]) == ("docs/report.pdf", "extracted")
    assert cited["extractor"].startswith("groundkit-pdf/1+pypdfium2/")
    # The word opens page 4; a chunk holding it starts there or runs in from page 3.
    page = 4 if hit["content"].startswith("geothermal") else 3
    assert cited["page"] == page
    code, out, _ = run(capsys, "search", "geothermal", *common(tmp_path), "--json")
    compact = json.loads(out)["results"][0]["citation"]
    assert compact["page"] == page  # compact keeps pages
    # and where the span stands on them: [page, x0, y0, x1, y1] per line, in reading order
    assert compact["rects"] and compact["rects"] == cited["rects"]
    assert all(r[0] in (page, page + 1) and r[1] < r[3] and r[2] < r[4] for r in compact["rects"])

    code, out, _ = run(capsys, "search", "geothermal", *common(tmp_path))
    assert f"] p. {page}  score" in out

    code, out, _ = run(capsys, "fetch", cited["chunk_id"], *common(tmp_path), "--json")
    fetched = json.loads(out)
    assert code == 0 and fetched["verification"] == "verified"
    assert fetched["citation"]["page"] == page

    (tmp_path / "docs" / "report.pdf").write_bytes(make_pdf(["replaced"]))
    code, out, _ = run(capsys, "verify", *common(tmp_path))
    assert code == 1 and "drifted" in out


def test_url_refused_by_default(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    site = Site()
    site.routes["/a.txt"] = Route(body=b"hello", headers={"Content-Type": "text/plain"})
    try:
        code, out, _ = run(capsys, "ingest", site.url("/a.txt"), *common(tmp_path))
        assert code == 1
        assert "failed 1" in out and "loopback" in out
        assert site.seen == []
    finally:
        site.close()


def test_credential_url_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        capsys, "ingest", "https://example.com/doc?access_token=SECRETVALUE", *common(tmp_path)
    )
    assert code == 2
    assert "credentials" in err
    assert "SECRETVALUE" not in err + out


def test_ocr_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--ocr off refuses a scan saying so; the default reads it, the citation naming the engine."""
    engine = real_engine()
    write_tree(tmp_path / "docs", {"scan.pdf": scanned_pdf(["Tidal mills ground grain."], size=14)})
    code, out, _ = run(
        capsys, "ingest", str(tmp_path / "docs"), *common(tmp_path), "--ocr", "off", "--json"
    )
    (failed,) = json.loads(out)["failed"]
    assert "OCR is off" in failed["reason"]
    code, out, _ = run(
        capsys,
        "ingest",
        str(tmp_path / "docs"),
        *common(tmp_path),
        "--ocr-languages",
        "eng",
        "--json",
    )
    assert code == 0 and json.loads(out)["added"] == ["docs/scan.pdf"]
    code, out, _ = run(capsys, "search", "tidal mills", *common(tmp_path), "--json", "--full")
    cited = json.loads(out)["results"][0]["citation"]
    assert cited["extractor"].endswith(f"+ocr:groundkit-ocr/1+{engine.identity}")
    assert cited["rects"]
    code, out, _ = run(capsys, "verify", *common(tmp_path))
    assert code == 0, out


def test_the_extraction_cache_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """By default an ingest records each PDF's extraction on the host; with
    ``--no-extraction-cache`` it records none (and reads none back)."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("GROUNDKIT_CACHE_DIR", str(cache))
    write_tree(tmp_path / "docs", {"report.pdf": make_pdf(LONG_PAGES)})
    argv = ["ingest", str(tmp_path / "docs"), *common(tmp_path), "--json"]
    code, out, _ = run(capsys, *argv, "--no-extraction-cache")
    assert code == 0 and json.loads(out)["added"] == ["docs/report.pdf"]
    assert not (cache / "extractions").exists()
    code, out, _ = run(capsys, *argv)
    assert code == 0 and json.loads(out)["unchanged"] == ["docs/report.pdf"]
    assert len(list((cache / "extractions").glob("*.gkx"))) == 1
