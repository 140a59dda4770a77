"""Entry point of the ``rolloutbatch`` console script and the ``kubectl-rolloutbatch`` plugin."""

from __future__ import annotations

import argparse
import os
import sys

from rolloutbatch import __version__


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``rolloutbatch submit: error: ...`` and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _prog() -> str:
    return "kubectl rolloutbatch" if os.path.basename(sys.argv[0]).startswith("kubectl-") else "rolloutbatch"


def _connection_options(parser: argparse.ArgumentParser, default) -> None:
    parser.add_argument("--kubeconfig", dest="global_kubeconfig", default=default, metavar="FILE",
                        help="kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster)")
    parser.add_argument("-n", "--namespace", default=default,
                        help="namespace (default: the kubeconfig context's namespace, else 'default')")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog=_prog(), description="RL rollouts of coding agents on Kubernetes")
    parser.add_argument("--version", action="version", version=f"rolloutbatch {__version__}")
    _connection_options(parser, None)
    # The same options after the subcommand; SUPPRESS keeps a value given before it.
    common = Parser(add_help=False)
    _connection_options(common, argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)

    from rolloutbatch import runner
    op = sub.add_parser("operator", help="run the operator (kopf) against the current cluster")
    runner.add_arguments(op)
    op.set_defaults(func=runner.run)

    from rolloutbatch.cli import batches, export
    batches.add_parsers(sub, common)
    export.add_parsers(sub, common)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "operator":
        if not args.kubeconfig:
            args.kubeconfig = args.global_kubeconfig
        return args.func(args)
    from rolloutbatch.cli.common import guarded
    return guarded(args.func, args)


if __name__ == "__main__":
    sys.exit(main())
