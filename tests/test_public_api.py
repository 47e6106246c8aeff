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
from pathlib import Path

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


SUBPACKAGES = (
    "groundkit.extraction",
    "groundkit.ingestion",
    "groundkit.lexical",
    "groundkit.providers",
    "groundkit.retrieval",
    "groundkit.service",
    "groundkit.storage",
    "groundkit.verification",
)


@pytest.mark.parametrize("package", ["groundkit", *SUBPACKAGES])
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


# Each subpackage's public names, pinned: a name added or dropped is a decision to make here.
PINNED = {
    "groundkit.extraction": [
        "PAGE_SEPARATOR",
        "DocxExtractor",
        "EpubExtractor",
        "Extraction",
        "ExtractorProtocol",
        "HtmlExtractor",
        "MainContentHtmlExtractor",
        "PdfExtractor",
        "PptxExtractor",
        "active_extractors",
        "decode_body",
        "docx_extractor",
        "epub_extractor",
        "html_extractor",
        "main_content_extractor",
        "pdf_extractor",
        "pptx_extractor",
    ],
    "groundkit.ingestion": [
        "AddressPolicy",
        "DocxLoader",
        "EpubLoader",
        "FileLoader",
        "HtmlLoader",
        "Indexer",
        "IngestExecutor",
        "LoaderProtocol",
        "LocalExecutor",
        "PdfLoader",
        "PptxLoader",
        "RayExecutor",
        "RoutingLoader",
        "UrlLoader",
        "chunk_document",
        "chunk_spans",
        "markdown_outline",
        "rst_outline",
    ],
    "groundkit.lexical": ["Analyzer", "BM25Index", "LexicalIndexProtocol"],
    "groundkit.providers": [
        "MINILM_MODEL_NAME",
        "EmbeddingProtocol",
        "OllamaEmbedder",
        "OpenAICompatibleEmbedder",
        "SentenceTransformerEmbedder",
        "ensure_identity",
        "identity_of",
        "read_dimensions",
        "resolve_model",
    ],
    "groundkit.retrieval": [
        "BUILT_IN_CALIBRATIONS",
        "FILTER_OPERATORS",
        "CrossEncoderReranker",
        "FusedHit",
        "GlossaryRewriter",
        "QueryRewriterProtocol",
        "RerankerProtocol",
        "Retriever",
        "SearchRequest",
        "convex_combination",
        "fit_relevance",
        "load_evidence",
        "lost_in_the_middle",
        "mmr_order",
        "reciprocal_rank_fusion",
        "search_collections",
    ],
    "groundkit.service": ["CollectionInfo", "CollectionRegistry", "build_server", "run_server"],
    "groundkit.storage": [
        "LanceDBVectorStore",
        "MetadataStoreProtocol",
        "PostgresMetadataStore",
        "SQLiteMetadataStore",
        "SnapshotStore",
        "StoreLocation",
        "VectorHit",
        "VectorStoreProtocol",
    ],
    "groundkit.verification": [
        "ChatClaimJudge",
        "ClaimJudge",
        "ClaimJudgement",
        "ClaimPair",
        "EntailmentModelJudge",
        "Receipt",
        "RuleClaimJudge",
        "VerifyReport",
        "check_citation",
        "check_quote",
        "check_receipts",
        "chunk_uri",
        "from_anthropic_citations",
        "from_openai_annotations",
        "read_receipts",
        "resolve_citation",
        "sentence_spans",
        "to_anthropic_documents",
        "to_anthropic_search_results",
        "verify_answer",
        "write_receipts",
    ],
}


@pytest.mark.parametrize("package", SUBPACKAGES)
def test_each_subpackage_exports_its_pinned_names(package: str) -> None:
    module = importlib.import_module(package)
    assert sorted(module.__all__) == sorted(PINNED[package])
    for name in module.__all__:
        assert getattr(module, name) is not None, name
        assert name in dir(module)


def test_the_top_level_holds_no_store_index_loader_or_server() -> None:
    # What the subpackages export for extension stays out of the application surface,
    # except the few objects Collection.open and search take (embedders, reranker,
    # rewriter, URL loader); every error and result type is at the top.
    internal = set(PINNED["groundkit.storage"]) | set(PINNED["groundkit.lexical"])
    internal |= set(PINNED["groundkit.service"]) | set(PINNED["groundkit.extraction"])
    assert not internal & set(groundkit.__all__)
    assert {"Collection", "SearchResponse", "Citation", "check_citation"} <= set(groundkit.__all__)
    assert not {"SyncCollection", "LoaderProtocol", "Indexer", "build_server"} & set(
        groundkit.__all__
    )


MOVED = sorted(groundkit._moved_names().items())


@pytest.mark.parametrize(("name", "where"), MOVED, ids=[name for name, _ in MOVED])
def test_each_old_top_level_name_warns_and_is_the_same_object(
    name: str, where: tuple[str, str]
) -> None:
    home, instead = where
    with pytest.warns(DeprecationWarning, match=rf"groundkit\.{name} is deprecated") as caught:
        old = getattr(groundkit, name)
    assert instead in str(caught[0].message)
    assert caught[0].filename == __file__  # pointed at the line that used it
    assert old is getattr(importlib.import_module(home), name)
    assert name not in groundkit.__all__
    assert name not in dir(groundkit)
    assert name not in vars(groundkit)  # not kept: the next use warns again


def test_moved_names_warn_naming_their_new_import() -> None:
    with pytest.warns(DeprecationWarning, match="use from groundkit.lexical import BM25Index"):
        from groundkit import BM25Index
    from groundkit.lexical import BM25Index as new_home

    assert BM25Index is new_home
    with pytest.warns(DeprecationWarning, match="from groundkit.ingestion import LoaderProtocol"):
        assert (
            groundkit.LoaderProtocol
            is importlib.import_module("groundkit.ingestion.protocols").LoaderProtocol
        )


def test_every_moved_name_has_a_home() -> None:
    # A name listed as moved that no home exports would fail only when a user reached it.
    assert set(groundkit._moved_names()) == set(groundkit._MOVED) | set(groundkit._RETIRING)
    assert not set(groundkit._moved_names()) & set(groundkit.__all__)


def test_the_migration_guide_lists_every_moved_name() -> None:
    guide = (Path(__file__).resolve().parent.parent / "docs" / "migration.md").read_text("utf-8")
    for name, (_, instead) in groundkit._moved_names().items():
        assert f"`groundkit.{name}" in guide, name
        if name in groundkit._MOVED:
            assert f"`{instead}`" in guide, name


def test_unknown_names_are_still_attribute_errors() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        groundkit.Nope  # noqa: B018


def _imports_of_moved_names(path: str) -> list[str]:
    with open(path, encoding="utf-8") as source:
        tree = ast.parse(source.read())
    moved = groundkit._moved_names()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "groundkit":
            found += [f"{path}:{node.lineno} {a.name}" for a in node.names if a.name in moved]
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "groundkit"
            and node.attr in moved
        ):
            found.append(f"{path}:{node.lineno} groundkit.{node.attr}")
    return found


def test_our_own_code_uses_no_moved_name() -> None:
    # The library, its tests, evals and scripts import each name from its home, so they
    # raise none of the deprecation warnings users are asked to act on.
    root = Path(__file__).resolve().parent.parent
    files = [
        p
        for folder in ("src", "tests", "evals", "scripts")
        for p in (root / folder).rglob("*.py")
        if "out" not in p.relative_to(root).parts[:2] and p.name != "test_public_api.py"
    ]
    assert files
    assert [hit for f in files for hit in _imports_of_moved_names(str(f))] == []
