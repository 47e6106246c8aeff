"""The inspector's HTML, built as strings: every value from a corpus, a query or an
answer passes through ``esc`` (html.escape, quotes included) on its way in.

No script, no inline style (the Content-Security-Policy forbids both), nothing loaded
from another origin: boxes over a PDF page are SVG rectangles whose position is in
their attributes, over an image served by the inspector itself.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote, urlencode

from groundkit.contracts import AnswerReport, EvidenceSpan, FetchResult, RetrievalResult

__all__ = [
    "CSS",
    "ResultRow",
    "SheetView",
    "SourceView",
    "answer_page",
    "collections_page",
    "error_page",
    "result_page",
    "search_page",
]

MODES = ("bm25", "dense", "hybrid")


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def col_url(collection: str, *parts: str, query: dict[str, str] | None = None) -> str:
    """``/c/<collection>/<parts...>``, each segment percent-encoded."""
    path = "/c/" + "/".join(quote(p, safe="") for p in (collection, *parts))
    if not parts:
        path += "/"
    return path + (f"?{urlencode(query)}" if query else "")


@dataclass(frozen=True, slots=True)
class ResultRow:
    """A search hit and the verdict of reading it back now (or why it could not be read)."""

    result: RetrievalResult
    verdict: FetchResult | None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class SourceView:
    """The source text around a span: what comes before, the span, what follows.
    ``clipped_*`` say whether text was left out at either end."""

    before: str
    span: str
    after: str
    clipped_before: bool
    clipped_after: bool
    mark: str = "span"  # "span": the cited span; "closest": the passage nearest a drifted one


@dataclass(frozen=True, slots=True)
class Box:
    """One rectangle of the citation: in page points (as cited) and in image pixels."""

    rect: tuple[float, float, float, float]
    pixels: tuple[float, float, float, float]  # left, top, width, height


@dataclass(frozen=True, slots=True)
class SheetView:
    """A rendered PDF page with the citation's boxes on it."""

    page: int
    src: str
    width: int
    height: int
    boxes: tuple[Box, ...]


CSS = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 0; color: #1d1d1f; background: #fafafa; }
header { background: #20354a; color: #fff; padding: .6rem 1.2rem; }
header a { color: #fff; text-decoration: none; font-weight: 600; }
header nav { display: inline; margin-left: 1.5rem; }
header nav a { font-weight: 400; margin-right: 1rem; opacity: .9; }
main { padding: 1rem 1.2rem; max-width: 80rem; }
form.search input[type=search] { width: 28rem; max-width: 90%; padding: .3rem; }
form textarea { width: 100%; font: inherit; }
ol.results { padding-left: 1.4rem; }
ol.results li { margin: .7rem 0; padding: .5rem .7rem; background: #fff; border: 1px solid #ddd; }
.meta { color: #555; font-size: 90%; }
.snippet { margin: .3rem 0 0; white-space: pre-wrap; }
.verdict { display: inline-block; padding: 0 .45rem; border-radius: .6rem; font-size: 85%;
  font-weight: 600; color: #fff; background: #777; }
.verdict-verified, .verdict-quoted, .verdict-supported { background: #1f7a3a; }
.verdict-moved, .verdict-weak { background: #9a6a00; }
.verdict-drifted, .verdict-unsupported, .verdict-contradicted, .verdict-unresolvable,
.verdict-uncited { background: #b3261e; }
pre.source { white-space: pre-wrap; word-wrap: break-word; background: #fff; padding: .8rem;
  border: 1px solid #ddd; max-height: 40rem; overflow: auto; }
mark { background: #ffe066; }
mark.closest { background: #ffb3b3; }
.result-grid { display: flex; flex-wrap: wrap; gap: 1.5rem; align-items: flex-start; }
.result-grid > section { flex: 1 1 26rem; min-width: 0; }
table.facts { font-size: 90%; border-collapse: collapse; }
table.facts th { text-align: left; font-weight: 600; padding: 0 1rem 0 0; color: #555; }
.sheets { display: flex; flex-direction: column; gap: 1rem; }
figure.sheet { margin: 0; }
.sheet-frame { position: relative; display: inline-block; border: 1px solid #bbb; line-height: 0; }
.sheet-frame img { display: block; max-width: 100%; height: auto; }
.sheet-frame svg { position: absolute; left: 0; top: 0; width: 100%; height: 100%; }
.sheet-frame rect { fill: rgba(255, 214, 0, .28); stroke: #e0a800; stroke-width: 2; }
.error { color: #b3261e; font-weight: 600; }
table.sentences { border-collapse: collapse; width: 100%; }
table.sentences td { border-top: 1px solid #ddd; padding: .4rem; vertical-align: top; }
blockquote { margin: .2rem 0 .4rem; padding-left: .6rem; border-left: 3px solid #ccc; }
"""


def _layout(title: str, body: str, *, collection: str | None = None) -> str:
    nav = ""
    if collection is not None:
        nav = (
            f'<nav><a href="{esc(col_url(collection))}">Search {esc(collection)}</a>'
            f'<a href="{esc(col_url(collection, "answer"))}">Check an answer</a></nav>'
        )
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)} · groundkit inspector</title>"
        '<link rel="stylesheet" href="/static/inspector.css"></head><body>'
        f'<header><a href="/">groundkit inspector</a>{nav}</header>'
        f"<main>{body}</main></body></html>\n"
    )


def badge(verdict: str, detail: str | None = None) -> str:
    title = f' title="{esc(detail)}"' if detail else ""
    return f'<span class="verdict verdict-{esc(verdict)}"{title}>{esc(verdict)}</span>'


def error_page(title: str, message: str, *, collection: str | None = None) -> str:
    return _layout(
        title, f"<h1>{esc(title)}</h1><p class=error>{esc(message)}</p>", collection=collection
    )


def collections_page(names: Sequence[str], where: str) -> str:
    if not names:
        body = f"<p>No collections in {esc(where)}: ingest something first (grk ingest PATH).</p>"
    else:
        items = "".join(f'<li><a href="{esc(col_url(n))}">{esc(n)}</a></li>' for n in names)
        body = f"<p>Collections in {esc(where)}:</p><ul>{items}</ul>"
    return _layout("Collections", f"<h1>Collections</h1>{body}")


def _search_form(collection: str, query: str, mode: str, top_k: int) -> str:
    options = "".join(
        f'<option value="{m}"{" selected" if m == mode else ""}>{m}</option>' for m in MODES
    )
    return (
        f'<form class="search" method="get" action="{esc(col_url(collection))}">'
        f'<input type="search" id="q" name="q" value="{esc(query)}" '
        'placeholder="search this collection" autofocus> '
        f'<label>mode <select id="mode" name="mode">{options}</select></label> '
        f'<label>top k <input type="number" id="top_k" name="top_k" min="1" max="50" '
        f'value="{top_k}"></label> <button type="submit" id="search">Search</button></form>'
    )


def search_page(
    collection: str,
    query: str,
    mode: str,
    top_k: int,
    rows: Sequence[ResultRow] | None,
    error: str | None = None,
) -> str:
    body = [f"<h1>{esc(collection)}</h1>", _search_form(collection, query, mode, top_k)]
    if error is not None:
        body.append(f"<p class=error>{esc(error)}</p>")
    if rows is not None:
        if not rows:
            body.append("<p>No results.</p>")
        else:
            body.append(f'<ol class="results">{"".join(_row(collection, r) for r in rows)}</ol>')
            ids = "\n".join(r.result.chunk_id for r in rows)
            answer = col_url(collection, "answer", query={"ids": ids})
            body.append(
                f'<p><a href="{esc(answer)}">Check an answer written from these results</a></p>'
            )
    return _layout(query or collection, "".join(body), collection=collection)


def _verdict_html(verdict: FetchResult | None, error: str | None) -> str:
    if verdict is not None:
        return badge(verdict.verification, verdict.detail)
    return badge("unresolvable", error)


def _row(collection: str, row: ResultRow) -> str:
    result = row.result
    citation = result.citation
    link = col_url(collection, "chunk", result.chunk_id)
    pages = f" · {esc(citation.pages)}" if citation.pages else ""
    heading = " › ".join(result.heading_path)
    heading_html = f" · {esc(heading)}" if heading else ""
    snippet = result.content if len(result.content) <= 320 else result.content[:320] + "…"
    return (
        f'<li class="result" data-chunk="{esc(result.chunk_id)}">'
        f'<a class="result-link" href="{esc(link)}">{esc(result.source)}</a> '
        f"{_verdict_html(row.verdict, row.error)}"
        f'<div class="meta">score {result.score:.4g}{pages}{heading_html} · '
        f"[{citation.start_offset}:{citation.end_offset}]</div>"
        f'<p class="snippet">{esc(snippet)}</p></li>'
    )


def result_page(
    collection: str,
    fetched: FetchResult,
    source: SourceView | None,
    source_error: str | None,
    sheets: Sequence[SheetView],
    sheets_note: str | None,
) -> str:
    citation = fetched.citation
    facts = [
        ("source", citation.source),
        ("pages", citation.pages or ""),
        ("offsets", f"[{citation.start_offset}:{citation.end_offset}]"),
        ("chunk", citation.chunk_id),
        ("document version", "" if citation.version is None else str(citation.version)),
        ("extractor", citation.extractor or ""),
        ("read from", fetched.read_from or ""),
    ]
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in facts if v)
    body = [
        f"<h1>{esc(citation.source)}</h1>",
        f'<p>{badge(fetched.verification)} <span id="detail">{esc(fetched.detail)}</span></p>',
        '<div class="result-grid">',
    ]
    if sheets or sheets_note:
        body.append('<section class="pages">')
        if sheets_note:
            body.append(f'<p class="meta" id="sheets-note">{esc(sheets_note)}</p>')
        body.append(f'<div class="sheets">{"".join(_sheet(s) for s in sheets)}</div></section>')
    body.append(f'<section class="details"><table class="facts">{rows}</table>')
    body.append("<h2>Source text</h2>")
    if source is not None:
        body.append(_source(source))
    else:
        body.append(f'<p class="error" id="source-error">{esc(source_error or "")}</p>')
        body.append(
            f'<h3>Indexed text</h3><pre class="source" id="indexed">{esc(fetched.content)}</pre>'
        )
    body.append("</section></div>")
    return _layout(citation.source, "".join(body), collection=collection)


def _sheet(sheet: SheetView) -> str:
    rects = "".join(
        f'<rect class="cited" x="{b.pixels[0]:.2f}" y="{b.pixels[1]:.2f}" '
        f'width="{b.pixels[2]:.2f}" height="{b.pixels[3]:.2f}" '
        f'data-rect="{b.rect[0]:.2f} {b.rect[1]:.2f} {b.rect[2]:.2f} {b.rect[3]:.2f}"/>'
        for b in sheet.boxes
    )
    return (
        f'<figure class="sheet" id="page-{sheet.page}" data-page="{sheet.page}">'
        f'<div class="sheet-frame"><img src="{esc(sheet.src)}" width="{sheet.width}" '
        f'height="{sheet.height}" alt="page {sheet.page}">'
        f'<svg viewBox="0 0 {sheet.width} {sheet.height}" '
        f'preserveAspectRatio="none" aria-hidden="true">{rects}</svg></div>'
        f"<figcaption>page {sheet.page}</figcaption></figure>"
    )


def _source(view: SourceView) -> str:
    head = "…" if view.clipped_before else ""
    tail = "…" if view.clipped_after else ""
    mark_id = "span" if view.mark == "span" else "closest"
    return (
        f'<pre class="source">{head}{esc(view.before)}'
        f'<mark id="{mark_id}" class="{esc(view.mark)}">{esc(view.span)}</mark>'
        f"{esc(view.after)}{tail}</pre>"
    )


def answer_page(
    collection: str,
    answer: str,
    ids: str,
    report: AnswerReport | None,
    error: str | None = None,
) -> str:
    body = [
        "<h1>Check an answer</h1>",
        "<p>Paste an answer whose sentences cite results with markers such as [1] and [2], "
        "and the chunk ids those markers stand for, one a line: the first line is [1].</p>",
        f'<form method="post" action="{esc(col_url(collection, "answer"))}">',
        f'<p><label>Answer<br><textarea id="answer" name="answer" rows="8">{esc(answer)}'
        "</textarea></label></p>",
        f'<p><label>Chunk ids<br><textarea id="ids" name="ids" rows="4">{esc(ids)}'
        "</textarea></label></p>",
        '<p><button type="submit" id="check">Check</button></p></form>',
    ]
    if error is not None:
        body.append(f"<p class=error>{esc(error)}</p>")
    if report is not None:
        body.append(_report(collection, report))
    return _layout("Check an answer", "".join(body), collection=collection)


def _report(collection: str, report: AnswerReport) -> str:
    counts = ", ".join(f"{esc(k)} {v}" for k, v in sorted(report.counts.items()) if v)
    passages = {f.citation.chunk_id: f for f in report.citations}
    rows = []
    for sentence in report.sentences:
        cited = "".join(
            _cited(collection, c.chunk_id, passages, sentence.evidence) for c in sentence.cited
        )
        rows.append(
            f'<tr class="sentence"><td>{badge(sentence.verdict, sentence.detail)}</td>'
            f"<td>{esc(sentence.text)}<div class=meta>{esc(sentence.detail)}</div>{cited}</td></tr>"
        )
    return (
        f"<h2>Verdicts</h2><p class=meta>{counts} · compared by {esc(report.method)}</p>"
        f'<table class="sentences">{"".join(rows)}</table>'
    )


def _cited(
    collection: str,
    chunk_id: str,
    passages: dict[str, FetchResult],
    evidence: EvidenceSpan | None,
) -> str:
    """A cited passage with its verdict; the sentence closest to the answer's marked in it."""
    fetched = passages.get(chunk_id)
    link = esc(col_url(collection, "chunk", chunk_id))
    if fetched is None:
        return f'<div><a href="{link}">{esc(chunk_id)}</a></div>'
    pages_shown = fetched.citation.pages
    where = fetched.citation.source + (f" ({pages_shown})" if pages_shown else "")
    text = esc(fetched.content)
    if evidence is not None:
        first = evidence.start_offset - fetched.citation.start_offset
        last = first + len(evidence.text)
        if first >= 0 and fetched.content[first:last] == evidence.text:
            content = fetched.content
            text = f"{esc(content[:first])}<mark>{esc(evidence.text)}</mark>{esc(content[last:])}"
    return (
        f'<div class="cited"><a href="{link}">{esc(where)}</a> {badge(fetched.verification)}'
        f"<blockquote>{text}</blockquote></div>"
    )
