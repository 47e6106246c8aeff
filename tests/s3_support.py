"""A local S3-compatible server for tests (moto), and the session fixture that provides one.

``s3_server`` uses ``GROUNDKIT_TEST_S3_ENDPOINT`` when it is set; otherwise it starts
``moto_server`` on 127.0.0.1 with a free port and stops it at the end of the session. As
with PostgreSQL, no server means a skip locally and a failure under ``CI``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from tests.services import free_port, unavailable

__all__ = ["ENDPOINT_ENV", "S3Server", "open_s3_vector_store", "s3_server", "start_s3"]

ENDPOINT_ENV = "GROUNDKIT_TEST_S3_ENDPOINT"
_S3_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


@dataclass
class S3Server:
    endpoint: str
    region: str = "us-east-1"
    # moto accepts any key; a real endpoint takes them from the environment.
    access_key: str = field(default_factory=lambda: os.environ.get("AWS_ACCESS_KEY_ID", "testing"))
    secret_key: str = field(
        default_factory=lambda: os.environ.get("AWS_SECRET_ACCESS_KEY", "testing")
    )
    process: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = None  # the server's output, read when it fails to start

    @property
    def storage_options(self) -> dict[str, str]:
        """What LanceDB's object store needs to reach this server (plain HTTP, path style)."""
        return {
            "aws_endpoint": self.endpoint,
            "aws_allow_http": "true",
            "aws_region": self.region,
            "aws_access_key_id": self.access_key,
            "aws_secret_access_key": self.secret_key,
        }

    @property
    def environment(self) -> dict[str, str]:
        """The same settings as environment variables, which LanceDB also reads."""
        return {key.upper(): value for key, value in self.storage_options.items()}

    def create_bucket(self, name: str) -> None:
        httpx.put(f"{self.endpoint}/{name}", timeout=30).raise_for_status()

    def delete(self, bucket: str, key: str) -> None:
        """Delete one object (a signed request, as the server wants for writes)."""
        from pyarrow import fs as pafs

        host = self.endpoint.split("://", 1)[1]
        filesystem = pafs.S3FileSystem(
            endpoint_override=host,
            scheme="http",
            region=self.region,
            access_key=self.access_key,
            secret_key=self.secret_key,
        )
        filesystem.delete_file(f"{bucket}/{key}")

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Every object key under ``prefix`` (ListObjectsV2, following continuation)."""
        out: list[str] = []
        params = {"list-type": "2", "prefix": prefix}
        while True:
            response = httpx.get(f"{self.endpoint}/{bucket}", params=params, timeout=30)
            response.raise_for_status()
            root = ET.fromstring(response.content)
            out.extend(k.text or "" for k in root.iter(f"{_S3_NS}Key"))
            token = root.findtext(f"{_S3_NS}NextContinuationToken")
            if not token:
                return out
            params["continuation-token"] = token

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.log is not None:
            self.log.close()


def _moto_command() -> list[str] | None:
    if importlib.util.find_spec("moto") is not None:
        return [sys.executable, "-m", "moto.server"]
    found = shutil.which("moto_server")
    return [found] if found else None


def start_s3(timeout: float = 60.0) -> S3Server:
    """Start moto's S3 server on 127.0.0.1 and wait until it answers."""
    command = _moto_command()
    if command is None:
        raise RuntimeError("moto is not installed (pip install 'moto[server]')")
    port = free_port()
    log = tempfile.TemporaryFile()  # noqa: SIM115  (closed by S3Server.stop)
    process = subprocess.Popen(
        [*command, "-H", "127.0.0.1", "-p", str(port)],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = S3Server(endpoint=f"http://127.0.0.1:{port}", process=process, log=log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.seek(0)
            output = log.read()[-2000:].decode(errors="replace")
            server.stop()
            raise RuntimeError(f"moto_server exited: {output}")
        try:
            httpx.get(server.endpoint, timeout=2)
            return server
        except httpx.TransportError:
            time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"moto_server did not answer within {timeout:.0f} s")


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """An S3-compatible endpoint for this session (skipped locally, failed in CI, if none)."""
    given = os.environ.get(ENDPOINT_ENV)
    if given:
        yield S3Server(endpoint=given.rstrip("/"))
        return
    try:
        server = start_s3()
    except (OSError, RuntimeError) as exc:
        unavailable(f"no S3-compatible server for the tests: {exc}")
    try:
        yield server
    finally:
        server.stop()


async def open_s3_vector_store(
    uri: str,
    name: str,
    dimensions: int,
    *,
    storage_options: dict[str, str] | None = None,
    ann_threshold: int | None = None,
) -> Any:
    """A ``LanceDBVectorStore`` whose table is ``<uri>/<name>.lance`` on object storage.

    ``LanceDBVectorStore.open`` takes a local directory, so this builds the store from a
    LanceDB connection to ``uri`` directly: the store's own write and search code runs
    unchanged against S3.
    """
    import lancedb

    from groundkit.storage.lancedb import DEFAULT_ANN_THRESHOLD, LanceDBVectorStore

    conn = await lancedb.connect_async(uri, storage_options=storage_options)
    listed = await conn.list_tables()
    table = await conn.open_table(name) if name in listed.tables else None
    return LanceDBVectorStore(
        conn,
        table,
        path=Path(uri) / f"{name}.lance",
        name=name,
        dimensions=dimensions,
        ann_threshold=ann_threshold or DEFAULT_ANN_THRESHOLD,
    )
