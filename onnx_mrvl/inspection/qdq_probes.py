"""Per-layer values of a QDQ model as onnxruntime really computes them.

``runner.run_all`` makes every node output a graph output. On a QDQ model that changes what
onnxruntime executes: a ``DQ -> op -> Q`` group one of whose tensors is a graph output -- the
QuantizeLinear output included (measured, docs/quantize.md "compare on QDQ models") -- is not fused
(no QLinearConv / QLinearSoftmax / QLinearAdd), and the x86 rewrite of int8 Q -> DQ pairs into
uint8 (QDQS8ToU8) skips it, so the float path's values would stand for the int8 ones. Instead
onnxruntime optimizes the unmodified model (level ALL, CPU provider, ``optimized_model_filepath``),
and that optimized graph -- its plan -- runs again with optimizations off and every tensor
visible: nothing is left to fuse, so exposing changes nothing, and the model outputs must equal the
unmodified session's bit for bit (else ``ModelError``). Each QuantizeLinear output of the model
is found in the plan by name, or as the tensor the plan quantizes with the same scale (a QLinear
kernel's output, a uint8 tensor of QDQS8ToU8: codes shifted by the zero-point change); a Q the plan
no longer computes is listed with its reason.
"""
from __future__ import annotations

import os
import tempfile
from typing import Dict, List, Mapping, Optional, Tuple

import numpy as np
import onnx

from .. import file_weights
from ..errors import ModelError
from .. import ort_plan
from .qdq_codes import code_stats, codes, codes_text, const_value, dequantize, quant_params

NOT_IN_PLAN = "onnxruntime's plan does not compute it (removed by its optimizer)"
AMBIGUOUS = "several tensors of onnxruntime's plan are quantized with its scale"


def is_qdq(model: onnx.ModelProto) -> bool:
    """A model with activation quantization: a QuantizeLinear whose input is not a constant."""
    consts = {t.name for t in model.graph.initializer} | {
        o for n in model.graph.node if n.op_type == "Constant" for o in n.output}
    return any(n.op_type == "QuantizeLinear" and n.input and n.input[0] not in consts for n in model.graph.node)


def optimized(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnxruntime's optimized graph of ``model`` (a default session's: level ALL, CPU provider)."""
    import onnxruntime as ort
    with tempfile.TemporaryDirectory(prefix="mrvl_qdq_plan_") as tmp:
        path = os.path.join(tmp, "optimized.onnx")
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.optimized_model_filepath = path
        so.log_severity_level = 4
        try:
            ort_plan.session(file_weights.serialized(model), so)
            return contrib_axis_qdq(onnx.load(path))
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises several types
            raise ModelError(f"onnxruntime cannot optimize model {model.graph.name!r}: {exc}",
                             hint="check the model with onnx.checker") from None


def contrib_axis_qdq(plan: onnx.ModelProto) -> onnx.ModelProto:
    """``plan`` with every default-domain QuantizeLinear / DequantizeLinear that has an ``axis``
    moved to com.microsoft when the model's opset is below 13. onnxruntime's quantizer writes
    per-channel weight Q / DQ with ``axis`` into opset 10-12 models (paddle2onnx / tf2onnx exports
    at opset 11 / 12) and onnxruntime runs them, but the plan it saves is refused on reload
    ("Unrecognized attribute: axis"); com.microsoft's QuantizeLinear / DequantizeLinear are the same
    per-axis functions with ``axis`` in every version."""
    opset = next((o.version for o in plan.opset_import if o.domain in ("", "ai.onnx")), 13)
    if opset >= 13:
        return plan
    for n in plan.graph.node:
        if n.domain in ("", "ai.onnx") and n.op_type in ("QuantizeLinear", "DequantizeLinear") and \
                any(a.name == "axis" for a in n.attribute):
            n.domain = "com.microsoft"
    if not any(o.domain == "com.microsoft" for o in plan.opset_import):
        plan.opset_import.append(onnx.helper.make_opsetid("com.microsoft", 1))
    return plan


def _run(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], optimize: bool) -> Dict[str, np.ndarray]:
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort_plan.session(file_weights.serialized(model), so)
    wanted = {i.name for i in sess.get_inputs()}
    missing = sorted(wanted - set(feeds))
    if missing:
        raise ModelError(f"model {model.graph.name!r} needs input(s) {missing} that were not given",
                         hint="pass them in the --inputs file")
    names = [o.name for o in sess.get_outputs()]
    vals = sess.run(names, {k: v for k, v in feeds.items() if k in wanted})
    out = {k: np.asarray(v) for k, v in feeds.items() if k in wanted}
    out.update({k: np.asarray(v) for k, v in zip(names, vals)})
    return out


def run_plan(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]
             ) -> Tuple[Dict[str, np.ndarray], onnx.ModelProto]:
    """(every tensor of onnxruntime's plan of ``model`` after one run, the plan). The model outputs
    are the unmodified session's; the plan's run must give them bit for bit."""
    from .runner import expose_all
    plain = _run(model, feeds, True)
    plan = optimized(model)
    values = _run(expose_all(plan), feeds, False)
    for o in model.graph.output:
        v = plain[o.name]
        if not np.array_equal(v, values.get(o.name), equal_nan=v.dtype.kind == "f"):
            raise ModelError(f"onnxruntime's optimized plan of {model.graph.name!r}, run again with every "
                             f"tensor visible, gives another {o.name!r}",
                             hint="compare cannot read this model's layers faithfully; report it")
    values.update(plain)
    return values, plan


def _scale_of(plan: onnx.ModelProto) -> Dict[str, List[Tuple[str, str]]]:
    """scale name -> [(tensor, zero point name)]: a tensor read by a DQ or a QLinear kernel as the
    (x, x_scale, x_zero_point) triple of its inputs (x_scale: a float initializer; the caller checks
    that x holds integer codes)."""
    floats = {t.name for t in plan.graph.initializer
              if t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)}
    out: Dict[str, List[Tuple[str, str]]] = {}
    seen = set()
    for n in plan.graph.node:
        if n.op_type != "DequantizeLinear" and not n.op_type.startswith("QLinear"):
            continue
        ins = list(n.input)
        for k in range(len(ins) - 1):
            x, sc = ins[k], ins[k + 1]
            if not x or x in floats or sc not in floats or (x, sc) in seen:
                continue
            seen.add((x, sc))
            out.setdefault(sc, []).append((x, ins[k + 2] if k + 2 < len(ins) else ""))
    return out


def plan_codes(model: onnx.ModelProto, plan: onnx.ModelProto, values: Mapping[str, np.ndarray]
               ) -> Tuple[Dict[str, np.ndarray], Dict[str, str]]:
    """({Q output of ``model``: its codes in onnxruntime's plan}, {Q output: why it has none})."""
    by_scale = _scale_of(plan)
    values = channels_first(plan, values)
    inits = {t.name: t for t in plan.graph.initializer}
    plan_q = {(n.input[0], n.input[1]): (n.output[0], n.input[2] if len(n.input) > 2 else "")
              for n in plan.graph.node if n.op_type == "QuantizeLinear" and len(n.input) > 1}
    q_of: Dict[str, List[Tuple[str, str, str]]] = {}   # input -> [(output, zero point, scale)]
    for n in plan.graph.node:
        if n.op_type == "QuantizeLinear" and len(n.input) > 1:
            q_of.setdefault(n.input[0], []).append((n.output[0], n.input[2] if len(n.input) > 2 else "", n.input[1]))
    shapes = _static_shapes(model)
    producer = {o: p for p in plan.graph.node for o in p.output}
    readers: Dict[str, List[onnx.NodeProto]] = {}
    for m in model.graph.node:
        for i in m.input:
            readers.setdefault(i, []).append(m)
    found: Dict[str, np.ndarray] = {}
    refused: Dict[str, str] = {}
    outs = {o.name for o in model.graph.output}
    for n in model.graph.node:
        if n.op_type != "QuantizeLinear" or not n.output or not n.output[0] or n.output[0] in outs:
            continue
        t = n.output[0]
        if t in values:
            found[t] = values[t]
            continue
        same_q = plan_q.get((n.input[0], n.input[1] if len(n.input) > 1 else ""))
        if same_q is None and len(n.input) > 1:   # its scale renamed: onnxruntime's ConstantSharing
            mine = const_value(model, n.input[1])           # keeps one of several equal scalar initializers
            same = [(o, zp) for o, zp, sc in q_of.get(n.input[0], [])
                    if mine is not None and _init(inits, sc) is not None and np.array_equal(_init(inits, sc), mine)]
            same_q = same[0] if len(same) == 1 else None
        end, chain = (t, []) if same_q is not None and same_q[0] in values else _moves_after(model, n, readers, shapes)
        cands = [same_q] if same_q is not None and same_q[0] in values else [
            (y, zp) for x, zp in by_scale.get(n.input[1] if len(n.input) > 1 else "", [])
            for y in [_before_moves(x, producer, values, shapes.get(end))]
            if y in values and values[y].dtype.kind in "iu" and (end not in shapes or tuple(values[y].shape) == shapes[end])]
        if len({x for x, _ in cands}) > 1 and all(   # a channels-last tensor and its transposed copy
                np.array_equal(values[x], values[cands[0][0]]) and zp == cands[0][1] for x, zp in cands):
            cands = cands[:1]
        if len({x for x, _ in cands}) != 1:
            refused[t] = AMBIGUOUS if cands else NOT_IN_PLAN
            continue
        x, zp_name = cands[0]
        got = _undo_moves(values[x], chain, shapes)
        if got is None:
            refused[t] = "its codes reach onnxruntime's plan only through moves whose shapes are not static"
            continue
        zp_plan = _init(inits, zp_name)
        zp_mine = const_value(model, n.input[2]) if len(n.input) > 2 and n.input[2] else None
        shift = (0 if zp_plan is None else zp_plan.astype(np.int64)) - \
            (0 if zp_mine is None else zp_mine.astype(np.int64))
        if np.size(shift) != 1:
            refused[t] = "per-channel zero points of a renamed tensor"
            continue
        dtype = zp_mine.dtype if zp_mine is not None else np.dtype(np.uint8)
        found[t] = (got.astype(np.int64) - int(np.ravel(shift)[0])).astype(dtype)
    return found, refused


MOVES = ("Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity")   # keep the codes as they are

# onnxruntime's NHWC kernels of a QDQ plan, and the ops its layout transformer lets a channels-last
# tensor flow through unchanged (elementwise: the layout of the input is the layout of the output)
_FOLLOW = ("DequantizeLinear", "QuantizeLinear", "QLinearAdd", "QLinearMul", "QLinearLeakyRelu",
           "QLinearSigmoid", "Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSigmoid", "Add", "Mul", "Resize")


def channels_first(plan: onnx.ModelProto, values: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """``values`` with the plan's channels-last 4-D tensors as NCHW. onnxruntime runs quantized
    convolutions, pools and resizes channels-last (``QLinearConv(channels_last=1)``, ``NhwcMaxPool``,
    an NHWC ``Resize``): such a tensor [N, H, W, C] with C = H = W has the model's NCHW shape and would
    pass for it. A tensor is channels-last when a node with ``channels_last=1`` or an ``Nhwc*`` op
    writes it, or an elementwise op / Q / DQ / Resize reads one (a Transpose ends it)."""
    last = set()
    for n in plan.graph.node:
        if any(a.name == "channels_last" and a.i for a in n.attribute) or n.op_type.startswith("Nhwc"):
            last.update(o for o in n.output if o)
        elif n.op_type in _FOLLOW and n.input and n.input[0] in last:
            last.update(o for o in n.output if o)
    out = dict(values)
    for t in last:
        v = values.get(t)
        if v is not None and np.ndim(v) == 4:
            out[t] = np.ascontiguousarray(np.transpose(v, (0, 3, 1, 2)))
    return out


def _before_moves(x: str, producer: Mapping[str, onnx.NodeProto], values: Mapping[str, np.ndarray],
                  shape: Optional[Tuple[int, ...]]) -> str:
    """``x``, or when its shape is not ``shape``, the tensor a chain of data-movement ops of the plan
    made it from (onnxruntime moves int8 codes through Transpose / Reshape, dropping their Q / DQ)."""
    for _ in range(8):
        if shape is None or x not in values or tuple(values[x].shape) == shape:
            return x
        p = producer.get(x)
        if p is None or p.op_type not in MOVES or not p.input:
            return x
        x = p.input[0]
    return x


def _same_params(model: onnx.ModelProto, a: onnx.NodeProto, b: onnx.NodeProto) -> bool:
    """Whether Q / DQ nodes ``a`` and ``b`` have equal scales and zero points (by name or by value)."""
    for k in (1, 2):
        x = a.input[k] if len(a.input) > k else ""
        y = b.input[k] if len(b.input) > k else ""
        if x == y:
            continue
        vx, vy = (const_value(model, x) if x else None), (const_value(model, y) if y else None)
        if vx is None or vy is None or vx.dtype != vy.dtype or not np.array_equal(vx, vy):
            return False
    return True


def _moves_after(model: onnx.ModelProto, q: onnx.NodeProto, readers: Mapping[str, List[onnx.NodeProto]],
                 shapes: Mapping[str, Tuple[int, ...]]) -> Tuple[str, List[onnx.NodeProto]]:
    """(end, moves): the model's chain ``Q -> DQ -> move -> Q -> DQ -> move -> ... -> Q(end)`` from
    ``q``, every Q with ``q``'s scale and zero point (onnxruntime drops those pairs and moves the codes
    themselves, so the plan holds only the codes of ``end``). The codes of ``q`` are the codes of
    ``end`` with the moves undone: a square tensor and its transpose have one shape, so the plan's
    tensor is found by ``end``'s shape and mapped back, not by ``q``'s shape."""
    t, chain = q.output[0], []
    for _ in range(8):
        dqs = readers.get(t, [])
        if len(dqs) != 1 or dqs[0].op_type != "DequantizeLinear" or not _same_params(model, q, dqs[0]):
            break
        mv = readers.get(dqs[0].output[0], [])
        if len(mv) != 1 or mv[0].op_type not in MOVES or mv[0].op_type == "Identity":
            break
        nq = readers.get(mv[0].output[0], [])
        if len(nq) != 1 or nq[0].op_type != "QuantizeLinear" or not _same_params(model, q, nq[0]):
            break
        chain.append(mv[0])
        t = nq[0].output[0]
    return t, chain


def _undo_moves(x: np.ndarray, chain: List[onnx.NodeProto], shapes: Mapping[str, Tuple[int, ...]]
                ) -> Optional[np.ndarray]:
    """``x`` (the codes after the moves of ``chain``) before them; None without static shapes."""
    for mv in reversed(chain):
        if mv.op_type == "Transpose":
            perm = next((list(a.ints) for a in mv.attribute if a.name == "perm"), None) or list(range(x.ndim))[::-1]
            if len(perm) != x.ndim:
                return None
            x = x.transpose(np.argsort(perm))
        else:
            shape = shapes.get(mv.input[0])
            if shape is None or int(np.prod(shape)) != x.size:
                return None
            x = x.reshape(shape)
    return x


def _static_shapes(model: onnx.ModelProto) -> Dict[str, Tuple[int, ...]]:
    """tensor -> static shape, from onnx's shape inference (where every dimension is known)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(file_weights.inline(model))
    except Exception:  # noqa: BLE001 - inference is a help here, not a requirement
        return {}
    out = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if vi.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
            out[vi.name] = tuple(int(d.dim_value) for d in dims)
    return out


def _init(inits, name: str) -> Optional[np.ndarray]:
    from onnx import numpy_helper
    return numpy_helper.to_array(inits[name]) if name in inits else None


class QdqReference:
    """compare's reference values of a QDQ model A: ``values`` (inputs, unmodified outputs, probe
    codes, and each DQ of a probe as the exact dequantization of its codes) and per tensor the
    codes of a compared value (``stats``)."""

    def __init__(self, model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]):
        self.values, plan = run_plan(model, feeds)
        found, self.refused = plan_codes(model, plan, self.values)
        self.values.update(found)
        self.params: Dict[str, Tuple[str, object]] = {}     # tensor -> (probe, quant params)
        q_nodes = {n.output[0]: n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.output}
        for t in found:
            p = quant_params(model, q_nodes[t], self.values[t].ndim)
            if p is not None:
                self.params[t] = (t, p)
        for n in model.graph.node:
            if n.op_type != "DequantizeLinear" or not n.input or n.input[0] not in found or not n.output[0]:
                continue
            p = quant_params(model, n, self.values[n.input[0]].ndim)
            if p is None:
                continue
            self.params[n.output[0]] = (n.input[0], p)
            if n.output[0] not in self.values:
                self.values[n.output[0]] = dequantize(self.values[n.input[0]], p)
        self.probes = sorted(found)

    def stats(self, tensor: str, got: np.ndarray) -> Optional[Dict[str, object]]:
        """Code statistics of ``got`` (codes, or a dequantized float) against the probe's codes."""
        if tensor not in self.params:
            return None
        probe, p = self.params[tensor]
        ref = self.values[probe].astype(np.int64)
        g = np.asarray(got)
        mine = g.astype(np.int64) if g.dtype.kind in "iu" else codes(g, p)
        if mine.shape != ref.shape:
            return None
        return {"probe": probe, **code_stats(ref, mine)}

    def b_exposed(self, mb: onnx.ModelProto, region_nodes) -> List[str]:
        """What to read of B: the inputs and outputs of its accelerator regions (exposing B's CPU
        QDQ groups would unfuse them as well)."""
        out: List[str] = []
        for r in region_nodes:
            out += [t for t in list(r.input) + list(r.output) if t]
        return out

    def to_dict(self) -> Dict[str, object]:
        return {"probes": len(self.probes), "source": "onnxruntime's optimized plan, run with every tensor visible",
                "rule": "codes: >= 99% identical, the rest within one quantum",
                "not_probed": [{"tensor": t, "reason": r} for t, r in self.refused.items()]}


def summary_text(ref: QdqReference, first) -> str:
    """The QDQ lines of compare's text output."""
    out = [f"QDQ reference: {len(ref.probes)} QuantizeLinear output(s) read from onnxruntime's optimized "
           f"plan (int8 codes; model outputs from its unmodified run)"]
    for t, r in ref.refused.items():
        out.append(f"  not probed: {t}: {r}")
    out.append(f"first layer whose codes differ: {first.tensor} (node {first.b_node}; "
               f"{codes_text(first.codes)})" if first is not None else
               "every probed layer's codes are identical to onnxruntime's")
    return "\n".join(out)
