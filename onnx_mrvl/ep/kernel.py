"""The ``Subgraph`` kernel: an onnxruntime-extensions Python custom op that runs a region's
binary on the simulator.

onnxruntime-extensions custom ops have a fixed arity, so one op type is defined per signature,
``mrvl::Subgraph_<inputs>x<outputs>``, lazily and once per process. Programs are kept in a
process-wide table keyed by the binary's sha256 (the node's ``sha256`` attribute): a session
loads and verifies its binaries before onnxruntime sees the model, and two models with different
binaries can never see each other's programs. The invocation hook is replaced by one that hands
outputs back as flat arrays instead of Python lists (design.md: 32 ms -> 0.24 ms for 1x64x112x112).
"""
from __future__ import annotations

import base64
import hashlib
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np

from ..errors import ArtifactError, MrvlError, MrvlRuntimeError

log = logging.getLogger(__name__)
DOMAIN = "mrvl"
ATTRS = ("region", "origin", "embed_mode", "artifact", "binary", "sha256")

_lock = threading.RLock()
_defined: set = set()
_hook_installed = False
_library_registered = False   # once a session has the library, defining more ops crashes at exit
MAX_ARITY = int(os.environ.get("ONNX_MRVL_MAX_ARITY", "16"))


@dataclass
class Program:
    """A loaded region: its simulator and run statistics."""
    region: str
    origin: List[str]
    sha256: str
    simulator: object
    refs: int = 0
    calls: int = 0
    wall_s: float = 0.0
    last_wall_s: float = 0.0
    cycles: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def stats(self) -> dict:
        with self.lock:
            return {"region": self.region, "calls": self.calls, "wall_s": self.wall_s,
                    "last_wall_s": self.last_wall_s, "mean_wall_s": self.wall_s / self.calls if self.calls else 0.0,
                    "simulated_cycles_per_call": self.cycles,
                    "simulated_latency_s": _latency(self.simulator)}


_programs: Dict[str, Program] = {}
_pending = threading.local()   # an error raised inside a kernel call, for the session to re-raise


def take_pending_error() -> Optional[MrvlError]:
    """The error the last kernel call on this thread recorded (and forget it)."""
    err = getattr(_pending, "error", None)
    _pending.error = None
    return err


def _latency(sim) -> Optional[float]:
    perf = getattr(sim, "perf", None)
    return getattr(perf, "latency_s", None) if perf is not None else None


def _total_cycles(sim) -> int:
    perf = getattr(sim, "perf", None)
    for name in ("total_cycles", "cycles"):
        v = getattr(perf, name, None)
        if isinstance(v, (int, np.integer)):
            return int(v)
    return 0


# ------------------------------------------------------------------ loading
def load_program(region: str, origin: List[str], sha256: str, data: bytes) -> Program:
    """Verify ``data`` against ``sha256``, validate it and keep its simulator (shared by digest)."""
    from ..artifact import load
    from ..sim import Simulator

    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise ArtifactError(f"model binary of region '{region}' does not match its sha256 attribute "
                            f"(file {digest[:16]}..., node {sha256[:16]}...): tampered or replaced",
                            node=region, origin=origin, hint="re-run onnx-mrvl convert")
    with _lock:
        prog = _programs.get(sha256)
        if prog is None:
            binary = load(data, name=region)
            prog = Program(region, list(origin), sha256, Simulator(binary))
            prog.cycles = _total_cycles(prog.simulator)
            _programs[sha256] = prog
        prog.refs += 1
        return prog


def release(sha256: str) -> None:
    with _lock:
        prog = _programs.get(sha256)
        if prog is not None:
            prog.refs -= 1
            if prog.refs <= 0:
                del _programs[sha256]


def read_artifact(region: str, origin: List[str], attrs: dict, model_dir: Optional[str]) -> bytes:
    if int(attrs.get("embed_mode", 0)) == 1:
        try:
            return base64.b64decode(attrs.get("binary", ""), validate=True)
        except ValueError:
            raise ArtifactError(f"embedded binary of region '{region}' is not valid base64", node=region,
                                origin=origin, hint="re-run onnx-mrvl convert") from None
    name = attrs.get("artifact", "")
    if not name:
        raise ArtifactError(f"region '{region}' names no artifact", node=region, origin=origin)
    if model_dir is None:
        raise ArtifactError(f"region '{region}': cannot resolve '{name}' without the model's folder",
                            node=region, origin=origin,
                            hint="open the model by path with onnx_mrvl.InferenceSession, or "
                                 "ep.register(sess_options, model_path=...)")
    base = os.path.realpath(model_dir)
    path = os.path.realpath(os.path.join(base, name))
    if os.path.isabs(name) or os.path.commonpath([base, path]) != base:
        raise ArtifactError(f"region '{region}': artifact '{name}' is outside the model's folder",
                            node=region, origin=origin, hint="artifacts must sit beside the model")
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise ArtifactError(f"model binary of region '{region}' cannot be read: {path} ({exc.strerror})",
                            node=region, origin=origin, hint="keep the .bin files beside model.onnx") from None


# ------------------------------------------------------------------ custom ops
_attr_types: Dict[int, Dict[str, object]] = {}    # op id -> attribute name -> declared type


def _cast(k_id, op, attributes) -> dict:
    """``op.cast_attributes``, with the declared types read once per op: the library reads them
    from a pybind property on every attribute of every call (~23 us a call, measured)."""
    types = _attr_types.get(k_id)
    if types is None:
        from onnxruntime_extensions import PyCustomOpDef
        declared = dict(op._nativedef.attrs)
        types = _attr_types[k_id] = {k: (int if t == PyCustomOpDef.dt_int64 else float if t == PyCustomOpDef.dt_float
                                         else None) for k, t in declared.items()}
    return {k: (v if types.get(k) is None else types[k](v)) for k, v in attributes.items()}


def _invoke(k_id, feed, attributes):
    """onnxruntime-extensions invocation hook returning flat arrays, not lists."""
    from onnxruntime_extensions._ocos import Opdef
    op = Opdef._odlist[k_id]
    try:
        attrs = _cast(k_id, op, attributes)
    except (AttributeError, KeyError, TypeError, ValueError):
        attrs = op.cast_attributes(attributes)            # the library's own way
    rv = op.body(*feed, **attrs)
    outs = rv if isinstance(rv, tuple) else (rv,)
    res = []
    for r in outs:
        arr = np.asarray(r)
        res.append(arr.shape)
        res.append(arr.reshape(-1).tolist() if arr.dtype.kind in "OUS" else np.ascontiguousarray(arr).reshape(-1))
    return (k_id,) + tuple(res)


def _install_hook() -> None:
    global _hook_installed
    if not _hook_installed:
        from onnxruntime_extensions._ocos import PyCustomOpDef
        PyCustomOpDef.install_hooker(_invoke)
        _hook_installed = True


def _kernel(num_outputs: int):
    def run(*inputs, region="", origin="", embed_mode=0, artifact="", binary="", sha256=""):
        # An exception must not cross into onnxruntime-extensions: it aborts the process. Errors are
        # recorded for InferenceSession.run to raise, and the outputs come back as NaN.
        prog = _programs.get(sha256)
        try:
            if prog is None:
                raise MrvlRuntimeError(f"region '{region}' has no loaded program (sha256 {sha256[:16]}...)",
                                       node=region, hint="create the session with onnx_mrvl.InferenceSession "
                                                         "or ep.register(sess_options, model_path=...)")
            t0 = time.perf_counter()
            outs = prog.simulator.run(list(inputs))
            dt = time.perf_counter() - t0
            with prog.lock:
                prog.calls += 1
                prog.wall_s += dt
                prog.last_wall_s = dt
            if len(outs) != num_outputs:
                raise MrvlRuntimeError(f"region '{region}' produced {len(outs)} outputs, the node has "
                                       f"{num_outputs}", node=region, origin=prog.origin)
        except Exception as exc:  # noqa: BLE001 - see above
            err = exc if isinstance(exc, MrvlError) else MrvlRuntimeError(
                f"region '{region}' failed: {type(exc).__name__}: {exc}", node=region,
                origin=prog.origin if prog else ())
            _pending.error = err
            log.error("%s", err)
            outs = _nan_outputs(prog, num_outputs)
        return tuple(outs) if num_outputs > 1 else outs[0]
    return run


def _nan_outputs(prog: Optional[Program], n: int) -> List[np.ndarray]:
    shapes = []
    try:
        shapes = [list(s) for s in prog.simulator.output_shapes] if prog is not None else []
    except Exception:  # noqa: BLE001
        shapes = []
    shapes = (shapes + [[1]] * n)[:n]
    return [np.full(s, np.nan, np.float32) for s in shapes]


def define_ops(signatures) -> None:
    """Define ``Subgraph_<i>x<o>`` custom ops for the given (inputs, outputs) pairs (once each)."""
    from onnxruntime_extensions import PyCustomOpDef, onnx_op

    with _lock:
        _install_hook()
        new = sorted(set(signatures) - _defined)
        if new and _library_registered:
            raise MrvlRuntimeError(
                f"regions with {new[0][0]} inputs and {new[0][1]} outputs need a custom op that can no longer be "
                f"defined in this process (onnxruntime-extensions reads its op list once)",
                hint=f"set ONNX_MRVL_MAX_ARITY above {max(max(n) for n in new)} before the first session, or "
                     f"create this model's session first")
        for nin, nout in new:
            attrs = {k: PyCustomOpDef.dt_string for k in ATTRS}
            attrs["embed_mode"] = PyCustomOpDef.dt_int64
            onnx_op(op_type=f"{DOMAIN}::Subgraph_{nin}x{nout}", inputs=[PyCustomOpDef.dt_float] * nin,
                    outputs=[PyCustomOpDef.dt_float] * nout, attrs=attrs)(_kernel(nout))
            _defined.add((nin, nout))
        _install_hook()


_REGISTERED_KEY = "mrvl.custom_ops_registered"
BASE_SIGNATURES: List[Tuple[int, int]] = [(i, o) for i in range(1, MAX_ARITY + 1) for o in range(1, MAX_ARITY + 1)]


def register(sess_options, model_path: Optional[str] = None, signatures=()) -> None:
    """Register the Mrvl custom ops on ``sess_options`` (an onnxruntime.SessionOptions).

    For callers building their own ``onnxruntime.InferenceSession``: with ``model_path``, the
    model's binaries are loaded and verified now, so the session can run it."""
    from onnxruntime_extensions import get_library_path

    sigs = list(BASE_SIGNATURES) + list(signatures)
    if model_path is not None:
        from .session import preload
        sigs += preload(model_path)[1]
    global _library_registered
    define_ops(sigs)
    # one SessionOptions reused for several sessions (a common pattern) gets the library once:
    # onnxruntime refuses a second registration ("Conflicting with a registered kernel")
    try:
        done = sess_options.get_session_config_entry(_REGISTERED_KEY) == "1"
    except Exception:  # noqa: BLE001 - onnxruntime raises for a missing key
        done = False
    if not done:
        sess_options.register_custom_ops_library(get_library_path())
        sess_options.add_session_config_entry(_REGISTERED_KEY, "1")
    _library_registered = True
