"""The QDQ rewrite of a dynamic-int8 model's layers (``dynamic_calibrated.py``): each layer's
calibrated input Q -> DQ, its int8 weights behind a DequantizeLinear, its bias (int32 or fp32) and,
for int8 layers, a Q -> DQ pair on its result."""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import ModelError, MrvlError
from ..graph_index import subgraph_reads, topological_order
from .dynamic_layers import Graph, Layer


def _consts(graph, name: str, arr: np.ndarray) -> str:
    """A new initializer ``name`` (a suffix when the model has that name already)."""
    have = {t.name for t in graph.initializer} | {o for n in graph.node for o in n.output} | \
        {i.name for i in graph.input}
    base, k = name, 1
    while name in have:
        name, k = f"{base}_{k}", k + 1
    graph.initializer.append(numpy_helper.from_array(arr, name))
    return name


def _int32_bias(graph, name: str, bias: np.ndarray, bs: np.ndarray, channels: int) -> onnx.NodeProto:
    """``DQ(round(b / (s_x s_w)) int32, s_x s_w)`` writing ``<name>/bias``, as ``quantize_static`` writes a bias."""
    bq = np.clip(np.round(bias / bs), -2 ** 31, 2 ** 31 - 1).astype(np.int32)
    bsn = _consts(graph, f"{name}/bias_scale", bs if bs.size > 1 else bs.reshape(()))
    bzn = _consts(graph, f"{name}/bias_zero_point", np.zeros(bs.shape if bs.size > 1 else (), np.int32))
    bqn = _consts(graph, f"{name}/bias_q", np.broadcast_to(bq, (channels,)).astype(np.int32))
    return helper.make_node("DequantizeLinear", [bqn, bsn, bzn], [f"{name}/bias"], name=f"{name}/bias_dq",
                            **({"axis": 0} if bs.size > 1 else {}))


def rewrite(model: onnx.ModelProto, g: Graph, layers: List[Layer], qp: Dict[str, Tuple],
            extra: Sequence[str], int8_outputs: bool = True) -> onnx.ModelProto:
    """The QDQ model. ``int8_outputs`` False: no pair after a layer (nor in place on its input): each
    layer reads its own Q -> DQ of its float input, as the dynamic model quantizes it for that layer
    alone, and writes float with the fp32 bias (an int8-in / fp16-out layer, fuse/qdq_int8_in.py)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    graph = m.graph
    removed = {n.name for L in layers for n in L.removed + ([L.dql] if L.dql is not None else [])}
    new_at: Dict[str, List[onnx.NodeProto]] = {}    # the name of a removed node -> the nodes written in its place
    dq_of: Dict[str, str] = {}                       # float input -> its dequantized tensor

    def pair(t: str, src: str, dst: str, name: str) -> List[onnx.NodeProto]:
        s, z = qp[t]
        sn = _consts(graph, f"{name}/scale", np.asarray(s, np.float32))
        zn = _consts(graph, f"{name}/zero_point", np.asarray(z, np.uint8))
        return [helper.make_node("QuantizeLinear", [src, sn, zn], [f"{name}/q"], name=name),
                helper.make_node("DequantizeLinear", [f"{name}/q", sn, zn], [dst], name=f"{name}/dq")]

    # quantization points: the layers' outputs, and their computed inputs. The pair writes the tensor
    # itself, so every reader reads the quantized value (a residual Add or a pool between int8 layers
    # then has int8 operands: int8 layers, as quantize_static writes them); a model input or output
    # gets a pair beside it instead (its other readers keep the float value).
    io = {i.name for i in graph.input} | {o.name for o in graph.output}
    points: Dict[str, str] = {}
    for L in layers if int8_outputs else ():
        for t in L.points:
            points.setdefault(t, f"{t}/output_q")
    for L in layers if int8_outputs else ():
        if L.x not in io and L.x in g.producer:
            points.setdefault(L.x, L.dql.name if L.dql is not None else f"{L.node.name}/input")
    for t in extra if int8_outputs else ():
        points.setdefault(t, f"{t}/output_q")
    dq_of.update({t: t for t in points})
    for L in layers:
        n, out = L.node, []
        if L.x not in dq_of:
            head = L.dql if L.dql is not None else n
            qname = L.dql.name if L.dql is not None else f"{n.name}/input"
            dq_of[L.x] = f"{qname}/dequantized"
            new_at.setdefault(head.name, []).extend(pair(L.x, L.x, dq_of[L.x], qname))
        axis = 0 if L.conv else 1
        wn = _consts(graph, f"{n.name}/weight_q", L.wq)
        per_channel = L.ws.size > 1 or (L.wz is not None and L.wz.size > 1)
        shape = (L.wq.shape[axis],) if per_channel else ()
        ws = np.broadcast_to(L.ws.reshape(-1), shape or (1,)).reshape(shape).astype(np.float32)
        wz = np.zeros(1, np.int32) if L.wz is None else L.wz.reshape(-1)   # asymmetric weights: their zero points
        sn = _consts(graph, f"{n.name}/weight_scale", ws)
        zn = _consts(graph, f"{n.name}/weight_zero_point", np.broadcast_to(wz, shape or (1,)).reshape(shape).astype(np.int8))
        kw = {"axis": axis} if per_channel else {}
        out.append(helper.make_node("DequantizeLinear", [wn, sn, zn], [f"{n.name}/weight"], name=f"{n.name}/weight_dq",
                                    **kw))
        ins = [dq_of[L.x], f"{n.name}/weight"]
        if L.conv:
            attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
            target = L.y
            if L.bias is not None:
                add = next((r for r in L.removed if r.op_type == "Add" and L.y in r.input), None)
                target = add.output[0] if add is not None else L.y   # None: the old quantizer's integer bias
                if int8_outputs:
                    bs = (np.float32(qp[L.x][0]) * L.ws).astype(np.float32)
                    out.append(_int32_bias(graph, n.name, L.bias, bs, L.wq.shape[0]))
                    ins.append(f"{n.name}/bias")
                else:   # the fp32 bias the dynamic model adds
                    ins.append(_consts(graph, f"{n.name}/bias_f", L.bias))
            out.append(helper.make_node("Conv", ins, [target], name=n.name, **attrs))
        elif L.gemm and not int8_outputs:
            ins.append(_consts(graph, f"{n.name}/bias_f", L.bias))
            out.append(helper.make_node("Gemm", ins, [L.y], name=n.name))
        elif L.gemm:
            bs = (np.float32(qp[L.x][0]) * L.ws).astype(np.float32)
            out.append(_int32_bias(graph, n.name, L.bias, bs, L.wq.shape[1]))
            ins.append(f"{n.name}/bias")
            out.append(helper.make_node("Gemm", ins, [L.y], name=n.name))
        elif L.bias is not None:   # a fused MatMul's bias input: an Add, as quantize_dynamic writes it
            bn = _consts(graph, f"{n.name}/bias_f", L.bias)
            out.append(helper.make_node("MatMul", ins, [f"{n.name}/matmul"], name=n.name))
            out.append(helper.make_node("Add", [f"{n.name}/matmul", bn], [L.y], name=f"{n.name}/bias"))
        else:
            out.append(helper.make_node("MatMul", ins, [L.y], name=n.name))
        new_at.setdefault(n.name, []).extend(out)
    nodes = []
    for n in graph.node:
        nodes.extend(new_at.get(n.name, []))
        if n.name not in removed:
            nodes.append(n)
    # the quantization points after the layers: the writer writes '<t>/float', Q -> DQ writes t
    producer = {o: k for k, n in enumerate(nodes) for o in n.output}
    tails: Dict[int, List[onnx.NodeProto]] = {}
    for t, name in points.items():
        k = producer[t]
        w = nodes[k]
        w.output[list(w.output).index(t)] = f"{t}/float"
        tails.setdefault(k, []).extend(pair(t, f"{t}/float", t, name))
    final = []
    for k, n in enumerate(nodes):
        final.append(n)
        final.extend(tails.get(k, []))
    # the Add of a fused MatMul's bias reads the pair after the MatMul, written after it
    final = _toposort(graph, final)
    del graph.node[:]
    graph.node.extend(final)
    read = {i for n in graph.node for i in n.input} | {o.name for o in graph.output} | subgraph_reads(graph.node)
    keep = [t for t in graph.initializer if t.name in read]
    del graph.initializer[:]
    graph.initializer.extend(keep)
    keep_vi = [v for v in graph.value_info if v.name not in points]
    del graph.value_info[:]
    graph.value_info.extend(keep_vi)
    return m



def _toposort(graph: onnx.GraphProto, nodes: List[onnx.NodeProto]) -> List[onnx.NodeProto]:
    """``nodes`` in an order where each reads what is written before it (the given order kept where
    it is one already); a cycle here would be this rewrite's fault, not the model's."""
    try:
        return topological_order(nodes, [i.name for i in graph.input])
    except ModelError as exc:
        raise MrvlError(f"the calibrated dynamic-int8 rewrite made a cycle ({exc})", hint="report this model") from exc
