"""The public surface: ``__all__`` is exactly what the package exports, each name ours."""

from __future__ import annotations
import __future__

import importlib
import importlib.metadata
import inspect
import subprocess
import sys
import types

import groundkit


def _exported() -> set[str]:
    """What ``import groundkit`` really puts in the namespace for users: every public
    name bound there, minus submodules and the ``__future__`` import."""
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
