"""The Mrvl ``Requantize`` op: a QuantizeLinear -> DequantizeLinear pair on an activation inside a
region (docs/fusion.md "int8 in transformers and recurrent models").

A QDQ model quantizes the output of every op onnxruntime's quantizer knows (MatMul, Add, Mul,
Softmax, LayerNormalization, Transpose, Reshape, ...); where no int8 layer absorbs such a pair (the
float ops between int8 layers: LayerNorm, Softmax, GELU, masks, scales), the pair is this one
layer: ``y = (sat(rne(x / s) + z) - z) * s`` with fp32 math, the codes stored as int8 / uint8 (an
int8 tensor, docs/program.md "tensor dtypes"), so the next int8 layer reads them exactly and a
float layer reads their dequantized value. Attributes: the int8 ones of a weightless layer
(``precision`` = "int8", ``in_*`` = ``out_*`` = the pair's scale, zero point and type).
The reference body is the pair itself.
"""
from __future__ import annotations

from onnx import TensorProto, helper

from .opset_int8 import INT8_POOL_ATTRS, QTYPES

ATTRS = INT8_POOL_ATTRS


def _body(a, present, opset):
    if opset < 13:
        raise ValueError("a Requantize reference body needs opset >= 13")
    s = helper.make_tensor("s", TensorProto.FLOAT, [], [float(a["out_scale"])])
    z = helper.make_tensor("z", QTYPES[a["out_type"]], [], [int(a["out_zero_point"])])
    return [helper.make_node("Constant", [], ["rq_s"], value=s),
            helper.make_node("Constant", [], ["rq_z"], value=z),
            helper.make_node("QuantizeLinear", ["X", "rq_s", "rq_z"], ["rq_q"]),
            helper.make_node("DequantizeLinear", ["rq_q", "rq_s", "rq_z"], ["Y"])]


def op_defs(OpDef) -> dict:
    """The OpDef of ``Requantize`` (``OpDef`` passed in: no import cycle with opset)."""
    return {"Requantize": OpDef("Requantize", "Requantize", "mrvl.requantize", ("X",), ATTRS, _body)}


INT8_OUT = "int8_out"   # ``precision`` of a float layer that writes int8 codes (an absorbed Q -> DQ pair)
INT8_OUT_ATTRS = ("precision", "out_scale", "out_zero_point", "out_type", "in_scale", "in_zero_point", "in_type")
# an int8_out Mul2D onnxruntime runs as QLinearMul: its constant's codes' quantization and the arithmetic
# ("qlinear" / "qlinear_u8"); the reference body stays the float Mul + QuantizeLinear (the two differ by
# at most one code on rounding ties; docs/simulator.md "int8 layers")
QLINEAR_MUL_ATTRS = ("in2_scale", "in2_zero_point", "in2_type", "requant")


def is_int8_out(attrs: dict) -> bool:
    return attrs.get("precision") == INT8_OUT


def int8_out_body(body):
    """The body of a float layer (LayerNorm, Mul2D) that dispatches on ``precision``: as it is, or
    ("int8_out") followed by QuantizeLinear -> DequantizeLinear of its output (the absorbed pair),
    and with ``in_*`` preceded by that of its data input (it reads int8 codes)."""
    def wrapped(a, present, opset):
        if not is_int8_out(a):
            return body(a, present, opset)
        x = "A" if "A" in present else "X"
        inner = body(a, present, opset)
        for n in inner:
            n.output[:] = ["rq_y" if o == "Y" else o for o in n.output]
            n.input[:] = ["rq_y" if i == "Y" else "rq_x" if i == x and "in_type" in a else i for i in n.input]
        pair = _body(a, present, opset)
        pair[2].input[0] = "rq_y"
        for node in pair:
            node.output[:] = ["rq_" + o if o != "Y" else o for o in node.output]
            node.input[:] = ["rq_" + i if i != "rq_y" else i for i in node.input]
        if "in_type" in a:
            inp = _body(dict(a, out_scale=a["in_scale"], out_zero_point=a["in_zero_point"], out_type=a["in_type"]),
                        present, opset)
            inp[2].input[0] = x
            for node in inp:
                node.output[:] = ["in_" + o if o != "Y" else "rq_x" for o in node.output]
                node.input[:] = [("in_" + i) if i != x else i for i in node.input]
            inner = inp + inner
        return inner + pair
    return wrapped


INNER_ATTRS = ("inner_scales", "inner_zero_points", "inner_types")   # LayerNorm's interior quantization


def inner_points(a: dict):
    """[(scale, zero point, type) or None] of a LayerNorm's interior quantization (var, vareps,
    norm, scaled; an RMSNorm's: square, var, vareps, inv, norm), or None when it has none."""
    if not a.get("inner_scales"):
        return None
    types = str(a.get("inner_types", "")).split(",")
    return [(float(s), int(z), t) if float(s) > 0 else None
            for s, z, t in zip(a["inner_scales"], a["inner_zero_points"], types)]


def _affine_nodes(form: str, eps: float, axis: int, present, red, fq):
    """The ``x * inv + c`` layer norm (keras3 / tf) with its interior steps: mean, negmean, diff,
    square, var, vareps, rstd, inv, xinv, minv, res (``fq(tensor, k)``: the k-th point's Q -> DQ)."""
    def mk(op, ins, out):
        return helper.make_node(op, ins, [out])

    def w(role):   # gamma / beta [D] along ``axis`` (negative)
        if axis == -1:
            return [], role
        shape = helper.make_tensor(f"la_{role}_shape", TensorProto.INT64, [-axis], [-1] + [1] * (-axis - 1))
        return [helper.make_node("Constant", [], [f"la_{role}_shape"], value=shape),
                mk("Reshape", [role, f"la_{role}_shape"], f"la_{role}_r")], f"la_{role}_r"
    nodes = red("X", "la_m")
    more, m = fq("la_m", 0)
    nodes += more + [mk("Sub", ["X", m], "la_d")]
    more, d = fq("la_d", 2)
    nodes += more + [mk("Mul", [d, d], "la_d2")]
    more, d2 = fq("la_d2", 3)
    nodes += more + red(d2, "la_v")
    more, v = fq("la_v", 4)
    nodes += more + [helper.make_node("Constant", [], ["la_eps"], value=helper.make_tensor(
        "la_eps", TensorProto.FLOAT, [], [eps])), mk("Add", [v, "la_eps"], "la_ve")]
    more, ve = fq("la_ve", 5)
    nodes += more + [mk("Sqrt", [ve], "la_sd"), mk("Reciprocal", ["la_sd"], "la_r")]
    more, inv = fq("la_r", 6)
    nodes += more
    if present.get("gamma"):
        more, g = w("gamma")
        nodes += more + [mk("Mul", [inv, g], "la_inv")]
        more, inv = fq("la_inv", 7)
        nodes += more
    nodes.append(mk("Mul", ["X", inv], "la_xa"))
    more, xa = fq("la_xa", 8)
    nodes += more
    beta = None
    if present.get("beta"):
        more, beta = w("beta")
        nodes += more
    if form == "keras3":
        nodes.append(mk("Neg", [m], "la_nm"))
        more, nm = fq("la_nm", 1)
        nodes += more + [mk("Mul", [nm, inv], "la_mb")]
        more, c = fq("la_mb", 9)
        nodes += more
        if beta is not None:
            nodes.append(mk("Add", [c, beta], "la_c"))
            more, c = fq("la_c", 10)
            nodes += more
    else:
        nodes.append(mk("Mul", [m, inv], "la_mb"))
        more, mb = fq("la_mb", 9)
        nodes += more + [mk("Sub", [beta, mb], "la_c") if beta is not None else mk("Neg", [mb], "la_c")]
        more, c = fq("la_c", 10)
        nodes += more
    return nodes + [mk("Add", [xa, c], "Y")]


def layernorm_inner_body(plain):
    """The LayerNorm body with its interior Q -> DQ steps (qdq_layernorm.py) when it has them, else ``plain``."""
    def body(a, present, opset):
        pts = inner_points(a)
        if pts is None:
            return plain(a, present, opset)
        axis, eps = int(a["axis"]), float(a["epsilon"])

        def red(x, y):
            if opset >= 18:
                return [helper.make_node("Constant", [], [y + "_ax"], value=helper.make_tensor(
                    y + "_ax", TensorProto.INT64, [1], [axis])),
                        helper.make_node("ReduceMean", [x, y + "_ax"], [y], keepdims=1)]
            return [helper.make_node("ReduceMean", [x], [y], axes=[axis], keepdims=1)]

        def fq(x, k):
            return fqp(x, pts[k])

        def fqp(x, p):
            if p is None:
                return [], x
            s, z, t = p
            n = [helper.make_node("Constant", [], [f"{x}_s"], value=helper.make_tensor(f"{x}_s", TensorProto.FLOAT, [], [s])),
                 helper.make_node("Constant", [], [f"{x}_z"], value=helper.make_tensor(f"{x}_z", QTYPES[t], [], [z])),
                 helper.make_node("QuantizeLinear", [x, f"{x}_s", f"{x}_z"], [f"{x}_q"]),
                 helper.make_node("DequantizeLinear", [f"{x}_q", f"{x}_s", f"{x}_z"], [f"{x}_f"])]
            return n, f"{x}_f"
        if a.get("form"):   # x * inv + c (fuse/qdq_norm_affine.py)
            return _affine_nodes(str(a["form"]), eps, axis, present, red, fq)
        rms = bool(int(a.get("rms", 0)))
        if rms:   # RMSNorm: square, var, vareps, inv, norm (fuse/qdq_layernorm.py)
            more, sq = fq("li_d2", 0)
            nodes = [helper.make_node("Mul", ["X", "X"], ["li_d2"])] + more + red(sq, "li_v")
            pts = pts[1:3] + [pts[4]] + [None] + [pts[3]]   # -> var, vareps, norm, (scaled), inv
        else:   # 8 points: mean, diff, square, var, vareps, std, norm, scaled; 4: var, vareps, norm, scaled
            p8 = pts if len(pts) == 8 else [None] * 3 + pts[:2] + [None] + pts[2:]
            pts = [p8[3], p8[4], p8[6], p8[7]]
            km, kv = a.get("mean_muls") or (1.0, 1.0)   # the means' constant factors (qdq_layernorm.py)

            def red_k(x, y, k):
                if float(k) == 1.0:
                    return red(x, y)
                return red(x, y + "_r") + [helper.make_node("Constant", [], [y + "_k"], value=helper.make_tensor(
                    y + "_k", TensorProto.FLOAT, [], [float(k)])), helper.make_node("Mul", [y + "_r", y + "_k"], [y])]
            more_m, m = fqp("li_m", p8[0])
            more_d, d = fqp("li_d0", p8[1])
            more_s, d2 = fqp("li_d2", p8[2])
            nodes = red_k("X", "li_m", km) + more_m + [helper.make_node("Sub", ["X", m], ["li_d0"])] + more_d + \
                [helper.make_node("Mul", [d, d], ["li_d2"])] + more_s + red_k(d2, "li_v", kv)
        more, v = fq("li_v", 0)
        nodes += more + [helper.make_node("Constant", [], ["li_eps"], value=helper.make_tensor(
            "li_eps", TensorProto.FLOAT, [], [eps])), helper.make_node("Add", [v, "li_eps"], ["li_ve"])]
        more, ve = fq("li_ve", 1)
        nodes += more + [helper.make_node("Sqrt", [ve], ["li_sd0"])]
        more, sd = fqp("li_sd0", None if rms else p8[5])
        nodes += more
        if rms and pts[4] is not None:   # x * DQ(Q(1 / sqrt))
            more, r = fq("li_r", 4)
            nodes += [helper.make_node("Reciprocal", [sd], ["li_r"])] + more + \
                [helper.make_node("Mul", ["X", r], ["li_n"])]
        else:
            nodes.append(helper.make_node("Div", ["X" if rms else d, sd], ["li_n"]))
        more, y = fq("li_n", 2)
        nodes += more
        shape = helper.make_tensor("li_shape", TensorProto.INT64, [-axis], [-1] + [1] * (-axis - 1)) \
            if axis < 0 else None
        for role, op, k in (("gamma", "Mul", 3), ("beta", "Add", None)):
            if not present.get(role):
                continue
            w = role
            if shape is not None and axis != -1:
                nodes += [helper.make_node("Constant", [], [f"li_{role}_shape"], value=shape),
                          helper.make_node("Reshape", [role, f"li_{role}_shape"], [f"li_{role}_r"])]
                w = f"li_{role}_r"
            nodes.append(helper.make_node(op, [y, w], [f"li_{role}_y"]))
            y = f"li_{role}_y"
            if k is not None:
                more, y = fq(y, k)
                nodes += more
        return nodes + [helper.make_node("Identity", [y], ["Y"])]
    return body
