"""The pieces of the deployable model: per-region standalone models and ``Subgraph`` nodes.

A ``Subgraph`` node (domain ``mrvl``, op type ``Subgraph_<inputs>x<outputs>``: onnxruntime-extensions
custom ops have a fixed arity) carries only simple attributes:
``region`` (name), ``origin`` (JSON list of original node names), ``embed_mode`` (1: the binary is in
the ``binary`` attribute, base64; 0: ``artifact`` names a file relative to the model), ``sha256``.
"""
from __future__ import annotations

import base64
import hashlib
from typing import List, Optional, Tuple

import onnx
from onnx import helper

from .. import opset
from ..graph_index import GraphIndex, extend_copies
from ..provenance import encode_origin

SUBGRAPH_PREFIX = "Subgraph_"
SUBGRAPH_ATTRS = ("region", "origin", "embed_mode", "artifact", "binary", "sha256")


def subgraph_op_type(num_inputs: int, num_outputs: int) -> str:
    return f"{SUBGRAPH_PREFIX}{num_inputs}x{num_outputs}"


def is_subgraph(node: onnx.NodeProto) -> bool:
    return node.domain == opset.DOMAIN and node.op_type.startswith(SUBGRAPH_PREFIX)


def _value_info(g: GraphIndex, name: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, g.elem_type(name) or onnx.TensorProto.FLOAT, g.shape(name))


def region_model(model: onnx.ModelProto, g: GraphIndex, nodes: List[onnx.NodeProto], inputs: List[str],
                 outputs: List[str], name: str) -> onnx.ModelProto:
    """A standalone ONNX model holding just the region (what the emit stage reads)."""
    used = {i for n in nodes for i in n.input}
    inits = [t for t in model.graph.initializer if t.name in used]
    produced = {o for n in nodes for o in n.output}
    vis = [_value_info(g, t) for t in sorted(produced - set(outputs)) if g.shape(t) is not None]
    live = {(n.op_type, n.overload) for n in nodes}
    funcs = [f for f in model.functions if f.domain == opset.DOMAIN and (f.name, f.overload) in live]
    # the fields helper.make_graph + make_model would set, filled in place: make_model copies the
    # whole graph once more, weights included (a second copy of every region weight)
    out = onnx.ModelProto()
    out.ir_version = max(model.ir_version, 10)
    graph = out.graph
    graph.node.extend(nodes)
    graph.name = name
    graph.input.extend([_value_info(g, t) for t in inputs])
    graph.output.extend([_value_info(g, t) for t in outputs])
    extend_copies(graph.initializer, inits)
    graph.value_info.extend(vis)
    out.opset_import.extend(model.opset_import)
    out.functions.extend(funcs)
    out.producer_name = "onnx_mrvl"
    return out


def region_model_taken(model: onnx.ModelProto, g: GraphIndex, nodes: List[onnx.NodeProto], inputs: List[str],
                       outputs: List[str], name: str) -> onnx.ModelProto:
    """``region_model``'s model (the same message, field for field) made out of ``model`` itself, which
    the caller gives up: its other nodes, initializers, value infos and functions are deleted, so the
    region's weights are not copied (upb keeps the deleted ones' memory until the model goes)."""
    used = {i for n in nodes for i in n.input}
    produced = {o for n in nodes for o in n.output}
    vis = [_value_info(g, t) for t in sorted(produced - set(outputs)) if g.shape(t) is not None]
    ins, outs = [_value_info(g, t) for t in inputs], [_value_info(g, t) for t in outputs]
    live = {(n.op_type, n.overload) for n in nodes}
    keep_func = [f.domain == opset.DOMAIN and (f.name, f.overload) in live for f in model.functions]
    node_copies = []
    for n in nodes:   # (small messages: copied, as extend would)
        c = onnx.NodeProto()
        c.CopyFrom(n)
        node_copies.append(c)
    ir_version = max(model.ir_version, 10)
    for fd, _ in model.ListFields():
        if fd.name not in ("graph", "opset_import", "functions"):
            model.ClearField(fd.name)
    graph = model.graph
    for fd, _ in graph.ListFields():
        if fd.name != "initializer":
            graph.ClearField(fd.name)
    for i in range(len(graph.initializer) - 1, -1, -1):
        if graph.initializer[i].name not in used:
            del graph.initializer[i]
    for i in range(len(keep_func) - 1, -1, -1):
        if not keep_func[i]:
            del model.functions[i]
    model.ir_version = ir_version
    graph.node.extend(node_copies)
    graph.name = name
    graph.input.extend(ins)
    graph.output.extend(outs)
    graph.value_info.extend(vis)
    model.producer_name = "onnx_mrvl"
    return model


def _copy(n: onnx.NodeProto) -> onnx.NodeProto:
    c = onnx.NodeProto()
    c.CopyFrom(n)
    return c


def subgraph_node(region, model: onnx.ModelProto, reference: bool
                  ) -> Tuple[onnx.NodeProto, Optional[onnx.FunctionProto]]:
    op_type = subgraph_op_type(len(region.inputs), len(region.outputs))
    node = helper.make_node(op_type, region.inputs, region.outputs, name=region.name, domain=opset.DOMAIN,
                            region=region.name, origin=encode_origin(region.origin), embed_mode=0,
                            artifact="", binary="", sha256="")
    func = None
    if reference:
        node.overload = region.name
        func = _reference_function(op_type, region)
    return node, func


def _reference_function(op_type: str, region) -> onnx.FunctionProto:
    """The region's fp32 reference: its Mrvl nodes, weights as Constant nodes (functions have no
    initializers). Runs in plain onnxruntime with no custom ops."""
    from .revert import inline_nodes

    m = onnx.ModelProto()
    m.CopyFrom(region.model)
    inline_nodes(m, {n.name for n in m.graph.node})  # onnxruntime resolves no overloads in nested calls
    consts = [helper.make_node("Constant", [], [t.name], value=t) for t in m.graph.initializer]
    body = consts + [_copy(n) for n in m.graph.node]
    return helper.make_function(opset.DOMAIN, op_type, list(region.inputs), list(region.outputs), body,
                                list(m.opset_import), attributes=list(SUBGRAPH_ATTRS), overload=region.name)


def attach_artifact(node: onnx.NodeProto, binary: bytes, *, artifact: str = "", embed: bool = False,
                    sha256: Optional[str] = None) -> None:
    """Point a Subgraph node at its compiled binary: embedded (base64) or a file relative to the model.
    ``sha256``: the binary's hex digest when the caller has it (pack computes it), else hashed here."""
    values = {"embed_mode": 1 if embed else 0, "artifact": "" if embed else artifact,
              "binary": base64.b64encode(binary).decode() if embed else "",
              "sha256": sha256 or hashlib.sha256(binary).hexdigest()}
    keep = [a for a in node.attribute if a.name not in values]
    del node.attribute[:]
    node.attribute.extend(keep)
    for k in SUBGRAPH_ATTRS:
        if k in values:
            node.attribute.append(helper.make_attribute(k, values[k]))
    node.attribute.sort(key=lambda a: SUBGRAPH_ATTRS.index(a.name) if a.name in SUBGRAPH_ATTRS else 99)


def subgraph_attrs(node: onnx.NodeProto) -> dict:
    return {a.name: (a.s.decode() if a.type == onnx.AttributeProto.STRING else helper.get_attribute_value(a))
            for a in node.attribute}
