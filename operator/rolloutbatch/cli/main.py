"""Entry point of the ``rolloutbatch`` console script and the ``kubectl-rolloutbatch`` plugin."""

from __future__ import annotations

import argparse
import sys

from rolloutbatch import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rolloutbatch", description="RL rollouts of coding agents on Kubernetes")
    parser.add_argument("--version", action="version", version=f"rolloutbatch {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    from rolloutbatch import runner
    op = sub.add_parser("operator", help="run the operator (kopf) against the current cluster")
    runner.add_arguments(op)
    op.set_defaults(func=runner.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
