"""Retrievers for the frameworks applications are built with, each an optional extra.

- ``groundkit.integrations.langchain`` (``pip install groundkit[langchain]``)
- ``groundkit.integrations.llama_index`` (``pip install groundkit[llama-index]``)
- ``groundkit.integrations.haystack`` (``pip install groundkit[haystack]``)

Importing this package imports no framework; importing one of its modules without
that framework installed raises ``ConfigurationError`` naming the install command.
Every document or node they return carries its groundkit citation, and
``citation_of`` in each module turns it back into a ``Citation`` to verify, with the
document's text, through ``Collection.verify(citation, content=...)`` or
``groundkit.check_citation``: the one verdict every entry point gives (ADR 0056).
"""

from __future__ import annotations

__all__: list[str] = []
