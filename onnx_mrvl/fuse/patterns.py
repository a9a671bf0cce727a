"""Fusion patterns, declared as data: an anchor op, optional chained steps, and a check that
returns the reason a match is ruled out (``None`` when it is fine).

    mrvl.conv2d_nhwc2nhwc   Conv -> [Add bias] -> [BN] -> [Mul scale] -> [Add shift] -> [activation]
    mrvl.fc_ni2no           Gemm (canonical FC) | MatMul(x, const 2-D) -> (the same chain)
                            MatMul(x[..., K], const [K, O]) -> [bias/scale/shift on the last axis] -> [activation]
    mrvl.*pool2d_nhwc2nhwc  MaxPool | AveragePool | GlobalAveragePool | GlobalMaxPool
    mrvl.sum / mrvl.mul     Add | Mul (two tensors of one rank that may broadcast, or a tensor and a
                            constant that does not widen it), 2-D to 5-D -> [activation]
    mrvl.concat (2-D to 5-D), mrvl.reshape, mrvl.resize_nearest (resize.py), mrvl.slice (slices.py)
Standalone activations (Mul2D(x, 1) + activation) are in standalone.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import onnx

from .. import int8_conv_passes
from ..array_minmax import minmax
from ..graph_index import GraphIndex, attr
from ..target import Target
from . import steps
from .groups import Group, batch_limit, float_static, image_batch_moved, model_images
from .qconst import const_dq, constant_value
from .resize import build_resize
from . import slices


@dataclass(frozen=True)
class Pattern:
    composite: str
    anchors: Tuple[str, ...]
    build: Callable   # (g, node, target) -> Group | str (reason)
    chain: Tuple[str, ...] = ()

    def match(self, g: GraphIndex, n: onnx.NodeProto, target: Target):
        """The group anchored at ``n`` or the reason it stays on the CPU (shape/attribute checks
        of ``build``, then the values of the weights the group would carry)."""
        built = self.build(g, n, target)
        if isinstance(built, Group):
            return weights_reason(built, target) or built
        return built


def weights_reason(grp: Group, target: Target) -> Optional[str]:
    """Why the group's weights (after folding) cannot go to the fp16 accelerator, or None.

    NaN/inf would poison every output; values beyond the fp16 range would silently become inf. The
    constant operand of an int8 element-wise layer (``precision`` int8 / int8_out) is stored and added
    in fp32 (emit's ``eltwise``): it needs to be finite only (a QDQ attention mask of float32's lowest)."""
    fp32 = grp.attrs.get("precision") in ("int8", "int8_out", "fp32")
    for key, w in grp.weights.items():
        w = np.asarray(w)
        if w.size == 0 or w.dtype.kind in "iu":   # an int8 layer's int8 kernel, int32 bias, table: stored as they are
            continue
        lo, hi = map(float, minmax(w))   # NaN propagates through min/max: no full-size temporaries
        if not (np.isfinite(lo) and np.isfinite(hi)):
            return f"{key} holds {int(w.size - np.isfinite(w).sum())} NaN/inf values"
        if fp32 and key in ("operand", "mask"):   # mask: an int8 Softmax's, added in fp32 (qdq_masked_softmax.py)
            continue
        big = max(-lo, hi)
        if big > target.fp16_max:
            folded = " after folding the following Mul/Add/BN" if len(grp.nodes) > 1 else ""
            return (f"{key} holds values up to {big:.4g}{folded}, beyond the fp16 range "
                    f"(|w| <= {target.fp16_max:g})")
    return None


# Optional chained steps after an anchor, in order (each absent or absorbed once). The folding
# steps are exact in fp32: W' = W * scale (per output channel), B' = B * scale + shift.
CONV_CHAIN = ("bias", "batchnorm", "scale", "shift", "activation")
FC_CHAIN = ("bias", "batchnorm", "scale", "shift", "activation")
FC_ND_CHAIN = ("bias", "scale", "shift", "activation")   # features on the last axis: no BN (axis 1)
MAX_FC_ROWS = 65536   # rows of an FC on N-D data ([B, T, K] -> [B*T, K]): one FC layer's row count
ELTWISE_RANKS = (2, 3, 4, 5)


def tensor_reason(g: GraphIndex, x: str, y: str, target: Target, what: str) -> Optional[str]:
    """Why a one-input element-wise layer (``what``: its name in the message) cannot take ``x`` ->
    ``y``: float32 static shapes, 2-D to 5-D, the image batch limit; None when it can."""
    reason = float_static(g, [x, y])
    if reason:
        return reason
    rank = len(g.shape(x))
    if rank not in ELTWISE_RANKS:
        return f"{what} on a {rank}-D tensor (the accelerator takes 2-D to 5-D)"
    return batch_limit(g, x, target, spatial=False)
CONCAT_RANKS = (2, 3, 4, 5)


def _absorb_chain(g: GraphIndex, grp: Group, chain, channels: int, rank: int, target: Target,
                  axis: int = 1) -> None:
    for step in chain:
        if step == "activation":
            _absorb_activation(g, grp, channels, target, axis)
            continue
        m = steps.FOLD_STEPS[step](g, grp.output, channels, rank, axis)
        if m is None or g.shape(m.output) is None:
            continue
        b = grp.weights.get("B", np.zeros(channels, np.float32))
        if m.scale is not None:
            w = grp.weights["W"]
            grp.weights["W"] = (w * m.scale.reshape((-1,) + (1,) * (w.ndim - 1))).astype(np.float32)
            b = b * m.scale
        if m.shift is not None:
            b = b + m.shift
        grp.weights["B"] = b.astype(np.float32)
        grp.nodes += m.nodes
        grp.output = m.output


def allowed_activations(ops, target: Target) -> Tuple[str, ...]:
    """Activations every op in ``ops`` can carry: prelu needs a slope input, which Conv2D and FC have."""
    return tuple(a for a in target.activations if a != "prelu" or all(op in ("Conv2D", "FC") for op in ops))


def _absorb_activation(g, group: Group, channels: int, target: Target, axis: int = 1) -> None:
    m = steps.activation(g, group.output, channels, allowed_activations([group.op], target), axis)
    if m and g.shape(m.output) is not None:   # an output without a static shape stays on the CPU
        group.nodes += m.nodes
        group.output = m.output
        group.attrs.update(m.attrs)
        group.weights.update(m.weights)


# ------------------------------------------------------------------ conv
def build_conv(g: GraphIndex, n: onnx.NodeProto, target: Target, int8: bool = False):
    """``int8``: an int8 (QDQ) layer, which also takes grouped convs and kernels / strides above
    the limits as passes into its int32 accumulator (``int8_conv_passes``)."""
    x, w = n.input[0], n.input[1]
    reason = float_static(g, [x, n.output[0]])
    if reason:
        return reason
    if not g.is_const(w) or (len(n.input) > 2 and n.input[2] and not g.is_const(n.input[2])):
        return "weights or bias are not constant initializers"
    wv = g.const(w)
    if g.elem_type(w) != onnx.TensorProto.FLOAT:
        return f"weights '{w}' are not float32"
    if wv.ndim != 4:
        return f"{wv.ndim - 2}-D convolution (the accelerator takes 2-D)"
    if attr(n, "auto_pad", "NOTSET") not in ("NOTSET", ""):
        return "auto_pad not resolved to explicit pads"
    cin, cout, group = g.shape(x)[1], wv.shape[0], attr(n, "group", 1)
    depthwise = group == cin and cout % cin == 0
    if group != 1 and not depthwise:
        if not int8:
            return f"grouped convolution (group={group}) that is not depthwise"
        if cin % group or cout % group:
            return f"grouped convolution (group={group}) that does not divide {cin} -> {cout} channels"
    k = list(wv.shape[2:])
    strides = list(attr(n, "strides", [1, 1]))
    dil = list(attr(n, "dilations", [1, 1]))
    pads = pads_checked = list(attr(n, "pads", [0, 0, 0, 0]))
    dil_passes = False
    if int8 and (max(k) > target.max_kernel or max(strides) > target.max_stride or max(dil) > target.max_dilation):
        low = int8_conv_passes.plan(k, strides, dil, pads, cin // group, group, target.max_kernel,
                                    target.max_stride, target.max_channels, depthwise and group > 1,
                                    target.max_dilation)
        if isinstance(low, str):
            return low
        pads_checked = list(low.pads)   # the padding of the lowered conv (space-to-depth: in blocks)
        dil_passes = True               # dilation beyond the limit: one tap per pass
    elif max(k) > target.max_kernel:
        return f"kernel {k[0]}x{k[1]} exceeds the limit {target.max_kernel}"
    elif max(strides) > target.max_stride:
        return f"stride {strides} exceeds the limit {target.max_stride}"
    if max(dil) > target.max_dilation and not dil_passes:
        return f"dilation {dil} exceeds the limit {target.max_dilation}"
    if max(pads_checked) > target.max_pad["conv"]:
        return f"padding {pads} exceeds the limit {target.max_pad['conv']}"
    if max(cin, cout) > target.max_channels:
        return f"{max(cin, cout)} channels exceed the limit {target.max_channels}"
    reason = batch_limit(g, x, target)
    if reason:
        return reason
    weights = {"W": np.asarray(wv, dtype=np.float32)}
    if len(n.input) > 2 and n.input[2]:
        weights["B"] = np.asarray(g.const(n.input[2]), dtype=np.float32).reshape(-1)
    grp = Group("Conv2D", "mrvl.conv2d_nhwc2nhwc", [n], [x], n.output[0],
                dict(strides=strides, pads=pads, dilations=dil, group=group, kernel_shape=k, channels=cout),
                weights)
    _absorb_chain(g, grp, CONV_CHAIN, cout, 4, target)
    return grp


# ------------------------------------------------------------------ fc
def build_fc(g: GraphIndex, n: onnx.NodeProto, target: Target):
    x, w = n.input[0], n.input[1]
    reason = float_static(g, [x, n.output[0]])
    if reason:
        return reason
    if not g.is_const(w):
        return "weights are not a constant initializer"
    xs = g.shape(x)
    if len(xs) < 2 or (len(xs) > 2 and n.op_type != "MatMul"):
        return f"input is {len(xs)}-D (the FC layer takes [N, K], or [..., K] through a MatMul)"
    if g.elem_type(w) != onnx.TensorProto.FLOAT:
        return f"weights '{w}' are not float32"
    wv = np.asarray(g.const(w), dtype=np.float32)
    if n.op_type == "Gemm":
        has_c = len(n.input) > 2 and bool(n.input[2])   # beta scales C only: without C it is no-op (tf2onnx writes 0)
        if attr(n, "transA", 0) or abs(attr(n, "alpha", 1.0) - 1) > 0 or (has_c and abs(attr(n, "beta", 1.0) - 1) > 0):
            return "Gemm not in the canonical FC form (transA=0, alpha=beta=1)"
        if not attr(n, "transB", 0):
            wv = wv.T
        weights = {"W": np.ascontiguousarray(wv)}
        if len(n.input) > 2 and n.input[2]:
            if not g.is_const(n.input[2]):
                return "bias is not a constant initializer"
            c = g.const(n.input[2]).astype(np.float32)
            if c.size not in (1, wv.shape[0]) or (c.ndim == 2 and c.shape[0] != 1):
                return f"bias of shape {list(c.shape)} is not per output feature"
            weights["B"] = np.broadcast_to(c.reshape(-1), (wv.shape[0],)).astype(np.float32)
    else:  # MatMul with a constant [K, O]
        if wv.ndim != 2:
            return "MatMul weight is not 2-D"
        weights = {"W": np.ascontiguousarray(wv.T)}
    if max(weights["W"].shape) > target.max_fc_features:
        return f"{max(weights['W'].shape)} features exceed the limit {target.max_fc_features}"
    if weights["W"].shape[1] != xs[-1]:
        return f"weights {list(wv.shape)} do not fit an input of shape {xs}"
    grp = Group("FC", "mrvl.fc_ni2no", [n], [x], n.output[0], {}, weights)
    # the FC layer computes row by row: its M rows ([M, K], or the leading dims of [..., K]) are not
    # an image batch, so target.max_batch does not apply (token MatMuls, RNN heads), only MAX_FC_ROWS
    rows = int(np.prod(xs[:-1]))
    if rows > MAX_FC_ROWS:
        return f"{rows} rows of an FC over {xs} exceed the limit {MAX_FC_ROWS}"
    if len(xs) > 2:   # [..., K] x [K, O]: Reshape [rows, K] -> FC -> Reshape [..., O]
        _absorb_chain(g, grp, FC_ND_CHAIN, weights["W"].shape[0], len(xs), target, axis=-1)
        return grp
    _absorb_chain(g, grp, FC_CHAIN, weights["W"].shape[0], 2, target)
    return grp


# ------------------------------------------------------------------ pools
_POOLS = {"MaxPool": ("MaxPool2D", "mrvl.maxpool2d_nhwc2nhwc"),
          "AveragePool": ("AvgPool2D", "mrvl.avgpool2d_nhwc2nhwc"),
          "GlobalAveragePool": ("GlobalAvgPool2D", "mrvl.globalavgpool2d_nhwc2nhwc"),
          "GlobalMaxPool": ("GlobalMaxPool2D", "mrvl.globalmaxpool2d_nhwc2nhwc")}


def build_pool(g: GraphIndex, n: onnx.NodeProto, target: Target):
    x = n.input[0]
    reason = float_static(g, [x, n.output[0]]) or batch_limit(g, x, target)
    if reason:
        return reason
    if len(g.shape(x)) != 4:
        return f"{len(g.shape(x)) - 2}-D pooling (the accelerator takes 2-D)"
    op, composite = _POOLS[n.op_type]
    attrs = {}
    if n.op_type in ("MaxPool", "AveragePool"):
        if len([o for o in n.output if o]) > 1:
            return "MaxPool with an Indices output"
        if attr(n, "auto_pad", "NOTSET") not in ("NOTSET", ""):
            return "auto_pad not resolved to explicit pads"
        k = list(attr(n, "kernel_shape"))
        pads = list(attr(n, "pads", [0, 0, 0, 0]))
        strides = list(attr(n, "strides", [1, 1]))
        if max(k) > target.max_pool_kernel:
            return f"pool window {k} exceeds the limit {target.max_pool_kernel}"
        if max(pads) > target.max_pad["pool"]:
            return f"padding {pads} exceeds the limit {target.max_pad['pool']}"
        # a window that does not overlap the next one may stride as far as it is wide (the global
        # pool split of legalize writes 16x16/s16 windows); otherwise the conv stride limit holds
        s_limit = [max(target.max_stride, min(kk, target.max_pool_kernel)) for kk in k]
        if any(s > lim for s, lim in zip(strides, s_limit)):
            return f"stride {strides} exceeds the limit {max(s_limit)}"
        if attr(n, "storage_order", 0):
            return "MaxPool storage_order=1"
        dil = list(attr(n, "dilations", [1, 1]))
        hw = g.shape(x)[2:]
        if any(size + pads[i] + pads[i + 2] < (kk - 1) * d + 1 for i, (size, kk, d) in enumerate(zip(hw, k, dil))):
            # onnxruntime's output size truncates toward zero: 1 output whose window hangs past the edge
            return f"pool window {k} is larger than the padded input {list(hw)} (pads {pads})"
        attrs = dict(kernel_shape=k, strides=strides, pads=pads, ceil_mode=int(attr(n, "ceil_mode", 0)),
                     dilations=list(attr(n, "dilations", [1, 1])))
        if n.op_type == "AveragePool":
            attrs["count_include_pad"] = int(attr(n, "count_include_pad", 0))
            if attrs.pop("dilations") != [1, 1]:
                return "dilated AveragePool"
    else:
        hw = g.shape(x)[2:]
        if max(hw) > target.max_pool_kernel * target.max_pool_kernel:
            return f"global pool over {hw} exceeds the limit"
    return Group(op, composite, [n], [x], n.output[0], attrs)


# ------------------------------------------------------------------ elementwise
def build_eltwise(g: GraphIndex, n: onnx.NodeProto, target: Target):
    op = "Sum2D" if n.op_type == "Add" else "Mul2D"
    a, b = n.input[0], n.input[1]
    reason = float_static(g, [a, b, n.output[0]])
    if reason:
        return reason
    out_shape = g.shape(n.output[0])
    if len(out_shape) not in ELTWISE_RANKS:
        return f"{len(out_shape)}-D elementwise operation"
    values = {t: constant_value(g, t) for t in (a, b)}
    consts = [t for t in (a, b) if values[t] is not None]
    if len(consts) == 2:
        return "both operands are constant (constant folding leaves this to the CPU)"
    if n.op_type == "Div" and consts:   # legalize's sub_div_const takes x / c
        return "no accelerator op for Div by a constant here"
    extra = []
    if len(consts) == 1:
        data = b if consts[0] == a else a
        if g.shape(data) != out_shape:
            return "the constant broadcasts the tensor operand to a larger shape"
        if len(values[consts[0]].shape) > len(out_shape):
            return "the constant has a higher rank than the tensor"
        inputs = [data]
        weights = {"operand": values[consts[0]].astype(np.float32)}
        dq = None if g.is_const(consts[0]) else const_dq(g, consts[0])
        if dq is not None and len(g.consumers.get(consts[0], ())) == 1:
            extra = [dq]   # a QDQ model's DQ of a constant: the operand's dequantized fp32 value
    else:
        # x[N,C,H,W] * s[N,C,1,1] (squeeze-and-excitation): operands of the output's rank broadcast
        # the same way in any storage order both share, so the layout keeps them aligned
        sa, sb = g.shape(a), g.shape(b)
        if len(sa) != len(out_shape) or len(sb) != len(out_shape):
            return (f"operands of shapes {sa} and {sb} broadcast across ranks (the accelerator "
                    f"broadcasts operands of the same rank)")
        # the leading axis of a 2-D/3-D tensor holds rows (heads of [H, T, T] attention scores
        # plus a [1, 1, T] mask), not images: a broadcast there is like any other
        if len(out_shape) > 3 and (sa[0] != out_shape[0] or sb[0] != out_shape[0]):
            return f"operands of shapes {sa} and {sb} broadcast along the batch axis"
        inputs, weights = [a, b], {}
    reason = batch_limit(g, n.output[0], target, spatial=False)
    if reason:
        return reason
    # a Div of two tensors: Mul2D with divide = 1, which exists only in fp32 (qdq_f32chain drops it elsewhere)
    attrs = {"divide": 1} if n.op_type == "Div" else {}
    grp = Group(op, "mrvl.sum" if op == "Sum2D" else "mrvl.mul", [n] + extra, inputs, n.output[0], attrs, weights)
    channels = out_shape[1] if len(out_shape) >= 2 else 1
    if n.op_type != "Div":   # a Div may go back to the CPU (qdq_f32chain): its reader stays a layer of its own
        _absorb_activation(g, grp, channels, target)
    return grp


# ------------------------------------------------------------------ data movement
def build_concat(g: GraphIndex, n: onnx.NodeProto, target: Target):
    reason = float_static(g, list(n.input) + [n.output[0]])
    if reason:
        return reason
    rank = len(g.shape(n.output[0]))
    if rank not in CONCAT_RANKS:
        return f"{rank}-D concat"
    axis = attr(n, "axis", 1) % rank
    if axis == 0:
        return "concat on the batch axis"
    # constant operands (a ViT class token before the patch tokens) travel as layer weights
    consts = {p: np.asarray(g.const(t), dtype=np.float32) for p, t in enumerate(n.input) if g.is_const(t)}
    if len(consts) == len(n.input):
        return "every operand is a constant"
    return Group("Concat", "mrvl.concat", [n], [t for t in n.input if not g.is_const(t)], n.output[0],
                 {"axis": axis, "num_inputs": len(n.input)}, {f"const{p}": c for p, c in consts.items()})


def build_reshape(g: GraphIndex, n: onnx.NodeProto, target: Target):
    reason = float_static(g, [n.input[0], n.output[0]])
    if reason:
        return reason
    if not g.shape(n.input[0]) or not g.shape(n.output[0]):   # PLCMOS' score: Reshape([1, 1] -> [])
        return "reshape from or to a 0-D tensor (a scalar result stays on the CPU)"
    reason = image_batch_moved(g.shape(n.input[0]), g.shape(n.output[0]), model_images(g))
    if reason:
        return reason
    return Group("Reshape", "mrvl.reshape", [n], [n.input[0]], n.output[0],
                 {"shape": list(g.shape(n.output[0]))})


ACTIVATION_CARRIERS = ("Conv2D", "FC", "Sum2D", "Mul2D")


def activation_through_concat(g: GraphIndex, grp: Group, producer_of: Dict[str, Group], target: Target) -> None:
    """act(Concat(a, b, ...)) = Concat(act(a), act(b), ...): when every input of a concat group is
    written by a conv/fc/sum/mul group with no activation yet and read by nothing else, the
    activation after the concat moves into those producers (instead of staying on the CPU alone)."""
    if grp.op != "Concat" or len(set(grp.inputs)) != len(grp.inputs) or grp.weights:
        return
    srcs = [producer_of.get(t) for t in grp.inputs]
    if any(p is None or p.op not in ACTIVATION_CARRIERS or p.attrs.get("activation", "none") != "none"
           for p in srcs):
        return
    if any(t in g.output_set or len(g.consumers.get(t, [])) != 1 for t in grp.inputs):
        return
    shape = g.shape(grp.output)
    channels = shape[1]
    m = steps.activation(g, grp.output, channels, allowed_activations([p.op for p in srcs], target))
    if m is None:
        return
    slope = m.weights.get("slope")
    start = 0
    for t, p in zip(grp.inputs, srcs):
        p.attrs.update(m.attrs)
        p.output_suffix = f"__{m.attrs['activation']}"
        if slope is not None:   # per output channel: each producer takes its slice (channel axis)
            c = g.shape(t)[1]
            p.weights["slope"] = slope[start:start + c] if grp.attrs["axis"] == 1 else slope
            start += c if grp.attrs["axis"] == 1 else 0
    grp.nodes += m.nodes
    grp.output = m.output


PATTERNS: List[Pattern] = [
    Pattern("mrvl.conv2d_nhwc2nhwc", ("Conv",), build_conv, CONV_CHAIN),
    Pattern("mrvl.fc_ni2no", ("Gemm", "MatMul"), build_fc, FC_CHAIN),
    Pattern("mrvl.pool2d_nhwc2nhwc", tuple(_POOLS), build_pool),
    Pattern("mrvl.sum|mrvl.mul", ("Add", "Mul", "Div"), build_eltwise, ("activation",)),
    Pattern("mrvl.concat", ("Concat",), build_concat),
    Pattern("mrvl.reshape", ("Reshape", "Flatten", "Squeeze", "Unsqueeze"), build_reshape),
    Pattern("mrvl.resize_nearest", ("Resize",), build_resize),
    Pattern("mrvl.slice", ("Split", "Slice"), slices.build),
]
ANCHORS: Dict[str, Pattern] = {op: p for p in PATTERNS for op in p.anchors}
