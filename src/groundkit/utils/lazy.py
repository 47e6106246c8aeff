"""Public names a package imports on first use (PEP 562 module ``__getattr__``).

A package lists which of its public names each module defines; ``import package``
then imports none of those modules, and the first ``package.Name`` (or ``from
package import Name``) imports the one module that defines it and keeps the value
in the package's namespace, so later uses cost a dict lookup. Type checkers see the
same names through imports under ``if TYPE_CHECKING:`` (a test holds both to each
other).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(
    package: str,
    namespace: dict[str, Any],
    defined_in: Mapping[str, Sequence[str]],
    computed: Mapping[str, Callable[[], object]] | None = None,
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` (whose globals are ``namespace``):
    each name of ``defined_in[module]`` comes from ``module``, each of ``computed`` from
    calling it; either is kept in ``namespace`` once found."""
    where = {name: module for module, names in defined_in.items() for name in names}
    made = dict(computed or {})

    def get(name: str) -> object:
        if name in made:
            value = made[name]()
        elif name in where:
            value = getattr(importlib.import_module(where[name]), name)
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def names() -> list[str]:
        return sorted({*namespace, *namespace.get("__all__", ()), *where, *made})

    return get, names
