"""The model's file: one safetensors file, the weights and, in its header, the constructor arguments and
metadata as JSON (`FORMAT`). Reading it runs no code: the header is checked first (`read_header`), every
tensor's dtype and shape against the architecture it describes (`check_tensors`), then the weights loaded.

    save_model(model, "model.safetensors", step=1000, dev_error=0.05)
    model, meta = load_model("model.safetensors")
"""

from __future__ import annotations

from typing import Any, BinaryIO

import torch
from pydantic import ValidationError

from core.schema import wrong_fields
from model.args import ModelArgs, ModelMeta
from model.encoder import output_size
from model.nmt import MultilingualNMT

FORMAT = "interlingua-model/2"  # safetensors: the weights, and in its header the arguments and metadata as JSON


class ModelFileError(ValueError):
    """A file that is not a model file of this format (safetensors with interlingua's header)."""


def save_model(model: MultilingualNMT, path: str, **meta: Any) -> None:
    """One safetensors file that `load_model` turns back into the model: the weights, and in its header the
    constructor arguments (`ModelArgs`) and `meta` (`ModelMeta`) as JSON. Nothing in it is code: reading it
    runs none."""
    from safetensors.torch import save_model as save

    save(
        model,
        str(path),
        metadata={"format": FORMAT, "args": model.args.model_dump_json(), "meta": ModelMeta(**meta).model_dump_json()},
    )


def read_header(path: str) -> tuple[ModelArgs, ModelMeta]:
    """(constructor arguments, metadata) from the header of a file `save_model` wrote, without its weights.
    ModelFileError when it is not one (a pickle, an older model.pt, another safetensors file), naming a wrong
    field of its header."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            header = handle.metadata() or {}
    except SafetensorError as exc:
        raise ModelFileError(f"not a safetensors file ({exc})") from None
    if header.get("format") != FORMAT:
        raise ModelFileError(f"a safetensors file without the header of {FORMAT} (format: {header.get('format')})")
    try:
        return ModelArgs.model_validate_json(header["args"]), ModelMeta.model_validate_json(header["meta"])
    except KeyError as exc:
        raise ModelFileError(f"its {FORMAT} header has no {exc}") from None
    except ValidationError as exc:
        raise ModelFileError(f"its {FORMAT} header is not readable ({wrong_fields(exc)})") from None


def embedding_size(args: ModelArgs) -> int:
    """The sentence embedding's size of a model of these constructor arguments (`read_header`), unbuilt."""
    return output_size(args.pooling, args.embed_dim, args.encoder_hidden)


def load_meta(path: str) -> ModelMeta:
    """The metadata `save_model` stored with the model, read from the file's header without its weights."""
    return read_header(path)[1]


def load_model(path: str, map_location: str | torch.device = "cpu") -> tuple[MultilingualNMT, ModelMeta]:
    """The model saved by `save_model` (in eval mode) and its metadata; ModelFileError for another file, and
    safetensors' error for a truncated one."""
    from safetensors.torch import load_model as load

    args, meta = read_header(path)
    model = MultilingualNMT.build(args)
    check_tensors(model, path)
    load(model, str(path), strict=True, device=str(map_location))
    return model.eval(), meta


# safetensors' dtype names (its file format's header)
_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}


def check_tensors(model: MultilingualNMT, path: str) -> None:
    """ModelFileError naming the tensors of the file at `path` whose dtype or shape is not the one the
    architecture its header describes (`model`) has: loading would cast them (float bytes relabelled as
    integers load as garbage). Reads the header only."""
    from safetensors import safe_open

    expected = model.state_dict()
    wrong = []
    with safe_open(str(path), framework="pt") as handle:
        for key in handle.keys():
            tensor = expected.get(key)
            if tensor is None:
                continue  # an unexpected name: `load`'s strict check names it
            piece = handle.get_slice(key)
            dtype, shape = _DTYPES.get(piece.get_dtype()), list(piece.get_shape())
            if dtype != tensor.dtype or shape != list(tensor.shape):
                wrong.append(f"{key} is {piece.get_dtype()} {shape}, not {tensor.dtype} {list(tensor.shape)}")
    if wrong:
        raise ModelFileError(
            f"{len(wrong)} tensors do not match the architecture its header describes "
            f"({'; '.join(wrong[:3])}): the file is damaged or crafted"
        )


def load_legacy_model(source: str | BinaryIO) -> tuple[MultilingualNMT, ModelMeta]:
    """A model file of the older format (`torch.save` of the arguments, weights and metadata), read with
    `weights_only=True`: tensors and plain values only; torch refuses a file that holds anything else (code
    to run). `source`: its path, or its bytes as read and checked (`io.BytesIO`). For `interlingua
    upgrade-model`, which converts it."""
    blob = torch.load(source, map_location="cpu", weights_only=True)
    model = MultilingualNMT.build(ModelArgs.model_validate(blob["args"]))
    model.load_state_dict(blob["state_dict"])
    return model.eval(), ModelMeta.model_validate(blob.get("meta", {}))
