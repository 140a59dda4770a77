"""Entry point of the ``rolloutbatch`` console script and the ``kubectl-rolloutbatch`` plugin.

Every command but ``operator`` is the light install's (``pip install rolloutbatch``, Python
3.10+). ``operator`` needs the ``operator`` extra (kopf, prometheus-client) and Python 3.11+;
without them it says so in one line and exits 1, before any of its modules is imported.
"""

from __future__ import annotations

import argparse
import os
import sys

from rolloutbatch import __version__

# The operator's floor: its pinned kopf requires 3.11 (pip refuses the extra below that).
OPERATOR_PYTHON = (3, 11)
OPERATOR_EXTRA = "pip install 'rolloutbatch[operator]'"


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``rolloutbatch submit: error: ...`` and exit code 2.

    No abbreviations: a prefix of an option would be that option (``--no-leader`` the operator's
    ``--no-leader-elect``), past the chart's check of its own flags in extraArgs, and a script
    relying on one breaks when a new option shares the prefix."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _prog() -> str:
    return "kubectl rolloutbatch" if os.path.basename(sys.argv[0]).startswith("kubectl-") else "rolloutbatch"


def _connection_options(parser: argparse.ArgumentParser, default) -> None:
    parser.add_argument("--kubeconfig", dest="global_kubeconfig", default=default, metavar="FILE",
                        help="kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster)")
    parser.add_argument("-n", "--namespace", default=default, type=_namespace_name,
                        help="namespace (default: the kubeconfig context's namespace, else 'default')")


def _namespace_name(text: str) -> str:
    """``-n``'s value, refused when it names no namespace: ``-n "$NS"`` with NS unset would
    otherwise act in the kubeconfig's namespace (the SDK refuses "" alike)."""
    from rolloutbatch.core.k8s_rules import InvalidName, check_namespace_name

    try:
        return check_namespace_name(text)
    except InvalidName as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _runner():
    """``rolloutbatch.runner``, or ``SystemExit`` with why the operator cannot run in this environment."""
    if sys.version_info < OPERATOR_PYTHON:
        raise SystemExit(f"rolloutbatch operator: error: needs Python >= {'.'.join(map(str, OPERATOR_PYTHON))} "
                         f"(this is {sys.version.split()[0]}); the SDK and the other commands run here")
    try:
        from rolloutbatch import runner
    except ModuleNotFoundError as exc:
        if not exc.name or exc.name.partition(".")[0] == "rolloutbatch":
            raise
        # A dependency of the operator's only: the light install lacks the extra.
        raise SystemExit(f"rolloutbatch operator: error: {exc.name} is not installed: the operator's "
                         f"dependencies are an extra ({OPERATOR_EXTRA})") from None
    return runner


def build_parser(operator: bool = True) -> argparse.ArgumentParser:
    parser = Parser(prog=_prog(), description="RL rollouts of coding agents on Kubernetes")
    parser.add_argument("--version", action="version", version=f"rolloutbatch {__version__}")
    _connection_options(parser, None)
    # The same options after the subcommand; SUPPRESS keeps a value given before it.
    common = Parser(add_help=False)
    _connection_options(common, argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)

    op = sub.add_parser("operator", help="run the operator (kopf) against the current cluster; needs rolloutbatch[operator]")
    if operator:
        # kopf and the service layer cost ~1 s of imports: only the operator command pays it.
        runner = _runner()
        runner.add_arguments(op)
        op.set_defaults(func=runner.run)

    from rolloutbatch.cli import batches, export, follow, logs, pools
    batches.add_parsers(sub, common)
    follow.add_parsers(sub, common)
    logs.add_parsers(sub, common)
    export.add_parsers(sub, common)
    pools.add_parsers(sub, common)
    return parser


def _command(argv: list[str]) -> str | None:
    """The subcommand: the first word that is not an option or its value."""
    words = iter(argv)
    for word in words:
        if word in ("--kubeconfig", "-n", "--namespace"):
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = _command(argv)
    if command is None and "--version" in argv and not {"-h", "--help"} & set(argv):
        # Answered before the subcommands' modules (the SDK, requests) are imported: `--version` stays fast.
        print(f"rolloutbatch {__version__}")
        return 0
    args = build_parser(operator=command == "operator").parse_args(argv)
    if args.command == "operator":
        if not args.kubeconfig:
            args.kubeconfig = args.global_kubeconfig
        return args.func(args)
    from rolloutbatch.cli.common import guarded
    return guarded(args.func, args)


if __name__ == "__main__":
    sys.exit(main())
