"""``onnx-mrvl``: one entry point, a subcommand per job.

Subcommands live in ``onnx_mrvl/cli/cmd_<name>.py``; each module defines ``register(subparsers)``
which adds its parser and sets ``func`` (taking the parsed args, returning an exit code).

Exit codes: 0 success, 1 the job ran and found a problem (e.g. a comparison failed),
2 usage error, 3 an onnx_mrvl error (bad model, artifact, ...), 4 an unexpected internal error,
130 interrupted (Ctrl-C), 143 / 129 terminated (SIGTERM / SIGHUP).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import pkgutil
import sys
from typing import List, Optional

from .common import EXIT_FAIL, EXIT_INTERNAL, EXIT_MRVL, EXIT_OK, EXIT_USAGE  # noqa: F401 - re-exported
from .common import configure_logging, error_json, run_command

GLOBAL_HELP = {"verbose": "more logging (-v info, -vv debug, -vvv also other libraries' debug "
                          "logs such as numba's); also after the command",
               "quiet": "only errors; also after the command"}


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="onnx-mrvl",
        description="Prepare ONNX models for the Marvell MLIP accelerator and run them in onnxruntime.",
        epilog="Exit codes: 0 success, 1 the job ran and found a difference, 2 usage error, "
               "3 an onnx_mrvl error (bad model, input file, option; the message has a Fix: line), "
               "4 internal error (please report it), 130 interrupted (Ctrl-C), 143 / 129 terminated "
               "(SIGTERM / SIGHUP).")
    parser.add_argument("--version", action="version", version=f"onnx-mrvl {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help=GLOBAL_HELP["verbose"])
    parser.add_argument("-q", "--quiet", action="store_true", help=GLOBAL_HELP["quiet"])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    from . import __path__ as cli_path
    for info in sorted(pkgutil.iter_modules(cli_path), key=lambda i: i.name):
        if info.name.startswith("cmd_"):
            importlib.import_module(f"{__package__}.{info.name}").register(sub)
    for p in sub.choices.values():   # -v/-q also after the command, like git and pip
        p.add_argument("-v", "--verbose", dest="sub_verbose", action="count", default=0, help=GLOBAL_HELP["verbose"])
        p.add_argument("-q", "--quiet", dest="sub_quiet", action="store_true", help=GLOBAL_HELP["quiet"])
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    words = sys.argv[1:] if argv is None else list(argv)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = parser.parse_args(words)
    except SystemExit as exc:   # --help, --version (0) and usage errors (2), also when called in-process
        sys.stderr.write(err.getvalue())
        code = exc.code if isinstance(exc.code, int) else EXIT_USAGE
        if code and "--json" in words:   # the usage error as JSON too
            lines = err.getvalue().strip().splitlines()
            command = next((w for w in words if not w.startswith("-")), "")
            error_json(command, code, "usage", lines[-1] if lines else "usage error",
                       f"see onnx-mrvl {command} --help".replace("  ", " "))
        return code
    sys.stderr.write(err.getvalue())
    args.verbose += getattr(args, "sub_verbose", 0)
    args.quiet = args.quiet or getattr(args, "sub_quiet", False)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    restore = configure_logging(args.verbose, args.quiet)
    try:
        return run_command(args.command, args.func, args)
    finally:
        restore()


if __name__ == "__main__":
    sys.exit(main())
