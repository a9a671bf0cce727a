"""``onnx_mrvl.InferenceSession``: an onnxruntime session with the Mrvl custom ops registered, each
region's binary loaded (once), verified against its sha256 and kept for the session's life, and
the model in its runtime form (runtime_form.py). Every run method of ``onnxruntime.InferenceSession``
raises a failing region's ``MrvlRuntimeError`` (failures.py), in every execution mode and thread."""
from __future__ import annotations

import functools
import os
import weakref
from typing import List, Optional, Tuple

import numpy as np
import onnx
import onnxruntime as ort

from .. import file_weights
from ..artifact.manifest import check_folder, check_model_file
from ..modelio import as_path
from ..errors import ArtifactError, ModelError, UsageError
from ..feeds import check_feeds
from ..provenance import decode_origin
from . import failures, kernel
from .runtime_form import is_subgraph
from .runtime_form import runtime_model as _runtime_form


def _subgraph_nodes(model: onnx.ModelProto):
    """Subgraph nodes of the main graph and of every control-flow body in it."""
    def walk(graph):
        for n in graph.node:
            if is_subgraph(n):
                yield n
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    yield from walk(a.g)
    yield from walk(model.graph)


def _attrs(node) -> dict:
    out = {}
    for a in node.attribute:
        out[a.name] = a.s.decode() if a.type == onnx.AttributeProto.STRING else onnx.helper.get_attribute_value(a)
    return out


def _load(path, external_data: bool = True) -> onnx.ModelProto:
    try:
        return onnx.load(path, load_external_data=external_data)
    except Exception as exc:  # noqa: BLE001 - protobuf raises several types
        raise ModelError(f"cannot read '{path}' ({exc})",
                         hint="pass the model.onnx that `onnx-mrvl convert` wrote, complete and beside its files") from None


def preload(model, model_dir: Optional[str] = None,
            model_file: Optional[str] = None) -> Tuple[List[kernel.Program], List[Tuple[int, int]]]:
    """Load and verify every region binary of ``model`` (path or ModelProto). A model file that a
    ``manifest.json`` beside it lists is checked against it first, its binaries then against the
    model's sha256 attributes (a region's error names its original nodes), and last the rest of the
    folder (files missing, or left from another conversion)."""
    path = model_file   # a ModelProto already loaded from this file: the folder is checked too
    if not isinstance(model, onnx.ModelProto):
        path = os.fspath(model)
        model_dir = os.path.dirname(os.path.abspath(path))
        if os.path.isfile(path):
            check_model_file(model_dir, os.path.basename(path))
        model = _load(path, external_data=False)
    programs, sigs = [], []
    try:
        for node in _subgraph_nodes(model):
            a = _attrs(node)
            region = a.get("region", node.name)
            origin = decode_origin(a.get("origin", "[]"))
            if not a.get("sha256"):
                raise ArtifactError(f"region '{region}' has no sha256 attribute", node=region, origin=origin,
                                    hint="re-run onnx-mrvl convert")
            data = kernel.read_artifact(region, origin, a, model_dir)
            programs.append(kernel.load_program(region, origin, a["sha256"], data))
            sigs.append((len(node.input), len(node.output)))
        if path is not None:
            check_folder(model_dir, model=os.path.basename(path))
    except BaseException:
        for p in programs:
            kernel.release(p.sha256)
        raise
    return programs, sigs


def _shapes(programs: List[kernel.Program]) -> dict:
    return {p.sha256: (p.simulator.input_shapes, p.simulator.output_shapes) for p in programs}


def runtime_model(path_or_model, model_dir: Optional[str] = None, *, fp16_overflow: str = "raise") -> onnx.ModelProto:
    """The runtime form of a converted model, for an ``onnxruntime.InferenceSession`` built by hand
    (after ``register(sess_options)``): its binaries are loaded and verified now and stay loaded for
    the process. A region error then fails the run with onnxruntime's exception, whose message
    ``onnx_mrvl.ep.failures.translate`` turns into the ``MrvlRuntimeError``."""
    path = None
    if isinstance(path_or_model, onnx.ModelProto):
        proto = path_or_model
    else:
        path = os.fspath(path_or_model)
        model_dir = model_dir or os.path.dirname(os.path.abspath(path))
        proto = _load(path)
    programs, _ = preload(proto, model_dir, model_file=path)
    return _runtime_form(proto, _shapes(programs), fp16_overflow)


def _raises_region_errors(method):
    """``method`` of onnxruntime's session, raising a failed region's error instead of onnxruntime's."""
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:
            err = failures.translate(exc) or failures.cpu_node_failure(exc, getattr(self, "_mrvl_cpu_nodes", ()))
            if err is None:
                raise
            raise err from None
    return run


class InferenceSession(ort.InferenceSession):
    """``onnxruntime.InferenceSession`` for converted models (Mrvl regions run on the simulator).

    ``path_or_model``: a path (artifacts resolve relative to its folder), serialized bytes or a
    ModelProto (binaries must then be embedded, or pass ``model_dir=``). onnxruntime runs the
    model's runtime form; inputs, outputs and results are those of the saved model.
    ``fp16_overflow``: "raise" (default: a region whose fp16 values overflow, i.e. turn finite
    inputs into inf/NaN, fails the run with ``MrvlRuntimeError`` naming the layer and its original
    nodes) or "inf" (the infs flow on, as on the device; a warning is logged)."""

    def __init__(self, path_or_model, sess_options: Optional[ort.SessionOptions] = None,
                 providers=None, *, model_dir: Optional[str] = None, fp16_overflow: str = "raise", **kwargs):
        if fp16_overflow not in ("raise", "inf"):
            raise UsageError(f"fp16_overflow={fp16_overflow!r}: expected 'raise' or 'inf'",
                             hint="'raise' fails a run whose fp16 values overflow; 'inf' lets the infs flow on")
        path = None
        if isinstance(path_or_model, onnx.ModelProto):
            proto = path_or_model
        elif isinstance(path_or_model, (bytes, bytearray)):
            try:
                proto = onnx.load_from_string(bytes(path_or_model))
            except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and kin
                raise ModelError(f"the bytes given are not an ONNX model ({type(exc).__name__}: {exc})",
                                 hint="pass the saved model's bytes, a ModelProto or the path of model.onnx") from None
        else:
            path = as_path(path_or_model, "InferenceSession's model")
            if os.path.isdir(path):
                raise ModelError(f"'{path}' is a folder, not a model file",
                                 hint=f"pass the converted model in it: {os.path.join(path, 'model.onnx')!r}")
            model_dir = os.path.dirname(os.path.abspath(path))
            if os.path.isfile(path):
                check_model_file(model_dir, os.path.basename(path))
            proto = _load(path)
        programs, _ = preload(proto, model_dir, model_file=path)
        self._mrvl_cpu_nodes = {n.name for n in proto.graph.node if n.name and not is_subgraph(n)}
        self._mrvl_programs = programs
        self._mrvl_finalizer = weakref.finalize(self, _release_all, [p.sha256 for p in programs])
        try:
            # the model is held once at a time: the loaded proto is dropped once its runtime form
            # exists, and that form once serialized, before onnxruntime parses its own copy (a large
            # CPU-side initializer, e.g. an embedding table, would otherwise be held 3-4 times)
            form = _runtime_form(proto, _shapes(programs), fp16_overflow) if programs else proto
            proto = None
            source = file_weights.serialized(form)
            del form
        except BaseException:
            self._mrvl_finalizer()
            raise
        so = sess_options
        if so is None:
            so = ort.SessionOptions()
            if programs:
                # The simulator runs inside one custom-op call on its own worker threads; idle
                # onnxruntime threads spinning for work meanwhile would take their cores.
                so.add_session_config_entry("session.intra_op.allow_spinning", "0")
                so.add_session_config_entry("session.inter_op.allow_spinning", "0")
        kernel.register(so)
        try:
            super().__init__(source, so, providers=providers or ["CPUExecutionProvider"], **kwargs)
        except Exception as exc:
            self._mrvl_finalizer()
            raise ModelError(f"onnxruntime cannot load the model: {exc}") from None

    def run(self, output_names, input_feed, run_options=None):
        """As onnxruntime's; a feed that does not fit the model (an input missing or unknown, float64
        for float32, a wrong rank or static dimension) or an unknown output name is a ``UsageError``
        naming the input and what it takes, not onnxruntime's error."""
        self._check_run(output_names, input_feed)
        return _run(self, output_names, input_feed, run_options)

    def _check_run(self, output_names, input_feed) -> None:
        specs = getattr(self, "_mrvl_specs", None)
        if specs is None:
            specs = self._mrvl_specs = [(i.name, list(i.shape or []), _ORT_TYPES.get(i.type))
                                        for i in self.get_inputs()]
            self._mrvl_outputs = [o.name for o in self.get_outputs()]
            self._mrvl_output_set = set(self._mrvl_outputs)
            self._mrvl_tensors = all(i.type.startswith("tensor(") for i in self.get_inputs())   # no sequences, maps
            self._mrvl_overridable = {i.name for i in self.get_overridable_initializers()}
            self._mrvl_fast = [(n, dt, tuple(shape) if all(isinstance(d, int) and d >= 0 for d in shape) else None,
                                len(shape), [(i, d) for i, d in enumerate(shape) if isinstance(d, int) and d >= 0])
                               for n, shape, dt in specs]
        if type(input_feed) is dict and len(input_feed) == len(specs) and (   # the usual call
                not output_names or self._mrvl_output_set.issuperset(output_names)):
            for name, dt, full, ndim, static in self._mrvl_fast:
                v = input_feed.get(name)
                if type(v) is not np.ndarray or v.dtype != dt or (
                        v.shape != full if full is not None else
                        v.ndim != ndim or any(v.shape[i] != d for i, d in static)):
                    break
            else:
                return
        if isinstance(output_names, (str, bytes)):
            raise UsageError(f"output_names is the string {output_names!r}, not a list of output names",
                             hint=f"pass [{output_names!r}], or None for every output")
        if not isinstance(input_feed, dict):
            raise UsageError(f"input_feed is a {type(input_feed).__name__}, not a dict",
                             hint=f"pass {{input name: numpy array}} for the inputs {[s[0] for s in specs]}")
        dtypes = {s[0]: s[2] for s in specs}
        arrays = {} if self._mrvl_tensors else None   # sequence / map / optional inputs: onnxruntime checks them
        for k, v in (input_feed.items() if arrays is not None else ()):
            if k in self._mrvl_overridable:   # an initializer the caller overrides: onnxruntime checks it
                continue
            if isinstance(v, np.ndarray):
                arrays[k] = v
            elif v is None or isinstance(v, (str, bytes, dict, set)):   # onnxruntime aborted the process on None
                raise UsageError(f"input '{k}' of InferenceSession.run's input_feed is {type(v).__name__} {v!r:.40}, "
                                 f"not an array", hint="pass a numpy array of the input's type and shape")
            elif isinstance(v, (list, tuple, int, float, bool, np.generic)):   # (np.float32(1): onnxruntime raised)
                try:
                    arrays[k] = np.asarray(v, dtypes.get(k))
                except (TypeError, ValueError) as exc:   # a ragged list, strings for numbers
                    raise UsageError(f"input '{k}': {exc}", hint="pass a numpy array of the input's type and shape") from None
            else:   # an OrtValue, ...: onnxruntime checks it
                arrays = None
                break
        if arrays is not None:
            check_feeds(arrays, specs, "InferenceSession.run's input_feed")
        unknown = [n for n in (output_names or ()) if n not in self._mrvl_outputs]
        if unknown:
            raise UsageError(f"output name(s) {unknown} are not outputs of the model (outputs: {self._mrvl_outputs})",
                             hint="pass None for every output, or names from get_outputs()")

    run_with_ort_values = _raises_region_errors(ort.InferenceSession.run_with_ort_values)
    run_with_iobinding = _raises_region_errors(ort.InferenceSession.run_with_iobinding)
    run_with_ortvaluevector = _raises_region_errors(ort.InferenceSession.run_with_ortvaluevector)

    def run_async(self, output_names, input_feed, callback, user_data, run_options=None):
        """As onnxruntime's: ``callback(results, user_data, err)``, with ``err`` the region's error
        message (a string, as onnxruntime passes) when a region failed."""
        def done(results, data, err):
            if err:
                mine = failures.translate(RuntimeError(err))
                err = str(mine) if mine is not None else err
            callback(results, data, err)
        return _raises_region_errors(ort.InferenceSession.run_async)(
            self, output_names, input_feed, done, user_data, run_options)

    def mrvl_stats(self) -> List[dict]:
        """Per region: calls, wall time (total, last, mean) and simulated cycles per call."""
        return [p.stats() for p in self._mrvl_programs]


_run = _raises_region_errors(ort.InferenceSession.run)
_ORT_TYPES = {f"tensor({t})": np.dtype(n) for t, n in (
    ("float", "float32"), ("double", "float64"), ("float16", "float16"), ("int64", "int64"), ("int32", "int32"),
    ("int16", "int16"), ("int8", "int8"), ("uint8", "uint8"), ("uint16", "uint16"), ("bool", "bool"))}


def _release_all(digests: List[str]) -> None:
    for d in digests:
        kernel.release(d)
