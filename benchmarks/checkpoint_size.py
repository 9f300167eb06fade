"""The size of a training checkpoint's `state.pt` against the model file, for a config's model.

    .venv/bin/python benchmarks/checkpoint_size.py [-c configs/bible6-cpu.yaml] [--vocab N] [KEY=VALUE ...]

The model is built from the config as training builds it (`train.builders.model_args`, the demo's six
languages unless --languages, `prepare.spm.vocab_size` unless --vocab), its AdamW optimizer takes one step (so that its
moments exist, as in every checkpoint after step 0), and both files are written by the code a checkpoint
uses (`checkpoint.save_state`, `model.model_file.save_model`) into a temporary folder, then measured and removed.
`state.pt` holds the weights and AdamW's two moments per weight, about three times the model file (the
best weights so far are the checkpoint's model file, not stored twice). Nothing here depends on the machine
but the time it takes.
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", "-c", default=str(ROOT / "configs" / "bible6-cpu.yaml"))
    p.add_argument("--vocab", type=int, help="the vocabulary size (default: prepare.spm.vocab_size)")
    p.add_argument("--languages", default="en,fr,es,ru,ar,zh", help="the dataset's languages (the demo's six)")
    p.add_argument("overrides", nargs="*", help="config overrides, e.g. model.encoder_hidden=512")
    args = p.parse_args()

    import torch

    from model.model_file import save_model
    from model.nmt import MultilingualNMT
    from model.training import make_optimizer
    from orchestration.config import load_config
    from orchestration.train.builders import model_args
    from orchestration.train.checkpoint import TrainingProgress, TrainingState, save_state

    config = load_config(args.config, args.overrides)
    languages = config.train.languages or args.languages.split(",")
    vocab = args.vocab or config.prepare.spm.vocab_size
    model = MultilingualNMT.build(model_args(config, languages, vocab))
    params = sum(p.numel() for p in model.parameters())
    optimizer = make_optimizer(
        model, lr=config.train.lr, weight_decay=config.train.weight_decay, device=torch.device("cpu")
    )
    for weight in model.parameters():  # one step: AdamW's moments exist, as in every checkpoint after step 0
        weight.grad = torch.zeros_like(weight)
    optimizer.step()
    state = TrainingState(
        model.state_dict(), optimizer.state_dict(), None, TrainingProgress(step=1), copy.deepcopy(model.state_dict())
    )
    with tempfile.TemporaryDirectory(prefix="bench-ckpt-") as tmp:
        started = time.perf_counter()
        save_state(state, Path(tmp) / "state.pt")
        state_s = time.perf_counter() - started
        save_model(model, str(Path(tmp) / "model.safetensors"))
        state_mb = (Path(tmp) / "state.pt").stat().st_size / 2**20
        model_mb = (Path(tmp) / "model.safetensors").stat().st_size / 2**20
    print(f"{args.config} {' '.join(args.overrides)}".strip())
    print(f"languages {len(languages)}, vocabulary {vocab}, parameters {params / 1e6:.1f} M")
    print(
        f"model.safetensors {model_mb:,.1f} MB; state.pt {state_mb:,.1f} MB ({state_mb / model_mb:.2f}x), "
        f"written in {state_s:.1f} s; the checkpoint {model_mb + state_mb:,.1f} MB"
    )


if __name__ == "__main__":
    main()
