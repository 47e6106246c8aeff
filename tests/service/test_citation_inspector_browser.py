"""The citation inspector in a real browser: headless Chromium driven by Selenium
against a real ``grk inspect`` process.

A person's path: open the address grk printed (the token once), type a query,
submit, click a result. The highlighted text must be the citation's span as the
source reads now; on a PDF page each drawn box must sit where pdfium places the cited
line on the rendered image, over the ink of its glyphs, and the span's ink must lie
inside the boxes. Screenshots go to $GROUNDKIT_TEST_ARTIFACTS (else the test's
tmp_path). Chromium and chromedriver are Debian's packages; without them the tests
skip, except under CI, where they fail.
"""

from __future__ import annotations

import io
import os
import queue
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("starlette")
pytest.importorskip("pypdfium2")
pytest.importorskip("selenium")

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

from groundkit import Collection, resolve_citation
from groundkit.contracts import Citation
from tests.service.inspector_support import PDF_SOURCE, TOKEN, build_index
from tests.services import REPO_ROOT, unavailable
from tests.support import write_tree

pytestmark = pytest.mark.timeout(240)

SCALE = 1.5  # the inspector's page scale (app.PAGE_SCALE), checked below
# How far a drawn box may sit from where pdfium maps the rectangle, in CSS pixels.
TOLERANCE_PX = 2.0
# A pixel darker than this (0-255 luminance) is ink.
INK = 140


@pytest.fixture(scope="module")
def chrome_paths() -> tuple[str, str]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        unavailable(
            "Chromium and chromedriver are not installed (apt-get install chromium "
            "chromium-driver); the inspector's browser tests need them"
        )
    return browser, driver


@pytest.fixture
def artifacts(tmp_path: Path) -> Path:
    root = os.environ.get("GROUNDKIT_TEST_ARTIFACTS")
    folder = (Path(root) if root else tmp_path) / "inspector-browser"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
async def corpus(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path, await build_index(tmp_path)


@contextmanager
def serving(index: Path) -> Iterator[str]:
    """``grk inspect INDEX --port 0`` with a token; the address it printed."""
    env = {**os.environ, "GROUNDKIT_SERVE_TOKEN": TOKEN}
    process = subprocess.Popen(
        [sys.executable, "-m", "groundkit", "inspect", str(index), "--port", "0"],
        cwd=REPO_ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    try:
        address = None
        seen: list[str] = []
        while address is None:
            try:
                line = lines.get(timeout=60)
            except queue.Empty:
                pytest.fail(f"grk inspect printed no address: {seen}")
            seen.append(line)
            if "citation inspector at " in line:
                address = line.split("citation inspector at ", 1)[1].strip()
        assert address.endswith(f"?token={TOKEN}")
        yield address
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def inspector(corpus: tuple[Path, Path]) -> Iterator[str]:
    with serving(corpus[1]) as address:
        yield address


@pytest.fixture
def browser(chrome_paths: tuple[str, str]) -> Iterator[WebDriver]:
    chromium, chromedriver = chrome_paths
    options = Options()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,1400",
        "--force-device-scale-factor=1",
        "--no-first-run",
        "--disable-extensions",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(chromedriver))
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(driver: WebDriver, css: str) -> WebElement:
    found: WebElement = WebDriverWait(driver, 30).until(
        lambda d: d.find_element(By.CSS_SELECTOR, css)
    )
    return found


def search_and_open(driver: WebDriver, address: str, query: str, source: str) -> str:
    """Type ``query``, submit, click the hit from ``source``; the chunk id opened."""
    driver.get(address)
    box = _wait(driver, "input#q")
    assert "token" not in driver.current_url  # traded for the cookie on the first request
    box.clear()
    box.send_keys(query)
    driver.find_element(By.ID, "search").click()
    _wait(driver, "a.result-link")
    links = [a for a in driver.find_elements(By.CSS_SELECTOR, "a.result-link") if a.text == source]
    assert links, [a.text for a in driver.find_elements(By.CSS_SELECTOR, "a.result-link")]
    href = str(links[0].get_attribute("href"))
    links[0].click()
    _wait(driver, "mark#span")
    assert driver.current_url == href
    return href.rsplit("/", 1)[1]


async def cited(corpus: tuple[Path, Path], chunk_id: str) -> tuple[Citation, str]:
    base, index = corpus
    async with Collection.open(index, base_dir=base) as col:
        fetched = await col.fetch_chunk(chunk_id)
    return fetched.citation, await resolve_citation(fetched.citation, base)


async def test_a_text_result_highlights_its_span(
    inspector: str, browser: WebDriver, corpus: tuple[Path, Path], artifacts: Path
) -> None:
    chunk_id = search_and_open(browser, inspector, "black tea boiling water", "docs/tea.md")
    browser.save_screenshot(str(artifacts / "text-result.png"))
    _, span = await cited(corpus, chunk_id)
    mark = browser.find_element(By.CSS_SELECTOR, "mark#span")
    assert mark.get_attribute("textContent") == span
    assert "Black tea wants boiling water" in span
    badge = browser.find_element(By.CSS_SELECTOR, "p .verdict")
    assert badge.text == "verified"


def _expected_boxes(pdf: bytes, citation: Citation, page: int) -> list[tuple[float, ...]]:
    """Each of the citation's rectangles on ``page`` as pdfium maps it onto the page
    rendered at SCALE (its own coordinate conversion, not the inspector's)."""
    import pypdfium2

    document = pypdfium2.PdfDocument(pdf)
    try:
        sheet = document[page - 1]
        bitmap = sheet.render(scale=SCALE)
        convert = bitmap.get_posconv(sheet)
        out: list[tuple[float, ...]] = []
        for rect in citation.rects:
            if rect.page != page:
                continue
            ax, ay = convert.to_bitmap(rect.x0, rect.y0)
            bx, by = convert.to_bitmap(rect.x1, rect.y1)
            out.append((min(ax, bx), min(ay, by), abs(bx - ax), abs(by - ay)))
        return out
    finally:
        document.close()


def _natural_width(image: WebElement) -> int:
    """The image's own width in pixels, 0 until it has loaded."""
    value = image.get_property("naturalWidth")
    return value if isinstance(value, int) else 0


def _ink(image: Any, box: tuple[float, ...] | None = None) -> int:
    """How many ink pixels ``image`` (PIL, grayscale) has, within ``box`` if given."""
    region = image if box is None else image.crop(tuple(round(v) for v in box))
    histogram = region.histogram()
    return int(sum(histogram[:INK]))


async def check_boxes(
    browser: WebDriver, pdf: bytes, citation: Citation, page: int, shot: Path
) -> tuple[list[tuple[float, ...]], Any]:
    """The open result page draws ``citation``'s rectangles on ``page`` where pdfium maps
    them (DOM within TOLERANCE_PX), each over ink on the image the browser was served;
    the expected pixel boxes and that image (grayscale) for further checks."""
    from PIL import Image

    image_element = _wait(browser, f"figure#page-{page} img")
    WebDriverWait(browser, 30).until(lambda d: _natural_width(image_element) > 0)
    figure = browser.find_element(By.ID, f"page-{page}")
    figure.screenshot(str(shot))
    expected = _expected_boxes(pdf, citation, page)
    drawn = figure.find_elements(By.CSS_SELECTOR, "rect.cited")
    assert len(drawn) == len(expected) > 0
    shown = image_element.rect
    natural = _natural_width(image_element)
    css_per_px = shown["width"] / natural
    for element, (x, y, w, h) in zip(drawn, expected, strict=True):
        box = element.rect
        assert abs(box["x"] - (shown["x"] + x * css_per_px)) <= TOLERANCE_PX, (box, x)
        assert abs(box["y"] - (shown["y"] + y * css_per_px)) <= TOLERANCE_PX, (box, y)
        assert abs(box["width"] - w * css_per_px) <= TOLERANCE_PX, (box, w)
        assert abs(box["height"] - h * css_per_px) <= TOLERANCE_PX, (box, h)
    src = str(image_element.get_attribute("src"))
    async with httpx.AsyncClient(timeout=30) as http:
        png = await http.get(src, headers={"authorization": f"Bearer {TOKEN}"})
    assert png.status_code == 200
    gray = Image.open(io.BytesIO(png.content)).convert("L")
    assert gray.size[0] == natural
    for x, y, w, h in expected:
        under = _ink(gray, (x, y, x + w, y + h))
        assert under >= 0.01 * w * h, (x, y, w, h, under)
    return expected, gray


@pytest.mark.parametrize(
    ("query", "page"),
    [("photovoltaic sunlight rooftops", 1), ("geothermal volcanic islands", 2)],
    ids=["upright", "rotated-90"],
)
async def test_a_pdf_result_boxes_its_lines_on_the_rendered_page(
    inspector: str,
    browser: WebDriver,
    corpus: tuple[Path, Path],
    artifacts: Path,
    query: str,
    page: int,
) -> None:
    from groundkit.service.inspector.app import PAGE_SCALE

    assert PAGE_SCALE == SCALE
    base, _ = corpus
    chunk_id = search_and_open(browser, inspector, query, PDF_SOURCE)
    citation, span = await cited(corpus, chunk_id)
    assert browser.find_element(By.CSS_SELECTOR, "mark#span").get_attribute("textContent") == span
    assert citation.page == page and citation.rects, citation
    browser.save_screenshot(str(artifacts / f"pdf-result-{page}.png"))
    pdf = (base / PDF_SOURCE).read_bytes()
    expected, gray = await check_boxes(browser, pdf, citation, page, artifacts / f"pdf-{page}.png")
    # The span is the page's whole text here: all the page's ink lies inside the boxes.
    total = _ink(gray)
    inside = sum(_ink(gray, (x - 2, y - 2, x + w + 2, y + h + 2)) for x, y, w, h in expected)
    assert total > 0 and inside >= 0.98 * total, (inside, total)


async def test_boxes_on_pages_turned_every_way(
    browser: WebDriver, tmp_path: Path, artifacts: Path
) -> None:
    """A chunk on each page of a PDF whose pages have /Rotate 90, 180, 270 and 0, opened
    in the browser: every box where pdfium maps it, over ink."""
    from evals.pdf_layouts import layout

    rotated = layout("rotated")
    write_tree(tmp_path, {"docs/turned.pdf": rotated.data})
    index = tmp_path / "idx"
    picked: dict[int, Citation] = {}
    async with Collection.open(index, base_dir=tmp_path) as col:
        assert not (await col.ingest(tmp_path / "docs")).failed
        async for batch in col.store.iter_chunks():
            for stored in batch:
                citation = stored.citation
                if citation.page is not None and citation.end_page == citation.page:
                    picked.setdefault(citation.page, citation)
    assert sorted(picked) == [1, 2, 3, 4]
    with serving(index) as address:
        browser.get(address)
        _wait(browser, "input#q")
        for page, citation in sorted(picked.items()):
            browser.get(address.split("?", 1)[0] + f"c/default/chunk/{citation.chunk_id}")
            _wait(browser, "mark#span")
            turn = rotated.rotations[page - 1]
            await check_boxes(
                browser, rotated.data, citation, page, artifacts / f"turned-{turn}.png"
            )


async def test_an_answer_shows_each_sentences_verdict(
    inspector: str, browser: WebDriver, corpus: tuple[Path, Path], artifacts: Path
) -> None:
    chunk_id = search_and_open(browser, inspector, "green tea degrees", "docs/tea.md")
    browser.find_element(By.LINK_TEXT, "Check an answer").click()
    answer = _wait(browser, "textarea#answer")
    answer.send_keys("Green tea is brewed at about 80 degrees [1]. Tea grows on the moon [1].")
    browser.find_element(By.ID, "ids").send_keys(chunk_id)
    browser.find_element(By.ID, "check").click()
    _wait(browser, "tr.sentence")
    browser.save_screenshot(str(artifacts / "answer.png"))
    verdicts = [
        row.find_element(By.CSS_SELECTOR, ".verdict").text
        for row in browser.find_elements(By.CSS_SELECTOR, "tr.sentence")
    ]
    assert verdicts[0] in ("quoted", "supported") and verdicts[1] != verdicts[0], verdicts
    quoted = browser.find_element(By.CSS_SELECTOR, "tr.sentence blockquote").text
    assert "Green tea is brewed at about 80 degrees" in quoted
