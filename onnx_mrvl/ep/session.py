"""``onnx_mrvl.InferenceSession``: an onnxruntime session with the Mrvl custom ops registered and
each region's binary loaded (once), verified against its sha256 and kept for the session's life."""
from __future__ import annotations

import json
import os
import weakref
from typing import List, Optional, Tuple

import onnx
import onnxruntime as ort

from ..errors import ArtifactError, ModelError
from . import kernel

SUBGRAPH_PREFIX = "Subgraph_"


def _subgraph_nodes(model: onnx.ModelProto):
    """Subgraph nodes of the main graph and of every control-flow body in it."""
    def walk(graph):
        for n in graph.node:
            if n.domain == kernel.DOMAIN and n.op_type.startswith(SUBGRAPH_PREFIX):
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


def preload(model, model_dir: Optional[str] = None) -> Tuple[List[kernel.Program], List[Tuple[int, int]]]:
    """Load and verify every region binary of ``model`` (path or ModelProto)."""
    if not isinstance(model, onnx.ModelProto):
        path = os.fspath(model)
        model_dir = os.path.dirname(os.path.abspath(path))
        try:
            model = onnx.load(path, load_external_data=False)
        except Exception as exc:  # noqa: BLE001 - protobuf raises several types
            raise ModelError(f"cannot read '{path}' ({exc})") from None
    programs, sigs = [], []
    try:
        for node in _subgraph_nodes(model):
            a = _attrs(node)
            region = a.get("region", node.name)
            try:
                origin = json.loads(a.get("origin", "[]"))
            except ValueError:
                origin = []
            if not a.get("sha256"):
                raise ArtifactError(f"region '{region}' has no sha256 attribute", node=region, origin=origin,
                                    hint="re-run onnx-mrvl convert")
            data = kernel.read_artifact(region, origin, a, model_dir)
            programs.append(kernel.load_program(region, origin, a["sha256"], data))
            sigs.append((len(node.input), len(node.output)))
    except BaseException:
        for p in programs:
            kernel.release(p.sha256)
        raise
    return programs, sigs


class InferenceSession(ort.InferenceSession):
    """``onnxruntime.InferenceSession`` for converted models (Mrvl regions run on the simulator).

    ``path_or_model``: a path (artifacts resolve relative to its folder), serialized bytes or a
    ModelProto (binaries must then be embedded, or pass ``model_dir=``)."""

    def __init__(self, path_or_model, sess_options: Optional[ort.SessionOptions] = None,
                 providers=None, *, model_dir: Optional[str] = None, **kwargs):
        source = path_or_model
        if isinstance(path_or_model, onnx.ModelProto):
            proto, source = path_or_model, path_or_model.SerializeToString()
        elif isinstance(path_or_model, (bytes, bytearray)):
            proto = onnx.load_from_string(bytes(path_or_model))
        else:
            source = os.fspath(path_or_model)
            proto = None
        if proto is not None:
            programs, sigs = preload(proto, model_dir)
        else:
            programs, sigs = preload(source)
        self._mrvl_programs = programs
        self._mrvl_finalizer = weakref.finalize(self, _release_all, [p.sha256 for p in programs])
        so = sess_options
        if so is None:
            so = ort.SessionOptions()
            if programs:
                # The simulator runs inside one custom-op call on its own worker threads; idle
                # onnxruntime threads spinning for work meanwhile would take their cores.
                so.add_session_config_entry("session.intra_op.allow_spinning", "0")
                so.add_session_config_entry("session.inter_op.allow_spinning", "0")
        kernel.register(so, signatures=sigs)
        try:
            super().__init__(source, so, providers=providers or ["CPUExecutionProvider"], **kwargs)
        except Exception as exc:
            self._mrvl_finalizer()
            raise ModelError(f"onnxruntime cannot load the model: {exc}") from None

    def run(self, output_names, input_feed, run_options=None):
        kernel.take_pending_error()
        outputs = super().run(output_names, input_feed, run_options)
        err = kernel.take_pending_error()
        if err is not None:
            raise err
        return outputs

    def mrvl_stats(self) -> List[dict]:
        """Per region: calls, wall time (total, last, mean) and simulated cycles per call."""
        return [p.stats() for p in self._mrvl_programs]


def _release_all(digests: List[str]) -> None:
    for d in digests:
        kernel.release(d)
