"""The embedding identity a collection is bound to, read off an embedder."""

from __future__ import annotations

import inspect

from pydantic import ValidationError

from groundkit.contracts import EmbeddingIdentity
from groundkit.errors import ConfigurationError
from groundkit.providers.protocols import EmbeddingProtocol

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
    except ValidationError as exc:
        raise ConfigurationError(
            f"{type(embedder).__name__} reports an invalid embedding identity: "
            f"{exc.errors(include_url=False, include_input=False)}"
        ) from None


async def ensure_identity(embedder: EmbeddingProtocol) -> EmbeddingIdentity:
    """Like ``identity_of``, but first awaits ``embedder.load()`` when one exists.

    For callers (opening a collection, say) that may hold an embedder whose
    size is only known once its model is loaded or its server has answered.
    """
    load = getattr(embedder, "load", None)
    if load is not None and inspect.iscoroutinefunction(load):
        await load()
    return identity_of(embedder)
