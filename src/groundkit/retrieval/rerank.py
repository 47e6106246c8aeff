"""Second-pass reranking of retrieved candidates with a local cross-encoder.

A cross-encoder reads query and passage together, so it can judge relevance
that two independently computed vectors miss; it is a classifier, not a
generator, and it only reorders the candidates it is handed.

Heavy dependencies stay out of import time: ``sentence_transformers`` (and
with it torch) is imported the first time a reranker actually loads its model,
so a base install can import this module and construct a reranker.

Scores are ``sigmoid(logit)`` computed here, over the model's raw logits.
sentence-transformers applies its own sigmoid to single-label models by
default; the model is therefore loaded, and ``predict`` called, with an
explicit identity activation, so exactly one squashing happens and it is ours.
A sigmoid (rather than min-max or a clamp) keeps every score in ``[0, 1]``
without reordering anything and without making a passage's score depend on
what it was ranked alongside.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
import os
import threading
import time
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from groundkit.contracts import RESULT_CITATION_FIELDS, RetrievalResult, Scores
from groundkit.errors import (
    ConfigurationError,
    GroundkitError,
    RerankerNotConfiguredError,
    RetrievalError,
)

__all__ = ["CrossEncoderReranker", "RerankerProtocol", "checked_rerank", "sigmoid"]

logger = logging.getLogger("groundkit.retrieval")


@runtime_checkable
class RerankerProtocol(Protocol):
    """What a Retriever needs from a reranker."""

    model_name: str

    async def rerank(
        self, query: str, results: Sequence[RetrievalResult], top_k: int | None = None
    ) -> list[RetrievalResult]:
        """Return new results, best first, scored in ``[0, 1]``; ``top_k`` caps the list."""
        ...


def sigmoid(logit: float) -> float:
    """Map a finite logit into ``[0, 1]`` without overflowing.

    Each branch only ever exponentiates a non-positive number, so ``±1000``
    saturates to ``1.0``/``0.0`` instead of raising ``OverflowError``. A NaN
    or infinite logit means the model misbehaved; ranking it would be
    arbitrary, so it is refused. The message names only the value.
    """
    if not math.isfinite(logit):
        raise RetrievalError(f"the reranker produced a non-finite logit ({logit!r})")
    if logit >= 0.0:
        return 1.0 / (1.0 + math.exp(-logit))
    z = math.exp(logit)
    return z / (1.0 + z)


# What a reranker may not change about a candidate: its text and everything its
# citation is read from. Only ``score`` and ``scores`` are the reranker's to set.
_KEPT_FIELDS = ("content", *RESULT_CITATION_FIELDS, "chunk_index", "collection", "metadata")


def _reranker_name(reranker: object) -> str:
    model = getattr(reranker, "model_name", None)
    kind = type(reranker).__name__
    return f"{kind} ({model!r})" if isinstance(model, str) else kind


def _finite_number(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


def _same(a: object, b: object) -> bool:
    return a is b or a == b


async def checked_rerank(
    reranker: RerankerProtocol,
    query: str,
    candidates: Sequence[RetrievalResult],
    top_k: int | None = None,
) -> list[RetrievalResult]:
    """``reranker.rerank(query, candidates, top_k)``, held to the protocol.

    A reranker may be application code, and what it returns goes to the caller as
    cited results. Its own exception becomes a ``RetrievalError`` naming it (only the
    exception's type: a reranker reads passages, and its message may quote them; the
    message is logged at DEBUG). Its output must be a list of the candidates it was
    given, each at most once (matched by ``chunk_id``), at most ``top_k`` of them,
    each with a finite, non-negative score and its text and citation unchanged;
    anything else is a ``RetrievalError``. What is returned is each candidate with
    the reranker's ``score`` and ``scores``, in the reranker's order.
    """
    name = _reranker_name(reranker)
    try:
        out = await reranker.rerank(query, candidates, top_k=top_k)
    except GroundkitError:
        raise
    except Exception as exc:
        logger.debug("the reranker %s failed", name, exc_info=True)
        raise RetrievalError(
            f"the reranker {name} failed ({type(exc).__name__}); enable DEBUG logging on "
            "'groundkit.retrieval' for its message"
        ) from None

    def refused(problem: str) -> RetrievalError:
        return RetrievalError(f"the reranker {name} returned unusable results: {problem}")

    if not isinstance(out, list | tuple):
        raise refused(f"expected a list of results, got {type(out).__name__}")
    if top_k is not None and len(out) > top_k:
        raise refused(f"{len(out)} results where at most {top_k} were asked for")
    given: dict[str, RetrievalResult] = {}
    for result in candidates:
        given.setdefault(result.chunk_id, result)
    seen: set[str] = set()
    kept: list[RetrievalResult] = []
    for i, item in enumerate(out):
        if not isinstance(item, RetrievalResult):
            raise refused(f"result {i} is {type(item).__name__}, not a RetrievalResult")
        candidate = given.get(item.chunk_id) if isinstance(item.chunk_id, str) else None
        if candidate is None:
            raise refused(f"result {i} is not one of the {len(given)} candidates it was given")
        if item.chunk_id in seen:
            raise refused(f"result {i} repeats a candidate already returned")
        seen.add(item.chunk_id)
        changed = [
            f for f in _KEPT_FIELDS if not _same(getattr(item, f, None), getattr(candidate, f))
        ]
        if changed:
            raise refused(
                f"result {i} changed the candidate's {', '.join(changed)}; a reranker "
                "only reorders and scores"
            )
        if not _finite_number(item.score) or item.score < 0:
            raise refused(f"result {i} has score {item.score!r}, not a finite number >= 0")
        signals = item.scores
        if signals is not None and (
            not isinstance(signals, Scores)
            or not all(v is None or _finite_number(v) for v in dataclasses.astuple(signals))
        ):
            raise refused(f"result {i} has scores {signals!r}, not finite signals")
        kept.append(candidate.model_copy(update={"score": float(item.score), "scores": signals}))
    return kept


class _Predictor(Protocol):
    """The slice of ``sentence_transformers.CrossEncoder`` this module uses."""

    def predict(self, inputs: Any, **kwargs: Any) -> Any: ...


class CrossEncoderReranker:
    """Rerank with a sentence-transformers cross-encoder, loaded on first use.

    Construction touches neither the filesystem nor the network. The first
    non-empty ``rerank`` loads the model in a worker thread; concurrent first
    calls await the same load. If the load fails, every call waiting on it
    gets the same error and nothing is cached: the next call tries again, so
    a model directory that appears later (or a transient hub error) heals
    without recreating the reranker. An instance is meant to serve one event
    loop at a time.

    Remote code is never trusted: a model that needs it fails to load.
    """

    def __init__(
        self,
        model_name_or_path: str,
        *,
        max_length: int | None = None,
        batch_size: int = 32,
        device: str = "cpu",
    ) -> None:
        if not isinstance(model_name_or_path, str) or not model_name_or_path.strip():
            raise ConfigurationError("a cross-encoder needs a model name or a local path")
        if max_length is not None and (isinstance(max_length, bool) or max_length < 1):
            raise ConfigurationError(f"max_length must be a positive integer, got {max_length!r}")
        if isinstance(batch_size, bool) or batch_size < 1:
            raise ConfigurationError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.model_name: str = model_name_or_path
        self._max_length = max_length
        self._batch_size = batch_size
        self._device = device
        self._model: _Predictor | None = None
        self._loading: asyncio.Task[_Predictor] | None = None
        # Fast tokenizers are not safe to call from two threads at once, and
        # torch already parallelises one batch; predictions take turns.
        self._predict_lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        """Whether the model is in memory (for diagnostics and tests)."""
        return self._model is not None

    async def rerank(
        self, query: str, results: Sequence[RetrievalResult], top_k: int | None = None
    ) -> list[RetrievalResult]:
        """Score each ``(query, result.content)`` pair and return new results, best first.

        Ties are broken by ``(source, start_offset)`` so equal scores order the
        same way on every run. Everything but ``score`` is carried over from the
        input result, and each output is re-validated against the contract.
        """
        if top_k is not None and (type(top_k) is not int or top_k < 1):
            raise RetrievalError(f"rerank top_k must be a positive integer, got {top_k!r}")
        pairs = [(query, r.content) for r in results]
        if not pairs:
            return []
        model = await self._loaded_model()
        started = time.perf_counter()
        try:
            raw = await asyncio.to_thread(self._predict, model, pairs)
        except Exception as exc:
            # Backend errors may quote the input they choked on (a tokenizer
            # echoing a passage, say); only the type crosses this boundary.
            logger.debug("cross-encoder inference failed", exc_info=True)
            raise RetrievalError(
                f"could not score {len(pairs)} query-passage pairs with the cross-encoder "
                f"{self.model_name!r} ({type(exc).__name__}); enable DEBUG logging on "
                "'groundkit.retrieval' for the backend's message"
            ) from None
        logits = self._logits(raw, len(pairs))
        scored = [_rescored(r, sigmoid(logit)) for r, logit in zip(results, logits, strict=True)]
        scored.sort(key=lambda r: (-r.score, r.source, r.start_offset))
        logger.debug(
            "reranked %d candidates with %s in %.0f ms",
            len(scored),
            self.model_name,
            (time.perf_counter() - started) * 1000,
        )
        return scored if top_k is None else scored[:top_k]

    async def _loaded_model(self) -> _Predictor:
        if self._model is not None:
            return self._model
        loop = asyncio.get_running_loop()
        task = self._loading
        if task is None or task.get_loop() is not loop:
            task = loop.create_task(self._load())
            # Retrieve the outcome even if every waiter was cancelled, so a
            # failure is not reported again as "exception never retrieved".
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
            self._loading = task
        # A cancelled caller must not cancel the load other callers share.
        return await asyncio.shield(task)

    async def _load(self) -> _Predictor:
        try:
            model = await asyncio.to_thread(self._load_sync)
        finally:
            # Success or failure, this load is over: a failure is retried by
            # the next call rather than remembered.
            if self._loading is asyncio.current_task():
                self._loading = None
        self._model = model
        return model

    def _load_sync(self) -> _Predictor:
        started = time.perf_counter()
        missing = self._missing()
        if missing is not None:  # known without loading (and without the hub's log lines)
            raise RerankerNotConfiguredError(self._failure(missing))
        untokenized = self._no_tokenizer_files()
        if untokenized is not None:
            raise RerankerNotConfiguredError(self._failure(untokenized))
        try:
            import torch
            from sentence_transformers import CrossEncoder
        except ImportError as exc:
            raise ConfigurationError(
                "cross-encoder reranking needs sentence-transformers and torch: "
                "pip install groundkit[local]"
            ) from exc
        try:
            model: _Predictor = CrossEncoder(
                self.model_name,
                max_length=self._max_length,
                device=self._device,
                trust_remote_code=False,
                activation_fn=torch.nn.Identity(),
            )
        except Exception as exc:
            # The loader's own words stay out of the message (they name its internals);
            # they are the error's cause and a debug record.
            logger.debug("cross-encoder %s did not load: %r", self.model_name, exc)
            raise RerankerNotConfiguredError(self._load_failure()) from exc
        architectures = getattr(getattr(model, "config", None), "architectures", None) or []
        if architectures and all(str(a).endswith("Model") for a in architectures):
            # A bare encoder loads "successfully" with a randomly initialised
            # classification head, which would rank at random.
            raise RerankerNotConfiguredError(
                f"{self.model_name!r} is a bare encoder ({', '.join(map(str, architectures))}), "
                "not a cross-encoder: it has no trained classification head. Use a "
                "sequence-classification reranker such as cross-encoder/ms-marco-MiniLM-L6-v2"
            )
        short = _short_vocabulary(model)
        if short is not None:
            raise RerankerNotConfiguredError(self._failure(short))
        logger.info(
            "loaded cross-encoder %s in %.0f ms",
            self.model_name,
            (time.perf_counter() - started) * 1000,
        )
        return model

    def _missing(self) -> str | None:
        """Why the model cannot be there, when the name alone tells: a file, or a path
        (not a hub name) to nothing."""
        name = self.model_name
        path = os.path.expanduser(name)
        if os.path.isdir(path):
            return None
        if os.path.exists(path):
            return "it is a file, not a model's directory"
        if name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name:
            return "no such directory"
        return None

    def _no_tokenizer_files(self) -> str | None:
        """What a local model directory lacks when it has no tokenizer files.

        The loader does not refuse such a directory: it builds a tokenizer of the
        special tokens alone, every word becomes ``[UNK]`` and every passage scores
        the same. A hub name is judged after loading, by ``_short_vocabulary``.
        """
        path = os.path.expanduser(self.model_name)
        if not os.path.isdir(path):
            return None
        names = set(os.listdir(path))
        if "config.json" not in names:  # not a model at all: the loader says so
            return None
        if names & _TOKENIZER_FILES or any(n.endswith(".model") for n in names):
            return None
        if "tokenizer_config.json" in names:
            try:
                with open(os.path.join(path, "tokenizer_config.json"), encoding="utf-8") as f:
                    config = json.load(f)
            except (OSError, ValueError):
                config = None
            if isinstance(config, dict) and config.get("vocab"):
                return None
        return (
            "the directory has no tokenizer files (tokenizer.json, vocab.txt, vocab.json "
            "with merges.txt, or a sentencepiece .model), so every word would be unknown "
            "to it; copy the tokenizer files from where the model came from"
        )

    def _load_failure(self) -> str:
        if os.path.isdir(os.path.expanduser(self.model_name)):
            hint = (
                "the directory is not a loadable sequence-classification model "
                "(it needs config.json, weights and tokenizer files)"
            )
        else:
            hint = self._missing() or (
                "there is no local directory of that name and the hub could not provide it "
                "(check the name, the network, or HF_HUB_OFFLINE and the local cache)"
            )
        return self._failure(hint)

    def _failure(self, hint: str) -> str:
        return (
            f"cannot load cross-encoder {self.model_name!r}: {hint}; "
            "pass the directory or hub name of a sequence-classification cross-encoder"
        )

    def _predict(self, model: _Predictor, pairs: list[tuple[str, str]]) -> Any:
        import torch

        with self._predict_lock:
            # Identity again at call time: a per-call activation overrides the
            # model's, so raw logits come back even if the default changes.
            return model.predict(
                pairs,
                batch_size=self._batch_size,
                activation_fn=torch.nn.Identity(),
                apply_softmax=False,
                convert_to_numpy=True,
                show_progress_bar=False,
            )

    def _logits(self, raw: object, expected: int) -> list[float]:
        try:
            arr = np.asarray(raw, dtype=np.float64)
        except (TypeError, ValueError):
            arr = np.empty((0,))
        if arr.ndim == 2 and arr.shape[1] == 1:
            arr = arr[:, 0]
        if arr.shape != (expected,):
            raise RetrievalError(
                f"cross-encoder {self.model_name!r} returned scores of shape {arr.shape} for "
                f"{expected} pairs; a reranker needs exactly one logit per pair "
                "(is it a single-label cross-encoder?)"
            )
        return [float(x) for x in arr]


# Files a tokenizer is read from; without any, the loader makes one of special
# tokens only. A sentencepiece model (``*.model``) is looked for by suffix.
_TOKENIZER_FILES = frozenset({"tokenizer.json", "vocab.txt", "vocab.json"})


def _short_vocabulary(model: object) -> str | None:
    """Why ``model``'s tokenizer cannot be its own: it knows far fewer tokens than the
    model has embeddings (under half), so most words would read as unknown."""
    tokenizer = getattr(model, "tokenizer", None)
    config = getattr(model, "config", None)
    wanted = getattr(config, "vocab_size", None)
    if tokenizer is None or not isinstance(wanted, int) or isinstance(wanted, bool):
        return None
    try:
        known = len(tokenizer)
    except Exception:  # no length to judge by: the scores are still checked
        return None
    if known * 2 >= wanted:
        return None
    return (
        f"its tokenizer knows {known} tokens where the model has {wanted}: the tokenizer "
        "files are missing or belong to another model; copy the model's own tokenizer "
        "files into its directory"
    )


def _rescored(result: RetrievalResult, score: float) -> RetrievalResult:
    # Rebuilt through the constructor, not model_copy(update=...), which skips
    # validation: the new score is checked against the contract like any other.
    fields = {name: getattr(result, name) for name in RetrievalResult.model_fields}
    fields["score"] = score
    signals = result.scores or Scores()
    fields["scores"] = dataclasses.replace(signals, rerank=score)
    return RetrievalResult(**fields)
