"""`interlingua translate`: sentences (or stored vectors) through the interlingua into another language."""

from __future__ import annotations

import argparse

from core.errors import Exit
from orchestration.cli.common import command
from orchestration.config import Config, ConfigError


def add_translate(sub: argparse._SubParsersAction) -> None:
    p = command(
        sub,
        "translate",
        translate,
        example="interlingua translate -c configs/bible6-cpu.yaml -l en -t fr -i verses.txt -o verses.fr.txt --beam 4",
        help="translate sentences through the interlingua: source encoder -> vector -> target decoder",
        description="Each line of -i (one sentence per line) is embedded by the source language's encoder and "
        "its vector alone decoded by the target language's decoder, greedy or by beam search. "
        "-o FILE.txt (or stdout) translates in this process into a new file, one line per input line. "
        "-o DIR (a folder or URI prefix) translates text or Parquet inputs of any size with a Ray Data actor "
        "pool (runtime.embed_actors, runtime.cpus_per_task or a GPU each) into DIR/part-NNNNN.txt blocks, each "
        "with its record, and DIR/manifest.json; a rerun resumes from the blocks written. "
        "--from-embeddings decodes stored vectors instead (embed's FILE.npy or output folder).",
    )
    p.add_argument("--lang", "-l", help="the sentences' language (not with --from-embeddings)")
    p.add_argument("--target", "-t", required=True, help="the language to translate into")
    p.add_argument("--input", "-i", nargs="+", default=["-"], help="text files, local or URIs; '-' is stdin (default)")
    p.add_argument(
        "--output",
        "-o",
        default="-",
        help="a new FILE.txt, local or a URI; '-' is stdout (default); or a folder or URI prefix: "
        "blocks + manifest.json (Ray Data, resumable)",
    )
    p.add_argument("--column", default="text", help="the text column of Parquet inputs, with -o DIR (default: text)")
    p.add_argument("--block-rows", type=int, default=2000, help="sentences per block, with -o DIR (default 2000)")
    p.add_argument("--beam", type=int, default=1, help="beam size; 1 is greedy decoding (default 1)")
    p.add_argument(
        "--from-embeddings",
        action="store_true",
        help="-i names stored vectors of this model's space: embed's FILE.npy or output folder",
    )
    p.add_argument("--model", help="a model directory, local or a URI (default: <run_dir>/train/model)")
    p.add_argument(
        "--force",
        action="store_true",
        help="with -o DIR: replace interlingua's translations of other inputs, model or options there (never "
        "other files)",
    )


def translate(config: Config, args: argparse.Namespace) -> int:
    import sys

    from orchestration.adapters import model_dir
    from orchestration.embed.to_file import check_locations
    from orchestration.embed.translate_file import translate_to_file

    if args.from_embeddings == bool(args.lang):
        raise ConfigError("give -l LANG for sentences, or --from-embeddings for stored vectors (not both)")
    model = args.model or model_dir.default(config.train_dir)
    check_locations(args.input, args.output if args.output != "-" else ".", model)
    if args.output != "-" and not args.output.endswith(".txt"):
        return _translate_corpus(config, args, model)
    if args.force:
        raise ConfigError("--force replaces translations in a folder (-o DIR); -o FILE.txt is only ever a new file")
    made = translate_to_file(
        model,
        args.input,
        args.output,
        args.lang,
        args.target,
        beam=args.beam,
        from_embeddings=args.from_embeddings,
        max_chars=config.serve.max_sentence_chars,
    )
    if args.output != "-":
        print(f"{made.rows} sentences ({made.source}) -> {args.output} ({made.target})")
    else:
        print(f"{made.rows} sentences ({made.source}) -> stdout ({made.target})", file=sys.stderr)
    return Exit.OK


def _translate_corpus(config: Config, args: argparse.Namespace, model) -> int:
    """-o DIR: the resumable Ray Data job (`embed.translate_corpus`)."""
    if args.from_embeddings:
        raise ConfigError(
            f"-o {args.output}: --from-embeddings decodes in this process into one file: give -o FILE.txt or stdout"
        )
    if "-" in args.input:
        raise ConfigError("stdin (-i -) is translated in this process: give -o FILE.txt or stdout")
    from core.location import Location

    if Location.of(args.output, "-o").exists():  # a file: `-o FILE` other than FILE.txt names a folder
        raise ConfigError(
            f"-o {args.output} is a file: translate writes one file only as -o FILE.txt (or stdout); any other -o "
            "is a folder of blocks"
        )
    if args.beam < 1:
        raise ConfigError(f"--beam {args.beam}: must be at least 1")
    from orchestration.embed.translate_corpus import translate_corpus

    r = config.runtime
    made = translate_corpus(
        args.input,
        args.output,
        source=args.lang,
        target=args.target,
        model_dir=model,
        config=config.to_dict(),
        beam=args.beam,
        column=args.column,
        block_rows=args.block_rows,
        max_chars=config.serve.max_sentence_chars,
        actors=r.embed_actors,
        cpus_per_actor=r.cpus_per_task,
        use_gpu=r.use_gpu,
        max_tokens=config.evaluate.max_tokens,
        force=args.force,
        ray_address=r.ray_address,
        dashboard=r.ray_dashboard,
        worker_niceness=r.worker_niceness,
    )
    out = str(made.out_dir).rstrip("/")
    print(
        f"{made.rows} sentences ({args.lang}, {made.empty} empty) -> {out}/ ({args.target}) in {made.blocks} blocks "
        f"({made.computed} translated now, {made.blocks - made.computed} complete already; {made.seconds:.0f} s); "
        "see manifest.json"
    )
    return Exit.OK
