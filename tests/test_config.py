"""Validated settings."""

from __future__ import annotations

import math
from typing import Any

import pytest

from groundkit import AnalyzerConfig, ChunkingConfig, IngestConfig, RetrievalConfig
from groundkit.config import DEFAULT_EXTENSIONS, MAX_TOP_K
from groundkit.errors import ConfigurationError, InvalidSettingError


class TestRetrievalConfig:
    def test_defaults(self) -> None:
        cfg = RetrievalConfig()
        assert (cfg.top_k, cfg.bm25_k1, cfg.bm25_b, cfg.score_threshold) == (10, 1.5, 0.75, None)

    def test_max_top_k(self) -> None:
        assert MAX_TOP_K == 1000

    @pytest.mark.parametrize("top_k", [1, 7, MAX_TOP_K])
    def test_top_k_in_bounds(self, top_k: int) -> None:
        assert RetrievalConfig(top_k=top_k).top_k == top_k

    @pytest.mark.parametrize("top_k", [0, -1, MAX_TOP_K + 1])
    def test_top_k_out_of_bounds(self, top_k: int) -> None:
        with pytest.raises(ConfigurationError, match="top_k"):
            RetrievalConfig(top_k=top_k)

    @pytest.mark.parametrize("field", ["bm25_k1", "bm25_b", "score_threshold"])
    @pytest.mark.parametrize("value", [math.nan, math.inf])
    def test_non_finite_rejected(self, field: str, value: float) -> None:
        with pytest.raises(ConfigurationError, match=field):
            RetrievalConfig(**{field: value})  # type: ignore[arg-type]

    @pytest.mark.parametrize(
        ("field", "value"),
        [
            ("bm25_k1", -0.1),
            ("bm25_k1", 10.5),
            ("bm25_b", -0.1),
            ("bm25_b", 1.01),
            ("score_threshold", -1.0),
            ("rrf_k", 0),
        ],
    )
    def test_ranges(self, field: str, value: float) -> None:
        with pytest.raises(ConfigurationError, match=field):
            RetrievalConfig(**{field: value})  # type: ignore[arg-type]

    def test_edges_accepted(self) -> None:
        cfg = RetrievalConfig(bm25_k1=0.0, bm25_b=1.0, score_threshold=0.0)
        assert (cfg.bm25_k1, cfg.bm25_b, cfg.score_threshold) == (0.0, 1.0, 0.0)


class TestChunkingConfig:
    def test_defaults(self) -> None:
        assert ChunkingConfig().max_chars == 1600
        assert ChunkingConfig().overlap_chars == 200

    def test_overlap_up_to_half_budget(self) -> None:
        assert ChunkingConfig(max_chars=100, overlap_chars=50).overlap_chars == 50
        with pytest.raises(ConfigurationError, match="overlap"):
            ChunkingConfig(max_chars=100, overlap_chars=51)

    @pytest.mark.parametrize(
        "kwargs",
        [{"max_chars": 31}, {"max_chars": 100_001}, {"overlap_chars": -1}],
    )
    def test_bounds(self, kwargs: dict[str, Any]) -> None:
        with pytest.raises(ConfigurationError):
            ChunkingConfig(**kwargs)


class TestIngestConfig:
    def test_defaults(self) -> None:
        # Defaults go through the same normalisation as explicit values.
        assert IngestConfig().extensions == tuple(sorted(DEFAULT_EXTENSIONS))
        assert IngestConfig() == IngestConfig(extensions=DEFAULT_EXTENSIONS)

    def test_extensions_normalised(self) -> None:
        cfg = IngestConfig(extensions=("TXT", ".Md", "txt", ".rst"))
        assert cfg.extensions == (".md", ".rst", ".txt")

    @pytest.mark.parametrize("extensions", [(), ("",), (".",)])
    def test_bad_extensions(self, extensions: tuple[str, ...]) -> None:
        with pytest.raises(ConfigurationError):
            IngestConfig(extensions=extensions)

    @pytest.mark.parametrize(
        "extension", ["*.md", ".*", "tar.gz", "..md", "md/", "docs/x.md", "a\\b.?", " .md"]
    )
    def test_an_extension_no_file_name_ends_in_is_refused(self, extension: str) -> None:
        # A file is matched by its last suffix: these matched nothing, silently.
        with pytest.raises(ConfigurationError, match="can never match"):
            IngestConfig(extensions=(extension,))
        with pytest.raises(ConfigurationError, match="can never match"):
            IngestConfig(html_extensions=(extension,))

    def test_max_file_bytes_positive(self) -> None:
        with pytest.raises(ConfigurationError):
            IngestConfig(max_file_bytes=0)


class TestAnalyzerConfig:
    @pytest.mark.parametrize("value", [0, 9])
    def test_min_token_chars_bounds(self, value: int) -> None:
        with pytest.raises(ConfigurationError):
            AnalyzerConfig(min_token_chars=value)


@pytest.mark.parametrize(
    "cfg",
    [RetrievalConfig(), ChunkingConfig(), IngestConfig(), AnalyzerConfig()],
    ids=lambda c: type(c).__name__,
)
def test_settings_frozen_and_strict(cfg: object) -> None:
    name = next(iter(type(cfg).model_fields))  # type: ignore[attr-defined]
    with pytest.raises(ConfigurationError):
        setattr(cfg, name, getattr(cfg, name))
    with pytest.raises(ConfigurationError):
        type(cfg)(unknown_setting=1)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("cls", "field", "value"),
    [
        (ChunkingConfig, "max_chars", "500"),
        (ChunkingConfig, "max_chars", 500.0),
        (ChunkingConfig, "overlap_chars", True),
        (ChunkingConfig, "contextual", "yes"),
        (ChunkingConfig, "contextual", 1),
        (IngestConfig, "keep_versions", True),
        (IngestConfig, "keep_versions", "3"),
        (IngestConfig, "max_file_bytes", 1024.0),
        (IngestConfig, "read_fields", "no"),
        (IngestConfig, "keep_sources", 0),
        (IngestConfig, "progress_log_seconds", "5"),
        (AnalyzerConfig, "stopwords", "false"),
        (AnalyzerConfig, "min_token_chars", "2"),
        (RetrievalConfig, "bm25_k1", "1.2"),
        (RetrievalConfig, "bm25_b", True),
        (RetrievalConfig, "score_threshold", True),
        (RetrievalConfig, "min_relevance", "0.5"),
    ],
)
def test_a_value_of_the_wrong_kind_is_refused_not_converted(
    cls: type[Any], field: str, value: object
) -> None:
    """``"yes"`` is not a switch and ``True`` is not a count: each is refused, naming
    the field, rather than read as what the caller may not have meant."""
    with pytest.raises(InvalidSettingError, match=field) as info:
        cls(**{field: value})
    assert info.value.problems[0][0].split(".")[0] == field
    # An int where a number is wanted is no surprise.
    assert RetrievalConfig(bm25_k1=2).bm25_k1 == 2.0


@pytest.mark.parametrize(
    "cfg",
    [RetrievalConfig(), ChunkingConfig(), IngestConfig(), AnalyzerConfig()],
    ids=lambda c: type(c).__name__,
)
def test_every_way_of_making_settings_checks_them(cfg: Any) -> None:
    """``model_validate``, ``model_validate_json`` and ``model_copy(update=...)`` (what the
    frozen error points to) raise groundkit's error, and never make settings the
    constructor would refuse."""
    cls = type(cfg)
    assert cls.model_validate(cfg.model_dump()) == cfg
    assert cls.model_validate_json(cfg.model_dump_json()) == cfg
    for bad in (5, {"unknown_setting": 1}):
        with pytest.raises(InvalidSettingError):
            cls.model_validate(bad)
    for text in ("{", "[]", '{"unknown_setting": 1}'):
        with pytest.raises(InvalidSettingError):
            cls.model_validate_json(text)
    with pytest.raises(InvalidSettingError, match="unknown_setting"):
        cfg.model_copy(update={"unknown_setting": 1})
    assert cfg.model_copy() == cfg == cfg.model_copy(update={})


def test_model_copy_checks_the_values_it_changes() -> None:
    chunking = ChunkingConfig(max_chars=400, overlap_chars=100)
    assert chunking.model_copy(update={"max_chars": 800}) == ChunkingConfig(
        max_chars=800, overlap_chars=100
    )
    for update in ({"max_chars": 0}, {"max_chars": 150}, {"contextual": "yes"}):
        with pytest.raises(InvalidSettingError):
            chunking.model_copy(update=update)
    # What was left at its default stays so: a sentence chunking takes a new budget.
    sentence = ChunkingConfig(strategy="sentence")
    assert sentence.model_copy(update={"max_chars": 300}).identity == "chunker/1:sentence:300:0"
    with pytest.raises(InvalidSettingError, match="top_k"):
        RetrievalConfig().model_copy(update={"top_k": 0})
