"""The citation inspector (``grk inspect``): a local web page to search a collection
and see each result where it stands in its source, with its verdict.

Needs starlette and uvicorn (``pip install groundkit[inspect]``), imported when the
inspector starts, not with ``groundkit.service``.
"""

from __future__ import annotations

__all__: list[str] = []
