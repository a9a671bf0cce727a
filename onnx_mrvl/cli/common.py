"""Helpers shared by the subcommands: exit codes and error messages, option types (sizes,
positive integers), strict JSON output, logging and progress, input files, random inputs, shapes."""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import re
import signal
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ..errors import MrvlError, UsageError
from ..feeds import check_feeds, random_array, read_inputs

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_MRVL, EXIT_INTERNAL = 0, 1, 2, 3, 4
PROGRESS_LOGGER = "onnx_mrvl.progress"
NOTICE_LOGGER = "onnx_mrvl.notice"    # one-liners such as "building the simulator's kernels"
# Third-party loggers that flood -vv (numba logs every bytecode it compiles: ~750k lines on a cold
# run); they stay at WARNING unless -vvv asks for everything.
QUIET_LIBRARIES = ("numba", "llvmlite", "matplotlib", "PIL", "urllib3", "asyncio", "filelock",
                   "hypothesis", "onnxscript", "torch", "tensorflow", "jax", "h5py")

ORT_TYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
             "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int8)": np.int8,
             "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_}


def parse_input_shapes(specs: Optional[List[str]]) -> Optional[Dict[str, List[int]]]:
    """``["x:1,3,224,224", ...]`` -> ``{"x": [1, 3, 224, 224]}``."""
    if not specs:
        return None
    out = {}
    for spec in specs:
        name, sep, dims = spec.rpartition(":")
        if not sep or not name:
            raise UsageError(f"--input-shape '{spec}' is not NAME:D1,D2,...", hint="e.g. --input-shape x:1,3,224,224")
        try:
            out[name] = [int(d) for d in dims.replace("x", ",").split(",") if d]
        except ValueError:
            raise UsageError(f"--input-shape '{spec}' has a dimension that is not an integer",
                             hint="give integer sizes, e.g. --input-shape x:1,3,224,224") from None
    return out


def random_inputs(session, seed: int = 0) -> Dict[str, np.ndarray]:
    """Seeded inputs for every input of an onnxruntime session (symbolic dims become 1)."""
    rng = np.random.default_rng(seed)
    return {i.name: random_array(rng, [d if isinstance(d, int) and d > 0 else 1 for d in i.shape],
                                 ORT_TYPES.get(i.type, np.float32)) for i in session.get_inputs()}


def session_specs(session) -> List[Tuple[str, list, Any]]:
    """(name, shape, numpy dtype) of an onnxruntime session's inputs (symbolic dims as str/None)."""
    return [(i.name, list(i.shape or []), ORT_TYPES.get(i.type)) for i in session.get_inputs()]


def load_inputs(path: str, session) -> Dict[str, np.ndarray]:
    """Inputs from .npz (by name, or arr_0... in order) or .npy (a single input), checked against
    the session's input names, ranks, static dimensions and dtypes (``UsageError`` otherwise)."""
    feeds = read_inputs(path, [i.name for i in session.get_inputs()])
    check_feeds(feeds, session_specs(session), f"'{path}'")
    return feeds


def error_stats(ref: np.ndarray, got: np.ndarray) -> dict:
    ref64, got64 = np.asarray(ref, np.float64), np.asarray(got, np.float64)
    if ref64.shape != got64.shape:
        return {"shape_mismatch": [list(ref64.shape), list(got64.shape)]}
    diff = np.abs(ref64 - got64)
    scale = float(np.max(np.abs(ref64))) if ref64.size else 0.0
    return {"max_abs": float(diff.max()) if diff.size else 0.0,
            "max_rel": float(diff.max() / scale) if diff.size and scale > 0 else 0.0,
            "ref_max_abs": scale}


class Progress:
    """Stage progress: INFO records of the ``onnx_mrvl.progress`` logger, with the elapsed time.
    The command line shows them when stderr is a terminal or with -v, never with -q."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.t0 = time.perf_counter()
        self.log = logging.getLogger(PROGRESS_LOGGER)

    def __call__(self, msg: str) -> None:
        if self.enabled:
            self.log.info("[%7.2fs] %s", time.perf_counter() - self.t0, msg)


# ---- option types (argparse ``type=``): a bad value is a usage error, exit 2 ----------------------

SIZE_FORMS = "a byte count such as 1048576 or 0x100000, or with a binary unit: 512K, 1M, 1MiB, 2G"
_SIZE = re.compile(r"^\s*(\d+)\s*(?:([KMG])(i?B)?)?\s*$", re.IGNORECASE)
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """``"1M"``, ``"1MiB"``, ``"512K"``, ``"0x100000"``, ``"1048576"`` -> bytes (K/M/G are powers of
    1024, as memory sizes are; ``MB`` is read as ``MiB``). Raises ``argparse.ArgumentTypeError``
    naming the accepted forms; zero and negative sizes are refused."""
    m = _SIZE.match(text)
    if m:
        value = int(m.group(1)) * _UNITS[m.group(2).upper()] if m.group(2) else int(m.group(1))
    else:
        try:
            value = int(text.strip(), 0)   # 0x100000, 0o..., 0b...
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid size {text!r}: use {SIZE_FORMS}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: must be positive ({SIZE_FORMS})")
    return value


def _integer(text: str, minimum: int) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= {minimum}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1 (``--num-tiles 0`` is a mistake, not "the default")."""
    return _integer(text, 1)


def nonnegative_int(text: str) -> int:
    """An integer >= 0."""
    return _integer(text, 0)


def tolerance(text: str) -> float:
    """A finite number >= 0 (``--atol -1`` failed every comparison, ``--atol nan`` too: exit 1, a
    "difference" that was the option's mistake)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number >= 0")
    return value


# ---- strict JSON ----------------------------------------------------------------------------------

def _finite(obj, path: str, flags: Dict[str, str]):
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            out[str(k)] = _finite(v, f"{path}/{k}", flags)
            if isinstance(v, (float, np.floating)) and not math.isfinite(v):
                out[f"{k}_non_finite"] = flags[f"{path}/{k}"]
        return out
    if isinstance(obj, (list, tuple)):
        return [_finite(v, f"{path}/{i}", flags) for i, v in enumerate(obj)]
    if isinstance(obj, np.ndarray):
        return _finite(obj.tolist(), path, flags)
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        if math.isfinite(obj):
            return float(obj)
        flags[path] = "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
        return None
    return obj


def strict_json(obj) -> str:
    """``obj`` as strict JSON (RFC 8259: no NaN/Infinity), indented by 1. A non-finite number becomes
    ``null``; in an object its key gets a sibling ``<key>_non_finite`` ("nan", "inf" or "-inf"), and a
    top-level object gets ``"non_finite": {JSON pointer: kind}`` listing every one (list items too).
    numpy scalars and arrays become numbers and lists."""
    flags: Dict[str, str] = {}
    clean = _finite(obj, "", flags)
    if flags and isinstance(clean, dict):
        clean["non_finite"] = flags
    return json.dumps(clean, indent=1, allow_nan=False)


def print_json(obj, file=None) -> None:
    """Print ``strict_json(obj)`` and a newline on stdout (or ``file``): the only JSON writer of the CLI."""
    out = file or sys.stdout
    out.write(strict_json(obj) + "\n")


# ---- errors -> exit codes, logging ----------------------------------------------------------------

def error_lines(exc: MrvlError) -> Tuple[str, Optional[str]]:
    """(message without its hint, the hint) of one of our errors."""
    text = str(exc)
    hint = getattr(exc, "hint", None)
    if hint and text.endswith(f". Fix: {hint}"):
        text = text[: -len(f". Fix: {hint}")]
    return text, hint


EXIT_INTERRUPTED = 130   # Ctrl-C (128 + SIGINT), as shells report it


class Terminated(KeyboardInterrupt):
    """SIGTERM / SIGHUP turned into an exception (``signals_interrupt``), so the cleanup of Ctrl-C runs
    (a save removes its staging folder) and the exit code is 128 + the signal's number."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def signals_interrupt():
    """While the command runs, SIGTERM and SIGHUP raise ``Terminated`` instead of ending the process
    at once (no ``finally`` ran then: a killed save left its staging folder beside the output). Only
    in the main thread (a signal handler cannot be set elsewhere); the previous handlers come back."""
    names = [n for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n)]
    saved = {}

    def handler(signum, frame):
        raise Terminated(signum)
    if threading.current_thread() is threading.main_thread():
        for n in names:
            saved[n] = signal.signal(getattr(signal, n), handler)
    try:
        yield
    finally:
        for n, old in saved.items():
            signal.signal(getattr(signal, n), old)


def error_json(command: str, code: int, kind: str, message: str, hint: Optional[str] = None,
               exc: Optional[MrvlError] = None) -> None:
    """With ``--json``, the error as the one JSON object on stdout (the message also goes to stderr):
    ``{"error": {"command", "exit_code", "type", "message", "fix", "node", "origin"}}``, so a caller
    parsing stdout gets JSON on failure too."""
    err = {"command": command, "exit_code": code, "type": kind, "message": message, "fix": hint}
    if exc is not None and exc.node:
        err["node"] = exc.node
    if exc is not None and exc.origin:
        err["origin"] = list(exc.origin)
    print_json({"error": err})


def run_command(command: str, func, args) -> int:
    """Run a subcommand, mapping what it raises to the README's exit codes: its own return value
    (0 success, 1 found a difference), 3 for an ``MrvlError`` (message + a "Fix:" line), 4 for any
    other exception (an internal error: please report it), 130 when interrupted (Ctrl-C), 143 / 129
on SIGTERM / SIGHUP (``signals_interrupt``). With
    ``--json`` an error is also printed as a JSON object on stdout (``error_json``)."""
    as_json = bool(getattr(args, "json", False))
    try:
        with signals_interrupt():
            return int(func(args) or 0)
    except MrvlError as exc:
        text, hint = error_lines(exc)
        print(f"onnx-mrvl {command}: error: {text}", file=sys.stderr)
        if hint:
            print(f"  Fix: {hint}", file=sys.stderr)
        if as_json:
            error_json(command, EXIT_MRVL, type(exc).__name__, text, hint, exc)
        return EXIT_MRVL
    except KeyboardInterrupt as exc:
        code, kind, what = EXIT_INTERRUPTED, "KeyboardInterrupt", "interrupted"
        if isinstance(exc, Terminated):
            code, kind = 128 + exc.signum, "Terminated"
            what = f"terminated ({signal.Signals(exc.signum).name})"
        print(f"onnx-mrvl {command}: {what}", file=sys.stderr)
        if as_json:
            error_json(command, code, kind, what)
        return code
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - last resort, report as internal error
        logging.getLogger("onnx_mrvl").debug("internal error", exc_info=True)
        print(f"onnx-mrvl {command}: internal error: {type(exc).__name__}: {exc} "
              f"(run with -vv for the traceback; please report it)", file=sys.stderr)
        if as_json:
            error_json(command, EXIT_INTERNAL, "internal", f"{type(exc).__name__}: {exc}",
                       "a bug of onnx_mrvl: run with -vv for the traceback and report it")
        return EXIT_INTERNAL


class _Formatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        if record.name == PROGRESS_LOGGER:
            return record.getMessage()
        if record.name == NOTICE_LOGGER:
            return f"onnx-mrvl: {record.getMessage()}"
        return f"{record.levelname} {record.name}: {record.getMessage()}" + (
            "\n" + self.formatException(record.exc_info) if record.exc_info else "")


class _OursBelowWarning(logging.Filter):
    """Lets through WARNING and above from anyone, lower levels only from onnx_mrvl's loggers."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or record.name.split(".")[0] == "onnx_mrvl"


def configure_logging(verbose: int, quiet: bool):
    """Log records to stderr: warnings by default, -v info, -vv debug (onnx_mrvl's own records; other
    libraries stay at WARNING), -vvv debug of everything, -q errors only. Progress (``Progress``)
    and notices (the ``onnx_mrvl.notice`` logger) show at the default level too when stderr is a
    terminal. Returns a function that undoes this (``main()`` called in-process leaves logging as
    it found it)."""
    root, progress = logging.getLogger(), logging.getLogger(PROGRESS_LOGGER)
    notice = logging.getLogger(NOTICE_LOGGER)
    libraries = [logging.getLogger(name) for name in QUIET_LIBRARIES]
    saved = root.level, progress.level, notice.level, [lg.level for lg in libraries]
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter())
    if verbose < 3:
        handler.addFilter(_OursBelowWarning())
        for lg in libraries:           # not only filtered: numba would still format its dumps
            lg.setLevel(logging.WARNING)
    root.addHandler(handler)
    root.setLevel(logging.ERROR if quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)])
    tty = hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
    progress.setLevel(logging.INFO if tty and not quiet else logging.NOTSET)
    notice.setLevel(logging.INFO if tty and not quiet else logging.NOTSET)

    def restore() -> None:
        root.removeHandler(handler)
        root.setLevel(saved[0])
        progress.setLevel(saved[1])
        notice.setLevel(saved[2])
        for lg, level in zip(libraries, saved[3]):
            lg.setLevel(level)
    return restore
