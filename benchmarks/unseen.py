"""Languages the model never saw: the demo's test verses in German, Italian, Portuguese, Romanian (and any other
version of the Bible) searched against English, by a model whose one shared encoder reads the joint vocabulary,
and by the offline USE, through `interlingua evaluate --testset`.

    .venv/bin/python benchmarks/unseen.py [--config configs/bible6-cpu.yaml] [--langs de:e it:1 pt:a ro:u]
        [--model DIR] [--out runs/unseen] [--no-use] [KEY=VALUE ...]

Writes one line-aligned file per language (`<out>/<lang>.txt`) of the config's test split's verses (their keys
`bible:<book>:<chapter>:<verse>`, the same verses in every language; a verse empty in any version is left out of
all, and counted), then runs `interlingua evaluate` on them as the test set `unseen` (the model's run, and with
`evaluate.encoder=use`). Prints xx-en and en-xx per language and system, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.dataset import Dataset  # noqa: E402
from orchestration.config import load_config  # noqa: E402


def verses(db_path: str, keys: list[str], versions: dict[str, str]) -> tuple[dict[str, list[str]], int]:
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    texts: dict[str, list[str]] = {lang: [] for lang in versions}
    left_out = 0
    for key in keys:
        _, book, chapter, number = key.split(":")
        row = {
            lang: db.execute(
                "SELECT vText FROM bible WHERE bbName=? AND bNumber=? AND cNumber=? AND vNumber=?",
                (version, int(book), int(chapter), int(number)),
            ).fetchone()
            for lang, version in versions.items()
        }
        if any(r is None or not r[0].strip() for r in row.values()):
            left_out += 1
            continue
        for lang, r in row.items():
            texts[lang].append(" ".join(r[0].split()))
    return texts, left_out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/bible6-cpu.yaml")
    parser.add_argument("--langs", nargs="+", default=["de:e", "it:1", "pt:a", "ro:u"], help="lang:version pairs")
    parser.add_argument("--pivot", default="en:k", help="the language searched against, lang:version")
    parser.add_argument("--model", default=None, help="a model directory (default: the config's trained model)")
    parser.add_argument("--out", default="runs/unseen")
    parser.add_argument("--no-use", action="store_true", help="the model alone, not the USE baseline")
    parser.add_argument("overrides", nargs="*", help="KEY=VALUE config overrides of each evaluation")
    args = parser.parse_args()

    from pipelines.source_config import BibleSource
    from pipelines.sources import bible_db_path

    config = load_config(args.config)
    keys = [str(k) for k in Dataset.open(config.data_dir).read("test", ["key"])["key"].to_pylist()]
    keys = [k for k in keys if k.startswith("bible:")]
    pivot, _, pivot_version = args.pivot.partition(":")
    versions = {pivot: pivot_version, **dict(pair.split(":", 1) for pair in args.langs)}
    texts, left_out = verses(bible_db_path(BibleSource(kind="bible")), keys, versions)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for lang, lines in texts.items():
        files[lang] = str((out / f"{lang}.txt").resolve())
        Path(files[lang]).write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    print(f"{len(keys)} test verses, {left_out} empty in a version and left out: {len(texts[pivot])} lines each")
    testset = json.dumps([{"name": "unseen", "files": files}])
    report: dict = {"verses": len(texts[pivot]), "systems": {}}
    systems = [("model", [])] + ([] if args.no_use else [("USE", ["evaluate.encoder=use"])])
    for name, overrides in systems:
        command = [sys.executable, "-m", "orchestration.cli", "evaluate", "-c", args.config, "--testset", "unseen"]
        command += [
            *(["--model", args.model] if args.model and name == "model" else []),
            f"evaluate.testsets={testset}",
        ]
        subprocess.run([*command, *args.overrides, *overrides], check=True)
        folder = Path(config.eval_dir) / ("testset-unseen-use" if name == "USE" else "testset-unseen")
        pairs = json.loads((folder / "metrics.json").read_text())["pairs"]
        rows = {
            lang: {"xx-en": pairs[f"{lang}-{pivot}"]["error"], "en-xx": pairs[f"{pivot}-{lang}"]["error"]}
            for lang in texts
            if lang != pivot
        }
        for lang, row in rows.items():
            xx, en = 100 * row["xx-en"], 100 * row["en-xx"]
            print(f"{name:<6} {lang}: {lang}-{pivot} {xx:.2f} %, {pivot}-{lang} {en:.2f} %")
        report["systems"][name] = rows
    print(json.dumps(report))


if __name__ == "__main__":
    main()
