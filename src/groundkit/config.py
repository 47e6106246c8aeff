"""Validated settings. Defaults are measured, not guessed (see adr/)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from groundkit.errors import ConfigurationError, InvalidSettingError
from groundkit.utils.heartbeat import PROGRESS_LOG_SECONDS

__all__ = [
    "DEFAULT_EXTENSIONS",
    "DEFAULT_EXTRACTION_CACHE_BYTES",
    "DEFAULT_MAX_FILE_BYTES",
    "DOCX_EXTENSIONS",
    "EPUB_EXTENSIONS",
    "HTML_EXTENSIONS",
    "MAX_TOP_K",
    "PDF_EXTENSIONS",
    "PPTX_EXTENSIONS",
    "AnalyzerConfig",
    "ChunkStrategy",
    "ChunkingConfig",
    "IngestConfig",
    "RelevanceCalibration",
    "RetrievalConfig",
]

MAX_TOP_K = 1000
DEFAULT_EXTENSIONS: tuple[str, ...] = (".txt", ".md", ".markdown", ".rst")
PDF_EXTENSIONS: tuple[str, ...] = (".pdf",)
HTML_EXTENSIONS: tuple[str, ...] = (".html", ".htm", ".xhtml")
DOCX_EXTENSIONS: tuple[str, ...] = (".docx",)
PPTX_EXTENSIONS: tuple[str, ...] = (".pptx",)
EPUB_EXTENSIONS: tuple[str, ...] = (".epub",)
# The largest source file read, at ingest and when a citation is checked.
DEFAULT_MAX_FILE_BYTES = 20 * 1024 * 1024
# What the record of past extractions may hold on disk (extraction/cache.py).
DEFAULT_EXTRACTION_CACHE_BYTES = 1 << 30
# Tesseract's language codes, joined by "+" (eng, deu, chi_sim, eng+deu).
_OCR_LANGUAGES = re.compile(r"[A-Za-z0-9_]+(?:\+[A-Za-z0-9_]+)*")


class _Settings(BaseModel):
    """Settings fail as ``ConfigurationError``, like every other bad setting.

    Numbers and switches are strict: ``"500"``, ``5.0`` or ``True`` given for a count,
    or ``"yes"`` or ``1`` for a switch, is refused rather than read as something the
    caller may not have meant. Every way of making one (the constructor,
    ``model_validate``, ``model_validate_json``, ``model_copy(update=...)``) checks it.
    """

    # Validators are built when a model is first used, not at import: a process pays
    # only for the models it uses (adr/0063-cold-start.md).
    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True, defer_build=True)

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _invalid(type(self), exc) from None

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Self:
        try:
            return super().model_validate(obj, *args, **kwargs)
        except ValidationError as exc:
            raise _invalid(cls, exc) from None

    @classmethod
    def model_validate_json(cls, json_data: Any, *args: Any, **kwargs: Any) -> Self:
        try:
            return super().model_validate_json(json_data, *args, **kwargs)
        except ValidationError as exc:
            raise _invalid(cls, exc) from None

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy; with ``update``, made through the constructor, so the new values are
        checked (pydantic's own copy takes them unchecked)."""
        if not update:
            return super().model_copy(deep=deep)
        given = {name: getattr(self, name) for name in self.model_fields_set}
        return type(self)(**{**given, **update})

    def __setattr__(self, name: str, value: Any) -> None:
        raise ConfigurationError(
            f"{type(self).__name__} is frozen; build a new one with model_copy(update=...)"
        )


def _invalid(cls: type[BaseModel], exc: ValidationError) -> InvalidSettingError:
    problems = tuple(
        (".".join(str(part) for part in error["loc"]), error["msg"], error.get("input"))
        for error in exc.errors()
    )
    return InvalidSettingError(
        f"invalid {cls.__name__}: {exc}", setting=cls.__name__, problems=problems
    )


class RelevanceCalibration(_Settings):
    """How likely a result is relevant, read off its cosine similarity, for one
    embedding model, fitted on judged queries (``groundkit.retrieval.fit_relevance``;
    adr/0071-relevance-calibration.md).

    ``relevance(cosine)`` is the logistic ``1 / (1 + exp(-(slope * cosine +
    intercept)))``. ``floor`` is the cosine below which a result is off the
    collection's topic: only a small share (``fit_relevance``'s ``keep``) of the
    relevant results it was fitted on lie below it. ``fitted_on`` names the data, so
    a reader can judge how far it carries.
    """

    slope: StrictFloat = Field(gt=0.0)
    intercept: StrictFloat
    floor: StrictFloat = Field(ge=-1.0, le=1.0)
    fitted_on: str = ""

    @field_validator("slope", "intercept")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value

    def relevance(self, cosine: float) -> float:
        """The probability that a result at this cosine similarity is relevant."""
        z = self.slope * cosine + self.intercept
        if z >= 0:
            return 1.0 / (1.0 + math.exp(-z))
        e = math.exp(z)  # no overflow for very negative z
        return e / (1.0 + e)

    def cosine_at(self, relevance: float) -> float:
        """The least cosine similarity whose relevance reaches ``relevance`` (0 < r < 1)."""
        return (math.log(relevance / (1.0 - relevance)) - self.intercept) / self.slope


class RetrievalConfig(_Settings):
    """How searches are scored and cut."""

    top_k: StrictInt = Field(default=10, ge=1, le=MAX_TOP_K)
    bm25_k1: StrictFloat = Field(default=1.5, ge=0.0, le=10.0)
    bm25_b: StrictFloat = Field(default=0.75, ge=0.0, le=1.0)
    rrf_k: StrictInt = Field(default=60, ge=1)
    score_threshold: StrictFloat | None = Field(default=None, ge=0.0)
    # Collections up to this many chunks keep their rows in memory, read in the
    # background once a first search has answered, so later searches need no
    # database read (adr/0010-row-preload.md). 0 disables.
    preload_max_chunks: StrictInt = Field(default=50_000, ge=0)
    # Hybrid: candidates taken from each side, how they are fused, BM25's weight.
    hybrid_candidates: StrictInt = Field(default=100, ge=1, le=MAX_TOP_K)
    # Defaults measured on SciFact: adr/0012-hybrid-fusion.md.
    hybrid_fusion: Literal["rrf", "convex"] = "convex"
    hybrid_bm25_weight: StrictFloat = Field(default=0.6, gt=0.0, lt=1.0)
    # How many candidates the cross-encoder reorders when rerank=True.
    rerank_depth: StrictInt = Field(default=50, ge=1, le=MAX_TOP_K)
    # When the vector side is missing or damaged: answer dense and hybrid searches
    # from BM25 and say so in the response ("bm25"), or refuse them ("error").
    # adr/0029-reconcile-vectors.md.
    vector_fallback: Literal["bm25", "error"] = "bm25"
    # search(expand=...): the chunks either side of a hit in a "window" passage,
    # and the longest passage (either kind) in characters.
    context_window: StrictInt = Field(default=2, ge=1, le=50)
    context_max_chars: StrictInt = Field(default=4000, ge=32, le=100_000)
    # Candidates read when a step chooses among more than it returns (expand, mmr).
    postprocess_candidates: StrictInt = Field(default=50, ge=1, le=MAX_TOP_K)
    # search(rewrite=True): the most query variants searched beside the original.
    max_rewrites: StrictInt = Field(default=3, ge=0, le=10)
    # Dense and hybrid results whose calibrated relevance is below this probability are
    # left out; "auto" leaves out those below the calibration's floor (off topic), so a
    # query the collection cannot answer returns nothing (adr/0071). None: all kept.
    min_relevance: Annotated[StrictFloat, Field(gt=0.0, lt=1.0)] | Literal["auto"] | None = None
    # The embedder's calibration; None takes the built-in one for a known model.
    relevance_calibration: RelevanceCalibration | None = None

    @field_validator("bm25_k1", "bm25_b", "score_threshold")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value


ChunkStrategy = Literal["fixed", "structure", "sentence"]


class ChunkingConfig(_Settings):
    """How documents are cut into chunks, and what their index text is.

    ``strategy``: ``"fixed"`` packs paragraphs, then sentences, up to
    ``max_chars`` with ``overlap_chars`` shared between neighbours;
    ``"structure"`` (the default) does the same but never across a heading
    (Markdown, reStructuredText, HTML ``h1``-``h6``, DOCX heading styles) or a page;
    ``"sentence"`` makes one chunk per sentence, also cut at headings (small
    children for ``search(expand=...)``; no overlap).
    ``contextual`` prefixes each chunk's *index* text (its BM25 terms and the
    embedder's input) with its document title and heading path; the stored
    content, offsets and citations are unchanged.
    The chunking a collection is first ingested with is bound to it
    (``identity``). Defaults chosen on SciFact and the long-document benchmark:
    adr/0003-chunk-budget.md, adr/0046-structure-chunking.md.
    """

    strategy: ChunkStrategy = "structure"
    max_chars: StrictInt = Field(default=1600, ge=32, le=100_000)
    overlap_chars: StrictInt = Field(default=200, ge=0)
    contextual: StrictBool = False

    @model_validator(mode="after")
    def _overlap_below_budget(self) -> ChunkingConfig:
        if self.strategy == "sentence":
            if "overlap_chars" in self.model_fields_set and self.overlap_chars:
                raise ValueError("sentence chunks do not overlap: leave overlap_chars unset or 0")
            return self
        if self.overlap_chars * 2 > self.max_chars:
            raise ValueError("overlap_chars must be at most half of max_chars")
        return self

    @property
    def effective_overlap(self) -> int:
        """The overlap actually applied (sentence chunks have none)."""
        return 0 if self.strategy == "sentence" else self.overlap_chars

    @property
    def identity(self) -> str:
        """What the collection is bound to: changing any of it changes the chunks."""
        text = f"chunker/1:{self.strategy}:{self.max_chars}:{self.effective_overlap}"
        return text + (":contextual" if self.contextual else "")

    @classmethod
    def from_identity(cls, identity: str | None) -> ChunkingConfig | None:
        """The chunking an ``identity`` names; None when it is not one this version wrote."""
        parts = (identity or "").split(":")
        if len(parts) not in (4, 5) or parts[0] != "chunker/1":
            return None
        if len(parts) == 5 and parts[4] != "contextual":
            return None
        strategy, budget, overlap = parts[1], parts[2], parts[3]
        if strategy not in ("fixed", "structure", "sentence"):
            return None
        if not (budget.isdigit() and overlap.isdigit()):
            return None
        try:
            settings: dict[str, Any] = {"strategy": strategy, "max_chars": int(budget)}
            if strategy != "sentence":
                settings["overlap_chars"] = int(overlap)
            made = cls(**settings, contextual=len(parts) == 5)
        except ConfigurationError:
            return None
        return made if made.identity == identity else None


class AnalyzerConfig(_Settings):
    """Lexical analysis. Changing it after ingest needs a re-index (identity is stored)."""

    stem_language: str | None = "english"
    stopwords: StrictBool = True
    min_token_chars: StrictInt = Field(default=1, ge=1, le=8)


def _normalise_extensions(value: tuple[str, ...]) -> tuple[str, ...]:
    """Lower case, with a leading dot. A file is matched by its last suffix only
    (``PurePath.suffix``), so a value no file name can end in (``"*.md"``, ``".tar.gz"``,
    ``"md/"``) is refused: taken, it would leave every file skipped without a word."""
    out: list[str] = []
    for ext in value:
        e = ext.lower()
        if not e.startswith("."):
            e = "." + e
        if len(e) < 2:
            raise ValueError(f"bad extension {ext!r}")
        if PurePosixPath("x" + e).suffix != e or "*" in e or "?" in e:
            raise ValueError(
                f"extension {ext!r} can never match: a file is matched by the part of its "
                "name from its last '.', such as '.md' (no globs, paths or inner dots)"
            )
        out.append(e)
    return tuple(sorted(set(out)))


class IngestConfig(_Settings):
    """Which files are read, by which loader, and how large one may be.

    ``extensions`` are read as UTF-8 text; ``pdf_extensions``,
    ``html_extensions``, ``docx_extensions``, ``pptx_extensions`` and
    ``epub_extensions`` go through an extractor (an empty tuple turns one off).
    ``html_extractor`` picks how HTML files and pages become text: ``"full"``
    (every block, BeautifulSoup) or ``"main-content"`` (the article only,
    trafilatura; the ``main-content`` extra).
    ``ocr`` decides what happens to PDF pages with no text layer (scans):
    ``"auto"`` recognises them when OCR is installed (``groundkit[ocr]`` and the
    tesseract program) and otherwise leaves them empty with a warning, failing a PDF
    none of whose pages has text; ``"required"`` fails a PDF with such a page when
    OCR is not installed; ``"off"`` never recognises. ``ocr_languages`` are tesseract's
    language names joined by ``+`` (``"eng+deu"``); each needs its language data.
    ``max_file_bytes`` caps the files read, at ingest and, for a ``Collection``
    opened with this config, when its citations are checked.
    ``read_fields`` reads document fields from the files themselves (Markdown
    front matter, PDF document info, HTML title and meta tags); with it off,
    only the fields given to ``ingest`` are stored. ``keep_versions`` bounds the
    past versions kept per document when one changes (``None``: all of them,
    so ``search(as_of=...)`` reaches back to the first ingest; ``0``: none).
    ``keep_sources`` stores a compressed copy of each file's extracted text with the
    collection (beside its URL snapshots), so a host without the file can still
    check its citations, and says it did (``read_from="kept copy"``).
    ``extraction_cache_bytes`` bounds the host-local record of what each PDF, HTML,
    office or EPUB file extracted to (``$GROUNDKIT_CACHE_DIR/extractions``, least
    recently used out; ``0``: none): an ingest meeting the same bytes again reads the
    record instead of extracting (no pdfium run, no OCR). Citation checks never read it.
    ``progress_log_seconds`` is the interval of the progress lines an ingest and an
    embedding model's load write to the ``groundkit.progress`` log at INFO (``None``:
    none), whether or not a ``progress`` callback is given.
    """

    extensions: tuple[str, ...] = DEFAULT_EXTENSIONS
    pdf_extensions: tuple[str, ...] = PDF_EXTENSIONS
    html_extensions: tuple[str, ...] = HTML_EXTENSIONS
    docx_extensions: tuple[str, ...] = DOCX_EXTENSIONS
    pptx_extensions: tuple[str, ...] = PPTX_EXTENSIONS
    epub_extensions: tuple[str, ...] = EPUB_EXTENSIONS
    html_extractor: Literal["full", "main-content"] = "full"
    ocr: Literal["auto", "required", "off"] = "auto"
    ocr_languages: str = "eng"
    max_file_bytes: StrictInt = Field(default=DEFAULT_MAX_FILE_BYTES, ge=1)
    read_fields: StrictBool = True
    keep_versions: StrictInt | None = Field(default=None, ge=0)
    keep_sources: StrictBool = False
    extraction_cache_bytes: StrictInt = Field(default=DEFAULT_EXTRACTION_CACHE_BYTES, ge=0)
    progress_log_seconds: StrictFloat | None = Field(default=PROGRESS_LOG_SECONDS, gt=0)

    @field_validator("ocr_languages")
    @classmethod
    def _languages(cls, value: str) -> str:
        if not _OCR_LANGUAGES.fullmatch(value):
            raise ValueError("expected tesseract language codes joined by '+', such as eng+deu")
        return value

    @field_validator("extensions")
    @classmethod
    def _normalise(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        out = _normalise_extensions(value)
        if not out:
            raise ValueError("at least one extension is needed")
        return out

    @field_validator(
        "pdf_extensions", "html_extensions", "docx_extensions", "pptx_extensions", "epub_extensions"
    )
    @classmethod
    def _normalise_extracted(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _normalise_extensions(value)

    @model_validator(mode="after")
    def _one_loader_per_extension(self) -> IngestConfig:
        groups = (
            self.extensions,
            self.pdf_extensions,
            self.html_extensions,
            self.docx_extensions,
            self.pptx_extensions,
            self.epub_extensions,
        )
        seen: set[str] = set()
        for group in groups:
            clash = seen & set(group)
            if clash:
                raise ValueError(f"extension(s) {sorted(clash)} given to more than one loader")
            seen |= set(group)
        return self
