"""2-D ConvTranspose -> one stride-1 Conv per output phase, interleaved by nearest Resize, a 0/1
phase mask and Add (sub-pixel decomposition; DB text-detection heads, U-Net / CenterNet decoders).

Along an axis with stride s, kernel k, begin pad p, input I and output O (O a multiple of s), the
outputs o = s*q + r of phase r only see the taps t = t0, t0+s, ... (t0 = (r+p) mod s):
``y[s*q + r] = sum_m x[q + e - m] * w[t0 + m*s]`` with e = (r+p) // s, i.e. a stride-1 Conv on x with
the flipped sub-kernel, begin pad M-1-e and the end pad that gives O/s outputs. The phases are put
back along W, then along H: ``Resize(nearest, asymmetric, floor)`` by s on that axis (o reads
o // s), times a constant 0/1 mask [1, 1, 1, O_w] / [1, 1, O_h, 1] of the phase, summed (the W step
runs at O_h/s rows; the masks are a few KB). The masks partition the output, so the bias goes into
every phase Conv. Per-channel Add/Mul constants and an inference BatchNormalization right after the
ConvTranspose (the bias Add paddle2onnx writes) fold into the weights first. Kernel == stride (no
overlap, the common 2x2/s2 head) gives 1x1 Convs.
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np

from .base import Match, attr, inp, is_float

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
    origin = Match(nodes).origin
    for n in nodes:
        g.remove(n)
    (sh, sw), sy, x = m.data["s"], m.data["sy"], node.input[0]
    (ph_h, ph_w), single = m.data["phases"], sh * sw == 1
    dtype = np.float32
    bias = g.add_const(f"{node.name}/B", b.astype(dtype))
    shape = [sy[0], cout, sy[2] // sh, sy[3] // sw]
    rows: List[str] = []
    for rh, (th, bh, eh) in enumerate(ph_h):
        cols: List[str] = []
        for rw, (tw, bw, ew) in enumerate(ph_w):
            tag = f"p{rh}{rw}"
            wsub = wc[:, :, th][:, :, :, tw].astype(dtype)
            z = out if single else g.fresh(f"{out}/{tag}")
            g.make("Conv", [x, g.add_const(f"{node.name}/W_{tag}", wsub), bias], [z], near=node,
                   origin=origin, name=f"{node.name}/{tag}" if not single else node.name,
                   kernel_shape=list(wsub.shape[2:]), strides=[1, 1], dilations=[1, 1],
                   pads=[bh, bw, eh, ew], group=group)
            g.set_shape(z, shape, g.dtype(x))
            cols.append(z)
        if single:
            return "stride-1 ConvTranspose -> Conv"
        rows.append(_interleave(g, node, origin, cols, 3, shape, f"{out}/r{rh}", f"{node.name}/r{rh}",
                                final=out if sh == 1 else None))
    if sh > 1:
        shape[3] = sy[3]
        _interleave(g, node, origin, rows, 2, shape, out, f"{node.name}/rows", final=out)
    folded = f", {len(nodes) - 1} per-channel Add/Mul/BN folded" if len(nodes) > 1 else ""
    return f"ConvTranspose stride {sh}x{sw} -> {sh * sw} phase Convs + Resize/mask/Add{folded}"


def _interleave(g, node, origin, parts: List[str], axis: int, shape: List[int], base: str, name: str,
                final: Optional[str] = None) -> str:
    """Phase tensors ``parts`` (phase r = index) interleaved along ``axis`` of 4-D ``shape``:
    sum_r Resize(part_r, s on axis) * mask_r, the mask [1,1,H,1] or [1,1,1,W] one where i % s == r."""
    s = len(parts)
    if s == 1:
        return parts[0]
    scales = np.ones(4, np.float32)
    scales[axis] = s
    scales = g.add_const(f"{node.name}/scales", scales)
    big = list(shape)
    big[axis] *= s
    terms = []
    for r, part in enumerate(parts):
        up, masked = g.fresh(f"{part}/up{axis}"), g.fresh(f"{part}/masked{axis}")
        g.make("Resize", [part, "", scales], [up], near=node, origin=origin, name=f"{name}/resize{r}",
               mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
        mshape = [1, 1, 1, 1]
        mshape[axis] = big[axis]
        mask = np.zeros(mshape, np.float32)
        idx = [slice(None)] * 4
        idx[axis] = slice(r, None, s)
        mask[tuple(idx)] = 1
        g.make("Mul", [up, g.add_const(f"{name}/mask{r}", mask)], [masked], near=node, origin=origin,
               name=f"{name}/mask{r}")
        for t in (up, masked):
            g.set_shape(t, big, 1)
        terms.append(masked)
    acc = terms[0]
    for i, t in enumerate(terms[1:], 1):
        dst = final if (final is not None and i == s - 1) else g.fresh(f"{base}/sum{i}")
        g.make("Add", [acc, t], [dst], near=node, origin=origin, name=f"{name}/sum{i}")
        g.set_shape(dst, big, 1)
        acc = dst
    return acc


# shared with qdq_convtranspose (the QDQ form)
interleave = _interleave
