"""Helpers to build small models and compare a model with its legalized form in onnxruntime."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .. import provenance
from ..feeds import random_feeds


def make_model(nodes: Sequence[onnx.NodeProto], inputs: Sequence[Tuple[str, Sequence]],
               outputs: Sequence[str], inits: Optional[Dict[str, np.ndarray]] = None,
               opset: int = 13, ir_version: int = 8, elem=TensorProto.FLOAT) -> onnx.ModelProto:
    """A model from nodes, (input name, shape) pairs, output names and numpy initializers."""
    graph = helper.make_graph(
        list(nodes), "t",
        [helper.make_tensor_value_info(n, elem, list(s)) for n, s in inputs],
        [helper.make_tensor_value_info(n, elem, None) for n in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    return model


def feeds_for(model: onnx.ModelProto, seed: int = 0,
              shapes: Optional[Dict[str, Sequence[int]]] = None) -> Dict[str, np.ndarray]:
    return random_feeds(model, seed, shapes)


def run(model: onnx.ModelProto, feeds: Dict[str, np.ndarray]) -> List[np.ndarray]:
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    return sess.run([o.name for o in model.graph.output], feeds)


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    scale = float(np.max(np.abs(a))) if a.size else 0.0
    return float(np.max(np.abs(a.astype(np.float64) - b))) / (scale or 1.0) if a.size else 0.0


def compare(model: onnx.ModelProto, legal: onnx.ModelProto, seed: int = 0,
            shapes: Optional[Dict[str, Sequence[int]]] = None) -> float:
    """Largest relative error over the outputs (relative to max |reference|)."""
    feeds = feeds_for(model, seed, shapes)
    ref, got = run(model, feeds), run(legal, feeds)
    assert [o.name for o in model.graph.output] == [o.name for o in legal.graph.output]
    errs = []
    for a, b in zip(ref, got):
        assert a.shape == b.shape, (a.shape, b.shape)
        errs.append(rel_err(a, b))
    return max(errs) if errs else 0.0


def op_types(model: onnx.ModelProto) -> List[str]:
    return [n.op_type for n in model.graph.node]


def created_nodes_have_origin(model: onnx.ModelProto, original: onnx.ModelProto) -> bool:
    """Every node not in the original (by name and op) carries an mrvl.origin record."""
    from .prepare import name_nodes
    named = onnx.GraphProto()
    named.node.extend(original.graph.node)
    name_nodes(named)
    before = {(n.name, n.op_type) for n in named.node}
    for n in model.graph.node:
        if (n.name, n.op_type) in before:
            continue
        if not any(p.key == provenance.ORIGIN_KEY for p in n.metadata_props):
            return False
    return True


def assert_static(model: onnx.ModelProto) -> None:
    """Every value_info and output has an element type and a fully static shape."""
    for vi in list(model.graph.value_info) + list(model.graph.output):
        t = vi.type.tensor_type
        assert t.elem_type, vi.name
        assert t.HasField("shape"), vi.name
        for d in t.shape.dim:
            assert d.HasField("dim_value") and d.dim_value >= 0, vi.name


def legalize_and_compare(model: onnx.ModelProto, target=None, *, input_shapes=None,
                         tol: float = 1e-5, seed: int = 0):
    """Legalize ``model`` and check the contract on it: the argument is untouched, the result
    passes onnx.checker, names are unique, created nodes carry provenance, shapes are static
    and the outputs match onnxruntime on the original within ``tol``. Returns (model, log)."""
    from . import legalize
    before = model.SerializeToString()
    result = legalize(model, target, input_shapes=input_shapes)
    out, log = result.model, result.log
    assert model.SerializeToString() == before, "legalize mutated its argument"
    onnx.checker.check_model(out, full_check=True)
    names = [n.name for n in out.graph.node]
    assert all(names) and len(set(names)) == len(names), names
    assert created_nodes_have_origin(out, model)
    assert out.ir_version <= 10
    assert_static(out)
    err = compare(model, out, seed, shapes=input_shapes)
    assert err <= tol, f"relative error {err} > {tol}"
    return out, log
