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
        "--from-embeddings decodes stored vectors instead (embed's FILE.npy or output folder). "
        "The output is a new file (or stdout), one line per input line.",
    )
    p.add_argument("--lang", "-l", help="the sentences' language (not with --from-embeddings)")
    p.add_argument("--target", "-t", required=True, help="the language to translate into")
    p.add_argument("--input", "-i", nargs="+", default=["-"], help="text files, local or URIs; '-' is stdin (default)")
    p.add_argument("--output", "-o", default="-", help="a new text file, local or a URI; '-' is stdout (default)")
    p.add_argument("--beam", type=int, default=1, help="beam size; 1 is greedy decoding (default 1)")
    p.add_argument(
        "--from-embeddings",
        action="store_true",
        help="-i names stored vectors of this model's space: embed's FILE.npy or output folder",
    )
    p.add_argument("--model", help="a model directory, local or a URI (default: <run_dir>/train/model)")


def translate(config: Config, args: argparse.Namespace) -> int:
    import sys

    from orchestration.adapters import model_dir
    from orchestration.embed.to_file import check_locations
    from orchestration.embed.translate_file import translate_to_file

    if args.from_embeddings == bool(args.lang):
        raise ConfigError("give -l LANG for sentences, or --from-embeddings for stored vectors (not both)")
    model = args.model or model_dir.default(config.train_dir)
    check_locations(args.input, args.output if args.output != "-" else ".", model)
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
