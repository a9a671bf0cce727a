"""Channel slices: ONNX ``Split`` on the channel axis of a 4-D tensor becomes one Mrvl ``Slice2D``
per output, ``Slice`` on the channel axis (step 1) one ``Slice2D``; every parameter must be a
constant. ``Slice2D`` reads channels [start, end) along the channel axis of the stored layout
(3 for NHWC, 1 for NCHW): like a Concat it runs on the storage needing the fewest conversions.

    mrvl.slice   Split(x[N, C, H, W], axis=1) -> Slice2D x k  |  Slice(x, starts, ends, axes=[1])
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np
import onnx

from .. import opset
from ..graph_index import GraphIndex, attr, slice_bounds
from ..target import Target
from .groups import Group, batch_limit, float_static

CHANNEL = 1   # logical (NCHW) channel axis


def _split_sizes(g: GraphIndex, n: onnx.NodeProto, channels: int):
    """The channel count of each output of a Split, or the reason they are not static."""
    if len(n.input) > 1 and n.input[1]:
        if not g.is_const(n.input[1]):
            return "split sizes are not a constant"
        return [int(v) for v in np.asarray(g.const(n.input[1])).reshape(-1)]
    if attr(n, "split") is not None:
        return [int(v) for v in attr(n, "split")]
    parts = int(attr(n, "num_outputs", len(n.output)))
    if attr(n, "num_outputs") is not None:   # opset 18: the last chunk may be smaller
        chunk = -(-channels // parts)
        return [chunk] * (parts - 1) + [channels - chunk * (parts - 1)]
    if channels % parts:
        return f"{channels} channels do not split equally into {parts} outputs"
    return [channels // parts] * parts


def _common_checks(g: GraphIndex, n: onnx.NodeProto, target: Target, what: str) -> Optional[str]:
    reason = float_static(g, [n.input[0]] + [o for o in n.output if o])
    if reason:
        return reason
    if g.is_const(n.input[0]):
        return f"{what} of a constant"
    rank = len(g.shape(n.input[0]))
    if rank != 4:
        return f"{rank}-D {what} (the accelerator slices channels of 4-D tensors)"
    return batch_limit(g, n.input[0], target)


def _group(g: GraphIndex, n: onnx.NodeProto, slices: List[Tuple[str, int, int]]):
    in_shape = g.shape(n.input[0])
    for o, start, end in slices:
        if end <= start:
            return f"an empty channel slice [{start}, {end})"
        want = list(in_shape)
        want[CHANNEL] = end - start
        if g.shape(o) != want:
            return f"output '{o}' has shape {g.shape(o)}, not {want}"
    used = [s for s in slices if s[0] in g.output_set or g.consumers.get(s[0])] or slices[:1]
    return Group("Slice2D", "mrvl.slice", [n], [n.input[0]], used[0][0], {"slices": used})


def build_split(g: GraphIndex, n: onnx.NodeProto, target: Target):
    reason = _common_checks(g, n, target, "split")
    if reason:
        return reason
    in_shape = g.shape(n.input[0])
    axis = attr(n, "axis", 0) % 4
    if axis != CHANNEL:
        return f"split on axis {axis} (the accelerator slices the channel axis only)"
    slices = split_ranges(g, n, in_shape[CHANNEL], "channels")
    return slices if isinstance(slices, str) else _group(g, n, slices)


def split_ranges(g: GraphIndex, n: onnx.NodeProto, length: int, what: str = "entries"):
    """[(output, start, end)] of a Split of an axis of ``length`` (unused outputs left out), or
    the reason it cannot be taken."""
    sizes = _split_sizes(g, n, length)
    if isinstance(sizes, str):
        return sizes
    if len(sizes) != len(n.output) or sum(sizes) != length:
        return f"split sizes {sizes} do not cover {length} {what} in {len(n.output)} outputs"
    ranges, start = [], 0
    for o, size in zip(n.output, sizes):
        if o:
            ranges.append((o, start, start + size))
        start += size
    return ranges


def _slice_params(g: GraphIndex, n: onnx.NodeProto):
    if len(n.input) == 1:   # opset < 10: attributes
        starts, ends = attr(n, "starts"), attr(n, "ends")
        axes = attr(n, "axes", list(range(len(starts or []))))
        return starts, ends, axes, [1] * len(starts or [])
    if any(t and not g.is_const(t) for t in n.input[1:]):
        return "slice parameters are not constants"
    vals = [None if i >= len(n.input) or not n.input[i] else
            [int(v) for v in np.asarray(g.const(n.input[i])).reshape(-1)] for i in range(1, 5)]
    starts, ends, axes, steps = vals
    return starts, ends, axes if axes is not None else list(range(len(starts))), steps or [1] * len(starts)


def build_slice(g: GraphIndex, n: onnx.NodeProto, target: Target):
    reason = _common_checks(g, n, target, "slice")
    if reason:
        return reason
    params = _slice_params(g, n)
    if isinstance(params, str):
        return params
    if params[0] is None or params[1] is None:
        return "slice without starts/ends"
    in_shape = g.shape(n.input[0])
    spatial = spatial_slice_conv(g, n, params, target)
    if not isinstance(spatial, str):
        return spatial
    start, end = 0, in_shape[CHANNEL]
    for s, e, ax, st in zip(*params):
        ax %= 4
        dim = in_shape[ax]
        if st != 1:
            return f"slice with step {st} (the accelerator slices with step 1)"
        s, e = slice_bounds(s, e, dim)
        if ax == CHANNEL:
            start, end = s, e
        elif (s, e) != (0, dim):
            return f"slice on axis {ax} (the accelerator slices the channel axis only)"
    return _group(g, n, [(n.output[0], start, end)])


SLICE_READERS = ("Conv", "Concat")   # a spatial slice becomes a conv only next to accelerator work


def _read_by_accelerator_ops(g: GraphIndex, t: str, depth: int = 2) -> bool:
    readers = g.consumers.get(t, [])
    if t in g.output_set or not readers:
        return False
    return all(c.op_type in SLICE_READERS or (c.op_type == "Slice" and depth > 0 and c.input[0] == t
                                              and _read_by_accelerator_ops(g, c.output[0], depth - 1))
               for c in readers)


def spatial_slice_conv(g: GraphIndex, n: onnx.NodeProto, params, target: Target):
    """A Slice on H and/or W (start a, step s; channels and batch whole) as a depthwise Conv2D with a
    one-hot ``(a_h+1) x (a_w+1)`` kernel (tap at ``a``), stride ``s``, no padding: output ``j`` reads
    ``a + j*s``, exactly (x * 1 plus zeros). YOLOv5's / YOLOX's Focus stem (``x[..., ::2, ::2]``, ...)
    and the start crops of legalize's kernel tiling then stay on the accelerator. Only when every
    reader is a Conv or a Concat, or a Slice read by those (a lone slice between CPU ops is no
    accelerator work); the group or the reason."""
    in_shape, out = g.shape(n.input[0]), n.output[0]
    rng = {ax: (0, d, 1) for ax, d in enumerate(in_shape)}
    for s, e, ax, st in zip(*params):
        ax %= 4
        dim = in_shape[ax]
        if st < 1:
            return f"slice with step {st}"
        s, e = slice_bounds(s, e, dim)
        rng[ax] = (s, e, st)
    if any(rng[ax] != (0, in_shape[ax], 1) for ax in (0, CHANNEL)):
        return "not a spatial slice"
    if all(rng[ax] == (0, in_shape[ax], 1) for ax in (2, 3)):
        return "no spatial slice"
    if not _read_by_accelerator_ops(g, out):
        return f"a spatial slice read by other ops than {'/'.join(SLICE_READERS)} (or slices read by them)"
    kernel, strides = [], []
    for ax in (2, 3):
        a, e, st = rng[ax]
        count, k = len(range(a, e, st)), a + 1
        if k > target.max_kernel or st > target.max_stride:
            return f"a spatial slice from {a} with step {st} exceeds the one-hot conv limits"
        if count < 1 or (in_shape[ax] - k) // st + 1 != count:
            return f"a spatial slice [{a}:{e}:{st}] that is not a strided conv window"
        kernel.append(k)
        strides.append(st)
    c = in_shape[CHANNEL]
    if c > target.max_channels:
        return f"{c} channels exceed the limit {target.max_channels}"
    w = np.zeros((c, 1, kernel[0], kernel[1]), np.float32)
    w[:, 0, kernel[0] - 1, kernel[1] - 1] = 1.0
    return Group("Conv2D", "mrvl.conv2d_nhwc2nhwc", [n], [n.input[0]], out,
                 dict(strides=strides, pads=[0, 0, 0, 0], dilations=[1, 1], group=c, kernel_shape=kernel,
                      channels=c), {"W": w})


def build(g: GraphIndex, n: onnx.NodeProto, target: Target):
    return (build_split if n.op_type == "Split" else build_slice)(g, n, target)


def materialize(m, grp: Group) -> None:
    """One Slice2D per used output, on the storage of the input needing the fewest conversions
    (NHWC on a tie when an output feeds accelerator ops); the axis follows that storage."""
    src = grp.inputs[0]
    outs = [o for o, _, _ in grp.attrs["slices"]]
    perm = m.common_perm([src], next((o for o in outs if m._feeds_mrvl(o)), outs[0]))
    x = m.get(src, perm, for_mrvl=True, origin=grp.origin)
    axis = list(perm).index(CHANNEL) if perm else CHANNEL
    folded = [a for a in m.alias_of.get(src, []) if a not in m.alias_owner]
    for k, (o, start, end) in enumerate(grp.attrs["slices"]):
        out = m.define(o, perm, mrvl=True)
        name = m.fresh(f"mrvl_{grp.anchor.name}")
        m.mrvl_producer[out] = name
        if k == 0:
            m.mrvl_name[grp.anchor.name] = name
            for a in folded:
                m.alias_owner[a] = name
        m.add(opset.make_node("Slice2D", [x], [out], name=name, origin=(folded if k == 0 else []) + grp.origin,
                              attrs={"axis": axis, "start": int(start), "end": int(end)},
                              composite=grp.composite), perm)
        if o in m.g.output_set and out != o:
            m.get(o, None, for_mrvl=True, origin=grp.origin)


slice_params = _slice_params
