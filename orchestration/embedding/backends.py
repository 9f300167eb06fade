"""Which engine runs the encoder: PyTorch, or ONNX Runtime on the export (`embedding.export`), fp32 or int8.

    encoder = load_encoder(model_dir, backend="auto")     # a MultilingualNMT, or an OnnxEncoder
    model.inference.embed(encoder, token_ids, "fr")        # the same call either way

`runtime.backend`:
  torch       the model.safetensors in PyTorch (the only one on a GPU)
  onnx        ONNX Runtime on the fp32 export: the same embeddings (max abs difference <= 1e-4)
  onnx-int8   ONNX Runtime on the int8 export: the fastest on a CPU, a slightly different embedding
  auto        (default) the fastest present: onnx-int8, else onnx, else torch. An export is present only
              once `interlingua export` wrote it beside the model directory and its manifest names this
              very model.safetensors (sha256); so nothing changes until a user exports, and a retrained model
              never runs on a stale export. `evaluate` asks for the fastest exact one (`exact`: onnx,
              else torch): an error rate measures the model, not its quantization, unless onnx-int8 is
              asked for by name.

`OnnxEncoder` has what `model.inference.embed` uses of a `MultilingualNMT` (`encode`, `embedding_dim`,
`languages`, `eval`/`train`), so the batching code is one for every backend.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from core.dataset import file_sha256
from core.errors import UserError
from orchestration.adapters import model_dir as model_files
from orchestration.embedding import export

if TYPE_CHECKING:
    from onnxruntime import InferenceSession

log = logging.getLogger(__name__)

BACKENDS = ("auto", "torch", "onnx", "onnx-int8")
FASTEST_FIRST = ("onnx-int8", "onnx")
EXACT = "onnx"  # the fastest backend whose embeddings are the model's own (within 1e-4 of torch)


# Whether ONNX Runtime's sessions compute denormal floats as zero (its `session.set_denormal_as_zero`; torch's flag,
# set in training and embedding, does not reach its threads). Off, ONNX Runtime's default: on the demo's trained
# model it changed neither the speed (0.98-1.02x, fp32 and int8) nor any output bit (benchmarks/onnx_denormals.py,
# benchmarks/RESULTS.md), where torch's embedding on trained weights gained 1.08x from its flag.
FLUSH_DENORMALS = False


class BackendError(UserError, RuntimeError):
    """A backend asked for that is not there: no export, a stale one, or onnxruntime missing."""


class OnnxEncoder:
    """The encoders of an export run by ONNX Runtime: `encode(ids (B, T), lengths (B,), lang) -> (B, D)`."""

    training = False

    def __init__(self, sessions: dict[str, InferenceSession], *, languages: list[str], embedding_dim: int) -> None:
        self.sessions, self.languages, self.embedding_dim = sessions, languages, embedding_dim

    def encode(self, ids: torch.Tensor, lengths: torch.Tensor, lang: str) -> torch.Tensor:
        """The sentence embeddings (B, D) of right-padded `ids` (B, T) in language `lang`."""
        session = self.sessions.get("shared") or self.sessions.get(lang)
        if session is None:
            raise KeyError(f"the export has no encoder for language {lang!r}; it knows {self.languages}")
        feed = {"ids": _int64(ids), "lengths": _int64(lengths)}
        return torch.from_numpy(session.run(None, feed)[0])  # (B, D)

    def eval(self) -> OnnxEncoder:
        return self

    def train(self, mode: bool = True) -> OnnxEncoder:
        return self  # inference only: nothing changes between modes

    def to(self, device: Any) -> OnnxEncoder:
        return self  # the CPU execution provider; `resolve` keeps other devices on torch


def _int64(tensor: torch.Tensor | np.ndarray) -> np.ndarray:
    array = tensor.cpu().numpy() if isinstance(tensor, torch.Tensor) else np.asarray(tensor)
    return np.ascontiguousarray(array, dtype=np.int64)


def load_encoder(
    model_dir: Path,
    *,
    backend: str = "auto",
    device: str = "cpu",
    threads: int | None = None,
    export_dir: Path | None = None,
    exact: bool = False,
):
    """The encoder of the (verified) model directory on `backend` (see the module docstring): a
    MultilingualNMT on `device`, or an OnnxEncoder (`threads`: ONNX Runtime's intra-op threads, None: its
    default). `export_dir`: where the export is (default `export.default_dir`); `exact`: see `resolve`.
    BackendError when an explicit ONNX backend cannot run."""
    model_dir = Path(model_dir)
    chosen = resolve(model_dir, backend, device=device, export_dir=export_dir, exact=exact)
    if chosen == "torch":
        model, _ = model_files.load(model_dir / model_files.MODEL_FILE, map_location=device)
        return model.to(device)
    folder = Path(export_dir) if export_dir else export.default_dir(model_dir)
    manifest = export.read_manifest(folder)
    if manifest is None:  # `resolve` found it: removed since
        raise BackendError(f"runtime.backend={chosen}: no export at {folder} any more; export the model again")
    sessions = {name: session(folder / export.file_name(name, chosen), threads=threads) for name in manifest.encoders}
    log.info("encoder backend %s (%s)", chosen, folder)
    return OnnxEncoder(sessions, languages=manifest.languages, embedding_dim=manifest.embedding_dim)


def resolve(
    model_dir: Path, backend: str, *, device: str = "cpu", export_dir: Path | None = None, exact: bool = False
) -> str:
    """The backend that runs: `backend` itself once it can, or for "auto" the fastest that can (`exact`: the
    fastest whose embeddings are the model's own, never int8)."""
    if backend not in BACKENDS:
        raise BackendError(f"runtime.backend: {backend!r} is not one of {', '.join(BACKENDS)}")
    if backend == "torch":
        return backend
    folder = Path(export_dir) if export_dir else export.default_dir(Path(model_dir))
    problem = _unusable(model_dir, folder, device)
    if backend == "auto":
        if problem:
            log.debug("encoder backend torch: %s", problem)
        return "torch" if problem else EXACT if exact else FASTEST_FIRST[0]
    if problem:
        raise BackendError(f"runtime.backend={backend}: {problem}")
    return backend


def _unusable(model_dir: Path, folder: Path, device: str) -> str | None:
    """Why the export at `folder` cannot stand in for the model at `model_dir`; None when it can."""
    if torch.device(device).type != "cpu":
        return f"ONNX backends run on the CPU, not {device}; use runtime.backend=torch there"
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return "onnxruntime is not installed (pip install 'interlingua[onnx]')"
    manifest = export.read_manifest(folder)
    if manifest is None:
        return f"no export at {folder}; write it with `interlingua export --model {model_dir}`"
    model_sha = file_sha256(Path(model_dir) / model_files.MODEL_FILE)
    if manifest.model.model_sha256 != model_sha:
        return (
            f"the export at {folder} is of another model.safetensors "
            f"(sha256 {manifest.model.model_sha256[:12]}, not {model_sha[:12]}); export this model again "
            f"with `interlingua export --model {model_dir}`"
        )
    for name, recorded in manifest.files.items():
        path = folder / name
        if not path.is_file() or file_sha256(path) != recorded:
            return f"{path}: missing or not the file its manifest records; export the model again"
    return None


def session(path: Path, *, threads: int | None = None, flush_denormals: bool = FLUSH_DENORMALS):
    """An ONNX Runtime CPU session of `path`; `threads` pins its intra-op threads (1: a per-core figure);
    `flush_denormals`: its threads compute denormal floats as zero (ONNX Runtime's own setting: torch's flag,
    `model.training.cpu_threads`, does not reach its thread pool)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    if flush_denormals:
        options.add_session_config_entry("session.set_denormal_as_zero", "1")
    if threads:
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
