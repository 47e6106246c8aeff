"""The documentation imports only the public surface (ADR 0066, docs/architecture.md,
"Public and internal").

Every Python code block of README.md and docs/*.md (and every file of examples/, when
there is one) is parsed, never run, and each ``import`` of a groundkit module must name a
public one: ``groundkit``, ``groundkit.sync``, a subpackage's ``__init__``,
``groundkit.integrations.*``, ``groundkit.testing`` (with the conformance and adversarial
suites it documents) or one of the model modules. Each name imported from a public module
must be in its ``__all__`` (or be one of its public submodules). A failure names the file
and the line.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
import re
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

# The subpackages whose __init__ is public: the list the exported-names test pins.
from tests.test_public_api import SUBPACKAGES

ROOT = Path(__file__).resolve().parent.parent

MODEL_MODULES = (
    "groundkit.config",
    "groundkit.contracts",
    "groundkit.errors",
    "groundkit.telemetry",
)
# groundkit.testing's own docstring and docs/architecture.md send users to these suites.
TESTING = ("groundkit.testing", "groundkit.testing.conformance", "groundkit.testing.adversarial")


def _warns_on_import(module: str) -> bool:
    """Whether the module's own top level warns that it is deprecated (a path kept for
    one release, which the docs must not teach), read from its source."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, module
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    return any(
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and ast.unparse(node.value.func) == "warnings.warn"
        and "DeprecationWarning" in ast.unparse(node.value)
        for node in tree.body
    )


def _integrations() -> tuple[str, ...]:
    """``groundkit.integrations`` and each of its modules not marked private by a ``_``
    nor deprecated."""
    package = importlib.import_module("groundkit.integrations")
    found = sorted(
        f"groundkit.integrations.{m.name}"
        for m in pkgutil.iter_modules(package.__path__)
        if not m.name.startswith("_") and not _warns_on_import(f"groundkit.integrations.{m.name}")
    )
    return ("groundkit.integrations", *found)


PUBLIC = frozenset(
    ("groundkit", "groundkit.sync", *SUBPACKAGES, *MODEL_MODULES, *TESTING, *_integrations())
)
PYTHON = frozenset({"python", "py", "python3", "pycon"})
FENCE = re.compile(r"(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`\n]*)")


@dataclass(frozen=True)
class Block:
    path: str
    line: int  # the file's line of the block's first line
    lang: str
    body: str


def fenced_blocks(text: str, path: str) -> Iterator[Block]:
    """The fenced code blocks of a Markdown text, indented ones (in a list) dedented."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.fullmatch(lines[i])
        if opening is None:
            i += 1
            continue
        fence = opening["fence"]
        end = i + 1
        while end < len(lines):
            closing = FENCE.fullmatch(lines[end])
            if closing and closing["fence"].startswith(fence) and not closing["info"].strip():
                break
            end += 1
        info = opening["info"].split()
        body = textwrap.dedent("\n".join(lines[i + 1 : end]))
        yield Block(path, i + 2, info[0].lower() if info else "", body)
        i = end + 1


def _source(block: Block) -> str:
    """The block as Python: a ``pycon`` session's ``>>>``/``...`` lines, others as they are."""
    if block.lang != "pycon":
        return block.body
    kept = []
    for line in block.body.splitlines():
        if line.startswith((">>> ", "... ")) or line in (">>>", "..."):
            kept.append(line[4:])
        else:
            kept.append("")  # output: blank, so the line numbers hold
    return "\n".join(kept)


def _all_of(module: str) -> frozenset[str]:
    names: list[str] = list(getattr(importlib.import_module(module), "__all__", ()))
    return frozenset(names)


def violations(block: Block) -> list[str]:
    """Every import of a groundkit module in ``block`` the public surface does not offer,
    as ``path:line: statement: why``."""
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    try:
        tree = compile(_source(block), block.path, "exec", flags=flags, dont_inherit=True)
    except SyntaxError as exc:
        return [f"{block.path}:{block.line + (exc.lineno or 1) - 1}: not Python: {exc.msg}"]
    found = []
    for node in ast.walk(tree):
        where = f"{block.path}:{block.line + getattr(node, 'lineno', 1) - 1}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top == "groundkit" and alias.name not in PUBLIC:
                    found.append(f"{where}: import {alias.name}: not a public module")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            module = node.module
            if module.split(".")[0] != "groundkit":
                continue
            statement = f"from {module} import {', '.join(a.name for a in node.names)}"
            if module not in PUBLIC:
                found.append(f"{where}: {statement}: {module} is not a public module")
                continue
            exported = _all_of(module)
            for alias in node.names:
                name = alias.name
                if name == "*" or name in exported or f"{module}.{name}" in PUBLIC:
                    continue
                found.append(f"{where}: {statement}: {name} is not in {module}.__all__")
    return found


def documentation() -> list[Path]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [f for f in files if f.is_file()]


def python_blocks() -> list[Block]:
    blocks = []
    for path in documentation():
        text = path.read_text(encoding="utf-8")
        name = path.relative_to(ROOT).as_posix()
        blocks += [b for b in fenced_blocks(text, name) if b.lang in PYTHON]
    examples = ROOT / "examples"
    if examples.is_dir():
        for path in sorted(examples.rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            blocks.append(Block(name, 1, "python", path.read_text(encoding="utf-8")))
    return blocks


def test_every_python_block_of_the_docs_imports_only_public_names() -> None:
    blocks = python_blocks()
    # Every ```python fence was read (a fence the parser missed would pass unchecked).
    opened = sum(
        len(re.findall(r"^[ \t]*```python[ \t]*$", p.read_text(encoding="utf-8"), re.M))
        for p in documentation()
    )
    assert sum(b.lang == "python" for b in blocks if b.path.endswith(".md")) == opened
    assert opened >= 10
    found = [v for block in blocks for v in violations(block)]
    assert found == [], "\n".join(found)
    # Every block parsed; and the docs do import groundkit, so the check had work to do.
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    imported = [
        node
        for b in blocks
        for node in ast.walk(compile(_source(b), b.path, "exec", flags=flags))
        if isinstance(node, ast.Import | ast.ImportFrom)
        and "groundkit" in ast.unparse(node).split()[1].split(".")[0]
    ]
    assert len(imported) >= 20


def test_every_public_module_exists_and_states_its_names() -> None:
    for module in PUBLIC - {"groundkit.integrations"}:
        assert _all_of(module), module
    assert {"groundkit.integrations.haystack", "groundkit.integrations.langchain"} <= PUBLIC
    assert "groundkit.integrations._common" not in PUBLIC
    # A deprecated path is not taught either: it warns and goes in the next release.
    assert _warns_on_import("groundkit.integrations.providers")
    assert "groundkit.integrations.providers" not in PUBLIC
    assert not _warns_on_import("groundkit.integrations.haystack")


BAD_DOC = """\
# Usage

```python
import groundkit
from groundkit import Collection, sync
from groundkit.storage import SQLiteMetadataStore
from groundkit.storage.sqlite import SQLiteMetadataStore as Inner
import groundkit.utils.heartbeat
from groundkit.integrations.haystack import GroundkitRetriever
from groundkit.integrations._common import CollectionReference
from groundkit.integrations.providers import chunk_uri
```

1. In a list:

   ```py
   from groundkit.retrieval.postprocess import fuse_rankings
   async with groundkit.Collection.open("idx") as col:
       from groundkit import BM25Index
   ```

```pycon
>>> from groundkit.config import MAX_TOP_K, Nope
```

```bash
python -c "from groundkit.utils import lazy"
```
"""


def test_the_check_names_each_internal_import_with_its_file_and_line() -> None:
    blocks = [b for b in fenced_blocks(BAD_DOC, "BAD.md") if b.lang in PYTHON]
    assert [(b.lang, b.line) for b in blocks] == [("python", 4), ("py", 17), ("pycon", 23)]
    assert [v for b in blocks for v in violations(b)] == [
        "BAD.md:7: from groundkit.storage.sqlite import SQLiteMetadataStore: "
        "groundkit.storage.sqlite is not a public module",
        "BAD.md:8: import groundkit.utils.heartbeat: not a public module",
        "BAD.md:10: from groundkit.integrations._common import CollectionReference: "
        "groundkit.integrations._common is not a public module",
        "BAD.md:11: from groundkit.integrations.providers import chunk_uri: "
        "groundkit.integrations.providers is not a public module",
        "BAD.md:17: from groundkit.retrieval.postprocess import fuse_rankings: "
        "groundkit.retrieval.postprocess is not a public module",
        "BAD.md:19: from groundkit import BM25Index: BM25Index is not in groundkit.__all__",
        "BAD.md:23: from groundkit.config import MAX_TOP_K, Nope: "
        "Nope is not in groundkit.config.__all__",
    ]


def test_a_block_that_is_not_python_is_reported_not_skipped() -> None:
    (block,) = fenced_blocks("```python\nimport groundkit\nfrom groundkit import (\n```\n", "X.md")
    (problem,) = violations(block)
    assert problem.startswith("X.md:") and "not Python" in problem


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_a_public_import_passes(module: str) -> None:
    names = sorted(_all_of(module))[:3]
    body = f"import {module}\n" + (f"from {module} import {', '.join(names)}\n" if names else "")
    assert violations(Block("OK.md", 1, "python", body)) == []
