"""The model-backed claim judges: mechanics only (labels, batching, errors), not quality.

The entailment judge loads a tiny randomly initialised BertForSequenceClassification
written here (vocab.txt and all, nothing downloaded); the chat judge talks to a real
HTTP server on 127.0.0.1 that speaks /v1/chat/completions.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from groundkit import (
    ChatClaimJudge,
    ConfigurationError,
    EntailmentModelJudge,
    RetrievalError,
    verify_answer,
)
from groundkit.testing.conformance import ClaimJudgeConformance
from groundkit.verification import ClaimPair
from groundkit.verification.judges import label_of
from tests.answer_support import tea_and_sky, tea_and_sky_collection

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

_VOCAB_TEXT = (
    "[PAD] [UNK] [CLS] [SEP] [MASK] the a is at of tea green black brewed steeped degrees "
    "about 100 80 caffeine does not raise alertness in adults exercise lowers blood pressure "
    "sky blue air scatters light more than red claim with no evidence all regular increased "
    "trial walked daily . , -"
)
_VOCAB = _VOCAB_TEXT.split()
LABELS = {0: "CONTRADICTION", 1: "entailment", 2: "Neutral"}


def _build_nli(directory: Path, *, id2label: dict[int, str], seed: int = 3) -> Path:
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "vocab.txt").write_text("\n".join(_VOCAB) + "\n", encoding="utf-8")
    tokenizer = BertTokenizer(str(directory / "vocab.txt"), do_lower_case=True)
    tokenizer.save_pretrained(str(directory))
    # Three labels named in config.json, as an NLI model's are; everything else tiny.
    sizes: dict[str, Any] = {"hidden_size": 16, "intermediate_size": 32, "num_attention_heads": 2}
    config = BertConfig(
        vocab_size=len(_VOCAB),
        num_hidden_layers=1,
        max_position_embeddings=48,
        initializer_range=0.3,
        id2label=id2label,
        label2id={name: index for index, name in id2label.items()},
        **sizes,
    )
    torch.manual_seed(seed)
    model = BertForSequenceClassification(config)
    with torch.no_grad():
        model.classifier.weight.mul_(8.0)  # logits far apart: no near-ties across batches
    model.save_pretrained(str(directory))
    return directory


@pytest.fixture(scope="module")
def nli_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    return _build_nli(tmp_path_factory.mktemp("nli") / "tiny-nli", id2label=LABELS)


class TestEntailmentJudgeConformance(ClaimJudgeConformance):
    @pytest.fixture
    def judge_factory(self, nli_model: Path) -> Callable[[], EntailmentModelJudge]:
        return lambda: EntailmentModelJudge(nli_model, batch_size=3)


async def test_labels_map_from_id2label_and_batches_agree(nli_model: Path) -> None:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    pairs = [
        ClaimPair("The tea is steeped at 100 degrees.", ("Green tea is brewed at 80 degrees.",)),
        ClaimPair("Caffeine does not raise alertness.", ("Caffeine raises alertness.",)),
        ClaimPair("The sky is blue.", ("Air scatters blue light.", "Red light less.")),
        ClaimPair("Exercise lowers blood pressure.", ("Regular exercise increased it.",)),
        ClaimPair("Black tea.", ()),
    ]
    judge = EntailmentModelJudge(nli_model, batch_size=2)
    assert not judge.loaded
    got = await judge.judge(pairs)
    assert judge.loaded
    # What the model itself says, read straight from transformers.
    tokenizer = AutoTokenizer.from_pretrained(str(nli_model))
    model = AutoModelForSequenceClassification.from_pretrained(str(nli_model)).eval()
    want = []
    for p in pairs:
        encoded = tokenizer(" ".join(p.evidence), p.claim, return_tensors="pt")
        with torch.no_grad():
            index = int(model(**encoded).logits[0].argmax())
        want.append(label_of(LABELS[index]))
    assert [j.label for j in got] == want
    for j in got:
        assert (j.reason != "") is (j.label == "contradiction")
        if j.contradicted:
            assert j.reason.startswith("entailment:tiny-nli reads contradiction (p=")
    assert [j.label for j in await EntailmentModelJudge(nli_model, batch_size=5).judge(pairs)] == [
        j.label for j in got
    ]


async def test_the_labels_follow_id2label(tmp_path: Path) -> None:
    """The same weights under a permuted id2label: each output index keeps its name."""
    pytest.importorskip("transformers")
    pairs = [ClaimPair("The sky is blue.", ("Air scatters blue light.",))]
    names = {"CONTRADICTION": "contradiction", "entailment": "entailment", "Neutral": "neutral"}
    seen = set()
    for n, order in enumerate([(0, 1, 2), (1, 2, 0), (2, 0, 1)]):
        id2label = {i: LABELS[j] for i, j in enumerate(order)}
        model = _build_nli(tmp_path / f"m{n}", id2label=id2label)
        (got,) = await EntailmentModelJudge(model).judge(pairs)
        seen.add(got.label)
        assert got.label in names.values()
    assert seen == {"contradiction", "entailment", "neutral"}


def test_label_names() -> None:
    assert label_of("CONTRADICTION") == "contradiction"
    assert label_of("entails") == "entailment"
    assert label_of(" Neutral ") == "neutral"
    assert label_of("LABEL_0") is None


async def test_a_model_without_nli_labels_is_a_configuration_error(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    plain = _build_nli(tmp_path / "plain", id2label={0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"})
    judge = EntailmentModelJudge(plain)
    with pytest.raises(ConfigurationError, match="id2label naming entailment"):
        await judge.judge([ClaimPair("Tea.", ("Tea.",))])


async def test_a_missing_directory_is_a_configuration_error(tmp_path: Path) -> None:
    judge = EntailmentModelJudge(tmp_path / "nowhere")
    with pytest.raises(ConfigurationError, match="no model directory"):
        await judge.judge([ClaimPair("Tea.", ("Tea.",))])
    pytest.importorskip("transformers")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigurationError, match="cannot load the entailment model"):
        await EntailmentModelJudge(tmp_path / "empty").judge([ClaimPair("Tea.", ("Tea.",))])


@pytest.mark.parametrize(
    "kwargs", [{"batch_size": 0}, {"batch_size": True}, {"max_length": -1}, {"model_path": ""}]
)
def test_bad_arguments(kwargs: dict[str, Any], tmp_path: Path) -> None:
    args: dict[str, Any] = {"model_path": tmp_path} | kwargs
    with pytest.raises(ConfigurationError):
        EntailmentModelJudge(**args)


# -- the chat endpoint ---------------------------------------------------------------


@dataclass
class ChatServer:
    """Answers /v1/chat/completions: by default a verdict read off the claim's words."""

    url: str
    replies: list[tuple[int, bytes]] = field(default_factory=list)
    seen: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    hold: threading.Event | None = None
    trickle: float | None = None  # seconds between the reply's bytes
    encoding: str | None = None  # a Content-Encoding header for the reply


def _content(body: dict[str, Any]) -> str:
    user = body["messages"][-1]["content"]
    claim = user.split("\n", 1)[0].casefold()
    if " not " in f" {claim} " or "100" in claim:
        verdict = {"label": "contradiction", "reason": "the source says otherwise"}
    elif "blue" in claim:
        verdict = {"label": "entailment", "reason": ""}
    else:
        verdict = {"label": "neutral"}
    return json.dumps(verdict)


def completion(content: str) -> bytes:
    return json.dumps(
        {"choices": [{"message": {"role": "assistant", "content": content}}]}
    ).encode()


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    lock = threading.Lock()
    state = ChatServer("")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length))
            with lock:
                state.seen.append(body)
                state.headers.append(dict(self.headers))
                scripted = state.replies.pop(0) if state.replies else None
            if state.hold is not None:
                state.hold.wait(30)
            if self.path != "/v1/chat/completions":
                status, payload = 404, b"{}"
            elif scripted is not None:
                status, payload = scripted
            else:
                status, payload = 200, completion(_content(body))
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            if state.encoding is not None:
                self.send_header("Content-Encoding", state.encoding)
            self.end_headers()
            if state.trickle is None:
                self.wfile.write(payload)
                return
            for byte in payload:  # ends with a broken pipe once the client gives up
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(state.trickle)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield state
    finally:
        if state.hold is not None:
            state.hold.set()
        server.shutdown()
        server.server_close()
        thread.join()


class TestChatJudgeConformance(ClaimJudgeConformance):
    @pytest.fixture
    def judge_factory(self, chat_server: ChatServer) -> Callable[[], ChatClaimJudge]:
        return lambda: ChatClaimJudge(chat_server.url, "tiny-judge", api_key="sk-test")


async def test_chat_judge_reads_strict_json(chat_server: ChatServer) -> None:
    judge = ChatClaimJudge(chat_server.url, "tiny-judge", api_key="sk-secret")
    got = await judge.judge(
        [
            ClaimPair("The tea is steeped at 100 degrees.", ("Tea is brewed at 80 degrees.",)),
            ClaimPair("The sky is blue.", ("Air scatters blue light.",)),
            ClaimPair("Tea is a drink.", ("Tea is a drink.",)),
        ]
    )
    assert [j.label for j in got] == ["contradiction", "entailment", "neutral"]
    assert got[0].reason == "the source says otherwise"
    body = chat_server.seen[0]
    assert body["model"] == "tiny-judge" and body["temperature"] == 0
    assert body["response_format"] == {"type": "json_object"}
    assert all(h.get("Authorization") == "Bearer sk-secret" for h in chat_server.headers)


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        (b"not json", "not JSON"),
        (b'{"choices": []}', "no choices"),
        (completion("contradiction"), "not a JSON object"),
        (completion('{"label": "maybe", "reason": "x"}'), "label must be one of"),
        (completion('{"label": "neutral", "reason": 3}'), "reason must be a string"),
        # JSON escapes a lone surrogate; in a report it could not be written as JSON.
        (
            completion('{"label": "contradiction", "reason": "\\ud800 bad"}'),
            r"reason cannot be encoded.*U\+D800",
        ),
        (completion('{"label": "neutral", "extra": 1}'), 'only "label" and "reason"'),
        (completion("[1, 2]"), 'only "label" and "reason"'),
        (json.dumps({"choices": [{"message": {"content": None}}]}).encode(), "not a string"),
        # Nested past the parser's recursion limit: a RecursionError, not a ValueError.
        (b"[" * 100_000 + b"]" * 100_000, "not JSON"),
        (completion("[" * 100_000 + "]" * 100_000), "not a JSON object"),
    ],
)
async def test_every_malformed_reply_is_a_retrieval_error(
    chat_server: ChatServer, reply: bytes, why: str
) -> None:
    chat_server.replies.append((200, reply))
    judge = ChatClaimJudge(chat_server.url, "tiny-judge")
    with pytest.raises(RetrievalError, match=why):
        await judge.judge([ClaimPair("Tea.", ("Tea.",))])


@pytest.mark.parametrize(
    ("status", "error", "match"),
    [
        (401, ConfigurationError, "credentials"),
        (403, ConfigurationError, "credentials"),
        (404, ConfigurationError, "base_url"),
        (500, RetrievalError, "HTTP 500"),
        (429, RetrievalError, "HTTP 429"),
    ],
)
async def test_statuses_are_typed_errors_without_the_key(
    chat_server: ChatServer, status: int, error: type[Exception], match: str
) -> None:
    chat_server.replies.append((status, b"{}"))
    judge = ChatClaimJudge(chat_server.url, "tiny-judge", api_key="sk-very-secret")
    with pytest.raises(error, match=match) as caught:
        await judge.judge([ClaimPair("Tea.", ("Tea.",))])
    assert "sk-very-secret" not in str(caught.value)


async def test_credentials_in_base_url_go_as_basic_auth_and_are_never_shown(
    chat_server: ChatServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    chat_server.replies.append((500, b"{}"))
    base = chat_server.url.replace("http://", "http://bob:hunter2@")
    with pytest.raises(RetrievalError, match="HTTP 500") as caught:
        await ChatClaimJudge(base, "m").judge([ClaimPair("a", ("b",))])
    assert "hunter2" not in str(caught.value) and "bob" not in str(caught.value)
    assert all("hunter2" not in r.getMessage() for r in caplog.records)
    assert chat_server.headers[0]["Authorization"] == "Basic Ym9iOmh1bnRlcjI="


def test_an_api_key_and_url_credentials_together_are_refused() -> None:
    # Sent together, the URL's Basic auth replaced the Bearer header without a word.
    with pytest.raises(ConfigurationError, match="one way") as caught:
        ChatClaimJudge("http://bob:hunter2@127.0.0.1:1/v1", "m", api_key="sk-very-secret")
    assert "hunter2" not in str(caught.value) and "sk-very-secret" not in str(caught.value)


async def test_a_wrong_base_url_and_a_dead_server(chat_server: ChatServer) -> None:
    with pytest.raises(ConfigurationError, match="404"):
        await ChatClaimJudge(chat_server.url + "/extra", "m").judge([ClaimPair("a", ("b",))])
    with ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler) as dead:
        port = dead.server_address[1]
    with pytest.raises(RetrievalError, match="could not reach"):
        await ChatClaimJudge(f"http://127.0.0.1:{port}/v1", "m").judge([ClaimPair("a", ("b",))])


async def test_a_lone_surrogate_is_refused_before_any_request(chat_server: ChatServer) -> None:
    judge = ChatClaimJudge(chat_server.url, "m")
    with pytest.raises(RetrievalError, match=r"a claim cannot be encoded.*U\+D800"):
        await judge.judge([ClaimPair("bad \ud800", ("b",))])
    with pytest.raises(RetrievalError, match=r"evidence cannot be encoded.*U\+DFFF"):
        await judge.judge([ClaimPair("a", ("ok", "bad \udfff"))])
    assert chat_server.seen == []


async def test_a_trickled_reply_meets_the_deadline(chat_server: ChatServer) -> None:
    # A byte every 50 ms never trips a per-read timeout of 0.5 s.
    chat_server.trickle = 0.05
    judge = ChatClaimJudge(chat_server.url, "m", timeout=0.5)
    with pytest.raises(RetrievalError, match=r"did not answer within 0\.5 s"):
        await asyncio.wait_for(judge.judge([ClaimPair("a", ("b",))]), 60)


@pytest.mark.parametrize(
    ("coding", "reply", "why"),
    [
        # 64 MiB of JSON whitespace in 64 KB of gzip: cut at the cap, not inflated.
        ("gzip", gzip.compress(b" " * (64 * 1024 * 1024), 9), r"a body over \d+ bytes"),
        ("zstd", b"\x28\xb5\x2f\xfd", "content coding 'zstd'"),
        ("gzip, gzip", b"", "content coding 'gzip, gzip'"),
    ],
)
async def test_a_reply_is_read_under_a_cap_and_in_one_bounded_coding(
    chat_server: ChatServer, coding: str, reply: bytes, why: str
) -> None:
    chat_server.replies.append((200, reply))
    chat_server.encoding = coding
    with pytest.raises(RetrievalError, match=why):
        await ChatClaimJudge(chat_server.url, "m").judge([ClaimPair("a", ("b",))])
    assert chat_server.headers[0]["Accept-Encoding"] == "gzip, deflate"


async def test_a_server_that_does_not_answer_in_time(chat_server: ChatServer) -> None:
    chat_server.hold = threading.Event()
    judge = ChatClaimJudge(chat_server.url, "m", timeout=0.2)
    with pytest.raises(RetrievalError, match=r"did not answer within 0\.2 s"):
        await judge.judge([ClaimPair("a", ("b",))])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"base_url": "ftp://x"},
        {"model": " "},
        {"timeout": 0},
        {"timeout": True},
        {"max_concurrency": 0},
        {"api_key": "sk-key\n"},  # no header can carry it
        {"api_key": "sk-ключ"},
        {
            "base_url": "http://127.0.0.1:99999/v1"
        },  # failed only when posting, not a groundkit error
        {"base_url": "http://127.0.0.1:0/v1"},
    ],
)
def test_chat_judge_bad_arguments(kwargs: dict[str, Any]) -> None:
    args: dict[str, Any] = {"base_url": "http://127.0.0.1:1/v1", "model": "m"} | kwargs
    with pytest.raises(ConfigurationError):
        ChatClaimJudge(**args)


async def test_a_socket_layer_failure_is_a_retrieval_error() -> None:
    """What the socket layer raises past httpx (anyio's ExceptionGroup holding an
    OverflowError for a port out of range) is a transport failure like any other."""
    judge = ChatClaimJudge("http://127.0.0.1:1/v1", "m", timeout=5)
    judge._url = "http://127.0.0.1:99999/v1/chat/completions"  # past the constructor's check
    with pytest.raises(RetrievalError, match="could not reach"):
        await judge.judge([ClaimPair("a", ("b",))])


async def test_verify_answer_takes_a_chat_judge(chat_server: ChatServer, tmp_path: Path) -> None:
    async with tea_and_sky_collection(tmp_path) as col:
        response = await tea_and_sky(col)
        answer = (
            "Green tea does not lower blood pressure in adults [1]. "
            "The sky is blue because air scatters sunlight [2]."
        )
        judge = ChatClaimJudge(chat_server.url, "tiny-judge")
        report = await verify_answer(answer, response, tmp_path / "corpus", claim_judge=judge)
        assert [s.verdict for s in report.sentences] == ["contradicted", "supported"]
        assert report.sentences[0].detail.startswith("the source says otherwise")
        assert report.claim_judge == "chat:tiny-judge"
        # One request per judged sentence, each with its closest cited sentences.
        assert len(chat_server.seen) == 2
        # The two requests run concurrently, so they may arrive in either order.
        prompts = [request["messages"][-1]["content"] for request in chat_server.seen]
        assert sum("Green tea lowers blood pressure" in p for p in prompts) == 1
