"""A ConvTranspose upsampling one axis by a stride above ``resize_max_scale`` (an iSTFT / overlap-add
as a ConvTranspose1d: DCCRN's ConviSTFT, stride 32-256; vocoder / decoder upsamplers), after
conv_1d_to_2d: ``x [N, C, 1, T]``, kernel ``[1, K]``, stride ``[1, s]`` -> one stride-1 Conv computing
every output phase as a channel, then the phases interleaved (depth-to-space along the axis).

With the kernel zero-extended to ``K' = m s`` taps, output sample ``n s + j`` (before the pads are
cut) is ``sum_c sum_q x[c, n - q] W[c, o, q s + j]``: a Conv over x with ``m`` taps (pads m-1 on both
sides, weight ``Wc[o s + j, c, 0, t] = W[c, o, (m-1-t) s + j]``) giving ``[N, O s, 1, T + m - 1]``;
``Reshape [N, O, s, T+m-1] -> Transpose [N, O, T+m-1, s] -> Reshape [N, O, 1, (T+m-1) s]`` puts the
phases in place, the ConvTranspose's own pads / output_padding are then a crop at both ends (a
depthwise one-hot Conv, as crop_to_conv writes it, when within ``max_kernel``). Exact (the same
products, summed in another order); the MACs are the ConvTranspose's times ``K' / K``. Taken when
convtranspose_phases cannot (stride above ``resize_max_scale``), the phase channels ``O s`` and the
taps ``m`` fit the target; group 1, dilation 1, constant weights."""
from __future__ import annotations

from typing import Optional

import numpy as np
from onnx import TensorProto

from .base import Match, attr, inp, reshape

NAME = "convtranspose_phase_conv"
OPS = ("ConvTranspose",)


def match(node, g) -> Optional[Match]:
    if node.op_type != "ConvTranspose" or node.domain not in ("", "ai.onnx"):
        return None
    sx, sy, w = g.shape(node.input[0]), g.shape(node.output[0]), g.const(node.input[1])
    if sx is None or sy is None or w is None or len(sx) != 4 or w.ndim != 4:
        return None
    return Match([node], {"sx": sx, "sy": sy})


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    sx, sy = m.data["sx"], m.data["sy"]
    w = g.const(node.input[1])
    if g.dtype(node.input[0]) != TensorProto.FLOAT:
        return "not float32"
    if inp(node, 2) and not g.is_const(node.input[2]):
        return "bias is not constant"
    s = list(attr(node, "strides") or [1, 1])
    if attr(node, "group", 1) != 1 or any(d != 1 for d in (attr(node, "dilations") or [1, 1])):
        return "grouped or dilated"
    if attr(node, "auto_pad", "NOTSET") != "NOTSET" or attr(node, "output_shape") is not None:
        return "auto_pad / output_shape (explicit pads only)"
    if w.shape[2] != 1 or s[0] != 1 or sx[2] != 1:
        return "not a 1-D ConvTranspose along W (kernel / stride / height 1 on H)"
    stride, k = s[1], w.shape[3]
    if stride <= target.resize_max_scale:
        return f"stride {stride} within resize_max_scale: convtranspose_phases takes it"
    pads = list(attr(node, "pads") or [0, 0, 0, 0])
    op = list(attr(node, "output_padding") or [0, 0])
    if pads[0] or pads[2] or op[0]:
        return "pads on H"
    taps = -(-k // stride)
    o = w.shape[1]
    if o * stride > target.max_channels or taps > target.max_kernel or taps - 1 > target.max_pad["conv"]:
        return (f"{o * stride} phase channels / {taps} taps / pads {taps - 1} beyond the target "
                f"(max_channels {target.max_channels}, max_kernel {target.max_kernel})")
    full = (sx[3] + taps - 1) * stride
    begin, end = pads[1], full - pads[1] - sy[3]
    if end < 0 or begin + end + 1 > target.max_kernel and (begin or end):
        return f"a crop of {begin} / {end} samples beyond max_kernel"
    m.data.update(stride=stride, taps=taps, crop=(begin, end), full=full)
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    n, c, _, t = m.data["sx"]
    s, taps, (begin, end) = m.data["stride"], m.data["taps"], m.data["crop"]
    w = g.const(node.input[1])                         # [C, O, 1, K]
    o, k = w.shape[1], w.shape[3]
    ext = np.zeros((c, o, taps * s), w.dtype)
    ext[..., :k] = w[:, :, 0, :]
    wc = ext.reshape(c, o, taps, s)[:, :, ::-1, :]       # [C, O, t (flipped), j]
    wc = np.ascontiguousarray(wc.transpose(1, 3, 0, 2).reshape(o * s, c, 1, taps))
    ins = [node.input[0], g.add_const(f"{node.name}/W_phases", wc)]
    if inp(node, 2):
        ins.append(g.add_const(f"{node.name}/B_phases", np.repeat(g.const(node.input[2]), s)))
    origin, dtype = m.origin, g.dtype(node.input[0])
    g.remove(node)
    tp = t + taps - 1
    z = g.fresh(f"{node.output[0]}/phases")
    g.make("Conv", ins, [z], near=node, origin=origin, name=node.name, kernel_shape=[1, taps],
           pads=[0, taps - 1, 0, taps - 1], strides=[1, 1], dilations=[1, 1], group=1)
    g.set_shape(z, [n, o * s, 1, tp], dtype)
    z4 = reshape(g, z, [n, o, s, tp], near=node, origin=origin, tag="phase_split")
    zt = g.fresh(f"{node.output[0]}/phase_t")
    g.make("Transpose", [z4], [zt], near=node, origin=origin, name=f"{node.name}/phase_transpose", perm=[0, 1, 3, 2])
    g.set_shape(zt, [n, o, tp, s], dtype)
    if not (begin or end):
        reshape(g, zt, [n, o, 1, tp * s], near=node, origin=origin, out=node.output[0], tag="phase_place")
    else:
        y = reshape(g, zt, [n, o, 1, tp * s], near=node, origin=origin, tag="phase_place")
        eye = np.zeros((o, 1, 1, begin + end + 1), np.float32)
        eye[:, 0, 0, begin] = 1.0
        g.make("Conv", [y, g.add_const(f"{node.name}/W_crop", eye)], [node.output[0]], near=node, origin=origin,
               name=f"{node.name}/phase_crop", kernel_shape=[1, begin + end + 1], group=o, pads=[0, 0, 0, 0],
               strides=[1, 1])
    return f"1-D ConvTranspose stride {s}, kernel {k} -> stride-1 Conv of {taps} taps x {s} phases + depth-to-space"
