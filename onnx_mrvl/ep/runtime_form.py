"""The runtime form of a deployable model: what ``onnx_mrvl.InferenceSession`` hands to onnxruntime.

The saved model keeps one ``mrvl::Subgraph_<i>x<o>`` node per region. At load time each becomes

    [inputs packed]  ->  mrvl::SubgraphRun_<i'>x<o'>  ->  guard Reshape(s)  ->  [outputs unpacked]

- up to ``MAX_ARITY`` (16) inputs pass as they are; more are packed into one float vector: first
  the dimensions of every input (``Shape`` -> ``Cast``), then each input flattened (``Reshape [-1]``
  -> ``Concat``). The kernel splits it by the shapes the binary was compiled for and checks the
  dimensions exactly;
- up to ``MAX_ARITY`` outputs each go through a ``Reshape`` to their compiled shape; more come back
  as one vector, ``Reshape [total]`` -> ``Split`` -> ``Reshape`` to each compiled shape.
The first ``Reshape`` after the kernel is the *guard* (``failures.py``): a failed region hands back
``[0, token]`` and the guard makes onnxruntime fail the run. So any number of region inputs and
outputs runs through custom ops of fixed arity (onnxruntime-extensions Python ops have one, and
read their op list once per process), and the big ``binary`` attribute of an embedded model is
not copied into every kernel call. Packing costs copies, so only arities above 16 use it.
"""
from __future__ import annotations

import os
from typing import Dict, List

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import ArtifactError, UsageError
from ..provenance import decode_origin
from .failures import GUARD_SUFFIX

DOMAIN = "mrvl"
RUN_OP = "SubgraphRun"
SUBGRAPH_PREFIX = "Subgraph_"
MAX_ARITY = int(os.environ.get("ONNX_MRVL_MAX_ARITY", "16"))


def run_op_type(num_inputs: int, num_outputs: int) -> str:
    return f"{RUN_OP}_{num_inputs}x{num_outputs}"


def is_subgraph(node: onnx.NodeProto) -> bool:
    return node.domain == DOMAIN and node.op_type.startswith(SUBGRAPH_PREFIX)


def _default_opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)


def runtime_model(model: onnx.ModelProto, shapes: Dict[str, tuple], fp16_overflow: str = "raise") -> onnx.ModelProto:
    """A copy of ``model`` in runtime form. ``shapes``: sha256 -> (input shapes, output shapes) of
    each region's loaded binary; ``fp16_overflow``: "raise" (a region whose fp16 values overflow
    fails the run) or "inf" (the infs flow on, as on the device, with a logged warning)."""
    if fp16_overflow not in ("raise", "inf"):
        raise UsageError(f"fp16_overflow={fp16_overflow!r}: expected 'raise' or 'inf'",
                         hint="'raise' fails a run whose fp16 values overflow; 'inf' lets the infs flow on")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    _rewrite(out.graph, shapes, _default_opset(out), "", int(fp16_overflow == "raise"))
    keep = [f for f in out.functions if not (f.domain == DOMAIN and f.name.startswith(SUBGRAPH_PREFIX))]
    del out.functions[:]
    out.functions.extend(keep)
    return out


def _rewrite(g: onnx.GraphProto, shapes: Dict[str, tuple], opset: int, tag: str, raise_overflow: int) -> None:
    """Region nodes of ``g`` and of every control-flow body in it (recursively) in runtime form."""
    nodes: List[onnx.NodeProto] = []
    inits: List[onnx.TensorProto] = []
    for k, node in enumerate(g.node):
        for a in node.attribute:   # If/Loop/Scan bodies may hold regions too (bodies.py)
            if a.type == onnx.AttributeProto.GRAPH:
                _rewrite(a.g, shapes, opset, f"{tag}{k}_{a.name}_", raise_overflow)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for j, sub in enumerate(a.graphs):
                    _rewrite(sub, shapes, opset, f"{tag}{k}_{a.name}{j}_", raise_overflow)
        if not is_subgraph(node):
            nodes.append(node)
            continue
        attrs = {a.name: a for a in node.attribute}
        region = attrs["region"].s.decode() if "region" in attrs else node.name
        sha = attrs["sha256"].s.decode() if "sha256" in attrs else ""
        in_shapes, out_shapes = shapes[sha]
        if len(in_shapes) != len(node.input) or len(out_shapes) != len(node.output):
            origin = decode_origin(attrs["origin"].s) if "origin" in attrs else []
            raise ArtifactError(f"region '{region}': the node has {len(node.input)} inputs and {len(node.output)} "
                                f"outputs, its binary {len(in_shapes)} and {len(out_shapes)}", node=region,
                                origin=origin, hint="re-run onnx-mrvl convert")
        nm = node.name or region   # unique: a region called per hardware batch has one node per call
        p = f"mrvl_rt{tag}{k}"
        packed_in = len(node.input) > MAX_ARITY
        packed_out = len(node.output) > MAX_ARITY
        xs = list(node.input)
        if packed_in:
            minus1 = _const(inits, f"{p}/minus1", [-1])
            dims, flats = [], []
            for j, name in enumerate(node.input):
                dims.append(f"{p}/shape{j}")
                flats.append(f"{p}/flat{j}")
                nodes.append(helper.make_node("Shape", [name], [dims[-1]], name=f"{nm}/mrvl_pack/shape{j}"))
                nodes.append(helper.make_node("Reshape", [name, minus1], [flats[-1]],
                                              name=f"{nm}/mrvl_pack/flat{j}"))
            nodes.append(helper.make_node("Concat", dims, [f"{p}/dims"], axis=0, name=f"{nm}/mrvl_pack/dims"))
            nodes.append(helper.make_node("Cast", [f"{p}/dims"], [f"{p}/dimsf"], to=onnx.TensorProto.FLOAT,
                                          name=f"{nm}/mrvl_pack/cast"))
            xs = [f"{p}/packed"]
            nodes.append(helper.make_node("Concat", [f"{p}/dimsf"] + flats, xs, axis=0,
                                          name=f"{nm}/mrvl_pack/concat"))
        raws = [f"{p}/raw{j}" for j in range(1 if packed_out else len(node.output))]
        nodes.append(helper.make_node(run_op_type(len(xs), len(raws)), xs, raws, name=nm, domain=DOMAIN,
                                      region=region, sha256=sha, packed_inputs=int(packed_in),
                                      packed_outputs=int(packed_out), raise_overflow=raise_overflow))
        guard = f"{nm}{GUARD_SUFFIX}"
        if not packed_out:
            for j, (raw, name) in enumerate(zip(raws, node.output)):
                shape = _const(inits, f"{p}/shape_out{j}", list(out_shapes[j]))
                nodes.append(helper.make_node("Reshape", [raw, shape], [name], name=f"{guard}{j}"))
        else:
            raw = raws[0]
            sizes = [int(np.prod(s, dtype=np.int64)) for s in out_shapes]
            total = _const(inits, f"{p}/total", [sum(sizes)])
            nodes.append(helper.make_node("Reshape", [raw, total], [f"{p}/flat_out"], name=guard))
            parts = [f"{p}/part{j}" for j in range(len(sizes))]
            if opset >= 13:
                nodes.append(helper.make_node("Split", [f"{p}/flat_out", _const(inits, f"{p}/sizes", sizes)],
                                              parts, axis=0, name=f"{nm}/mrvl_unpack/split"))
            else:
                nodes.append(helper.make_node("Split", [f"{p}/flat_out"], parts, axis=0, split=sizes,
                                              name=f"{nm}/mrvl_unpack/split"))
            for j, (part, name) in enumerate(zip(parts, node.output)):
                shape = _const(inits, f"{p}/shape_out{j}", list(out_shapes[j]))
                nodes.append(helper.make_node("Reshape", [part, shape], [name], name=f"{nm}/mrvl_unpack/{j}"))
    del g.node[:]
    g.node.extend(nodes)
    g.initializer.extend(inits)


def _const(inits: List[onnx.TensorProto], name: str, values) -> str:
    inits.append(numpy_helper.from_array(np.asarray(values, dtype=np.int64), name))
    return name
