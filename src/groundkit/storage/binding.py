"""A collection is bound to one analyzer and at most one embedding space.

Terms and vectors are only comparable with what produced them, so the first
ingest records both identities and everything later is checked against them: an
ingest binds (``bind_for_ingest``; the chunker too), an open checks (``check_analyzer``,
``check_embedding``). The stores only compare-and-set; what a mismatch means,
and what the user is told, is decided here, once.
"""

from __future__ import annotations

from groundkit.contracts import CollectionManifest, EmbeddingIdentity
from groundkit.errors import ConfigurationError, IndexIdentityError
from groundkit.storage.protocols import MetadataStoreProtocol

__all__ = [
    "bind_for_ingest",
    "check_analyzer",
    "check_chunker",
    "check_embedding",
    "describe_embedding",
    "identity_mismatch",
]


def describe_embedding(identity: EmbeddingIdentity) -> str:
    """``provider/model (N-d)``: how an embedding space is named in messages."""
    return f"{identity.provider}/{identity.model_name} ({identity.dimensions}-d)"


def identity_mismatch(
    kind: str, bound: str, given: str, collection: str | None
) -> IndexIdentityError:
    """The one message for "this collection was built with something else"."""
    subject = f"collection {collection!r}" if collection else "this collection"
    return IndexIdentityError(
        f"{subject} is bound to the {kind} {bound}, not {given}: terms and vectors only "
        f"compare with what made them; use the same {kind}, or a new collection"
    )


def check_analyzer(bound: str | None, identity: str, collection: str | None = None) -> None:
    """Refuse an analyzer other than the one the collection is bound to (if any)."""
    if bound is not None and bound != identity:
        raise identity_mismatch("analyzer", repr(bound), repr(identity), collection)


def check_chunker(bound: str | None, identity: str, collection: str | None = None) -> None:
    """Refuse a chunker other than the bound one: a collection chunked two ways would
    rank a document by when it was ingested, and its context spans would disagree."""
    if bound is not None and bound != identity:
        subject = f"collection {collection!r}" if collection else "this collection"
        raise IndexIdentityError(
            f"{subject} is bound to the chunker {bound!r}, not {identity!r}: every document "
            "of a collection is chunked one way; ingest with the same chunking, or into a new "
            "collection (or delete this one and ingest again)"
        )


def check_embedding(
    manifest: CollectionManifest | None,
    identity: EmbeddingIdentity,
    collection: str | None = None,
) -> bool:
    """Refuse an embedding space other than the bound one; True when bound to this one."""
    if manifest is None:
        return False
    if manifest.identity != identity:
        raise identity_mismatch(
            "embedding model",
            describe_embedding(manifest.identity),
            describe_embedding(identity),
            collection,
        )
    return True


async def bind_for_ingest(
    store: MetadataStoreProtocol,
    *,
    analyzer: str,
    embedding: EmbeddingIdentity | None,
    chunker: str | None = None,
    collection: str | None = None,
) -> CollectionManifest | None:
    """Bind the collection before anything is written; returns its manifest, if any.

    An ingest without an embedder into a collection bound to one is refused too:
    its text would move on while its vectors stayed behind.
    """
    check_analyzer(await store.bind_analyzer(analyzer), analyzer, collection)
    if chunker is not None:
        check_chunker(await store.bind_chunker(chunker), chunker, collection)
    if embedding is None:
        manifest = await store.read_manifest()
        if manifest is not None:
            subject = f"collection {collection!r}" if collection else "this collection"
            raise ConfigurationError(
                f"{subject} is bound to the embedding model "
                f"{describe_embedding(manifest.identity)}; ingest with that embedder so its "
                "vectors stay in step with its text"
            )
        return None
    manifest = await store.bind_embedding(embedding)
    check_embedding(manifest, embedding, collection)
    return manifest
