"""Which QDQ node groups onnxruntime runs in float (docs/fusion.md "int8").

onnxruntime's QDQ transformer fuses ``DQ -> op -> Q`` into a QLinear* kernel only where its
selectors accept the group (for AveragePool it depends on the readers around it, not on the group
alone), and runs the rest as float ops between DequantizeLinear and QuantizeLinear; the two round
differently. ``ort_float_nodes`` asks onnxruntime itself: it optimizes the model as a default
session does (level ALL, CPU provider) and returns the names of the nodes of ``op_type`` that are
still that float op. Cached for the last model asked about."""
from __future__ import annotations

import json
import os
import tempfile
from typing import Optional, Dict, FrozenSet, List

import onnx
from . import file_weights

KEY = "onnx_mrvl.ort_float_nodes"   # metadata_props: {op type: [names]} of the model before legalize
# the op types whose int8 layers depend on it: Conv, MatMul, AveragePool, Softmax, ReduceMean (requant), the Lookup groups' ops
OP_TYPES = ("AveragePool", "Conv", "MatMul", "Sigmoid", "Tanh", "Relu", "LeakyRelu", "Clip", "HardSigmoid", "HardSwish",
            "Elu", "Selu", "Softplus", "Softsign", "Exp", "Neg", "Abs", "Erf", "Mul", "Add", "Sum", "Sub", "Div",
            "PRelu", "BatchNormalization", "Pow", "Softmax", "ReduceMean", "Gemm")
U8_ADDS = "QLinearAdd:uint8"   # the Add nodes of an int8 model onnxruntime runs as a uint8 QLinearAdd
QLINEAR_MULS = "QLinearMul"    # the Mul nodes onnxruntime fuses into a QLinearMul (any code type)
U8_MULS = "QLinearMul:uint8"   # those of an int8 model its S8 -> U8 rewrite runs on uint8 codes
U8_SOFTMAXES = "QLinearSoftmax:uint8"   # the Softmax nodes onnxruntime runs as a uint8 QLinearSoftmax
QLINEAR_WEIGHTED = ("QLinearConv", "QGemm", "QLinearMatMul")   # MLAS's integer GEMM kernels
EXACT_SUMS = "QLinear:exact"   # the Conv / Gemm / MatMul nodes its QLinear kernel sums on codes other than U8 x S8
U8S8_SUMS = "Integer:u8s8"     # the Conv / Gemm / MatMul nodes its integer kernels sum on U8 x S8 codes (any output)
# onnxruntime's integer GEMM kernels: (the weights' input, the activation zero point's input); MatMulIntegerToFloat
# is its DQ -> MatMul without an output Q (a QGemm without y_scale: DQ -> Gemm's); QAttention's projections
# (legalize contrib_qattention's MatMuls, matched by their origin: the node reads its weights itself)
INTEGER_WEIGHTED = {"QLinearConv": (3, 2), "QGemm": (3, 2), "QLinearMatMul": (3, 2), "MatMulIntegerToFloat": (1, 4),
                    "QAttention": (1, 6)}
MEAN_ROWS = "ReduceMean:rows"   # the float ReduceMean nodes whose plan reduces axes 2, 3 of NCHW (its KR path)
_LAST: List = [None, None]   # (the model last asked about, its plan): one fuse run at a time


def stamp(model: onnx.ModelProto) -> None:
    """Record (in ``metadata_props``) onnxruntime's float nodes of a QDQ model as it is given, so
    fuse, which sees the legalized graph (whose rewrites change onnxruntime's choices), asks about
    the model the user runs. Nothing for a model without QuantizeLinear."""
    if not any(n.op_type == "QuantizeLinear" for n in model.graph.node):
        return
    plan = {op: sorted(names) for op, names in _float_nodes_all(model).items()}
    for p in list(model.metadata_props):
        if p.key == KEY:
            model.metadata_props.remove(p)
    model.metadata_props.add(key=KEY, value=json.dumps(plan, sort_keys=True))


def ort_float_nodes(model: onnx.ModelProto, op_type: str) -> FrozenSet[str]:
    """Names of the ``op_type`` nodes onnxruntime runs as that float op (``OP_TYPES``)."""
    stamped = next((p.value for p in model.metadata_props if p.key == KEY), None)
    if stamped is not None:
        return frozenset(json.loads(stamped).get(op_type, []))
    if _LAST[0] is not model:
        _LAST[0], _LAST[1] = model, _float_nodes_all(model)
    return _LAST[1].get(op_type, frozenset())


FLOAT_GEMM_KEY = "onnx_mrvl.ort_float_gemm"   # node metadata: onnxruntime computes this Conv's sums as that float GEMM


def mark_float_gemm(node: onnx.NodeProto, kind: str) -> None:
    """Record on a Conv legalize wrote that onnxruntime computes its sums in float as ``kind``
    (``"conv_transpose"``: a phase of a QDQ ConvTranspose, which onnxruntime runs as its float
    ConvTranspose: an SGEMM with A transposed, then col2im)."""
    for p in node.metadata_props:
        if p.key == FLOAT_GEMM_KEY:
            p.value = kind
            return
    node.metadata_props.add(key=FLOAT_GEMM_KEY, value=kind)


def float_gemm_of(node: onnx.NodeProto) -> Optional[str]:
    """The mark ``mark_float_gemm`` left on ``node``, or None."""
    return next((p.value for p in node.metadata_props if p.key == FLOAT_GEMM_KEY), None)


INSTANCE_NORM_KEY = "onnx_mrvl.ort_instance_norm"   # node metadata: onnxruntime runs this layer norm as InstanceNormalization


def mark_instance_norm(node: onnx.NodeProto) -> None:
    """Record on the LayerNormalization legalize wrote for an InstanceNormalization that onnxruntime,
    running the model as given, computes it with its InstanceNorm kernel (sim/ort_reduce.py's
    ``instance_norm``: another fp32 order than its LayerNormalization)."""
    if not instance_norm(node):
        node.metadata_props.add(key=INSTANCE_NORM_KEY, value="1")


def instance_norm(node: onnx.NodeProto) -> bool:
    """Whether ``mark_instance_norm`` marked ``node``."""
    return any(p.key == INSTANCE_NORM_KEY for p in node.metadata_props)


STRIDED_MEAN_KEY = "onnx_mrvl.ort_strided_mean"   # node metadata: onnxruntime sums this mean over a strided axis


def mark_strided_mean(node: onnx.NodeProto) -> None:
    """Record on a ReduceMean legalize moved that onnxruntime, running the model as given, sums it
    over a strided axis (its RK path: an in-order fp32 sum; sim/ort_reduce.py), not over the last."""
    if strided_mean(node):
        return
    node.metadata_props.add(key=STRIDED_MEAN_KEY, value="1")


def strided_mean(node: onnx.NodeProto) -> bool:
    """Whether ``mark_strided_mean`` marked ``node``."""
    return any(p.key == STRIDED_MEAN_KEY for p in node.metadata_props)


def ort_u8_adds(model: onnx.ModelProto) -> FrozenSet[str]:
    """Names of the int8 QDQ Add nodes onnxruntime fuses into a QLinearAdd of uint8 codes: its x86
    rewrite (QDQS8ToU8Transformer) turns each int8 Q -> DQ pair whose Q has one reader into uint8
    (codes and zero point + 128); an Add all of whose three pairs were turned runs on those codes."""
    return ort_float_nodes(model, U8_ADDS)


def ort_u8_softmaxes(model: onnx.ModelProto) -> FrozenSet[str]:
    """Names of the QDQ Softmax nodes onnxruntime fuses into a QLinearSoftmax of uint8 codes (a U8
    model's, or an int8 model's whose two pairs its S8 -> U8 rewrite turned: zero points + 128)."""
    return ort_float_nodes(model, U8_SOFTMAXES)


def ort_qlinear_muls(model: onnx.ModelProto) -> Dict[str, FrozenSet[str]]:
    """{"qlinear": names, "qlinear_u8": names} of the QDQ Mul nodes onnxruntime fuses into a
    QLinearMul, the second those whose codes its S8 -> U8 rewrite turned to uint8 (an int8 model)."""
    return {"qlinear": ort_float_nodes(model, QLINEAR_MULS), "qlinear_u8": ort_float_nodes(model, U8_MULS)}


def ort_exact_sums(model: onnx.ModelProto) -> FrozenSet[str]:
    """Names of the QDQ Conv / Gemm / MatMul nodes onnxruntime fuses into QLinearConv / QGemm /
    QLinearMatMul on codes other than uint8 activations x int8 weights (int8 activations its S8 -> U8
    rewrite left, uint8 weights): MLAS's S8S8 / U8U8 kernels sum exactly on any CPU, where its U8S8
    kernel without VNNI clamps pairs to int16 (sim/mlas_u8s8.py). Found by the weights' codes the
    plan's node reads (the NHWC rewrite renames the node itself)."""
    return ort_float_nodes(model, EXACT_SUMS)


def ort_u8s8_sums(model: onnx.ModelProto) -> FrozenSet[str]:
    """Names of the QDQ Conv / Gemm / MatMul nodes onnxruntime sums on uint8 activations x int8
    weights in an integer kernel, whatever its output (QGemm without y_scale, MatMulIntegerToFloat:
    an int8-in layer's float output): the kernels whose pairs clamp to int16 without VNNI."""
    return ort_float_nodes(model, U8S8_SUMS)


def float_nodes_of(model: onnx.ModelProto) -> Dict[str, FrozenSet[str]]:
    """{op type: names} of the float nodes of ``model`` as it is (no stamp, no cache): for the small
    models fuse builds (lookup_table.py) to check they are run as the whole model runs them."""
    return _float_nodes_all(model)


def _float_nodes(model: onnx.ModelProto, op_type: str) -> FrozenSet[str]:
    return _float_nodes_all(model).get(op_type, frozenset())


def session(model_bytes: bytes, so):
    """onnxruntime's CPU session of ``model_bytes``; onnxruntime 1.2x's MatMulAddFusion fails on some
    QDQ graphs ("Attempt to replace the existing tensor": several MatMul + bias Add reading one 3-D DQ
    output), so a failure is retried without that fusion (the QDQ fusions do not depend on it)."""
    import onnxruntime as ort
    try:
        return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - onnxruntime raises several types; the retry raises its own
        return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"],
                                    disabled_optimizers=["MatMulAddFusion"])


def _float_nodes_all(model: onnx.ModelProto) -> Dict[str, FrozenSet[str]]:
    import onnxruntime as ort
    if not any(n.op_type in OP_TYPES or n.op_type in INTEGER_WEIGHTED for n in model.graph.node):
        return {}
    with tempfile.TemporaryDirectory(prefix="mrvl_ort_plan_") as tmp:
        path = os.path.join(tmp, "optimized.onnx")
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL   # a default session's
        so.optimized_model_filepath = path
        so.log_severity_level = 4
        m = onnx.ModelProto()
        m.CopyFrom(model)
        del m.graph.value_info[:]   # onnxruntime infers them; fuse's own may be partial
        try:
            session(file_weights.serialized(m), so)
            optimized = onnx.load(path)
        except Exception:   # noqa: BLE001 - onnxruntime cannot load it (1.32: an int8 Q without a zero
            # point before GlobalAveragePool): no host run to follow; its QLinear choices are assumed, and
            # the integer sums are the accelerator's exact ones (what the model's ONNX semantics compute)
            readers = frozenset(r for names in _weight_readers(model).values() for r in names)
            return {EXACT_SUMS: readers} if readers else {}
    names = {n.name for n in model.graph.node}
    by_output = {o: n.name for n in model.graph.node for o in n.output}
    found: Dict[str, set] = {}
    inits = {t.name: t.data_type for t in optimized.graph.initializer}
    weight_readers = _weight_readers(model)
    zp_of = {n.output[0]: n.input[2] for n in optimized.graph.node if n.op_type == "QuantizeLinear" and len(n.input) > 2}
    for n in optimized.graph.node:
        wi, zi = INTEGER_WEIGHTED.get(n.op_type, (len(n.input), 0))
        readers = weight_readers.get(n.input[wi]) if wi < len(n.input) else None
        if n.op_type == "QAttention" and n.name in names:
            readers = {n.name}
        if readers:
            a_zp = n.input[zi] if zi < len(n.input) and n.input[zi] else zp_of.get(n.input[0])   # else: its Q's
            u8s8 = (inits.get(a_zp), inits.get(n.input[wi])) == (onnx.TensorProto.UINT8, onnx.TensorProto.INT8)
            if u8s8 or n.op_type in QLINEAR_WEIGHTED:
                found.setdefault(U8S8_SUMS if u8s8 else EXACT_SUMS, set()).update(readers)
        if n.op_type == "QLinearAdd" and n.name in names and len(n.input) > 7 \
                and inits.get(n.input[7]) == onnx.TensorProto.UINT8:
            found.setdefault(U8_ADDS, set()).add(n.name)
        if n.op_type == "QLinearMul" and n.name in names and len(n.input) > 7:
            found.setdefault(QLINEAR_MULS, set()).add(n.name)
            if inits.get(n.input[7]) == onnx.TensorProto.UINT8 and inits.get(n.input[2]) == onnx.TensorProto.UINT8:
                found.setdefault(U8_MULS, set()).add(n.name)
        if n.op_type == "QLinearSoftmax" and n.name in names and len(n.input) > 4 \
                and inits.get(n.input[4]) == onnx.TensorProto.UINT8:
            found.setdefault(U8_SOFTMAXES, set()).add(n.name)
        if n.op_type == "ReduceMean" and n.name in names and _trailing_hw(n, optimized):
            found.setdefault(MEAN_ROWS, set()).add(n.name)
        op = "Conv" if n.op_type == "FusedConv" else n.op_type   # Conv + activation: FusedConv
        if op not in OP_TYPES:
            continue
        if n.name in names:
            found.setdefault(op, set()).add(n.name)
        elif n.name.endswith("_nchwc") and n.name[:-len("_nchwc")] in by_output:
            # the NCHWc transformer names a node by its output
            found.setdefault(op, set()).add(by_output[n.name[:-len("_nchwc")]])
    return {op: frozenset(v) for op, v in found.items()}


def _weight_readers(model: onnx.ModelProto) -> Dict[str, set]:
    """{weight codes' name: the Conv / Gemm / MatMul nodes reading them through a DequantizeLinear, or
    the QLinear nodes of a QOperator model reading them}."""
    dq = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "DequantizeLinear"}
    readers: Dict[str, set] = {}
    for n in model.graph.node:
        if n.op_type in ("Conv", "Gemm", "MatMul") and len(n.input) > 1 and n.input[1] in dq and n.name:
            readers.setdefault(dq[n.input[1]], set()).add(n.name)
        elif n.op_type in QLINEAR_WEIGHTED and len(n.input) > 3 and n.name:   # QOperator
            readers.setdefault(n.input[3], set()).add(n.name)
    return readers


def _trailing_hw(n: onnx.NodeProto, plan: onnx.ModelProto) -> bool:
    """Whether the plan's ReduceMean ``n`` reduces axes 2, 3 (of an NCHW map: its KR path, each
    channel's H*W values summed as a row). Its layout transformer may have moved the mean onto
    channels-last data (axes 1, 2: a strided, in-order sum) where the model's mean is over 2, 3."""
    from onnx import numpy_helper
    axes = next((list(a.ints) for a in n.attribute if a.name == "axes"), None)
    if axes is None and len(n.input) > 1 and n.input[1]:
        t = next((t for t in plan.graph.initializer if t.name == n.input[1]), None)
        axes = None if t is None else [int(v) for v in numpy_helper.to_array(t).ravel()]
    return axes is not None and sorted(a % 4 for a in axes) == [2, 3] and all(a in (2, 3, -1, -2) for a in axes)
