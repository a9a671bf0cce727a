"""2-D ConvTranspose -> one stride-1 Conv per output phase, the phases interleaved by Concat and
reshapes (sub-pixel decomposition; DB text-detection heads, U-Net / CenterNet decoders).

Along an axis with stride s, kernel k, begin pad p, input I and output O (O a multiple of s), the
outputs o = s*q + r of phase r only see the taps t = t0, t0+s, ... (t0 = (r+p) mod s):
``y[s*q + r] = sum_m x[q + e - m] * w[t0 + m*s]`` with e = (r+p) // s, i.e. a stride-1 Conv on x with
the flipped sub-kernel, begin pad M-1-e and the end pad that gives O/s outputs. The phases are put
back along W, then along H, as data moves only (exact, and free of arithmetic):
- along W: the phases' Concat on channels, ``[N, s*C, H, W]``, viewed as ``[N, C, H, s*W]``
  (``Reshape [N, s, C, H, W] -> Transpose (0, 2, 3, 4, 1) -> Reshape``: in the accelerator's NHWC
  storage a pixel's s*C channels are already s pixels of C, so fuse makes them reshapes);
- along H: a Concat on W, ``[N, C, H, s*W']``, viewed as ``[N, C, s*H, W']`` (a Reshape).
Where every phase along W has the same taps count and pads (kernel == stride: the DB head's 2x2/s2),
group is 1 and C > 1, the phases of a row are one Conv with s*C output channels (no Concat). The
phases partition the output, so the bias goes into every phase Conv. Per-channel Add/Mul constants and an
inference BatchNormalization right after the ConvTranspose (the bias Add paddle2onnx writes) fold
into the weights first; an element-wise activation that alone reads the result is applied to each
phase (it commutes with the interleave), so fuse puts it in the Convs' epilogue.
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np
import onnx

from .base import Match, attr, inp, is_float, reshape

NAME = "convtranspose_phases"
OPS = ("ConvTranspose",)


def _axis_phases(k: int, s: int, p: int, n_in: int, n_out: int):
    """Per phase r: (taps of the flipped sub-kernel, begin pad, end pad), or a reason."""
    q = n_out // s
    phases = []
    for r in range(s):
        c = r + p
        taps = list(range(c % s, k, s))
        if not taps:
            return "kernel smaller than the stride (a phase with no taps)"
        m = len(taps)
        begin = m - 1 - c // s
        end = q - n_in - begin + m - 1
        if begin < 0 or end < 0:
            return f"phase {r} would need a negative pad ({begin}, {end})"
        phases.append((taps[::-1], begin, end))
    return phases


def plan_phases(k: List[int], s: List[int], pads: List[int], sx, sy, target):
    """Per spatial axis the phases of a 2-D ConvTranspose (kernel ``k``, strides ``s``, begin pads
    ``pads[:2]``, input / output shapes ``sx`` / ``sy``), or the reason the target cannot take them."""
    if max(s) > target.resize_max_scale:
        return f"stride {s} > resize_max_scale {target.resize_max_scale}"
    phases = []
    for a in range(2):
        if sy[2 + a] % s[a]:
            return f"output size {sy[2 + a]} not a multiple of the stride {s[a]}"
        ph = _axis_phases(k[a], s[a], pads[a], sx[2 + a], sy[2 + a])
        if isinstance(ph, str):
            return ph
        if any(max(b, e) > target.max_pad["conv"] for _, b, e in ph):
            return f"phase pads > max_pad {target.max_pad['conv']}"
        phases.append(ph)
    return phases


def _per_channel(g, node, out: str, c: int):
    """(scale, shift) [c] of a per-channel Add/Mul with a constant or an inference
    BatchNormalization reading ``out``, else None."""
    if node.domain not in ("", "ai.onnx"):                     # (neither widens a 4-D tensor)
        return None
    if node.op_type == "BatchNormalization":
        if any(not g.is_const(i) for i in node.input[1:5]) or attr(node, "training_mode", 0) \
                or attr(node, "spatial", 1) == 0 or any(o and g.used(o) for o in node.output[1:]):
            return None
        scale, bias, mean, var = (g.const(i).astype(np.float64).reshape(-1) for i in node.input[1:5])
        k = scale / np.sqrt(var + attr(node, "epsilon", 1e-5))
        return k, bias - mean * k
    if node.op_type not in ("Add", "Mul") or len(node.input) != 2:
        return None
    other = node.input[1] if node.input[0] == out else node.input[0]
    if other == out or not g.is_const(other):
        return None
    v = g.const(other)
    if v.dtype != np.float32 or v.ndim > 4:
        return None
    if v.size == 1:
        v = np.full(c, float(v.reshape(-1)[0]), np.float64)
    elif (1,) * (4 - v.ndim) + tuple(v.shape) != (1, c, 1, 1):
        return None
    v = v.reshape(-1).astype(np.float64)
    return (v, np.zeros(c)) if node.op_type == "Mul" else (np.ones(c), v)


def match(node, g) -> Optional[Match]:
    if node.op_type != "ConvTranspose" or node.domain not in ("", "ai.onnx"):
        return None
    sx, sy = g.shape(node.input[0]), g.shape(node.output[0])
    if sx is None or sy is None or len(sx) != 4:
        return None
    return Match([node], {"sx": sx, "sy": sy})


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    sx, sy = m.data["sx"], m.data["sy"]
    if not g.is_const(node.input[1]) or (inp(node, 2) and not g.is_const(node.input[2])):
        return "weight or bias is not constant"
    if not is_float(g, node.input[0]) or g.const(node.input[1]).dtype != np.float32:
        return "not float32"
    if g.opset < 11:
        return f"opset {g.opset} has no Resize with roi/scales inputs"
    if any(d != 1 for d in (attr(node, "dilations") or [1, 1])):
        return "dilated ConvTranspose"
    w = g.const(node.input[1])
    k = list(attr(node, "kernel_shape") or w.shape[2:])
    s = list(attr(node, "strides") or [1, 1])
    pads = list(attr(node, "pads") or [0, 0, 0, 0])
    auto = attr(node, "auto_pad", "NOTSET") or "NOTSET"
    if attr(node, "output_shape") or auto != "NOTSET":
        # implicit pads: the total is fixed by the (inferred) output size; onnxruntime and the
        # spec split an odd total differently, so only an even one (same on both sides) is taken
        op = list(attr(node, "output_padding") or [0, 0])
        for a in range(2):
            total = s[a] * (sx[2 + a] - 1) + op[a] + k[a] - sy[2 + a]
            if total < 0 or total % 2 or (auto == "VALID" and total):
                return f"implicit pads ({auto}, output_shape) with total {total} on axis {2 + a}"
            pads[a], pads[a + 2] = total // 2, total // 2
    if list(w.shape[2:]) != k:
        return "kernel_shape differs from the weight"
    phases = plan_phases(k, s, pads, sx, sy, target)
    if isinstance(phases, str):
        return phases
    m.data.update(k=k, s=s, phases=phases)
    return None


# element-wise ops of one tensor (Clip: constant bounds) that commute with the interleave
ACTIVATIONS = ("Relu", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Elu", "Selu",
               "Softplus", "Clip", "Gelu")


def _activation(g, out: str):
    """The element-wise activation alone reading ``out``, or None."""
    nxt = g.only_consumer(out)
    if nxt is None or nxt.op_type not in ACTIVATIONS or nxt.domain not in ("", "ai.onnx") \
            or nxt.input[0] != out or len(nxt.output) != 1 or any(i == out for i in nxt.input[1:]) \
            or not all(g.is_const(i) for i in nxt.input[1:] if i):
        return None
    return nxt


def rewrite(m: Match, g) -> str:
    node = m.node
    group = attr(node, "group", 1)
    wt = g.const(node.input[1]).astype(np.float64)           # [Cin, Cout/g, kh, kw]
    cin, cog = wt.shape[:2]
    cout = cog * group
    wc = wt.reshape(group, cin // group, cog, *wt.shape[2:]).transpose(0, 2, 1, 3, 4)
    wc = wc.reshape(cout, cin // group, *wt.shape[2:])        # Conv layout [Cout, Cin/g, kh, kw]
    b = g.const(node.input[2]).astype(np.float64) if inp(node, 2) else np.zeros(cout)
    nodes, out = [node], node.output[0]
    while True:                                               # fold per-channel Add / Mul
        nxt = g.only_consumer(out)
        v = _per_channel(g, nxt, out, cout) if nxt is not None else None
        if v is None:
            break
        wc, b = wc * v[0].reshape(-1, 1, 1, 1), b * v[0] + v[1]
        nodes.append(nxt)
        out = nxt.output[0]
    (sh, sw), sy, x = m.data["s"], m.data["sy"], node.input[0]
    (ph_h, ph_w), single = m.data["phases"], sh * sw == 1
    act = None if single else _activation(g, out)
    if act is not None:
        nodes.append(act)
        out = act.output[0]
    origin = Match(nodes).origin
    for n in nodes:
        g.remove(n)
    dtype = np.float32
    # one Conv for a row's phases: the same taps count and pads along W, no groups; a single output
    # channel stays s Convs of one output (a dot product per pixel, the simulator's one-output path)
    stack = sw > 1 and group == 1 and cout > 1 and len({(len(t), bw, ew) for t, bw, ew in ph_w}) == 1
    bias = g.add_const(f"{node.name}/B", np.tile(b, sw if stack else 1).astype(dtype))
    shape = [sy[0], cout, sy[2] // sh, sy[3] // sw]
    rows: List[str] = []
    for rh, (th, bh, eh) in enumerate(ph_h):
        cols: List[str] = []
        for k, phases in enumerate([ph_w] if stack else [[p] for p in ph_w]):   # one Conv each
            tag = f"p{rh}" if stack else f"p{rh}{k}"
            wsub = np.concatenate([wc[:, :, th][:, :, :, tw] for tw, _, _ in phases]).astype(dtype)
            _, bw, ew = phases[0]
            z = out if single else g.fresh(f"{out}/{tag}")
            g.make("Conv", [x, g.add_const(f"{node.name}/W_{tag}", wsub), bias], [z], near=node,
                   origin=origin, name=f"{node.name}/{tag}" if not single else node.name,
                   kernel_shape=list(wsub.shape[2:]), strides=[1, 1], dilations=[1, 1],
                   pads=[bh, bw, eh, ew], group=group)
            g.set_shape(z, [shape[0], wsub.shape[0]] + shape[2:], g.dtype(x))
            if act is not None:
                z = _apply(g, act, z, node, origin, [shape[0], wsub.shape[0]] + shape[2:])
            cols.append(z)
        if single:
            return "stride-1 ConvTranspose -> Conv"
        final = out if sh == 1 else None
        if stack:
            rows.append(phases_to_w(g, node, origin, cols[0], sw, shape, f"{node.name}/r{rh}", final))
        else:
            rows.append(_interleave(g, node, origin, cols, 3, shape, f"{out}/r{rh}", f"{node.name}/r{rh}",
                                    final=final))
    if sh > 1:
        shape[3] = sy[3]
        _interleave(g, node, origin, rows, 2, shape, out, f"{node.name}/rows", final=out)
    folded = f", {len(nodes) - 1 - (act is not None)} per-channel Add/Mul/BN folded" \
        if len(nodes) > 1 + (act is not None) else ""
    convs = sh if stack else sh * sw
    moved = f", {act.op_type} applied to each phase" if act is not None else ""
    return f"ConvTranspose stride {sh}x{sw} -> {convs} phase Convs + Concat/reshape interleave{folded}{moved}"


def _apply(g, act, z: str, near, origin, shape) -> str:
    """A copy of the activation node ``act`` reading ``z``; returns its output."""
    y = g.fresh(f"{z}/{act.op_type.lower()}")
    n = onnx.NodeProto()
    n.CopyFrom(act)
    n.input[0] = z
    n.output[0] = y
    n.name = f"{act.name}/{z.rsplit('/', 1)[-1]}"
    g.add(n, near=near, origin=origin)
    g.set_shape(y, shape, g.dtype(z))
    return y


def phases_to_w(g, node, origin, z: str, s: int, shape: List[int], name: str,
                final: Optional[str] = None) -> str:
    """``z [N, s*C, H, W]`` whose channels are (phase r, c) -> ``[N, C, H, s*W]`` with phase r at
    columns r, r+s, ...: Reshape to 5-D, move the phase axis last, Reshape (in NHWC storage the same
    bytes: fuse makes it reshapes)."""
    n, c, h, w = shape
    five = reshape(g, z, [n, s, c, h, w], near=node, origin=origin, tag=f"{name.rsplit('/', 1)[-1]}_5d")
    t = g.fresh(f"{five}/t")
    g.make("Transpose", [five], [t], near=node, origin=origin, name=f"{name}/phase_last", perm=[0, 2, 3, 4, 1])
    g.set_shape(t, [n, c, h, w, s], g.dtype(z))
    return reshape(g, t, [n, c, h, w * s], near=node, origin=origin, out=final,
                   tag=f"{name.rsplit('/', 1)[-1]}_4d")


def _interleave(g, node, origin, parts: List[str], axis: int, shape: List[int], base: str, name: str,
                final: Optional[str] = None) -> str:
    """Phase tensors ``parts`` of 4-D ``shape`` (phase r = index) interleaved along ``axis`` (3: W,
    2: H): along W their channel Concat through ``phases_to_w``; along H their Concat on W viewed
    as ``s`` times the rows."""
    s = len(parts)
    if s == 1:
        return parts[0]
    n, c, h, w = shape
    dtype = g.dtype(parts[0])
    cat = g.fresh(f"{base}/cat{axis}")
    g.make("Concat", parts, [cat], near=node, origin=origin, name=f"{name}/concat", axis=1 if axis == 3 else 3)
    if axis == 3:
        g.set_shape(cat, [n, s * c, h, w], dtype)
        return phases_to_w(g, node, origin, cat, s, shape, name, final)
    g.set_shape(cat, [n, c, h, s * w], dtype)
    return reshape(g, cat, [n, c, s * h, w], near=node, origin=origin, out=final or g.fresh(f"{base}/rows"),
                   tag="rows_4d")


# shared with qdq_convtranspose (the QDQ form)
interleave = _interleave
