"""A small corpus for the citation inspector's tests: text, hostile Markdown and a PDF
whose second page is rotated, ingested into one collection."""

from __future__ import annotations

import io
from pathlib import Path

from groundkit import Collection
from tests.support import write_tree

TOKEN = "inspector-token-0123456789abcdef"
PDF_SOURCE = "docs/energy.pdf"
# One distinctive word a page, so a search names the page its hit must come from.
PDF_PAGES = (
    "Photovoltaic panels convert sunlight into electricity on sunny rooftops.",
    "Geothermal wells tap the heat of the earth below volcanic islands.",
)
HOSTILE = (
    "# Hostile <script>alert('zanzibarite')</script>\n\n"
    'Zanzibarite notes: <img src="https://evil.example/p.png" onerror="alert(1)"> '
    "and \"quotes\" & ampersands, <a href='javascript:alert(2)'>a link</a>, "
    "</pre></mark><style>body{display:none}</style> end of zanzibarite.\n"
)
FILES = {
    "docs/tea.md": "Green tea is brewed at about 80 degrees.\n\n"
    "Black tea wants boiling water and four minutes.\n",
    "docs/hostile.md": HOSTILE,
}


def energy_pdf() -> bytes:
    """Two letter-size pages of 14 pt Helvetica at known places; page 2 has /Rotate 90."""
    import pypdfium2
    from fpdf import FPDF

    pdf = FPDF(unit="pt", format="letter")
    pdf.set_font("helvetica", size=14)
    for text in PDF_PAGES:
        pdf.add_page()
        pdf.set_xy(72, 144)
        pdf.multi_cell(300, 18, text)
    document = pypdfium2.PdfDocument(bytes(pdf.output()))
    try:
        document[1].set_rotation(90)
        out = io.BytesIO()
        document.save(out)
    finally:
        document.close()
    return out.getvalue()


async def build_index(root: Path) -> Path:
    """``root/docs`` written and ingested into ``root/idx`` (collection ``default``)."""
    write_tree(root, {**FILES, PDF_SOURCE: energy_pdf()})
    index = root / "idx"
    async with Collection.open(index, base_dir=root) as col:
        report = await col.ingest(root / "docs")
        assert not report.failed, report.failed
    return index
