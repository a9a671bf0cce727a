"""The fp16 baseline: the ORIGINAL model run in onnxruntime under the simulator's numeric model.

Every float32 tensor is stored in fp16 and every op computes in fp32 (docs/simulator.md, "Numeric
model"), by rewriting a copy of the model:

* after each node, each float32 output ``t`` becomes ``Cast(fp16) -> Cast(fp32)`` of the node's
  own result (renamed ``t__fp32``), so ``t`` keeps its name and holds fp16 values;
* each float32 graph input is rounded the same way before any node reads it (the simulator rounds
  boundary inputs on entry);
* constants (initializers, ``Constant`` nodes) are rounded where the simulator stores them in
  fp16 (program.md / emit: kernels and element-wise operands) and kept float32 where it keeps
  them float32 (per-channel vectors: bias, batch-norm scale/shift, PReLU slope) -- by the role of
  the consumer's input, see ``FP16_CONSTANT_INPUTS``. Other constants (Clip bounds, Resize scales,
  Pad values...) are layer parameters, float32 as well.

onnxruntime's Cast rounds to nearest even, as the simulator (checked on random bit patterns, and
every run checks that the rounded tensors really hold fp16 values: ``MrvlError`` otherwise, e.g.
if an optimizer removed a Cast pair). Nodes inside If/Loop/Scan bodies are not rewritten.
"""
from __future__ import annotations

import copy
import logging
from typing import Dict, Iterable, Mapping, Optional, Set

import numpy as np
import onnx
from onnx import TensorProto, helper

from ..errors import MrvlError
from .runner import make_session

log = logging.getLogger(__name__)

FLOAT = TensorProto.FLOAT
# (op_type, input index) of constants the simulator stores in fp16; "*" = every input.
FP16_CONSTANT_INPUTS: Dict[str, Iterable] = {
    "Conv": (1,), "ConvTranspose": (1,), "Gemm": (0, 1), "MatMul": (0, 1),     # kernels
    "Add": "*", "Sub": "*", "Mul": "*", "Div": "*", "Sum": "*", "Concat": "*",  # element-wise / concat operands
}
SUFFIX_OUT, SUFFIX_IN, SUFFIX_W = "__fp32", "__fp16in", "__fp16w"


def _rounds_constant(node: onnx.NodeProto, index: int) -> bool:
    roles = FP16_CONSTANT_INPUTS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
    return roles is not None and (roles == "*" or index in roles)


def _round_pair(src: str, dst: str, name: str):
    mid = f"{dst}__fp16"
    return [helper.make_node("Cast", [src], [mid], name=f"{name}/to_fp16", to=TensorProto.FLOAT16),
            helper.make_node("Cast", [mid], [dst], name=f"{name}/to_fp32", to=FLOAT)]


def _float_constants(model: onnx.ModelProto) -> Set[str]:
    out = {t.name for t in model.graph.initializer if t.data_type == FLOAT}
    for n in model.graph.node:
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
            for a in n.attribute:
                if a.name == "value" and a.t.data_type == FLOAT:
                    out.add(n.output[0])
                elif a.name in ("value_float", "value_floats"):
                    out.add(n.output[0])
    return out


def fp16_baseline_model(model: onnx.ModelProto, dtypes: Mapping[str, np.dtype]) -> onnx.ModelProto:
    """A copy of ``model`` whose float32 tensors hold fp16 values (see the module docstring).
    ``dtypes``: tensor name -> numpy dtype of every node output (a reference run's values)."""
    m = copy.deepcopy(model)
    g = m.graph
    consts = _float_constants(m)
    inits = {t.name for t in g.initializer}
    inputs = [vi.name for vi in g.input if vi.name not in inits
              and vi.type.tensor_type.elem_type == FLOAT]
    nodes = []
    renamed_in = {x: f"{x}{SUFFIX_IN}" for x in inputs}
    for x in inputs:
        nodes.extend(_round_pair(x, renamed_in[x], f"{x}/fp16_input"))
    weights: Dict[str, str] = {}
    for n in g.node:
        for k, i in enumerate(n.input):
            if i in renamed_in:
                n.input[k] = renamed_in[i]
            elif i in consts and _rounds_constant(n, k):
                if i not in weights:
                    weights[i] = f"{i}{SUFFIX_W}"
                    nodes.extend(_round_pair(i, weights[i], f"{i}/fp16_weight"))
                n.input[k] = weights[i]
        nodes.append(n)
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
            continue                     # a constant: rounded by the role of its readers
        for k, t in enumerate(n.output):
            if t and np.dtype(dtypes.get(t, np.int8)) == np.float32:
                n.output[k] = f"{t}{SUFFIX_OUT}"
                nodes.extend(_round_pair(n.output[k], t, f"{t}/fp16_output"))
    # Cast pairs of constants come before their first reader: nodes stay topologically sorted
    del g.node[:]
    g.node.extend(nodes)
    if m.ir_version > 13 or m.ir_version == 0:
        m.ir_version = 10
    return m


def rounded_tensors(model: onnx.ModelProto, dtypes: Mapping[str, np.dtype]) -> Set[str]:
    """The tensors of ``model`` that the baseline stores in fp16: float32 node outputs."""
    return {t for n in model.graph.node if not (n.op_type == "Constant" and n.domain in ("", "ai.onnx"))
            for t in n.output if t and np.dtype(dtypes.get(t, np.int8)) == np.float32}


def run_fp16_baseline(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray],
                      dtypes: Optional[Mapping[str, np.dtype]] = None) -> Dict[str, np.ndarray]:
    """Every node output of ``model`` (by its original name) under the fp16 baseline.
    ``dtypes`` defaults to those of a plain onnxruntime run of ``model`` on ``feeds``."""
    if dtypes is None:
        from .runner import run_all
        dtypes = {k: v.dtype for k, v in run_all(model, feeds).items()}
    bm = fp16_baseline_model(model, dtypes)
    names = [t for n in model.graph.node for t in n.output if t]
    del bm.graph.output[:]
    bm.graph.output.extend(onnx.ValueInfoProto(name=t) for t in dict.fromkeys(names))
    sess = make_session(bm, None)
    wanted = {i.name for i in sess.get_inputs()}
    values = sess.run(list(dict.fromkeys(names)), {k: v for k, v in feeds.items() if k in wanted})
    out = {k: np.asarray(v) for k, v in zip(dict.fromkeys(names), values)}
    _check_rounded(out, rounded_tensors(model, dtypes))
    log.info("fp16 baseline: %d tensors", len(out))
    return out


def _check_rounded(values: Mapping[str, np.ndarray], names: Iterable[str]) -> None:
    for t in names:
        v = values.get(t)
        if v is None or v.dtype != np.float32:
            raise MrvlError(f"fp16 baseline: tensor {t!r} is {None if v is None else v.dtype}, expected float32",
                            hint="report this model (the baseline rewrite lost a tensor)")
        with np.errstate(over="ignore", invalid="ignore"):
            back = v.astype(np.float16).astype(np.float32)
        if not np.array_equal(back, v, equal_nan=True):
            raise MrvlError(f"fp16 baseline: tensor {t!r} holds values that are not fp16 (onnxruntime "
                            "removed a Cast pair?)", hint="report this model and the onnxruntime version")


def judge_against_baseline(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray],
                           ref: Mapping[str, np.ndarray], rows, ours_values: Mapping[str, np.ndarray],
                           atol: float, rtol: float):
    """Run the fp16 baseline of ``model`` (the reference A) and judge compare's ``rows`` against it
    (``baseline_report.judge``); ``ref``: A's fp32 values of every tensor."""
    from .baseline_report import judge
    from .discontinuous import Discontinuities

    dtypes = {k: v.dtype for k, v in ref.items()}
    base = run_fp16_baseline(model, feeds, dtypes)
    return judge(rows, ref, base, ours_values, Discontinuities(model, dtypes), atol, rtol)
