"""Rebuilding an embedder from what a collection recorded about it.

A collection's manifest records the provider, the model name and the vector size,
never where an HTTP embedding server is or how to log in to it
(adr/0039-http-embedder-endpoints.md). For ``openai-compatible`` and ``ollama``
collections the endpoint comes from this process's configuration:

- an explicit ``endpoint`` (``grk --embedding-url``), else
- ``GROUNDKIT_EMBEDDING_URL``, else, for Ollama only, ``OLLAMA_HOST``, else
  Ollama's default ``http://127.0.0.1:11434``;
- the API key, when the server wants one, only from ``GROUNDKIT_EMBEDDING_API_KEY``.

The recorded size is passed as ``dimensions=``, so a server that now serves
another model is refused on its first answer instead of mixing vector spaces.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from groundkit.contracts import CollectionManifest
from groundkit.errors import ConfigurationError
from groundkit.providers.protocols import EmbeddingProtocol

__all__ = [
    "EMBEDDING_API_KEY_ENV",
    "EMBEDDING_URL_ENV",
    "HTTP_PROVIDERS",
    "EmbedderRecipe",
    "embedder_for_manifest",
    "http_embedder",
    "recipe_for",
    "require_embedder_for_manifest",
]

logger = logging.getLogger("groundkit.providers")

EMBEDDING_URL_ENV = "GROUNDKIT_EMBEDDING_URL"
EMBEDDING_API_KEY_ENV = "GROUNDKIT_EMBEDDING_API_KEY"
HTTP_PROVIDERS = ("openai-compatible", "ollama")
_OLLAMA_DEFAULT = "http://127.0.0.1:11434"


def _endpoint(provider: str, endpoint: str | None, environ: Mapping[str, str]) -> str | None:
    url = endpoint or environ.get(EMBEDDING_URL_ENV) or None
    if url is None and provider == "ollama":
        url = _ollama_host(environ.get("OLLAMA_HOST") or _OLLAMA_DEFAULT)
    return url


def _ollama_host(value: str) -> str:
    """``OLLAMA_HOST`` read as Ollama reads it, for the same server.

    Without a scheme the port defaults to Ollama's 11434, not HTTP's 80, and an
    empty host is 127.0.0.1: ``0.0.0.0``, ``:11434`` and ``[::1]`` are all
    common settings. With a scheme the URL is taken as written.
    """
    text = value.strip()
    if "://" in text:
        return text
    hostport, slash, path = text.partition("/")
    if hostport.startswith("["):  # [v6] or [v6]:port
        inside, _, rest = hostport[1:].partition("]")
        host, port = f"[{inside}]", rest.removeprefix(":")
    elif hostport.count(":") > 1:  # a bare IPv6 address
        host, port = f"[{hostport}]", ""
    else:
        host, _, port = hostport.partition(":")
    return f"http://{host or '127.0.0.1'}:{port or '11434'}{slash}{path}"


def http_embedder(
    provider: str,
    model: str,
    *,
    endpoint: str | None = None,
    dimensions: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> EmbeddingProtocol:
    """An ``OpenAICompatibleEmbedder`` or ``OllamaEmbedder`` for ``model``, its endpoint
    and key found as the module docstring says; ``ConfigurationError`` when no
    endpoint is configured."""
    from groundkit.providers.http import OllamaEmbedder, OpenAICompatibleEmbedder

    env = os.environ if environ is None else environ
    url = _endpoint(provider, endpoint, env)
    if url is None:
        raise ConfigurationError(
            f"{provider} model {model!r} is served over HTTP and no endpoint is configured: "
            f"set {EMBEDDING_URL_ENV} (or pass --embedding-url) to the server's base URL; a "
            f"key, if it needs one, goes in {EMBEDDING_API_KEY_ENV}"
        )
    if provider == "ollama":
        return OllamaEmbedder(model, base_url=url, dimensions=dimensions)
    if provider == "openai-compatible":
        key = env.get(EMBEDDING_API_KEY_ENV) or None
        return OpenAICompatibleEmbedder(model, base_url=url, api_key=key, dimensions=dimensions)
    raise ConfigurationError(
        f"unknown HTTP embedding provider {provider!r}; use one of {', '.join(HTTP_PROVIDERS)}"
    )


def require_embedder_for_manifest(
    manifest: CollectionManifest,
    *,
    endpoint: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> EmbeddingProtocol:
    """The embedder ``manifest`` names; ``ConfigurationError`` saying what is missing
    (an endpoint for an HTTP provider, or a provider groundkit does not build)."""
    from groundkit.providers.local import (
        LOCAL_PROVIDERS,
        ONNX_INT8_PROVIDER,
        SentenceTransformerEmbedder,
    )

    if manifest.provider in LOCAL_PROVIDERS:
        if manifest.provider == ONNX_INT8_PROVIDER:
            # int8 vectors: queries must be embedded by the same quantised export.
            return SentenceTransformerEmbedder(manifest.model_name, backend="onnx", quantize="int8")
        return SentenceTransformerEmbedder(manifest.model_name)
    if manifest.provider in HTTP_PROVIDERS:
        return http_embedder(
            manifest.provider,
            manifest.model_name,
            endpoint=endpoint,
            dimensions=manifest.dimensions,
            environ=environ,
        )
    raise ConfigurationError(
        f"collection uses {manifest.provider!r} embeddings, which groundkit cannot build by "
        "name; open it from Python with that embedder"
    )


def embedder_for_manifest(
    manifest: CollectionManifest,
    *,
    endpoint: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> EmbeddingProtocol | None:
    """The embedder ``manifest`` names, or None when it cannot be built here (an
    unknown provider, an HTTP provider with no endpoint configured; logged as a
    warning naming what to set). For callers that still serve BM25 without one
    (``grk serve``); ``require_embedder_for_manifest`` raises instead.

    A sentence-transformers model is found by its recorded name (offline copies
    included, see ``resolve_model``).
    """
    try:
        return require_embedder_for_manifest(manifest, endpoint=endpoint, environ=environ)
    except ConfigurationError as exc:
        logger.warning("dense and hybrid search unavailable: %s", exc)
        return None


@dataclass(frozen=True, slots=True)
class EmbedderRecipe:
    """How to rebuild an embedder in another process: what a Ray worker receives
    instead of the embedder itself (a loaded model is not shipped, nor a key)."""

    provider: str
    settings: tuple[tuple[str, object], ...]

    def build(self) -> EmbeddingProtocol:
        from groundkit.providers.local import LOCAL_PROVIDERS, SentenceTransformerEmbedder

        if self.provider in LOCAL_PROVIDERS:
            kwargs: dict[str, Any] = dict(self.settings)
            return SentenceTransformerEmbedder(**kwargs)
        raise ConfigurationError(f"no recipe builds a {self.provider!r} embedder")


def recipe_for(embedder: EmbeddingProtocol) -> EmbedderRecipe:
    """The recipe that rebuilds ``embedder`` elsewhere; ``ConfigurationError`` saying
    why when it cannot be shipped."""
    from groundkit.providers.local import SentenceTransformerEmbedder

    if type(embedder) is SentenceTransformerEmbedder:
        return EmbedderRecipe(embedder.provider, tuple(sorted(embedder.settings.items())))
    if embedder.provider in HTTP_PROVIDERS:
        reason = (
            "an HTTP embedder is not shipped to Ray workers (its key would travel with "
            "the tasks); ingest without an executor, the server does the embedding"
        )
    else:
        reason = (
            f"{type(embedder).__name__} has no recipe to rebuild it on a Ray worker; "
            "only SentenceTransformerEmbedder can be shipped"
        )
    raise ConfigurationError(f"this embedder cannot run on Ray workers: {reason}")
