"""The region kernels: onnxruntime-extensions Python custom ops that run a region's binary on the
simulator.

``onnx_mrvl.InferenceSession`` runs the model's runtime form (runtime_form.py): ops of fixed arity,
``mrvl::SubgraphRun_<i>x<o>`` (i, o in 1..16; more are packed), each output followed by a guard.
A failing region never raises inside the op (that aborts the process) and never hands back
placeholder values: its error is recorded under a token, the op returns a ``[0, token]`` tensor, the
guard makes onnxruntime fail the run on whatever thread, and the session raises the recorded
``MrvlRuntimeError`` (failures.py). The saved-form ops ``Subgraph_<i>x<o>`` (i, o in 1..16,
``ONNX_MRVL_MAX_ARITY``) serve sessions built by hand on the saved model (``register``).
Programs are kept in a process-wide table keyed by the binary's sha256: a session loads and
verifies its binaries before onnxruntime sees the model, and two models with different binaries
never see each other's programs. Outputs go back through the library's own invocation hook as flat
arrays (``_Output``); no global hook is replaced.
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
from . import failures
from .runtime_form import DOMAIN, MAX_ARITY, run_op_type

log = logging.getLogger(__name__)
_PROTOBUF_IMPL = "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"


def extensions():
    """``onnxruntime_extensions``, imported without its side effect on the environment: its import
    sets PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python (onnxruntime_extensions/cvt.py), which
    protobuf in this process has already read but every child process inherits (a ``subprocess``
    run of ``onnx-mrvl`` after an InferenceSession then parsed models with protobuf's pure-Python
    decoder: many times slower). The variable is put back as it was."""
    before = os.environ.get(_PROTOBUF_IMPL)
    try:
        import onnxruntime_extensions
    finally:
        if before is None:
            os.environ.pop(_PROTOBUF_IMPL, None)
        else:
            os.environ[_PROTOBUF_IMPL] = before
    return onnxruntime_extensions


ATTRS = ("region", "origin", "embed_mode", "artifact", "binary", "sha256")

_lock = threading.RLock()
_defined: set = set()
_run_defined = False
_library_registered = False   # once a session has the library, defining more ops crashes at exit


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
    num_outputs: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def stats(self) -> dict:
        with self.lock:
            return {"region": self.region, "calls": self.calls, "wall_s": self.wall_s,
                    "last_wall_s": self.last_wall_s, "mean_wall_s": self.wall_s / self.calls if self.calls else 0.0,
                    "simulated_cycles_per_call": self.cycles,
                    "simulated_latency_s": _latency(self.simulator)}


_programs: Dict[str, Program] = {}
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
            prog.num_outputs = len(prog.simulator.output_shapes)
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
class _Output:
    """A kernel result for onnxruntime-extensions' own invocation hook, which sends each output
    back as ``r.shape`` and ``r.flatten().tolist()``: here ``tolist`` hands over the flat float32
    array itself (the library takes an array as it is), so a 1x64x112x112 output is not turned
    into a Python list (measured: 32 ms -> 0.24 ms). No hook is replaced: other Python custom ops
    in the process run exactly as before."""
    __slots__ = ("_a", "shape")

    def __init__(self, a: np.ndarray):
        self._a = np.ascontiguousarray(a, dtype=np.float32)
        self.shape = self._a.shape

    def flatten(self) -> "_Output":
        return self

    def tolist(self) -> np.ndarray:
        return self._a.reshape(-1)

    def __array__(self, dtype=None, copy=None):
        return self._a if dtype is None else self._a.astype(dtype)


def _region_error(region: str, prog: Optional[Program], exc: BaseException) -> MrvlRuntimeError:
    """``exc`` as our error, naming the region, the layer (the simulator names it) and original nodes."""
    origin = tuple(prog.origin) if prog is not None else ()
    if isinstance(exc, MrvlError):
        msg = exc.message if f"'{region}'" in exc.message else f"region '{region}': {exc.message}"
        return MrvlRuntimeError(msg, node=exc.node or region, origin=exc.origin or origin, hint=exc.hint)
    return MrvlRuntimeError(f"region '{region}' failed: {type(exc).__name__}: {exc}", node=region, origin=origin)


def _simulate(prog: Optional[Program], region: str, sha256: str, inputs: List[np.ndarray],
              on_overflow: str = "warn") -> List[np.ndarray]:
    if prog is None:
        raise MrvlRuntimeError(f"region '{region}' has no loaded program (sha256 {sha256[:16]}...)",
                               node=region, hint="create the session with onnx_mrvl.InferenceSession")
    t0 = time.perf_counter()
    outs = prog.simulator.run(inputs, on_overflow=on_overflow)
    dt = time.perf_counter() - t0
    with prog.lock:
        prog.calls += 1
        prog.wall_s += dt
        prog.last_wall_s = dt
    n = prog.num_outputs
    if len(outs) != n:
        raise MrvlRuntimeError(f"region '{region}' produced {len(outs)} outputs, its binary declares {n}",
                               node=region, origin=prog.origin, hint="recompile the region")
    return outs


def _unpack(prog: Program, region: str, x: np.ndarray) -> List[np.ndarray]:
    """Inputs packed by the runtime form: every input's dimensions, then every input flattened."""
    want = prog.simulator.input_shapes
    x = x.reshape(-1)
    head = sum(len(s) for s in want)
    sizes = [int(np.prod(s, dtype=np.int64)) for s in want]
    dims = [int(v) for v in x[:head]] if x.size >= head else []
    got, at = [], 0
    for s in want:
        got.append(dims[at:at + len(s)])
        at += len(s)
    if got != [list(s) for s in want] or x.size != head + sum(sizes):
        raise MrvlRuntimeError(f"region '{region}' got inputs of shapes {got} ({x.size - head} values), "
                               f"its binary was compiled for {want}", node=region, origin=prog.origin,
                               hint="feed the shapes the model was converted for")
    out, at = [], head
    for s, n in zip(want, sizes):
        out.append(x[at:at + n].reshape(s))
        at += n
    return out


def _run_kernel(num_outputs: int):
    """The runtime form's kernel (``mrvl::SubgraphRun_<i>x<o>``, runtime_form.py). Never raises: a
    failure is recorded and every output comes back as a ``[0, token]`` tensor for its guard."""
    def run(*inputs, region="", sha256="", packed_inputs=0, packed_outputs=0, raise_overflow=1):
        prog = _programs.get(sha256)
        try:
            xs = _unpack(prog, region, inputs[0]) if (int(packed_inputs) and prog is not None) else inputs
            outs = _simulate(prog, region, sha256, xs, "raise" if int(raise_overflow) else "warn")
            if int(packed_outputs):
                return _Output(np.concatenate([o.reshape(-1) for o in outs]))
            if len(outs) != num_outputs:
                raise MrvlRuntimeError(f"region '{region}' produced {len(outs)} outputs, the node has "
                                       f"{num_outputs}", node=region, origin=prog.origin)
            res = tuple(map(_Output, outs))
        except BaseException as exc:  # noqa: BLE001 - an exception here aborts the process (failures.py)
            err = _region_error(region, prog, exc)
            token = failures.record(err)
            log.debug("region %s failed (token %d): %s", region, token, err)
            res = tuple(_Output(np.empty((0, token), np.float32)) for _ in range(num_outputs))
        return res if num_outputs > 1 else res[0]
    return run


def _saved_form_kernel(num_outputs: int):
    """The kernel of a saved-form ``Subgraph_<i>x<o>`` node, run by a session the user built on the
    saved model (``register``). No guard follows it, so a failure cannot reach the caller as an
    exception: the process stops (fail closed) after logging the error."""
    def run(*inputs, region="", origin="", embed_mode=0, artifact="", binary="", sha256=""):
        prog = _programs.get(sha256)
        try:
            outs = _simulate(prog, region, sha256, list(inputs))
            if len(outs) != num_outputs:
                raise MrvlRuntimeError(f"region '{region}' produced {len(outs)} outputs, the node has "
                                       f"{num_outputs}", node=region)
        except BaseException as exc:  # noqa: BLE001
            log.critical("%s. The session was built on the saved model, so this stops the process; load "
                         "onnx_mrvl.ep.runtime_model(path) instead to get the error as an exception",
                         _region_error(region, prog, exc))
            raise
        res = tuple(_Output(o) for o in outs)
        return res if num_outputs > 1 else res[0]
    return run


def define_ops(signatures) -> None:
    """Define the runtime op and the saved-form ``Subgraph_<i>x<o>`` ops (once each, before the
    library is first registered: onnxruntime-extensions reads its op list once)."""
    ext = extensions()
    PyCustomOpDef, onnx_op = ext.PyCustomOpDef, ext.onnx_op

    global _run_defined
    with _lock:
        new = sorted(set(signatures) - _defined)
        if new and _library_registered:
            raise MrvlRuntimeError(
                f"a saved-form node with {new[0][0]} inputs and {new[0][1]} outputs needs a custom op that can no "
                f"longer be defined in this process (onnxruntime-extensions reads its op list once)",
                hint="run the model through onnx_mrvl.InferenceSession or onnx_mrvl.ep.runtime_model(path), "
                     "which take any number of inputs and outputs")
        if not _run_defined:
            attrs = {"region": PyCustomOpDef.dt_string, "sha256": PyCustomOpDef.dt_string,
                     "packed_inputs": PyCustomOpDef.dt_int64, "packed_outputs": PyCustomOpDef.dt_int64,
                     "raise_overflow": PyCustomOpDef.dt_int64}
            for nin, nout in BASE_SIGNATURES:
                op = onnx_op(op_type=f"{DOMAIN}::{run_op_type(nin, nout)}", inputs=[PyCustomOpDef.dt_float] * nin,
                             outputs=[PyCustomOpDef.dt_float] * nout, attrs=attrs)(_run_kernel(nout))
                _attributes_as_given(op)
            _run_defined = True
        for nin, nout in new:
            attrs = {k: PyCustomOpDef.dt_string for k in ATTRS}
            attrs["embed_mode"] = PyCustomOpDef.dt_int64
            onnx_op(op_type=f"{DOMAIN}::Subgraph_{nin}x{nout}", inputs=[PyCustomOpDef.dt_float] * nin,
                    outputs=[PyCustomOpDef.dt_float] * nout, attrs=attrs)(_saved_form_kernel(nout))
            _defined.add((nin, nout))


def _as_given(attributes: dict) -> dict:
    return attributes


def _attributes_as_given(op) -> None:
    """Let ``op`` (an onnxruntime-extensions ``Opdef``) take its attributes as the library passes
    them (strings), without the library's per-call cast: that reads the op's attribute types from
    the native op definition once per attribute and type tried, each read a fresh dict (6.4 us of
    each call for the runtime op's five attributes); the runtime kernel converts its three integer
    flags itself. Only these ops change; other Python custom ops in the process cast as before."""
    if callable(getattr(op, "cast_attributes", None)):
        op.cast_attributes = _as_given


_REGISTERED_KEY = "mrvl.custom_ops_registered"
BASE_SIGNATURES: List[Tuple[int, int]] = [(i, o) for i in range(1, MAX_ARITY + 1) for o in range(1, MAX_ARITY + 1)]


def register(sess_options, model_path: Optional[str] = None, signatures=()) -> None:
    """Register the Mrvl custom ops on ``sess_options`` (an onnxruntime.SessionOptions).

    For callers building their own ``onnxruntime.InferenceSession``: load
    ``onnx_mrvl.ep.runtime_model(path)`` (binaries loaded, region errors fail the run; see
    ``failures.translate``). With ``model_path``, the saved model itself can be loaded: its
    binaries are loaded and verified now, but a region error then stops the process (no guard)."""
    get_library_path = extensions().get_library_path

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
