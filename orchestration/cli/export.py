"""`interlingua export`: the model's encoders as ONNX (fp32 and int8) for the fast backends."""

from __future__ import annotations

import argparse
from pathlib import Path

from core.errors import Exit
from orchestration.cli.common import command
from orchestration.config import Config


def add_export(sub: argparse._SubParsersAction) -> None:
    p = command(
        sub,
        "export",
        export,
        example="interlingua export -c configs/bible6-cpu.yaml   # -> runs/bible6-cpu/train/model-onnx/",
        help="the model's encoders as ONNX, fp32 and int8 (runtime.backend=onnx, onnx-int8, auto)",
        description="Write each encoder of the model directory as an ONNX graph (token ids and lengths in, "
        "the sentence embedding out; dynamic batch and length; sentencepiece stays outside) and its "
        "dynamic int8 quantization, with manifest.json (the model's sha256, each file's). Default OUT: "
        "beside the model directory (<model>-onnx), where runtime.backend looks for it.",
    )
    p.add_argument("--model", help="a model directory (default: <run_dir>/train/model)")
    p.add_argument(
        "--output",
        "-o",
        help="the export directory (default: <model>-onnx beside the model); "
        "an existing one is replaced only if it holds nothing but an earlier export",
    )


def export(config: Config, args: argparse.Namespace) -> int:
    from core.location import Location
    from orchestration.adapters import model_dir
    from orchestration.config import ConfigError
    from orchestration.embedding.export import export_model

    model = args.model or model_dir.default(config.train_dir)
    if args.output:
        Location.of(args.output, "-o").require_local(
            ConfigError, f"-o {args.output}: the export is written to a local folder; give a local -o"
        )
    else:  # beside a fetched copy no backend looks
        Location.of(model, "--model").require_local(
            ConfigError, f"--model {model} is at a URI: give a local -o for its export"
        )
    result = export_model(model_dir.fetch(model), Path(args.output) if args.output else None)
    ops = ", ".join(result.quantized_ops) or "nothing quantized"
    print(f"{model} -> {result.out_dir}/ ({', '.join(result.files)}; int8: {ops}); see manifest.json")
    return Exit.OK


def add_upgrade_model(sub: argparse._SubParsersAction) -> None:
    p = command(
        sub,
        "upgrade-model",
        upgrade_model,
        example="interlingua upgrade-model runs/bible6-cpu/train/model",
        help="convert a model directory of an older version (model.pt) to model.safetensors, once",
        description="Older versions saved the model as model.pt, a torch pickle, which this version never "
        "loads (unpickling a file from a bucket or a registry runs whatever code it holds). This reads "
        "it with torch's weights_only=True (tensors and plain values only: a file holding code is "
        "refused), checks it against lineage.json, writes model.safetensors beside it and records it "
        "in lineage.json. model.pt stays; remove it once no older version needs it.",
    )
    p.add_argument("model", help="the local model directory")


def upgrade_model(config: Config, args: argparse.Namespace) -> int:
    from core.location import Location
    from orchestration.adapters import model_dir
    from orchestration.config import ConfigError

    Location.of(args.model, "upgrade-model").require_local(
        ConfigError,
        f"{args.model}: upgrade-model converts a local model directory; download it, convert "
        "it and upload model.safetensors and lineage.json back",
    )
    from orchestration.embedding.export import upgrade_model_dir

    target = upgrade_model_dir(Path(args.model))
    print(f"{args.model}: wrote {target.name} (from {model_dir.LEGACY_MODEL_FILE}, kept)")
    return Exit.OK
