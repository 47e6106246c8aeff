"""Claim judges backed by a model: a local entailment classifier or a chat endpoint.

``RuleClaimJudge`` (``claims.py``) sees numbers, negation and direction words
only. These two read the whole sentence, so they can catch a contradiction in
wording the rules miss, and bring the quality of the model behind them: none
ships with groundkit, and the tests exercise the mechanics (labels, batching,
errors) with a randomly initialised model and a local HTTP server, not quality.

- ``EntailmentModelJudge``: a local sequence-classification model directory
  (an NLI cross-encoder) whose ``config.json`` names its labels in
  ``id2label`` (entailment / neutral / contradiction, in any order and case).
  Loaded on first use in a worker thread, like the reranker; needs
  ``pip install groundkit[local]``.
- ``ChatClaimJudge``: an OpenAI-compatible ``/chat/completions`` endpoint asked
  for a JSON object ``{"label": ..., "reason": ...}``; anything else it answers
  is a ``RetrievalError``, never a guess.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import threading
from collections.abc import Sequence
from typing import Any, Final

import httpx

from groundkit.errors import ConfigurationError, RetrievalError
from groundkit.utils.http_answer import (
    POST_FAILURES,
    UnreadableAnswer,
    credentials,
    json_body,
    port_problem,
    post_json,
)
from groundkit.utils.text import describe_unencodable
from groundkit.verification.claims import ClaimJudgement, ClaimLabel, ClaimPair, check_pairs

__all__ = ["ChatClaimJudge", "EntailmentModelJudge", "label_of"]

logger = logging.getLogger("groundkit.verification")

_LABELS: Final[tuple[ClaimLabel, ...]] = ("entailment", "neutral", "contradiction")


def label_of(name: object) -> ClaimLabel | None:
    """The judgement a model's label name stands for ("CONTRADICTION", "entails"), or None."""
    text = str(name).strip().casefold()
    if text.startswith("contradict"):
        return "contradiction"
    if text.startswith("entail"):
        return "entailment"
    if text.startswith("neutral"):
        return "neutral"
    return None


def _premise(pair: ClaimPair) -> str:
    return " ".join(" ".join(s.split()) for s in pair.evidence)


class EntailmentModelJudge:
    """A local NLI classifier: premise = the evidence sentences, hypothesis = the claim.

    The label with the highest logit wins; its softmax probability is shown in
    the reason. Construction touches nothing; the first ``judge`` loads the
    model in a worker thread, and a failed load is retried by the next call.
    Remote code is never trusted.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        *,
        batch_size: int = 16,
        max_length: int = 512,
        device: str = "cpu",
    ) -> None:
        path = os.fspath(model_path) if isinstance(model_path, str | os.PathLike) else None
        if not path or not path.strip():
            raise ConfigurationError("an entailment judge needs a local model directory")
        for name, value in (("batch_size", batch_size), ("max_length", max_length)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"{name} must be a positive integer, got {value!r}")
        self.model_path = path
        self.name = f"entailment:{os.path.basename(os.path.normpath(path)) or path}"
        self._batch_size = batch_size
        self._max_length = max_length
        self._device = device
        self._model: tuple[Any, Any, dict[int, ClaimLabel]] | None = None
        # A threading lock, not an asyncio one: the judge may serve more than one event
        # loop (the sync API runs its own), and the load happens in a worker thread.
        self._load_lock = threading.Lock()
        self._predict_lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._model is not None

    async def judge(self, pairs: Sequence[ClaimPair]) -> list[ClaimJudgement]:
        checked = check_pairs(pairs)
        if not checked:
            return []
        tokenizer, model, labels = await self._loaded()
        try:
            rows = await asyncio.to_thread(self._predict, tokenizer, model, checked)
        except Exception as exc:
            logger.debug("entailment inference failed", exc_info=True)
            raise RetrievalError(
                f"could not judge {len(checked)} claims with the entailment model "
                f"{self.model_path!r} ({type(exc).__name__}); enable DEBUG logging on "
                "'groundkit.verification' for the backend's message"
            ) from None
        out: list[ClaimJudgement] = []
        for row in rows:
            if len(row) != len(labels) or not all(math.isfinite(v) for v in row):
                raise RetrievalError(
                    f"the entailment model {self.model_path!r} gave {len(row)} scores "
                    f"({'finite' if all(math.isfinite(v) for v in row) else 'not finite'}) "
                    f"for its {len(labels)} labels"
                )
            best = max(range(len(row)), key=lambda i: (row[i], -i))
            top = max(row)
            total = sum(math.exp(v - top) for v in row)
            label = labels[best]
            reason = ""
            if label == "contradiction":
                reason = f"{self.name} reads contradiction (p={1.0 / total:.2f})"
            out.append(ClaimJudgement(label, reason))
        return out

    async def _loaded(self) -> tuple[Any, Any, dict[int, ClaimLabel]]:
        if self._model is not None:
            return self._model
        return await asyncio.to_thread(self._load_once)

    def _load_once(self) -> tuple[Any, Any, dict[int, ClaimLabel]]:
        """Concurrent first calls load once; a failed load is retried by the next call."""
        with self._load_lock:
            if self._model is None:
                self._model = self._load()
            return self._model

    def _load(self) -> tuple[Any, Any, dict[int, ClaimLabel]]:
        path = os.path.expanduser(self.model_path)
        if not os.path.isdir(path):
            raise ConfigurationError(
                f"no model directory at {self.model_path!r}: pass the local directory of a "
                "sequence-classification (NLI) model; nothing is downloaded"
            )
        try:
            import torch  # noqa: F401
            from transformers import AutoModelForSequenceClassification, AutoTokenizer
        except ImportError as exc:
            raise ConfigurationError(
                "an entailment judge needs torch and transformers: pip install groundkit[local]"
            ) from exc
        try:
            tokenizer = AutoTokenizer.from_pretrained(
                path, local_files_only=True, trust_remote_code=False
            )
            model = AutoModelForSequenceClassification.from_pretrained(
                path, local_files_only=True, trust_remote_code=False
            )
        except Exception as exc:
            detail = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
            raise ConfigurationError(
                f"cannot load the entailment model {self.model_path!r} "
                f"[{type(exc).__name__}: {detail}]: it needs config.json, weights and "
                "tokenizer files of a sequence-classification model"
            ) from exc
        id2label = getattr(model.config, "id2label", None) or {}
        labels: dict[int, ClaimLabel] = {}
        for key, name in id2label.items():
            label = label_of(name)
            if label is not None:
                labels[int(key)] = label
        if len(labels) != len(id2label) or "contradiction" not in labels.values():
            raise ConfigurationError(
                f"the model {self.model_path!r} labels its outputs {sorted(id2label.values())}; "
                "an entailment judge needs id2label naming entailment, neutral and "
                "contradiction (set them in config.json)"
            )
        model.to(self._device)
        model.eval()
        return tokenizer, model, labels

    def _predict(self, tokenizer: Any, model: Any, pairs: list[ClaimPair]) -> list[list[float]]:
        import torch  # extra: local (the model was loaded with it)

        rows: list[list[float]] = []
        with self._predict_lock, torch.no_grad():
            for at in range(0, len(pairs), self._batch_size):
                batch = pairs[at : at + self._batch_size]
                encoded = tokenizer(
                    [_premise(p) for p in batch],
                    [p.claim for p in batch],
                    truncation=True,
                    padding=True,
                    max_length=min(
                        self._max_length,
                        int(getattr(model.config, "max_position_embeddings", self._max_length)),
                    ),
                    return_tensors="pt",
                ).to(self._device)
                logits = model(**encoded).logits
                rows.extend([float(v) for v in row] for row in logits.tolist())
        return rows


_SYSTEM = (
    "You check whether a claim contradicts its evidence. Reply with one JSON object and "
    'nothing else: {"label": "entailment" | "neutral" | "contradiction", "reason": "<at '
    'most 12 words>"}. "contradiction" only when the evidence states the claim is false '
    "(a different number, the opposite direction, a negation); otherwise neutral or "
    "entailment."
)
_REASON_CHARS: Final = 200
# A verdict is a few dozen bytes, a completion around it (reasoning included) far
# less than this.
_MAX_REPLY_BYTES: Final = 4 * 1024 * 1024


class ChatClaimJudge:
    """An OpenAI-compatible chat endpoint asked for a strict JSON verdict per claim.

    ``base_url`` is the API root (``http://host:port/v1``); the request goes to
    ``{base_url}/chat/completions`` with temperature 0. The API key is sent as
    a bearer header and never appears in a message. 401/403/404 raise
    ``ConfigurationError`` (credentials, model or URL); a timeout (``timeout``
    bounds the whole answer, not each read), a transport failure, another
    status, a reply over 4 MiB, or any reply that is not exactly the JSON object
    asked for raises ``RetrievalError``.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_concurrency: int = 4,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ConfigurationError(f"base_url must be an http(s) URL, got {base_url!r}")
        if not isinstance(model, str) or not model.strip():
            raise ConfigurationError("a chat judge needs a model name")
        if api_key is not None and not isinstance(api_key, str):
            raise ConfigurationError("api_key, when given, must be a string")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise ConfigurationError(f"timeout must be a positive number, got {timeout!r}")
        if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int):
            raise ConfigurationError("max_concurrency must be a positive integer")
        if max_concurrency < 1:
            raise ConfigurationError("max_concurrency must be a positive integer")
        self.name = f"chat:{model}"
        try:
            endpoint = httpx.URL(base_url.rstrip("/") + "/chat/completions")
        except (httpx.InvalidURL, ValueError):
            raise ConfigurationError("base_url is not a valid URL") from None
        problem = port_problem(endpoint)
        if problem is not None:
            raise ConfigurationError(problem)
        # Credentials in base_url go as Basic auth, never in the URL shown or requested.
        requested, self._auth = credentials(endpoint, api_key)
        self._url = str(requested)
        self._model = model
        self._key = api_key
        self._timeout = float(timeout)
        self._concurrency = max_concurrency
        self._transport = transport

    async def judge(self, pairs: Sequence[ClaimPair]) -> list[ClaimJudgement]:
        checked = check_pairs(pairs)
        if not checked:
            return []
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        gate = asyncio.Semaphore(self._concurrency)
        async with httpx.AsyncClient(
            timeout=self._timeout, headers=headers, transport=self._transport
        ) as client:

            async def one(pair: ClaimPair) -> ClaimJudgement:
                async with gate:
                    return await self._ask(client, pair)

            return list(await asyncio.gather(*(one(p) for p in checked)))

    async def _ask(self, client: httpx.AsyncClient, pair: ClaimPair) -> ClaimJudgement:
        evidence = "\n".join(f"- {' '.join(s.split())}" for s in pair.evidence)
        body = {
            "model": self._model,
            "temperature": 0,
            "response_format": {"type": "json_object"},
            "messages": [
                {"role": "system", "content": _SYSTEM},
                {"role": "user", "content": f"Claim: {pair.claim}\nEvidence:\n{evidence}"},
            ],
        }
        try:
            # One deadline for the whole answer, read under a cap (utils/http_answer.py).
            answer = await post_json(
                client,
                self._url,
                body,
                headers={},
                auth=self._auth,
                deadline=self._timeout,
                limit=_MAX_REPLY_BYTES,
            )
        except (httpx.TimeoutException, TimeoutError):
            raise RetrievalError(
                f"the chat judge at {self._url} did not answer within {self._timeout:g} s"
            ) from None
        except (httpx.HTTPError, *POST_FAILURES) as exc:
            raise RetrievalError(
                f"could not reach the chat judge at {self._url} ({type(exc).__name__})"
            ) from None
        except UnreadableAnswer as exc:
            raise RetrievalError(f"the chat judge at {self._url} sent {exc}") from None
        if answer.status in (401, 403):
            raise ConfigurationError(
                f"the chat judge at {self._url} refused the credentials "
                f"(HTTP {answer.status}); check api_key"
            )
        if answer.status == 404:
            raise ConfigurationError(
                f"the chat judge at {self._url} answered 404: check base_url (the API root, "
                f"e.g. http://host:port/v1) and that model {self._model!r} exists"
            )
        if answer.status != 200:
            raise RetrievalError(f"the chat judge at {self._url} answered HTTP {answer.status}")
        return _parse_reply(answer.body, self._url)


def _parse_reply(raw: bytes, url: str) -> ClaimJudgement:
    """The judgement in a chat completion, or a RetrievalError saying what is off."""

    def bad(why: str) -> RetrievalError:
        return RetrievalError(f"the chat judge at {url} sent a malformed reply: {why}")

    try:
        payload = json_body(raw)
    except (ValueError, UnicodeDecodeError):
        raise bad("the response body is not JSON") from None
    try:
        content = payload["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise bad("no choices[0].message.content") from None
    if not isinstance(content, str):
        raise bad("the message content is not a string")
    try:
        verdict = json_body(content)
    except ValueError:
        raise bad("the message is not a JSON object") from None
    if not isinstance(verdict, dict) or set(verdict) - {"label", "reason"}:
        raise bad('the message must be an object with only "label" and "reason"')
    label = verdict.get("label")
    if label not in _LABELS:
        raise bad(f"label must be one of {', '.join(_LABELS)}, got {str(label)[:40]!r}")
    reason = verdict.get("reason", "")
    if not isinstance(reason, str):
        raise bad("reason must be a string")
    # JSON can escape a lone surrogate ("\\ud800"): in a report it would make the report
    # one that cannot be written as JSON. Refused here, as at groundkit's other edges.
    unencodable = describe_unencodable(reason, "reason")
    if unencodable is not None:
        raise bad(unencodable)
    reason = " ".join(reason.split())[:_REASON_CHARS]
    if label == "contradiction" and not reason:
        reason = "the chat judge reads contradiction"
    return ClaimJudgement(label, reason if label == "contradiction" else "")
