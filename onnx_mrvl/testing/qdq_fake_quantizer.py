"""A small fake-quantizer for ``qdq_variants``: places Q/DQ in a float model the way a given tool
does (``Style``: weight form, bias form, placement, opset attributes, activation type, ...), with
min/max scales from an onnxruntime run over seeded feeds."""
from __future__ import annotations

import collections
import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F32 = TensorProto.FLOAT
QTYPES = {"s8": (TensorProto.INT8, np.int8, -128, 127), "u8": (TensorProto.UINT8, np.uint8, 0, 255),
          "s16": (TensorProto.INT16, np.int16, -32768, 32767), "u16": (TensorProto.UINT16, np.uint16, 0, 65535)}
WEIGHTED = ("Conv", "ConvTranspose", "Gemm", "MatMul")
# ops whose output takes its input's quantization (onnxruntime's and torch's shared qparams)
MOVES = ("Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "MaxPool", "Pad", "Slice", "Split",
         "Resize", "GlobalMaxPool")


@dataclasses.dataclass
class Style:
    opset: int = 13
    act: str = "s8"                 # s8 | u8 | s16 | u16
    symmetric: bool = False
    per_channel: bool = True
    weight: str = "int8"            # int8 (DQ of int8 codes) | fp32 (fp32 -> Q -> DQ) | int4 (block-wise)
    transpose_weights: bool = False  # tf2onnx: MatMul [N,K] and Conv HWIO codes -> DQ -> Transpose
    bias: str = "int32"             # int32 (DQ, scale s_x * s_w) | fp32
    placement: str = "outputs"      # outputs (after every op) | inputs (in front of weighted ops only)
    fuse_relu: bool = True          # False: Q/DQ between a layer and its Relu/Clip too
    float_ops: Tuple[str, ...] = ()  # op types / node names left float (mixed export)
    int8_io: bool = False           # TFLite: graph input int8 codes -> DQ; output Q -> int8
    zero_point: bool = True         # False: Q/DQ without zero point input (uint8 / opset-21 output_dtype)
    block_size: int = 16            # int4 weights: block along the input channels
    negative_axis: bool = False     # per-channel axis written counted from the end (axis=-1)
    add_inputs: bool = False        # placement "inputs": the residual Add's inputs quantized too (TensorRT)


# -- the fake-quantizer -----------------------------------------------------------------------------

def calibration_feeds(model: onnx.ModelProto, n: int = 4, seed: int = 100) -> List[Dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        out.append({i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
                    for i in model.graph.input})
    return out


def _ranges(model: onnx.ModelProto, feeds: Sequence[Dict[str, np.ndarray]]) -> Dict[str, Tuple[float, float]]:
    """min / max of every float tensor over the calibration feeds (onnxruntime, fp32)."""
    import onnxruntime as ort
    m = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in list(m.graph.value_info) + list(m.graph.output)}
    names = [o for n in m.graph.node for o in n.output if o and types.get(o) == F32]
    m2 = onnx.ModelProto()
    m2.CopyFrom(m)
    have = {o.name for o in m2.graph.output}
    m2.graph.output.extend([helper.make_empty_tensor_value_info(t) for t in names if t not in have])
    sess = ort.InferenceSession(m2.SerializeToString(), providers=["CPUExecutionProvider"])
    outs = [o.name for o in m2.graph.output]
    lo, hi = {}, {}
    for f in feeds:
        vals = dict(zip(outs, sess.run(outs, f)))
        vals.update(f)
        for t, v in vals.items():
            if v.dtype == np.float32:
                lo[t], hi[t] = min(lo.get(t, 0.0), float(v.min())), max(hi.get(t, 0.0), float(v.max()))
    return {t: (lo[t], hi[t]) for t in lo}


def act_qparams(lo: float, hi: float, act: str, symmetric: bool) -> Tuple[float, int]:
    _, _, qmin, qmax = QTYPES[act]
    if symmetric:
        m = max(abs(lo), abs(hi), 1e-6)
        s = 2 * m / (qmax - qmin)
        z = 0 if qmin < 0 else (qmax + 1) // 2
        return float(np.float32(s)), z
    lo, hi = min(lo, 0.0), max(hi, 1e-6)
    s = (hi - lo) / (qmax - qmin)
    z = int(np.clip(round(qmin - lo / s), qmin, qmax))
    return float(np.float32(s)), z


class _Quantizer:
    def __init__(self, model: onnx.ModelProto, st: Style, ranges):
        self.m, self.st, self.ranges = model, st, ranges
        self.nodes: List[onnx.NodeProto] = []
        self.inits: Dict[str, onnx.TensorProto] = {t.name: t for t in model.graph.initializer}
        self.const = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        self.dq: Dict[str, str] = {}          # float tensor -> its DQ output
        self.qp: Dict[str, Tuple[float, int]] = {}
        self.users = collections.defaultdict(list)
        for n in model.graph.node:
            for i in n.input:
                self.users[i].append(n)
        self.count = 0

    # Q / DQ nodes with the attributes of the style's opset
    def _attrs(self, op: str, qtype: int, axis: Optional[int] = None, block: int = 0) -> dict:
        a = {} if axis is None else {"axis": axis}
        if op == "QuantizeLinear" and self.st.opset >= 19:
            a["saturate"] = 1
        if self.st.opset >= 21:
            a["block_size"] = block
            if op == "QuantizeLinear" and not self.st.zero_point:
                a["output_dtype"] = qtype   # the type without a zero point (onnxruntime 1.32 refuses both)
        return a

    def _init(self, name: str, v: np.ndarray) -> str:
        self.inits[name] = numpy_helper.from_array(np.asarray(v), name)
        self.const[name] = np.asarray(v)
        return name

    def _name(self, base: str) -> str:
        self.count += 1
        return f"{base}_{self.count}"

    def qdq_act(self, t: str, params: Optional[Tuple[float, int]] = None, out: Optional[str] = None) -> str:
        """Q -> DQ of activation ``t`` (onnxruntime's naming: t_QuantizeLinear)."""
        st = self.st
        lo, hi = self.ranges[t] if t in self.ranges else (-1.0, 1.0)
        s, z = params or act_qparams(lo, hi, st.act, st.symmetric)
        qt, npt = QTYPES[st.act][:2]
        sn = self._init(f"{t}_scale", np.array(s, np.float32))
        ins = [sn]
        if st.zero_point or z != 0 or (st.opset < 21 and st.act != "u8"):
            ins.append(self._init(f"{t}_zero_point", np.array(z, npt)))
        q, dq = f"{t}_QuantizeLinear_Output", out or f"{t}_DequantizeLinear_Output"
        self.nodes.append(helper.make_node("QuantizeLinear", [t] + ins, [q], name=f"{t}_QuantizeLinear",
                                           **self._attrs("QuantizeLinear", qt)))
        self.nodes.append(helper.make_node("DequantizeLinear", [q] + ins, [dq], name=f"{t}_DequantizeLinear",
                                           **self._attrs("DequantizeLinear", qt)))
        self.qp[t] = self.qp[dq] = (s, z)
        return dq

    def weight(self, n: onnx.NodeProto, name: str, axis: int) -> Tuple[str, np.ndarray]:
        """The weight ``name`` of ``n`` in the style's form; returns (tensor the op reads, scales per channel)."""
        st, w = self.st, self.const[name]
        if st.weight == "int4":
            return self._weight_int4(n, name, w)
        red = tuple(i for i in range(w.ndim) if i != axis)
        m = np.abs(w).max(axis=red) if st.per_channel else np.full(w.shape[axis], np.abs(w).max())
        s = (np.maximum(m, 1e-8) / 127).astype(np.float32)
        shape = [-1 if i == axis else 1 for i in range(w.ndim)]
        codes = np.clip(np.round(w / s.reshape(shape)), -127, 127).astype(np.int8)
        if st.weight.startswith("uint8"):   # legacy TFLite: uint8 weights, per tensor, zero point
            return self._weight_uint8(name, w, st.weight == "uint8_asym", axis)
        perm = None
        if st.transpose_weights and n.op_type == "MatMul":
            perm, codes, w, axis = [1, 0], codes.T.copy(), w.T.copy(), 0      # stored [N, K], per row
        elif st.transpose_weights and n.op_type == "Conv":
            perm, codes, w, axis = [3, 2, 0, 1], codes.transpose(2, 3, 1, 0).copy(), w.transpose(2, 3, 1, 0).copy(), 3
        sn = self._init(f"{name}_scale", s if st.per_channel else s[:1].reshape(()))
        zn = self._init(f"{name}_zero_point", np.zeros(s.shape if st.per_channel else (), np.int8))
        ax = (axis - w.ndim if st.negative_axis else axis) if st.per_channel else None
        dq_out = f"{name}_DequantizeLinear_Output"
        if st.weight == "fp32":   # torch.ao / ModelOpt / Quark: the float weight quantized in the graph
            src = self._init(f"{name}_float", w.astype(np.float32))
            q = f"{name}_QuantizeLinear_Output"
            self.nodes.append(helper.make_node("QuantizeLinear", [src, sn, zn], [q], name=f"{name}_QuantizeLinear",
                                               **self._attrs("QuantizeLinear", TensorProto.INT8, ax)))
        else:
            q = self._init(f"{name}_quantized", codes)
        self.nodes.append(helper.make_node("DequantizeLinear", [q, sn, zn], [dq_out], name=f"{name}_DequantizeLinear",
                                           **self._attrs("DequantizeLinear", TensorProto.INT8, ax)))
        if perm is not None:
            t = f"{name}_transposed"
            self.nodes.append(helper.make_node("Transpose", [dq_out], [t], name=f"{name}_Transpose", perm=perm))
            dq_out = t
        return dq_out, s

    def _weight_uint8(self, name, w, asym: bool, axis: int):
        """Per-tensor uint8 weights: asymmetric over [min, max] (``asym``) or zero point 128."""
        if asym:
            lo, hi = min(float(w.min()), 0.0), max(float(w.max()), 0.0)
            s = np.float32((hi - lo) / 255)
            z = int(np.clip(round(-lo / s), 0, 255))
        else:
            s, z = np.float32(np.abs(w).max() / 127), 128
        codes = np.clip(np.round(w / s) + z, 0, 255).astype(np.uint8)
        sn = self._init(f"{name}_scale", np.array(s, np.float32))
        zn = self._init(f"{name}_zero_point", np.array(z, np.uint8))
        q = self._init(f"{name}_quantized", codes)
        out = f"{name}_DequantizeLinear_Output"
        self.nodes.append(helper.make_node("DequantizeLinear", [q, sn, zn], [out], name=f"{name}_DequantizeLinear"))
        return out, np.full(w.shape[axis], s, np.float32)

    def _weight_int4(self, n, name, w):
        """opset 21 block-wise int4 weights (MatMul [K, N]: blocks along K, axis 0)."""
        if n.op_type != "MatMul":
            raise ValueError("int4 block-wise weights are written for MatMul only")
        b = self.st.block_size
        k, nn = w.shape
        wb = w.reshape(k // b, b, nn)
        s = (np.maximum(np.abs(wb).max(1), 1e-8) / 7).astype(np.float32)   # [K/b, N]
        codes = np.clip(np.round(wb / s[:, None, :]), -7, 7).astype(np.int8).reshape(k, nn)
        t = helper.make_tensor(f"{name}_quantized", TensorProto.INT4, codes.shape, codes.reshape(-1).tolist())
        self.inits[t.name] = t
        sn = self._init(f"{name}_scale", s)
        zt = helper.make_tensor(f"{name}_zero_point", TensorProto.INT4, s.shape, [0] * s.size)
        self.inits[zt.name] = zt
        out = f"{name}_DequantizeLinear_Output"
        self.nodes.append(helper.make_node("DequantizeLinear", [t.name, sn, zt.name], [out],
                                           name=f"{name}_DequantizeLinear", axis=0, block_size=b))
        return out, None

    def bias(self, n: onnx.NodeProto, name: str, x: str, ws: Optional[np.ndarray]) -> str:
        b = self.const[name]
        if self.st.bias == "fp32" or ws is None or x not in self.qp:
            return name
        s = (np.float32(self.qp[x][0]) * ws).astype(np.float32)
        codes = np.round(b / s).astype(np.int32)
        sn = self._init(f"{name}_scale", s)
        q = self._init(f"{name}_quantized", codes)
        zn = self._init(f"{name}_zero_point", np.zeros(s.shape, np.int32))
        out = f"{name}_DequantizeLinear_Output"
        self.nodes.append(helper.make_node("DequantizeLinear", [q, sn, zn], [out], name=f"{name}_DequantizeLinear",
                                           axis=0, **({"block_size": 0} if self.st.opset >= 21 else {})))
        return out

    def floats(self, n: onnx.NodeProto) -> bool:
        return n.op_type in self.st.float_ops or n.name in self.st.float_ops

    def run(self) -> onnx.ModelProto:
        st, g = self.st, self.m.graph
        outputs = {o.name for o in g.output}
        for i in g.input:
            if st.int8_io:   # TFLite: the graph input holds the codes
                s, z = act_qparams(*self.ranges[i.name], st.act, st.symmetric)
                dq = f"{i.name}_DequantizeLinear_Output"
                ins = [self._init(f"{i.name}_scale", np.array(s, np.float32)),
                       self._init(f"{i.name}_zero_point", np.array(z, QTYPES[st.act][1]))]
                self.nodes.append(helper.make_node("DequantizeLinear", [i.name] + ins, [dq],
                                                   name=f"{i.name}_DequantizeLinear"))
                self.dq[i.name], self.qp[i.name], self.qp[dq] = dq, (s, z), (s, z)
            elif st.placement == "outputs" and not any(self.floats(u) for u in self.users[i.name]):
                self.dq[i.name] = self.qdq_act(i.name)
        renamed = {}
        for n in g.node:
            n2 = onnx.NodeProto()
            n2.CopyFrom(n)
            quantized_op = not self.floats(n)
            if n.op_type in WEIGHTED and quantized_op:   # a quantized layer after float ops: a pair in front
                for k in ([0, 1] if n.op_type == "MatMul" and n.input[1] not in self.const else [0]):
                    if n.input[k] not in self.dq:
                        self.dq[n.input[k]] = self.qdq_act(n.input[k])
            if st.add_inputs and n.op_type == "Add" and quantized_op:
                for t in n.input:
                    if t not in self.dq and t not in self.const:
                        self.dq[t] = self.qdq_act(t)
            ins = [self.dq.get(i, i) for i in n.input]   # every reader of a quantized tensor reads its DQ
            if n.op_type in WEIGHTED and quantized_op and len(ins) > 1 and ins[1] in self.const:
                axis = {"Conv": 0, "ConvTranspose": 1, "MatMul": 1}.get(n.op_type, 0 if _attr(n, "transB") else 1)
                ins[1], ws = self.weight(n, ins[1], axis)
                if len(ins) > 2 and ins[2]:
                    ins[2] = self.bias(n, ins[2], ins[0], ws)
            n2.ClearField("input")
            n2.input.extend(ins)
            self.nodes.append(n2)
            if st.placement != "outputs" or not quantized_op:
                continue
            for o in n.output:
                if not o or o not in self.ranges or self._fused_into_next(o):
                    continue
                if self.users[o] and all(self.floats(u) for u in self.users[o]) and o not in outputs:
                    continue       # only float ops read it: no pair
                params = self.qp.get(n.input[0]) if n.op_type in MOVES else None
                if params is None and n.op_type in MOVES:
                    params = self.qp.get(ins[0])
                if o in outputs:
                    pre = f"{o}_float"
                    n2.output[list(n2.output).index(o)] = pre
                    renamed[o] = pre
                    self.ranges[pre] = self.ranges[o]
                    if st.int8_io:
                        self._quantize_output(pre, o, params)
                    else:
                        self.dq[o] = self.qdq_act(pre, params, out=o)
                else:
                    self.dq[o] = self.qdq_act(o, params)
        if st.int8_io:
            for o in g.output:
                o.type.tensor_type.elem_type = QTYPES[st.act][0]
        used = {i for n in self.nodes for i in n.input}
        graph = helper.make_graph(self.nodes, g.name + "_qdq", list(g.input), list(g.output),
                                  [t for k, t in self.inits.items() if k in used])
        if st.int8_io:
            for i in graph.input:
                i.type.tensor_type.elem_type = QTYPES[st.act][0]
        opsets = [helper.make_opsetid("", max(st.opset, _opset(self.m)))]
        model = helper.make_model(graph, opset_imports=opsets, producer_name="onnx_mrvl.testing.qdq_variants")
        model.ir_version = 10 if st.opset >= 21 else 9 if st.opset >= 19 else 8
        return model

    def _quantize_output(self, t: str, out: str, params) -> None:
        s, z = params or act_qparams(*self.ranges[t], self.st.act, self.st.symmetric)
        ins = [self._init(f"{out}_scale", np.array(s, np.float32)), self._init(f"{out}_zero_point", np.array(z, QTYPES[self.st.act][1]))]
        self.nodes.append(helper.make_node("QuantizeLinear", [t] + ins, [out], name=f"{out}_QuantizeLinear",
                                           **self._attrs("QuantizeLinear", QTYPES[self.st.act][0])))

    def _fused_into_next(self, t: str) -> bool:
        """The layer's output goes into its Relu / Clip alone (quantized after that)."""
        u = self.users[t]
        return self.st.fuse_relu and len(u) == 1 and u[0].op_type in ("Relu", "Clip") and not self.floats(u[0]) and \
            any(p.op_type in WEIGHTED + ("Add",) for p in self.m.graph.node if t in p.output)


def _attr(n, name, default=0):
    return next((helper.get_attribute_value(a) for a in n.attribute if a.name == name), default)


def _opset(m: onnx.ModelProto) -> int:
    return next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))


def quantize(model: onnx.ModelProto, style: Style, feeds: Optional[Sequence[Dict[str, np.ndarray]]] = None) -> onnx.ModelProto:
    """``model`` (float) with Q/DQ placed as ``style`` says, scales from min/max over ``feeds``."""
    feeds = feeds or calibration_feeds(model)
    return _Quantizer(model, style, _ranges(model, feeds)).run()
