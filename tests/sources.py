"""Real PDF, HTML and HTTP fixtures for the sources tests.

PDFs are generated with fpdf2 (DejaVu for non-Latin text); the web server is a
real ``http.server`` on 127.0.0.1 whose routes a test scripts.
"""

from __future__ import annotations

import io
import socket
import struct
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

DEJAVU = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")

# One distinct word per page, so a search hit names the page it must come from.
PAGES = (
    "Photovoltaic panels convert sunlight into electricity on the first page.",
    "Αιολική ενέργεια: wind turbines and the Greek word for wind on page two.",
    "Гидроэлектростанция: hydroelectric dams store water in Russian on page three.",
    "Geothermal wells tap the heat of the earth on the fourth and last page.",
)

# Served and stored as windows-1252 bytes: not UTF-8, so the meta charset decides.
HTML_PAGE = """<!DOCTYPE html>
<html><head><meta charset="windows-1252"><title>  Café “Guide” </title>
<style>body { color: red; } .secret { display: none }</style>
<script>var tracking = "scriptword should never be indexed";</script>
</head>
<body>
<!-- commentword is not content -->
<noscript>noscriptword</noscript>
<template><p>templateword</p></template>
<h1>Espresso   basics</h1>
<p>An espresso is brewed by forcing hot water
   through finely ground coffee.<br>Crema sits on top.</p>
<ul><li>Ristretto</li><li>Lungo</li></ul>
<pre>  grind   fine
  tamp    firm</pre>
<table><tr><td>dose</td><td>18 g</td></tr></table>
</body></html>
"""


def _font_pdf() -> Any:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.add_font("DejaVu", fname=str(DEJAVU))
    pdf.set_font("DejaVu", size=12)
    return pdf


def make_pdf(
    pages: Sequence[str] = PAGES,
    *,
    user_password: str | None = None,
    info: dict[str, Any] | None = None,
) -> bytes:
    """A PDF with one page per string; encrypted (RC4) when a user password is given.

    ``info`` sets document info: ``title``, ``author``, ``subject`` (strings),
    ``creation_date`` (a datetime).
    """
    pdf = _font_pdf()
    for name, value in (info or {}).items():
        getattr(pdf, f"set_{name}")(value)
    if user_password is not None:
        pdf.set_encryption(owner_password="owner", user_password=user_password)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 10, text)
    return bytes(pdf.output())


def image_only_pdf() -> bytes:
    """A scanned-looking PDF: one page holding a picture, no text layer."""
    from PIL import Image

    image = Image.new("RGB", (64, 32), (200, 30, 30))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    pdf = _font_pdf()
    pdf.add_page()
    pdf.image(io.BytesIO(buffer.getvalue()), x=10, y=10, w=100)
    return bytes(pdf.output())


# -- compressed bodies -----------------------------------------------------------


def gzip_bomb(decoded_bytes: int, layers: int = 2) -> bytes:
    """``decoded_bytes`` NUL bytes gzipped ``layers`` times, built in steps of 1 MiB
    (the decoded form is never held whole)."""
    streams = [zlib.compressobj(9, zlib.DEFLATED, 31) for _ in range(layers)]

    def push(data: bytes) -> bytes:
        for stream in streams:
            data = stream.compress(data)
        return data

    out = bytearray()
    step = b"\0" * (1024 * 1024)
    left = decoded_bytes
    while left > 0:
        out += push(step[: min(left, len(step))])
        left -= len(step)
    # Flushing each layer in turn: what the inner one flushes still goes through the outer.
    tail = b""
    for stream in streams:
        tail = stream.compress(tail) + stream.flush()
    return bytes(out + tail)


def raw_deflate(data: bytes) -> bytes:
    """``data`` as a bare deflate stream, without the zlib wrapper some servers omit."""
    stream = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    return stream.compress(data) + stream.flush()


# -- a scripted web server ---------------------------------------------------


@dataclass(frozen=True)
class Route:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    # Send the headers and this much body, then stall for this long.
    stall_after: int | None = None
    stall_seconds: float = 0.0
    chunked: bool = False  # no Content-Length; stream the body in pieces
    # Headers sent after ``headers``, a name possibly again (a second Content-Type).
    repeated: tuple[tuple[str, str], ...] = ()
    # Send this much body, then reset the connection (a TCP RST, no orderly close).
    reset_after: int | None = None


@dataclass(frozen=True)
class Seen:
    path: str
    headers: dict[str, str]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        site = self.server.site
        site.record(Seen(self.path, dict(self.headers.items())))
        route = site.routes.get(self.path.split("?", 1)[0], Route(404, b"not here"))
        self.send_response(route.status)
        for name, value in (*route.headers.items(), *route.repeated):
            self.send_header(name, value)
        if route.chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(len(route.body)))
        self.end_headers()
        body = route.body
        if route.reset_after is not None:
            self.wfile.write(body[: route.reset_after])
            self.wfile.flush()
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()  # now: a shutdown first would send a FIN
            self.close_connection = True
            return
        if route.stall_after is not None:
            self.wfile.write(body[: route.stall_after])
            self.wfile.flush()
            time.sleep(route.stall_seconds)
            self.close_connection = True
            return
        if route.chunked:
            for i in range(0, len(body), 4096):
                piece = body[i : i + 4096]
                self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    site: Site

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up on a stalled or oversized reply


class Site:
    """An HTTP server on 127.0.0.1 serving ``routes`` (path → Route)."""

    def __init__(self, wrap: Callable[[Any], Any] | None = None) -> None:
        self.routes: dict[str, Route] = {}
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        if wrap is not None:
            self._httpd.socket = wrap(self._httpd.socket)
        self._httpd.site = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def url(self, path: str, host: str = "127.0.0.1", scheme: str = "http") -> str:
        return f"{scheme}://{host}:{self.port}{path}"

    def record(self, seen: Seen) -> None:
        with self._lock:
            self.seen.append(seen)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def stub_resolver(table: dict[str, list[str]], calls: list[str]) -> Any:
    """A resolver answering from ``table``; records every name it is asked."""

    async def resolve(host: str, port: int) -> list[str]:
        calls.append(host)
        if host not in table:
            raise OSError(f"stub resolver has no entry for {host!r}")
        return table[host]

    return resolve


def self_signed(directory: Path, hostname: str) -> tuple[Path, Path]:
    """A certificate for ``hostname`` only (no IP address in it), and its key."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostname)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(hostname)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path = directory / "cert.pem"
    key_path = directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path
