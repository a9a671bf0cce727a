"""``onnx-mrvl``: one entry point, a subcommand per job.

Subcommands live in ``onnx_mrvl/cli/cmd_<name>.py``; each module defines ``register(subparsers)``
which adds its parser and sets ``func`` (taking the parsed args, returning an exit code).

Exit codes: 0 success, 1 the job ran and found a problem (e.g. a comparison failed),
2 usage error, 3 an onnx_mrvl error (bad model, artifact, ...), 4 an unexpected internal error.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys
from typing import List, Optional

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_MRVL, EXIT_INTERNAL = 0, 1, 2, 3, 4


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="onnx-mrvl",
        description="Prepare ONNX models for the Marvell MLIP accelerator and run them in onnxruntime.")
    parser.add_argument("--version", action="version", version=f"onnx-mrvl {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-v info, -vv debug)")
    parser.add_argument("-q", "--quiet", action="store_true", help="only errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    from . import __path__ as cli_path
    for info in sorted(pkgutil.iter_modules(cli_path), key=lambda i: i.name):
        if info.name.startswith("cmd_"):
            importlib.import_module(f"{__package__}.{info.name}").register(sub)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    from ..errors import MrvlError

    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.ERROR if args.quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(args.verbose, 2)]
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args.func(args) or 0)
    except MrvlError as exc:
        print(f"onnx-mrvl {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_MRVL
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - last resort, report as internal error
        logging.getLogger("onnx_mrvl").debug("internal error", exc_info=True)
        print(f"onnx-mrvl {args.command}: internal error: {type(exc).__name__}: {exc} "
              f"(run with -vv for the traceback; please report it)", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
