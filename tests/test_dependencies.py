"""Every third-party module groundkit imports is installed by what the code says it needs.

Read from the source, not from what happens to be installed: an import is *optional*
when it sits in a ``try`` whose ``except ImportError`` names an install command
(``pip install groundkit[extra]``), when its line says ``# extra: NAME`` (it runs only
after that extra was found), or in a module that belongs to an extra as a whole
(the integrations, the MCP service, the PostgreSQL and LanceDB stores, the local
models, the conformance suites). Every other import must be installed by the base
requirements; an optional one by its extra alone, with the base. Requirements are
followed transitively through the installed distributions' metadata, so a module that
arrives only because some other extra pulled it in (as xxhash once did) fails here.
"""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import re
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "groundkit"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]

# Modules that are part of an extra as a whole (their imports need that extra).
MODULE_EXTRAS = {
    "groundkit/integrations/langchain.py": "langchain",
    "groundkit/integrations/llama_index.py": "llama-index",
    "groundkit/integrations/haystack.py": "haystack",
    "groundkit/service/server.py": "serve",
    "groundkit/service/transport.py": "serve",
    "groundkit/storage/postgres.py": "postgres",
    "groundkit/storage/lancedb.py": "dense",
    "groundkit/storage/location.py": "dense",  # its one lancedb import opens a vector store
    "groundkit/providers/local.py": "local",
    "groundkit/retrieval/rerank.py": "local",
    "groundkit/testing/plugin.py": "test",
    "groundkit/testing/conformance/": "test",
}
_EXTRA_IN_HINT = re.compile(r"groundkit\[([a-z-]+)(?:,([a-z-]+))?\]")
_EXTRA_COMMENT = re.compile(r"#\s*extra:\s*([a-z-]+)")


@dataclass(frozen=True)
class Import:
    module: str  # top-level name
    where: str  # path:line
    extras: tuple[str, ...]  # () for the base install


def _hint_extras(handler: ast.ExceptHandler) -> tuple[str, ...] | None:
    """The extras an ``except ImportError`` handler's message names, if it names any."""
    for node in ast.walk(handler):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found = _EXTRA_IN_HINT.search(node.value)
            if found:
                return tuple(e for e in found.groups() if e)
    return None


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    names = (
        {n.id for n in ast.walk(handler.type) if isinstance(n, ast.Name)} if handler.type else set()
    )
    return bool(names & {"ImportError", "ModuleNotFoundError", "Exception"})


def _imports(path: Path) -> Iterator[Import]:
    relative = path.relative_to(PACKAGE.parent).as_posix()
    module_extra = next((e for p, e in MODULE_EXTRAS.items() if relative.startswith(p)), None)
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    tree = ast.parse(text)
    guarded: dict[int, tuple[str, ...]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Try):
            for handler in node.handlers:
                if _catches_import_error(handler):
                    extras = _hint_extras(handler)
                    for inner in node.body:
                        for sub in ast.walk(inner):
                            if extras is not None:
                                guarded[id(sub)] = extras
    stdlib = set(sys.stdlib_module_names)
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module.split(".")[0]]
        else:
            continue
        for name in names:
            if name in stdlib or name in ("groundkit", "__future__"):
                continue
            marked = _EXTRA_COMMENT.search(lines[node.lineno - 1])
            if marked:
                extras = (marked[1],)
            elif id(node) in guarded:
                extras = guarded[id(node)]
            elif module_extra is not None:
                extras = (module_extra,)
            else:
                extras = ()
            yield Import(name, f"{relative}:{node.lineno}", extras)


def _installed_by(requirements: list[str], extras: tuple[str, ...] = ()) -> set[str]:
    """The distributions ``requirements`` bring in, followed through installed metadata."""
    seen: set[str] = set()
    todo = [(Requirement(r), extras) for r in requirements]
    environment: dict[str, str] = {k: str(v) for k, v in default_environment().items()}
    while todo:
        req, wanted = todo.pop()
        if req.marker is not None and not any(
            req.marker.evaluate({**environment, "extra": e}) for e in (*wanted, "")
        ):
            continue
        name = canonicalize_name(req.name)
        key = f"{name}[{','.join(sorted(req.extras))}]"
        if key in seen:
            continue
        seen.add(key)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo.extend((Requirement(r), tuple(req.extras)) for r in requires)
    return {k.split("[")[0] for k in seen}


def _closure(extras: tuple[str, ...]) -> set[str]:
    requirements = list(PROJECT["dependencies"])
    for extra in extras:
        requirements += PROJECT["optional-dependencies"][extra]
    return {r for r in _installed_by(requirements) if r != "groundkit"}


def _all_imports() -> list[Import]:
    return [i for path in sorted(PACKAGE.rglob("*.py")) for i in _imports(path)]


def test_every_import_is_installed_by_what_it_needs() -> None:
    providers = metadata.packages_distributions()
    missing: list[str] = []
    closures: dict[tuple[str, ...], set[str]] = {}
    for found in _all_imports():
        dists = {canonicalize_name(d) for d in providers.get(found.module, [])}
        if not dists:
            pytest.fail(f"{found.where}: no installed distribution provides {found.module!r}")
        closure = closures.setdefault(found.extras, _closure(found.extras))
        if not dists & closure:
            need = f"groundkit[{','.join(found.extras)}]" if found.extras else "the base install"
            missing.append(f"{found.where}: {found.module} ({', '.join(sorted(dists))}) {need}")
    assert not missing, "imported but not installed by what the code names:\n" + "\n".join(missing)


def test_the_check_sees_an_undeclared_base_import(tmp_path: Path) -> None:
    # The rule itself: an import outside any guard needs the base requirements.
    source = tmp_path / "groundkit" / "storage" / "probe.py"
    source.parent.mkdir(parents=True)
    source.write_text("import matplotlib\n", encoding="utf-8")
    global PACKAGE
    saved, PACKAGE = PACKAGE, tmp_path / "groundkit"
    try:
        (found,) = list(_imports(source))
    finally:
        PACKAGE = saved
    assert found.extras == ()
    assert "matplotlib" not in _closure(())


def test_every_dependency_has_a_floor_and_a_ceiling() -> None:
    declared = list(PROJECT["dependencies"])
    for extra, requirements in PROJECT["optional-dependencies"].items():
        declared += [r for r in requirements if not r.startswith("groundkit[")]
        assert requirements, extra
    for text in declared:
        req = Requirement(text)
        operators = {spec.operator for spec in req.specifier}
        assert ">=" in operators and "<" in operators, f"{text}: a floor and a ceiling"


def test_pypdf_clears_the_known_advisories() -> None:
    (pypdf,) = [Requirement(r) for r in PROJECT["optional-dependencies"]["pdf-legacy"]]
    assert "6.14.2" not in pypdf.specifier and "6.15.0" in pypdf.specifier
