"""The citation inspector over HTTP (httpx against the ASGI app, no browser): pages,
escaping of hostile corpus text, 404s, no outside URLs, and the token rules."""

from __future__ import annotations

import io
import re
from collections.abc import AsyncIterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

pytest.importorskip("starlette")
pytest.importorskip("pypdfium2")

from groundkit import Collection, ConfigurationError, resolve_citation
from groundkit.cli import main
from groundkit.service.collections import CollectionRegistry
from groundkit.service.inspector.access import COOKIE, InspectorGate, session_value
from groundkit.service.inspector.app import build_app
from groundkit.service.transport import ASGIApp
from tests.service.inspector_support import PDF_SOURCE, TOKEN, build_index


class _Page(HTMLParser):
    """What a page holds: its tags' attributes, and the text of each element by id."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text_by_id: dict[str, str] = {}
        self._open: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        self.tags.append((tag, found))
        if tag not in ("img", "input", "meta", "link", "br", "rect"):
            self._open.append((tag, found.get("id")))
            if found.get("id"):
                self.text_by_id.setdefault(str(found["id"]), "")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self._open) - 1, -1, -1):
            if self._open[i][0] == tag:
                del self._open[i:]
                break

    def handle_data(self, data: str) -> None:
        for _, ident in self._open:
            if ident:
                self.text_by_id[ident] += data


def parse(body: str) -> _Page:
    page = _Page()
    page.feed(body)
    page.close()
    return page


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def corpus(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path, await build_index(tmp_path)


@pytest.fixture
async def registry(corpus: tuple[Path, Path]) -> AsyncIterator[CollectionRegistry]:
    _, index = corpus
    reg = CollectionRegistry(index)
    yield reg
    await reg.close()


def client(app: ASGIApp, host: str = "127.0.0.1:8765") -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=f"http://{host}")


def open_app(registry: CollectionRegistry, token: str | None = None) -> ASGIApp:
    return InspectorGate(build_app(registry), token=token, host="127.0.0.1")


async def first_hit(http: httpx.AsyncClient, query: str) -> str:
    found = await http.get("/c/default/", params={"q": query})
    assert found.status_code == 200
    links = [
        a["href"] for t, a in parse(found.text).tags if t == "a" and a.get("class") == "result-link"
    ]
    assert links, found.text
    return str(links[0])


async def test_search_result_and_span(
    registry: CollectionRegistry, corpus: tuple[Path, Path]
) -> None:
    base, index = corpus
    async with client(open_app(registry)) as http:
        home = await http.get("/")
        assert home.status_code == 303 and home.headers["location"] == "/c/default/"
        listing = await http.get("/c/default/", params={"q": "black tea boiling"})
        assert listing.status_code == 200
        assert "verdict-verified" in listing.text
        link = await first_hit(http, "black tea boiling")
        shown = await http.get(link)
        assert shown.status_code == 200
    marked = parse(shown.text).text_by_id["span"]
    chunk_id = link.rsplit("/", 1)[1]
    async with Collection.open(index, base_dir=base) as col:
        fetched = await col.fetch_chunk(chunk_id)
    assert marked == await resolve_citation(fetched.citation, base)
    assert "Black tea wants boiling water" in marked


async def test_hostile_corpus_text_is_escaped(registry: CollectionRegistry) -> None:
    async with client(open_app(registry)) as http:
        listing = await http.get("/c/default/", params={"q": "zanzibarite"})
        link = await first_hit(http, "zanzibarite")
        shown = await http.get(link)
        reflected = await http.get("/c/default/", params={"q": '"><script>alert(9)</script>'})
    for response in (listing, shown, reflected):
        page = parse(response.text)
        tags = {t for t, _ in page.tags}
        assert "script" not in tags and "style" not in tags, response.text
        assert not any(t == "img" and "evil" in str(a.get("src")) for t, a in page.tags)
        assert not any(k.startswith("on") for _, a in page.tags for k in a)
    assert "&lt;script&gt;alert(&#x27;zanzibarite&#x27;)&lt;/script&gt;" in shown.text
    assert "alert(9)" in reflected.text and "<script>alert(9)" not in reflected.text
    # The span is whole: corpus text that closes </mark> or </pre> closes nothing.
    assert "end of zanzibarite" in parse(shown.text).text_by_id["span"]


async def test_pages_reach_no_other_origin(registry: CollectionRegistry) -> None:
    async with client(open_app(registry)) as http:
        bodies = [await http.get("/c/default/", params={"q": "zanzibarite tea photovoltaic"})]
        for query in ("zanzibarite", "photovoltaic"):
            bodies.append(await http.get(await first_hit(http, query)))
        bodies.append(await http.get("/c/default/answer"))
        css = await http.get("/static/inspector.css")
    assert css.status_code == 200 and "url(" not in css.text and "@import" not in css.text
    for response in bodies:
        assert response.status_code == 200
        policy = response.headers["content-security-policy"]
        assert "default-src 'self'" in policy and "script-src 'none'" in policy
        assert response.headers["cache-control"] == "no-store"
        for tag, attrs in parse(response.text).tags:
            assert "style" not in attrs, (tag, attrs)
            for name in ("href", "src", "action"):
                value = attrs.get(name)
                if value is not None:
                    assert value.startswith("/") and not value.startswith("//"), (tag, value)


async def test_pdf_result_draws_its_rectangles(registry: CollectionRegistry) -> None:
    from PIL import Image

    async with client(open_app(registry)) as http:
        link = await first_hit(http, "photovoltaic sunlight")
        shown = await http.get(link)
        page = parse(shown.text)
        images = [a for t, a in page.tags if t == "img"]
        rects = [a for t, a in page.tags if t == "rect"]
        assert len(images) == 1 and rects, shown.text
        png = await http.get(str(images[0]["src"]))
    assert png.status_code == 200 and png.headers["content-type"] == "image/png"
    image = Image.open(io.BytesIO(png.content))
    assert image.size == (int(str(images[0]["width"])), int(str(images[0]["height"])))
    for rect in rects:
        x, y = float(str(rect["x"])), float(str(rect["y"]))
        w, h = float(str(rect["width"])), float(str(rect["height"]))
        assert x >= 0 and x + w <= image.width and y >= 0 and y + h <= image.height
    assert PDF_SOURCE in shown.text


async def test_not_found(registry: CollectionRegistry) -> None:
    async with client(open_app(registry)) as http:
        text_doc = await first_hit(http, "black tea")
        pdf_link = await first_hit(http, "photovoltaic")
        pdf_page = parse((await http.get(pdf_link)).text)
        src = next(str(a["src"]) for t, a in pdf_page.tags if t == "img")
        text_page = (await http.get(text_doc)).text
        text_doc_id = re.search(r"/page/([0-9a-f]+)/", src)
        assert text_doc_id is not None and "/page/" not in text_page
        paths = [
            "/c/nope/",
            "/c/nope/chunk/abc",
            "/c/default/chunk/0123456789abcdef",
            "/c/default/page/0123456789abcdef/1.png",
            src.replace("/1.png", "/99.png"),
            src.replace("/1.png", "/x.png"),
            "/c/default/page/..%2F..%2Fetc/1.png",
            "/nothing/here",
            "/c/default/answer/extra",
        ]
        for path in paths:
            response = await http.get(path)
            assert response.status_code == 404, (path, response.status_code)
            assert "Traceback" not in response.text
        put = await http.put("/c/default/")
        assert put.status_code in (404, 405)


async def test_answer_page(registry: CollectionRegistry) -> None:
    async with client(open_app(registry)) as http:
        link = await first_hit(http, "black tea boiling")
        chunk_id = link.rsplit("/", 1)[1]
        prefilled = await http.get("/c/default/answer", params={"ids": chunk_id})
        assert chunk_id in parse(prefilled.text).text_by_id["ids"]
        checked = await http.post(
            "/c/default/answer",
            data={
                "answer": "Black tea wants boiling water [1]. The moon is cheese [1].",
                "ids": chunk_id,
            },
        )
        assert checked.status_code == 200
        page = parse(checked.text)
        rows = [a for t, a in page.tags if t == "tr" and a.get("class") == "sentence"]
        assert len(rows) == 2
        verdicts = re.findall(r'class="verdict verdict-([a-z]+)"', checked.text)
        assert verdicts[0] in ("quoted", "supported") and "unsupported" in verdicts
        # The cited sentence closest to the first one is marked in its passage.
        assert "<mark>Black tea wants boiling water and four minutes.</mark>" in checked.text
        unknown = await http.post("/c/default/answer", data={"answer": "x [1].", "ids": "feed"})
        assert unknown.status_code == 400 and "feed" in unknown.text
        empty = await http.post("/c/default/answer", data={"answer": "", "ids": ""})
        assert empty.status_code == 400
        huge = await http.post("/c/default/answer", data={"answer": "a" * 300_000, "ids": "x"})
        assert huge.status_code == 413


async def test_bad_search_options(registry: CollectionRegistry) -> None:
    async with client(open_app(registry)) as http:
        for params in (
            {"q": "tea", "mode": "psychic"},
            {"q": "tea", "top_k": "0"},
            {"q": "tea", "top_k": "x"},
        ):
            assert (await http.get("/c/default/", params=params)).status_code == 400
        dense = await http.get("/c/default/", params={"q": "tea", "mode": "dense"})
        assert dense.status_code == 400 and "embed" in dense.text.lower()


async def test_token_rules(registry: CollectionRegistry) -> None:
    app = open_app(registry, TOKEN)
    async with client(app) as http:
        bare = await http.get("/c/default/", params={"q": "tea"})
        assert bare.status_code == 401 and "tea" not in bare.text.replace("?token=", "")
        assert "Green" not in bare.text
        wrong = await http.get("/c/default/", params={"q": "tea", "token": "x" * 32})
        assert wrong.status_code == 401 and "set-cookie" not in wrong.headers
        http.cookies.set(COOKIE, session_value("another-token-0123456789"))
        assert (await http.get("/")).status_code == 401
        entered = await http.get("/c/default/", params={"q": "tea", "token": TOKEN})
        assert entered.status_code == 303
        where = urlsplit(entered.headers["location"])
        assert where.path == "/c/default/" and parse_qs(where.query) == {"q": ["tea"]}
        cookie = entered.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and TOKEN not in cookie
        http.cookies.set(COOKIE, session_value(TOKEN))
        after = await http.get("/c/default/", params={"q": "green tea"})
        assert after.status_code == 200 and "Green tea" in after.text
    async with client(app) as http:
        by_header = await http.get("/", headers={"authorization": f"Bearer {TOKEN}"})
        assert by_header.status_code == 303
        any_case = await http.get("/", headers={"authorization": f"bearer {TOKEN}"})
        assert any_case.status_code == 303
        wrong = await http.get("/", headers={"authorization": f"bearer {TOKEN}x"})
        assert wrong.status_code == 401
        # The redirect stays on this site whatever the path looks like.
        odd = await http.get("http://127.0.0.1:8765//evil.example/x", params={"token": TOKEN})
        assert odd.status_code == 303 and odd.headers["location"].startswith("/evil.example")


async def test_loopback_refuses_other_hosts(registry: CollectionRegistry) -> None:
    for host, status in (("evil.example", 403), ("localhost:1", 303), ("[::1]:8765", 303)):
        async with client(open_app(registry), host=host) as http:
            assert (await http.get("/")).status_code == status, host
    async with client(open_app(registry)) as http:
        for origin, status in (
            ("https://evil.example", 403),
            ("null", 403),
            ("http://127.0.0.1:8765", 200),
        ):
            sent = await http.post(
                "/c/default/answer", data={"answer": "x", "ids": ""}, headers={"origin": origin}
            )
            assert sent.status_code == (400 if status == 200 else status), origin
    # Off loopback the token guards instead: any Host name is served to a token holder.
    gate = InspectorGate(build_app(registry), token=TOKEN, host="0.0.0.0")
    async with client(gate, host="inspector.lan") as http:
        seen = await http.get("/", headers={"authorization": f"Bearer {TOKEN}"})
        assert seen.status_code == 303


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--host", "0.0.0.0"], "GROUNDKIT_SERVE_TOKEN"),
        (["--token", "short"], "at least 16"),
        (["--port", "70000"], "--port"),
    ],
)
def test_cli_refuses_unsafe_settings(
    argv: list[str],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GROUNDKIT_SERVE_TOKEN", raising=False)
    assert main(["inspect", str(tmp_path / "idx"), *argv]) == 2
    assert message in capsys.readouterr().err


def test_cli_refuses_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--json", "inspect", str(tmp_path)])
    assert "does not take --json" in capsys.readouterr().err


async def test_serving_nothing_is_an_error(tmp_path: Path) -> None:
    from groundkit.service.inspector.command import _inspect

    with pytest.raises(ConfigurationError, match="no collections"):
        await _inspect(
            CollectionRegistry(tmp_path / "empty"), None, "127.0.0.1", 0, None, ready=print
        )


async def _chunk_of(http: httpx.AsyncClient, query: str) -> tuple[str, _Page]:
    link = await first_hit(http, query)
    shown = await http.get(link)
    assert shown.status_code == 200, shown.text
    return link.rsplit("/", 1)[1], parse(shown.text)


async def test_records_and_html_show_their_text(corpus: tuple[Path, Path]) -> None:
    base, index = corpus
    (base / "docs" / "page.html").write_text(
        "<html><head><title>Kiln</title><script>var quasar = 1;</script></head><body>"
        "<h1>Kiln</h1><p>The kiln fires porcelain at 1300 degrees quasar.</p></body></html>",
        encoding="utf-8",
    )
    async with Collection.open(index, base_dir=base) as col:
        await col.ingest(base / "docs")
        await col.add_documents([{"id": "TCK-7", "text": "The teapot lid is cracked, quasar."}])
    registry = CollectionRegistry(index)
    try:
        async with client(open_app(registry)) as http:
            for query, expected in (
                ("porcelain kiln", "The kiln fires porcelain at 1300 degrees quasar."),
                ("teapot lid cracked", "The teapot lid is cracked, quasar."),
            ):
                chunk_id, page = await _chunk_of(http, query)
                assert expected in page.text_by_id["span"]
                async with Collection.open(index, base_dir=base) as col:
                    fetched = await col.fetch_chunk(chunk_id)
                assert page.text_by_id["span"] == fetched.content
                assert not any(t == "img" for t, _ in page.tags)  # no pages to draw
    finally:
        await registry.close()


async def test_edited_sources_show_where_the_text_is_now(corpus: tuple[Path, Path]) -> None:
    base, index = corpus
    registry = CollectionRegistry(index)
    try:
        async with client(open_app(registry)) as http:
            chunk_id, _ = await _chunk_of(http, "black tea boiling")
            tea = base / "docs" / "tea.md"
            tea.write_text("A new first line.\n\n" + tea.read_text(encoding="utf-8"))
            moved = parse((await http.get(f"/c/default/chunk/{chunk_id}")).text)
            assert "Black tea wants boiling water" in moved.text_by_id["span"]
            assert any(a.get("class") == "verdict verdict-moved" for _, a in moved.tags)
            tea.write_text("Green tea is brewed at about 80 degrees.\n\nBlack coffee instead.\n")
            drifted = (await http.get(f"/c/default/chunk/{chunk_id}")).text
            assert "verdict-drifted" in drifted or "verdict-unresolvable" in drifted
            assert 'id="span"' not in drifted
            # A PDF gone from disk: the result says so, its page is 404.
            pdf_id, pdf_page = await _chunk_of(http, "photovoltaic sunlight")
            src = next(str(a["src"]) for t, a in pdf_page.tags if t == "img")
            (base / PDF_SOURCE).unlink()
            gone = await http.get(f"/c/default/chunk/{pdf_id}")
            assert gone.status_code == 200 and "verdict-unresolvable" in gone.text
            assert "not on this host" in parse(gone.text).text_by_id["sheets-note"]
            assert (await http.get(src)).status_code == 404
    finally:
        await registry.close()


async def test_the_clearance_hides_chunks_and_pages(corpus: tuple[Path, Path]) -> None:
    base, index = corpus
    from tests.service.inspector_support import energy_pdf

    (base / "docs" / "secret.md").write_text(
        "---\nsensitivity: restricted\n---\nThe photovoltaic vault code is 4711.\n",
        encoding="utf-8",
    )
    (base / "vault").mkdir()
    (base / "vault" / "plan.pdf").write_bytes(energy_pdf())
    async with Collection.open(index, base_dir=base) as col:
        await col.ingest(base / "docs")
        await col.ingest(base / "vault", metadata={"sensitivity": "restricted"})
        secret = (await col.search("vault code 4711")).results[0]
        found = (await col.search("photovoltaic", 20)).results
        pdf = next(r for r in found if r.source == PDF_SOURCE)
        plan = next(r for r in found if r.source == "vault/plan.pdf")
    plan_page = f"/c/default/page/{plan.document_id}/1.png"
    open_registry = CollectionRegistry(index)
    cleared = CollectionRegistry(index, clearance="internal")
    try:
        async with client(open_app(open_registry)) as http:
            assert (await http.get(f"/c/default/chunk/{secret.chunk_id}")).status_code == 200
            assert (await http.get(plan_page)).status_code == 200
        async with client(open_app(cleared)) as http:
            listing = await http.get("/c/default/", params={"q": "vault code 4711 photovoltaic"})
            assert "4711" not in listing.text.replace("vault code 4711 photovoltaic", "")
            hidden = await http.get(f"/c/default/chunk/{secret.chunk_id}")
            unknown = await http.get("/c/default/chunk/" + "0" * 32)
            assert hidden.status_code == unknown.status_code == 404
            assert (await http.get(f"/c/default/chunk/{pdf.chunk_id}")).status_code == 200
            assert (await http.get(plan_page)).status_code == 404
            assert (await http.get(f"/c/default/chunk/{plan.chunk_id}")).status_code == 404
    finally:
        await open_registry.close()
        await cleared.close()


async def test_a_url_snapshot_shows_its_kept_text(tmp_path: Path) -> None:
    from groundkit import UrlLoader
    from groundkit.utils.url_safety import AddressPolicy
    from tests.sources import Route, Site

    site = Site()
    site.routes["/kiln.html"] = Route(
        body=b"<html><body><h1>Kilns</h1><p>A <b>kiln</b> fires stoneware at 1250 degrees."
        b"</p><script>var nebula = 1;</script></body></html>",
        headers={"Content-Type": "text/html; charset=utf-8"},
    )
    loader = UrlLoader(policy=AddressPolicy.allowing("127.0.0.0/8"), timeout=5.0)
    try:
        async with Collection.open(tmp_path / "idx", base_dir=tmp_path, url_loader=loader) as col:
            await col.ingest(site.url("/kiln.html"))
    finally:
        site.close()  # the page is gone: the inspector shows the kept snapshot
    registry = CollectionRegistry(tmp_path / "idx")
    try:
        async with client(open_app(registry)) as http:
            chunk_id, page = await _chunk_of(http, "stoneware kiln")
            shown = (await http.get(f"/c/default/chunk/{chunk_id}")).text
    finally:
        await registry.close()
    assert "kiln fires stoneware at 1250 degrees" in page.text_by_id["span"]
    assert "verdict-verified" in shown and "nebula" not in shown
    assert not any(t == "img" for t, _ in page.tags)
