"""`interlingua export`: a model directory's encoders as ONNX, fp32 and int8, beside it or in `-o`.

    <run_dir>/train/model-onnx/          (`default_dir`; or -o OUT)
        encoder-<name>.onnx              fp32, one per encoder module ("shared", or a language)
        encoder-<name>.int8.onnx         dynamic int8 (DynamicQuantizeLSTM)
        manifest.json                    format marker, the model it came from (path, sha256 of
                                         model.safetensors and spm.model), each file's sha256, versions

The folder is an output of the `ExportKind` (`core.output`): built in a staging directory
and swapped in whole, so a crash leaves the previous export intact. An existing OUT is
replaced only when it holds nothing but an earlier export's files (its manifest names
them); anything else there is refused (ForeignDataError, exit 2), never overwritten. Sentencepiece and the
normalization stay outside the graphs: the model directory keeps them.
"""

from __future__ import annotations

import errno
import hashlib
import io
import logging
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from pydantic import ValidationError

from core import boundary, stage
from core.boundary import Name, Segment
from core.dataset import file_sha256
from core.location import Location, json_bytes
from core.output import OutputFolder, Staging
from core.schema import Record
from orchestration.adapters import model_dir as model_files

log = logging.getLogger(__name__)

FORMAT: Final = "interlingua-onnx-export"  # the marker that makes a folder ours to replace
VERSION = 1
MANIFEST = "manifest.json"
BACKENDS = ("onnx", "onnx-int8")


class ExportedModel(Record):
    """The model directory an export came from."""

    dir: str
    model_sha256: str
    spm_sha256: str | None = None


class ExportManifest(Record):
    """`manifest.json` of an export: what makes the folder ours to replace, and what the backends check."""

    format: Literal["interlingua-onnx-export"] = FORMAT
    version: int = VERSION
    model: ExportedModel
    languages: list[Segment]
    encoders: list[Segment]  # "shared", or a language each
    embedding_dim: int
    quantized_ops: list[str]
    files: dict[Name, str]  # name -> sha256
    versions: dict[str, str]  # onnx, onnxruntime, torch


@dataclass(frozen=True)
class Exported:
    """What `export_model` wrote."""

    out_dir: Path
    files: dict[str, str]  # name -> sha256
    quantized_ops: list[str]


def default_dir(model_dir: Path) -> Path:
    """Where `interlingua export` writes, and where the backends look: beside the model directory (inside
    it, `interlingua train` would refuse to replace the model: a model directory holds only its own files)."""
    model_dir = Path(model_dir).resolve()
    return model_dir.with_name(f"{model_dir.name}-onnx")


def file_name(encoder: str, backend: str) -> str:
    """The file of `encoder` ("shared" or a language) for `backend` ("onnx" or "onnx-int8")."""
    return f"encoder-{encoder}.int8.onnx" if backend == "onnx-int8" else f"encoder-{encoder}.onnx"


def read_manifest(out_dir: Path | Location) -> ExportManifest | None:
    """The export's manifest; None when `out_dir` holds none, or one that is not an export's. BoundaryError
    when the folder holds a link (`core.boundary`); a manifest naming a file outside it is not an export's."""
    boundary.check_no_links(out_dir, "the ONNX export")
    try:
        return ExportManifest.model_validate_json((Location.of(out_dir) / MANIFEST).read_bytes())
    except (FileNotFoundError, ValidationError):
        return None


class ExportKind:
    """An ONNX export as an output kind (`core.output.Kind`): the files its manifest names, and the manifest,
    written last."""

    what = "-o"
    marker = MANIFEST
    advice = "give an empty or new directory; interlingua replaces only its own export"

    def ours(self, folder: Location) -> Callable[[str], bool]:
        manifest = read_manifest(folder)
        own = {*manifest.files, MANIFEST} if manifest else set()
        return lambda entry: entry in own


def folder(out_dir: Path) -> OutputFolder:
    """The export at the local folder `out_dir` as an output (`core.output.OutputFolder`): staged beside it,
    swapped in by two renames."""
    return OutputFolder(out_dir, ExportKind())


def export_model(model_dir: Path, out_dir: Path | None = None) -> Exported:
    """Export every encoder of the (verified) model directory as fp32 and int8 ONNX into `out_dir`
    (`default_dir` when None). ModelDirError for a damaged model directory; ForeignDataError when
    `out_dir` holds anything an earlier export did not write."""
    model_dir = model_files.check(Path(model_dir).resolve())
    lineage = model_files.verify(model_dir)
    out_dir = Path(out_dir).resolve() if out_dir else default_dir(model_dir)

    def work(staging: Staging) -> stage.Manifest[Exported]:
        model, _ = model_files.load(model_dir / model_files.MODEL_FILE)
        files, quantized = _write_graphs(model, staging.local)
        manifest = ExportManifest(
            model=ExportedModel(
                dir=str(model_dir), model_sha256=lineage["model_sha256"], spm_sha256=lineage.get("spm_sha256")
            ),
            languages=list(model.languages),
            encoders=sorted(model.encoders),
            embedding_dim=model.embedding_dim,
            quantized_ops=quantized,
            files=files,
            versions=_versions(),
        )
        data = json_bytes(manifest.model_dump(mode="json"))
        return stage.Manifest(Exported(out_dir, files, quantized), data)  # committed last

    # no cache answer: -o is checked to hold only an earlier export's files before any work, the graphs written
    # in a staging folder, swapped in with the manifest last, discarded on any error (`core.stage`)
    exported = stage.run(stage.always(folder(out_dir)), work).manifest
    log.info("exported %s to %s (%s)", model_dir, out_dir, ", ".join(exported.files))
    return exported


def _write_graphs(model, staging: Path) -> tuple[dict[str, str], list[str]]:
    """Each encoder's fp32 and int8 graph written to `staging`; {name: sha256} and the quantized op types."""
    import onnx

    from model.onnx_export import encoder_graph, quantize_int8

    files, quantized = {}, set()
    for name, encoder in sorted(model.encoders.items()):
        fp32, int8 = staging / file_name(name, "onnx"), staging / file_name(name, "onnx-int8")
        onnx.save(encoder_graph(encoder.eval(), name=f"encoder-{name}"), str(fp32))
        quantized.update(quantize_int8(str(fp32), str(int8)))
        files[fp32.name], files[int8.name] = file_sha256(fp32), file_sha256(int8)
    return files, sorted(quantized)


def _versions() -> dict[str, str]:
    import onnx
    import onnxruntime
    import torch

    return {"onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__, "torch": torch.__version__}


def upgrade_model_dir(model_dir: Path) -> Path:
    """Convert the model directory of an older version in place: its model.pt (a torch pickle) is read with
    `weights_only=True` (tensors and plain values only: torch refuses a file that holds code), checked first
    against the sha256 its lineage.json records, and written as model.safetensors; lineage.json then records
    the new file. model.pt is left where it was (remove it once no older version needs it). Returns the new
    file; ModelDirError when there is nothing to convert or the file is refused.

    Written through the output layer (`model_files.folder`, `core.stage`): before anything is read, the folder
    must hold nothing but a model directory's files (ForeignDataError naming a user's others) and no link
    (BoundaryError: a link is never followed out of the model directory); the converted directory is built
    in a staging folder beside it, from the very bytes checked (each file opened without following a link),
    and swapped in whole behind the fence; on any error the folder stays as it was."""
    import pickle

    from model.model_file import load_legacy_model, save_model

    model_dir = Path(model_dir)
    out = model_files.folder(model_dir)
    present = out.check_replaceable()  # a link or a user's file: refused before anything is read
    legacy, target = model_dir / model_files.LEGACY_MODEL_FILE, model_dir / model_files.MODEL_FILE
    if model_files.MODEL_FILE in present:
        raise model_files.ModelDirError(f"{target} exists: {model_dir} is of this version already")
    if model_files.LEGACY_MODEL_FILE not in present:
        raise model_files.ModelDirError(f"{model_dir}: no {model_files.LEGACY_MODEL_FILE} to convert")
    recorded = model_files.lineage(model_dir)
    data = _read_own_file(legacy)
    if "model_sha256" in recorded and recorded["model_sha256"] != hashlib.sha256(data).hexdigest():
        raise model_files.ModelDirError(
            f"{legacy}: sha256 differs from the one recorded in "
            f"{model_files.LINEAGE_FILE}: the file is damaged or was replaced; not converted"
        )
    try:
        model, meta = load_legacy_model(io.BytesIO(data))
    except (pickle.UnpicklingError, RuntimeError, EOFError, KeyError, TypeError, ValueError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise model_files.ModelDirError(
            f"{legacy}: refused ({type(exc).__name__}: {first}); only a file of tensors and plain values is converted"
        ) from None

    def work(staging: Staging) -> stage.Manifest[Path]:
        rewritten = model_files.LINEAGE_FILE if recorded else None  # written below, with the new sha256
        for name in (name for name in model_files.FILES if name in present and name != rewritten):
            # model.pt as it was checked, the others as they are
            (staging.local / name).write_bytes(data if name == legacy.name else _read_own_file(model_dir / name))
        save_model(model, str(staging.local / model_files.MODEL_FILE), **meta.model_dump())
        if recorded:
            new_sha256 = file_sha256(staging.local / model_files.MODEL_FILE)
            staging.join(model_files.LINEAGE_FILE).write_json({**recorded, "model_sha256": new_sha256})
        return stage.Manifest(target, None)  # the staging folder holds model.safetensors, committed last

    return stage.run(stage.always(out), work).manifest


def _read_own_file(path: Path) -> bytes:
    """The bytes of the regular file `path` of a checked folder, opened without following a link (one put there
    since the check) nor waiting on a FIFO; BoundaryError naming it otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise boundary.BoundaryError(f"{path}: a symbolic link; a link is never followed out of its folder") from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise boundary.BoundaryError(f"{path}: not a regular file; the folder is damaged or crafted")
        return handle.read()
