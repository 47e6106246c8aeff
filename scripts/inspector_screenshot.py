"""The screenshot of the citation inspector in docs/inspector.md, made the way a person
would see it: a generated PDF ingested, ``grk inspect`` started, headless Chromium
searching and opening the PDF result, the window saved as a PNG.

    python scripts/inspector_screenshot.py [--out docs/img/inspector.png]

Needs groundkit[inspect], selenium and Pillow, and Debian's chromium and chromium-driver.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARAGRAPHS = (
    "Solar energy in brief",
    "Photovoltaic panels convert sunlight into electricity. A typical rooftop array of "
    "twenty panels produces between five and eight kilowatts at noon on a clear day.",
    "Output falls in winter and under cloud; batteries store the midday surplus for the "
    "evening, when demand peaks.",
    "Inverters turn the panels' direct current into the alternating current of the grid, "
    "and most fail long before the panels do.",
)
GRK = (sys.executable, "-m", "groundkit")
QUERY = "how much electricity does a rooftop array produce"


def _pdf() -> bytes:
    from fpdf import FPDF

    pdf = FPDF(unit="pt", format="letter")
    pdf.add_page()
    pdf.set_font("helvetica", style="B", size=20)
    pdf.set_xy(72, 72)
    pdf.multi_cell(468, 26, PARAGRAPHS[0])
    pdf.set_font("helvetica", size=13)
    for text in PARAGRAPHS[1:]:
        pdf.set_x(72)
        pdf.multi_cell(468, 18, text)
        pdf.ln(10)
    return bytes(pdf.output())


def _start(index: Path) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "groundkit", "inspect", str(index), "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    line = process.stderr.readline()
    if "citation inspector at " not in line:
        process.kill()
        raise SystemExit(f"grk inspect did not start: {line}")
    return process, line.split(" at ", 1)[1].strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "inspector.png")
    parser.add_argument("--width", type=int, default=960, help="width of the saved image")
    args = parser.parse_args()

    from PIL import Image
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        (base / "docs").mkdir()
        (base / "docs" / "solar.pdf").write_bytes(_pdf())
        index = base / "idx"
        subprocess.run(
            [*GRK, "ingest", "docs", "--index-dir", str(index), "--chunker", "sentence", "-q"],
            cwd=base,
            check=True,
        )
        process, address = _start(index)
        options = Options()
        options.binary_location = "/usr/bin/chromium"
        for argument in (
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=1200,900",
            "--force-device-scale-factor=1",
            "--hide-scrollbars",
        ):
            options.add_argument(argument)
        driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
        try:
            driver.get(address)
            wait = WebDriverWait(driver, 30)
            box = wait.until(lambda d: d.find_element(By.ID, "q"))
            box.send_keys(QUERY)
            driver.find_element(By.ID, "search").click()
            wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "a.result-link")).click()
            image = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "figure img"))
            wait.until(lambda d: image.get_property("naturalWidth"))
            png = driver.get_screenshot_as_png()
        finally:
            driver.quit()
            process.terminate()
            process.wait(timeout=30)
    shot = Image.open(io.BytesIO(png)).convert("RGB")
    height = round(shot.height * args.width / shot.width)
    small = shot.resize((args.width, height), Image.Resampling.LANCZOS)
    quantized = small.quantize(colors=128, method=Image.Quantize.MEDIANCUT)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    quantized.save(args.out, optimize=True)
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes, {args.width}x{height})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
