"""Run a model with every intermediate tensor visible, and capture every layer of a region binary.

``run_all`` marks every node output as a graph output and runs the model: in plain onnxruntime,
or through ``onnx_mrvl.InferenceSession`` when the model holds ``Subgraph`` region nodes (then
the regions' inputs are captured too). ``capture_region`` runs one region binary on the
simulator with every layer output added to the program's outputs (docs/program.md: outputs are
tensor ids), so nothing inside the simulator has to change.
"""
from __future__ import annotations

import copy
import logging
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np
import onnx

from .. import file_weights
from ..errors import ModelError
from ..provenance import decode_origin
from .canonical import is_region_node
from .tensors import Storage, layer_storage

log = logging.getLogger(__name__)


def node_attrs(node: onnx.NodeProto) -> Dict[str, object]:
    out: Dict[str, object] = {}
    for a in node.attribute:
        v = onnx.helper.get_attribute_value(a)
        out[a.name] = v.decode("utf-8", "replace") if isinstance(v, bytes) else v
    return out


def region_nodes(model: onnx.ModelProto) -> List[onnx.NodeProto]:
    return [n for n in model.graph.node if is_region_node(n)]


def region_origin(node: onnx.NodeProto) -> List[str]:
    return decode_origin(node_attrs(node).get("origin", "[]"))


def expose_all(model: onnx.ModelProto, only=None) -> onnx.ModelProto:
    """A copy of ``model`` whose every node output (of the names ``only`` when given) is also a graph output."""
    m = copy.deepcopy(model)
    have = {o.name for o in m.graph.output}
    for n in m.graph.node:
        for t in n.output:
            if t and t not in have and (only is None or t in only):
                m.graph.output.append(onnx.ValueInfoProto(name=t))
                have.add(t)
    if m.ir_version > 13 or m.ir_version == 0:
        m.ir_version = 10
    return m


def make_session(model: onnx.ModelProto, model_dir: Optional[str]):
    """onnx_mrvl.InferenceSession when ``model`` has region nodes (also inside control-flow bodies),
    plain onnxruntime otherwise."""
    import onnxruntime as ort

    from ..bodies import all_nodes

    so = ort.SessionOptions()
    so.log_severity_level = 3          # graph-optimizer notices are not the user's concern here
    if any(is_region_node(n) for n in all_nodes(model.graph)):   # a region in an If / Loop body too
        from ..ep import InferenceSession
        return InferenceSession(model, so, model_dir=model_dir, fp16_overflow="inf")   # compare reports infs
    try:
        return ort.InferenceSession(file_weights.serialized(model), so, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises several types
        raise ModelError(f"onnxruntime cannot load model {model.graph.name!r}: {exc}",
                         hint="check the model with onnx.checker / onnx-mrvl diff") from None


def run_all(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray],
            model_dir: Optional[str] = None, only=None) -> Dict[str, np.ndarray]:
    """Every graph input and node output (those named in ``only`` when given) of ``model`` after one
    run on ``feeds``."""
    m = expose_all(model, None if only is None else set(only))
    sess = make_session(m, model_dir)
    names = [o.name for o in sess.get_outputs()]
    wanted = {i.name for i in sess.get_inputs()}
    missing = sorted(wanted - set(feeds))
    if missing:
        raise ModelError(f"model {model.graph.name!r} needs input(s) {missing} that were not given",
                         hint="pass them in the --inputs file")
    values = sess.run(names, {k: v for k, v in feeds.items() if k in wanted})
    out = {k: np.asarray(v) for k, v in feeds.items() if k in wanted}
    out.update({k: np.asarray(v) for k, v in zip(names, values)})
    return out


def region_binary(node: onnx.NodeProto, model_dir: Optional[str]) -> bytes:
    """The binary of one Subgraph node: embedded (base64) or the file beside the model."""
    from ..ep.kernel import read_artifact

    return read_artifact(node.name, region_origin(node), node_attrs(node), model_dir)


def capture_region(binary: bytes, inputs: Mapping[str, np.ndarray], name: str = ""
                   ) -> Tuple[List[Dict[str, object]], dict]:
    """Run a region binary on the simulator; returns (layers, program meta), one dict per layer in
    execution order:
    ``index``, ``name``, ``layer_name``, ``origin``, ``layout``, ``inputs`` / ``output`` (tensor ids),
    ``in_layout`` / ``in_shape`` (of the first input), ``storage`` (``tensors.Storage``), ``value``
    (float32 array as stored)."""
    from ..artifact import load
    from ..sim.simulator import Simulator

    b = load(binary, name=name or None)
    meta = copy.deepcopy(b.meta)
    tensors = {int(t["id"]): t for t in meta.get("tensors") or []}
    outs = list(meta["outputs"])
    have = {int(o["tensor"]) for o in outs}
    layers = list(meta.get("layers") or [])
    for layer in layers:
        tid = int(layer["outputs"][0])
        if tid not in have and tid in tensors:
            outs.append({"name": f"__capture_{tid}", "tensor": tid, "shape": tensors[tid]["shape"],
                         "layout": tensors[tid].get("layout", "")})
            have.add(tid)
    meta["outputs"] = outs
    sim = Simulator.from_program(meta, b.weights)
    feed = {}
    for spec in b.meta["inputs"]:
        if spec["name"] not in inputs:
            raise ModelError(f"region {b.meta.get('name')!r}: no value for its input {spec['name']!r}",
                             node=name, hint="the region's input must be a tensor of the model")
        feed[spec["name"]] = np.ascontiguousarray(inputs[spec["name"]], dtype=np.float32)
    values = sim.run(feed)
    by_tensor = {int(o["tensor"]): v for o, v in zip(outs, values)}
    storage = layer_storage(meta)
    rows = []
    for k, layer in enumerate(layers):
        tid = int(layer["outputs"][0])
        first = tensors.get(int(layer["inputs"][0]), {}) if layer.get("inputs") else {}
        rows.append({"index": int(layer.get("index", k)), "name": str(layer.get("name", k)),
                     "layer_name": str(layer.get("layer_name", "")),
                     "params": dict(layer.get("params") or {}),
                     "origin": [str(o) for o in layer.get("origin") or []],
                     "layout": str(tensors.get(tid, {}).get("layout", "")),
                     "inputs": [int(t) for t in layer.get("inputs") or []], "output": tid,
                     "in_layout": str(first.get("layout", "")),
                     "in_shape": tuple(int(d) for d in first.get("shape") or ()),
                     "storage": storage.get(tid, Storage()), "value": by_tensor[tid]})
    return rows, b.meta


def whole_layers(layers: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Layers whose output is a whole original tensor: not layout changes, and not pieces of an
    original node that a later layer finishes (partial sums of a split kernel, the groups of a split
    grouped conv), recognised by a consumer layer naming the same original node."""
    consumers: Dict[int, List[Dict[str, Any]]] = {}
    for layer in layers:
        for t in layer["inputs"]:
            consumers.setdefault(t, []).append(layer)
    out = []
    for layer in layers:
        if layer["layer_name"] == "layout_transform":
            continue
        mine = set(layer["origin"])
        if any(mine & set(c["origin"]) for c in consumers.get(layer["output"], [])
               if c["layer_name"] != "layout_transform"):
            continue
        out.append(layer)
    return out
