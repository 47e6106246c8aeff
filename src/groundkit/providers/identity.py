"""The embedding identity a collection is bound to, read off an embedder."""

from __future__ import annotations

import inspect

from groundkit.contracts import EmbeddingIdentity
from groundkit.errors import ConfigurationError, InvalidQueryError
from groundkit.providers.protocols import EmbeddingProtocol
from groundkit.utils.heartbeat import PROGRESS_LOG_SECONDS, load_logged

__all__ = ["ensure_identity", "identity_of"]


def identity_of(embedder: EmbeddingProtocol) -> EmbeddingIdentity:
    """``(provider, model_name, dimensions)`` of ``embedder``.

    Raises ``ConfigurationError`` when the embedder cannot state them yet (its
    size is learnt on load) or states something invalid (an empty name, a
    non-positive size).
    """
    try:
        return EmbeddingIdentity(
            provider=embedder.provider,
            model_name=embedder.model_name,
            dimensions=embedder.dimensions,
        )
    except InvalidQueryError as exc:
        raise ConfigurationError(
            f"{type(embedder).__name__} reports an invalid embedding identity: "
            f"{str(exc).removeprefix('invalid EmbeddingIdentity: ')}"
        ) from None


async def ensure_identity(
    embedder: EmbeddingProtocol, *, log_every: float | None = PROGRESS_LOG_SECONDS
) -> EmbeddingIdentity:
    """Like ``identity_of``, but first awaits ``embedder.load()`` when one exists.

    For callers (opening a collection, say) that may hold an embedder whose
    size is only known once its model is loaded or its server has answered. A model
    not loaded yet is announced in the progress log, every ``log_every`` seconds
    while it loads (``groundkit.utils.heartbeat``).
    """
    load = getattr(embedder, "load", None)
    if load is not None and inspect.iscoroutinefunction(load):
        if getattr(embedder, "loaded", True):
            await load()
        else:
            await load_logged(load, embedder.model_name, log_every)
    return identity_of(embedder)
