"""What every command's parser shares: its example under --help, the verbosity flags, config overrides."""

from __future__ import annotations

import argparse
from collections.abc import Callable


class _HelpFormatter(argparse.HelpFormatter):
    """Wraps the description as usual; keeps the example as written, to be copied."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return text if text.startswith("Example:") else super()._fill_text(text, width, indent)


def verbosity_flags(p: argparse.ArgumentParser, default: object = False) -> None:
    """-v and --quiet; on the main parser and (default SUPPRESS, so as not to reset it) on every command."""
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=default,
        help="debug lines, and the libraries' own (Beam, Ray, faiss, MLflow)",
    )
    p.add_argument(
        "--quiet", action="store_true", default=default, help="print only the result (and warnings and errors)"
    )


def command(
    sub: argparse._SubParsersAction,
    name: str,
    handler: Callable,
    *,
    example: str,
    writes: bool = False,
    locks: bool = False,
    beam: bool = False,
    help: str,
    description: str | None = None,
) -> argparse.ArgumentParser:
    """A subcommand's parser running `handler(config, args) -> exit code`: its example under --help, the
    verbosity flags and -c/--config with KEY=VALUE overrides. `writes`: run_dir is checked
    writable before any work; `locks`: the command holds the run dir's lock while it writes there (exit 5 when
    another holds it); `beam`: unknown --flags go to Apache Beam. `help` is the line under the main --help,
    `description` the paragraph under the command's own."""
    p = sub.add_parser(
        name,
        help=help,
        description=description,
        epilog=f"Example:\n  {example}",
        formatter_class=_HelpFormatter,
    )
    verbosity_flags(p, default=argparse.SUPPRESS)
    p.add_argument("--config", "-c", help="run config (YAML); schema defaults when omitted")
    p.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, e.g. prepare.spm.vocab_size=8000"
    )
    p.set_defaults(handler=handler, writes=writes, locks=locks, beam=beam)
    return p
