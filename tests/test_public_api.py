"""The public surface: ``__all__`` is exactly what the package exports, each name ours."""

from __future__ import annotations
import __future__

import ast
import importlib
import importlib.metadata
import inspect
import subprocess
import sys
import types

import pytest

import groundkit


def _exported() -> set[str]:
    """What ``import groundkit`` really puts in the namespace for users: every public
    name bound there once each name ``dir(groundkit)`` lists has been used (the
    package imports them on first use), minus submodules and the ``__future__``
    import."""
    for name in dir(groundkit):
        getattr(groundkit, name)
    return {
        name
        for name, value in vars(groundkit).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and not isinstance(value, __future__._Feature)
    } | {"__version__"}


def test_all_is_what_the_package_exports() -> None:
    # A name imported into groundkit/__init__.py but left out of __all__ (or listed
    # but never bound) fails here, so __all__ cannot drift from the namespace.
    assert sorted(groundkit.__all__) == sorted(_exported())
    assert len(groundkit.__all__) == len(set(groundkit.__all__))


def test_every_name_is_importable_and_ours() -> None:
    fresh = importlib.import_module("groundkit")
    namespace: dict[str, object] = {}
    exec("from groundkit import *", namespace)
    for name in groundkit.__all__:
        value = getattr(fresh, name)
        assert value is not None, name
        assert name in namespace, name
        if inspect.isclass(value) or inspect.isfunction(value):
            module = value.__module__
            # Classes and functions re-exported from a dependency would make its
            # API ours; everything public is defined in groundkit.
            assert module.split(".")[0] == "groundkit", (name, module)


def test_version_matches_distribution() -> None:
    assert groundkit.__version__ == importlib.metadata.version("groundkit")


def test_importing_groundkit_loads_no_optional_dependency() -> None:
    # groundkit.testing too, without pytest: its asserts work in any runner.
    code = (
        "import sys, groundkit, groundkit.testing; "
        "heavy = {'torch', 'sentence_transformers', 'transformers', 'lancedb', 'pyarrow', "
        "'mcp', 'uvicorn', 'starlette', 'opentelemetry.sdk', 'pypdf', 'bs4', 'docx', 'pptx', "
        "'ebooklib', 'trafilatura', 'lxml', 'langchain_core', 'llama_index', 'haystack', 'ray', "
        "'pytest'}; "
        "print(sorted(heavy & set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_dir_lists_every_public_name_before_use() -> None:
    code = "import groundkit; print(sorted(set(groundkit.__all__) - set(dir(groundkit))))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("package", ["groundkit", "groundkit.providers", "groundkit.service"])
def test_each_lazy_name_comes_from_the_module_type_checkers_see(package: str) -> None:
    # The names are imported on first use from the package's table; type checkers read
    # the imports under TYPE_CHECKING instead. Both must say the same, for every name
    # of __all__ that is not bound at import.
    module = importlib.import_module(package)
    assert module.__file__ is not None
    with open(module.__file__, encoding="utf-8") as source:
        tree = ast.parse(source.read())
    seen: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            for imported in node.body:
                if isinstance(imported, ast.ImportFrom):
                    assert imported.module is not None
                    seen.update((alias.name, imported.module) for alias in imported.names)
    for name, where in seen.items():
        assert getattr(module, name) is getattr(importlib.import_module(where), name)
    eager = {n for n in module.__all__ if n.endswith("Error") or n == "__version__"}
    assert set(seen) == set(module.__all__) - (eager if package == "groundkit" else set())


def test_importing_groundkit_loads_no_dependency() -> None:
    # Every public name is imported on first use: the package itself costs next to
    # nothing, and using one name loads what that name needs, not the rest.
    code = (
        "import sys, groundkit; "
        "third = sorted({m.split('.')[0] for m in sys.modules} & {'numpy', 'pydantic', "
        "'httpx', 'aiosqlite', 'Stemmer', 'yaml', 'regex', 'rapidfuzz', 'xxhash', "
        "'opentelemetry'}); "
        "ours = sorted(m for m in sys.modules if m.startswith('groundkit.')); "
        "print(third, ours)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == (
        "[] ['groundkit.errors', 'groundkit.utils', 'groundkit.utils.lazy']"
    )
