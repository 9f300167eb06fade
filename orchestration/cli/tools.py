"""The commands around the stages: compare, search, embed, mine, card, get-catalogs, config. Each is
`add_<name>(sub)`, its flags beside its handler `<name>(config, args) -> exit code`."""

from __future__ import annotations

import argparse

from core.errors import Exit
from orchestration.cli.common import command
from orchestration.config import Config, ConfigError


def add_compare(sub: argparse._SubParsersAction) -> None:
    p = command(
        sub,
        "compare",
        compare,
        help="the runs of an MLflow experiment side by side",
        example="interlingua compare -c configs/bible6-cpu.yaml --pairs --plot runs/compare.png",
    )
    p.add_argument("--experiment", help="experiment name (default: tracking.experiment)")
    p.add_argument("--max-runs", type=int, default=20, help="most recent evaluation runs to show (default 20)")
    p.add_argument("--pairs", action="store_true", help="also show every language pair's error")
    p.add_argument(
        "--stage",
        choices=["evaluate", "train"],
        default="evaluate",
        help="evaluation runs (test error, default) or training runs and tune trials (dev error)",
    )
    p.add_argument("--testset", help="the evaluation runs of this evaluate.testsets name (default: the split's)")
    p.add_argument(
        "--plot",
        help="write a figure (learning curves, error-matrix differences) to this PNG "
        "(an existing file only if interlingua compare wrote it)",
    )


def compare(config: Config, args: argparse.Namespace) -> int:
    from orchestration.lifecycle.compare import compare_runs

    print(
        compare_runs(
            config,
            experiment=args.experiment,
            max_runs=args.max_runs,
            pairs=args.pairs,
            plot=args.plot,
            stage=args.stage,
            testset=args.testset,
        )
    )
    return Exit.OK


def add_search(sub: argparse._SubParsersAction) -> None:
    p = command(
        sub,
        "search",
        search,
        example='interlingua search -c configs/bible6-cpu.yaml -q "Dieu est amour." -l fr --in en,zh -k 3',
        help="the nearest sentences of the evaluation split to a query sentence, in other languages",
    )
    p.add_argument("--query", "-q", required=True, help="the query sentence")
    p.add_argument("--lang", "-l", required=True, help="the query's language")
    p.add_argument("--in", dest="targets", help="languages to search, comma-separated (default: all others)")
    p.add_argument("-k", type=int, default=5, help="neighbours per language (default 5)")
    p.add_argument("--model", help="a model directory (default: <run_dir>/train/model)")


def search(config: Config, args: argparse.Namespace) -> int:
    from core.dataset import Dataset
    from orchestration.embed.search import nearest_sentences

    if args.k < 1:
        raise ConfigError("-k must be at least 1")
    languages = config.train.languages or Dataset.open(config.data_dir).languages
    targets = args.targets.split(",") if args.targets else [lang for lang in languages if lang != args.lang]
    found = nearest_sentences(config, args.query, args.lang, targets, args.k, args.model)
    for lang, hits in found.items():
        print(f"[{lang}]")
        for score, key, text in hits:
            print(f"  {score:.3f}  {key}  {text}")
    return Exit.OK


def add_embed(sub: argparse._SubParsersAction) -> None:
    p = command(
        sub,
        "embed",
        embed,
        example="interlingua embed -c configs/bible6-cpu.yaml -l en -i corpus/ 'more/*.txt' -o embeddings/",
        help="sentences (text lines or a Parquet column) -> embedding blocks + manifest (Ray Data)",
        description="Embed text files (one sentence per line) and Parquet files (--column) with a Ray Data "
        "actor pool (runtime.embed_actors, runtime.cpus_per_task or a GPU each) into "
        "OUT/<lang>/part-NNNNN.npy blocks, each with its record OUT/part-NNNNN.json, and OUT/manifest.json. "
        "A rerun skips complete blocks. -o FILE.npy embeds small text input "
        "in this process.",
    )
    p.add_argument("--lang", "-l", required=True, help="the sentences' language")
    p.add_argument(
        "--input",
        "-i",
        nargs="+",
        default=["-"],
        help="text or Parquet files, directories, globs ('corpus/*.txt'), local or URIs "
        "(s3://bucket/corpus/*.txt); '-' is stdin (with FILE.npy)",
    )
    p.add_argument(
        "--output",
        "-o",
        required=True,
        help="a directory or URI prefix (blocks + manifest.json), or FILE.npy: one (N, D) array (small inputs)",
    )
    p.add_argument("--column", default="text", help="the text column of Parquet inputs (default: text)")
    p.add_argument("--block-rows", type=int, default=20000, help="sentences per block (default 20000)")
    p.add_argument(
        "--dtype",
        choices=["float32", "float16"],
        default="float32",
        help="the stored vectors' number type; float16 halves their size (default float32)",
    )
    p.add_argument("--model", help="a model directory, local or a URI (default: <run_dir>/train/model)")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace interlingua's embeddings of other inputs in the "
        "output directory (never other files), or an existing -o FILE.npy",
    )


def embed(config: Config, args: argparse.Namespace) -> int:
    from orchestration.adapters import model_dir
    from orchestration.embed.to_file import check_locations, embed_to_file

    model = args.model or model_dir.default(config.train_dir)
    check_locations(args.input, args.output, model)
    if args.output.endswith(".npy"):
        made = embed_to_file(
            model,
            args.input,
            args.output,
            args.lang,
            dtype=args.dtype,
            force=args.force,
            backend=config.runtime.backend,
        )
        print(f"{made.rows} sentences ({made.empty} empty) -> {args.output} ({made.dim}-d {args.dtype})")
        return Exit.OK
    if "-" in args.input:
        raise ConfigError("stdin (-i -) is embedded in this process: give -o FILE.npy")
    from orchestration.embed.corpus import embed_corpus

    r = config.runtime
    result = embed_corpus(
        args.input,
        args.output,
        lang=args.lang,
        model_dir=model,
        config=config.to_dict(),
        column=args.column,
        dtype=args.dtype,
        block_rows=args.block_rows,
        actors=r.embed_actors,
        cpus_per_actor=r.cpus_per_task,
        use_gpu=r.use_gpu,
        max_tokens=config.evaluate.max_tokens,
        force=args.force,
        ray_address=r.ray_address,
        backend=r.backend,
        dashboard=r.ray_dashboard,
        worker_niceness=r.worker_niceness,
    )
    out = str(result.out_dir).rstrip("/")
    print(
        f"{result.rows} sentences ({result.empty} empty) -> {out}/ in {result.blocks} blocks "
        f"({result.computed} embedded now, {result.blocks - result.computed} complete already; "
        f"{result.seconds:.0f} s); see manifest.json"
    )
    return Exit.OK


def add_mine(sub: argparse._SubParsersAction) -> None:
    command(
        sub,
        "mine",
        mine,
        writes=True,
        example='interlingua mine -c configs/bible6-cpu.yaml "mine.inputs=[{lang: fr, path: fr.txt}, '
        '{lang: en, path: en.txt}]" mine.threshold=1.06',
        help="mine parallel sentences from monolingual text by margin (faiss); the pairs feed `prepare`",
        description="Embed every mine.inputs language, search both ways, score by ratio margin, drop the "
        "known garbage, keep pairs above mine.threshold (or the max-F1 threshold on mine.gold).",
    )


def mine(config: Config, args: argparse.Namespace) -> int:
    from orchestration.mine.job import mine as mine_pairs

    result = mine_pairs(config)
    for pair in result.pairs:
        gold = "" if pair.scores is None else " P {precision:.3f} R {recall:.3f} F1 {f1:.3f}".format(**pair.scores)
        print(
            f"{pair.name}: {pair.candidates:,} candidates, {len(pair.kept):,} pairs above {pair.threshold:.4f}"
            f"{gold}; dropped: " + ", ".join(f"{r} {n:,}" for r, n in pair.dropped.items())
        )
    print(f"pairs and report: {result.out_dir}  (MLflow run {result.run_id})")
    return Exit.OK


def add_card(sub: argparse._SubParsersAction) -> None:
    p = command(
        sub,
        "card",
        card,
        help="print a model's card: its use, training data, recipe, results, limits and how to make it again",
        example="interlingua card -c configs/bible6-cpu.yaml --version 3",
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument("--model", help="a model directory (default: <run_dir>/train/model)")
    which.add_argument("--version", help="a registered version of registry.model_name: its card as registered")


def card(config: Config, args: argparse.Namespace) -> int:
    from orchestration.lifecycle.card import card_of_model, card_of_version

    print(card_of_version(config, args.version) if args.version else card_of_model(config, args.model), end="")
    return Exit.OK


def add_get_catalogs(sub: argparse._SubParsersAction) -> None:
    p = command(
        sub,
        "get-catalogs",
        get_catalogs,
        example="interlingua get-catalogs -o data/catalogs --locales en,fr,es,ru,ar,zh_CN",
        help="fetch the gettext catalogs of a pinned list of Debian packages (apt-get), for kind: gettext",
        description="Download the packages of pipelines.debian_catalogs.PACKAGES with apt-get, unpack them "
        "with dpkg-deb and keep their MO files as /usr/share/locale lays them out, with catalogs.json (each "
        ".deb's version and sha256, each catalog's sha256). An existing OUT is replaced only if it holds "
        "nothing but an earlier fetch.",
    )
    p.add_argument("--output", "-o", default="data/catalogs", help="the catalogs folder (default data/catalogs)")
    p.add_argument("--locales", help="keep only these locales, comma-separated (default: every locale shipped)")
    p.add_argument(
        "--apt-update", action="store_true", help="run apt-get update first (needs root): for a fresh machine"
    )


def get_catalogs(config: Config, args: argparse.Namespace) -> int:
    from pipelines.debian_catalogs import fetch

    locales = [name for name in args.locales.split(",") if name] if args.locales else None
    result = fetch(args.output, locales=locales, update=args.apt_update)
    print(
        f"{result.catalogs:,} catalogs in {result.locales} locales of {result.packages} packages in "
        f"{result.out_dir}; see catalogs.json"
    )
    return Exit.OK


def add_config(sub: argparse._SubParsersAction) -> None:
    command(
        sub,
        "config",
        show_config,
        help="print the resolved configuration as YAML",
        example="interlingua config -c configs/bible6-cpu.yaml train.lr=3e-4",
    )


def show_config(config: Config, args: argparse.Namespace) -> int:
    from core.schema import dump_yaml

    print(dump_yaml(config.to_dict()), end="")
    return Exit.OK
