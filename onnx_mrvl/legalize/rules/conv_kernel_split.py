"""Conv kernels larger than target.max_kernel -> a sum of Convs over kernel tiles (ONNC
SplitConvPass). Each tile convolves the input window its offset sees (a Slice where the tile
starts inside the image, reduced pads otherwise); the bias is added once. A tile whose pads exceed
``max_pad["conv"]`` (an edge tile of a long kernel: wav2vec2's positional conv, k = 128 pad 64) reads
its input through ``Pad`` nodes of at most ``max_pad`` each (pad_to_conv runs them on the
accelerator), shared by the tiles needing the same extra padding of the same input.

A stride above target.max_stride is handled here too, first: space-to-depth + a stride-1 Conv
(conv_stride_s2d.py); a kernel still too large is then split on the next sweep."""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np
from onnx import helper

from . import conv_stride_s2d as s2d
from .base import Match, attr, inp, pad_chain

NAME = "conv_kernel_split"
OPS = ("Conv",)


def _chunks(k: int, limit: int) -> List[Tuple[int, int]]:
    n = -(-k // limit)
    base, extra = divmod(k, n)
    out, start = [], 0
    for i in range(n):
        size = base + (1 if i < extra else 0)
        out.append((start, start + size))
        start += size
    return out


def match(node, g) -> Optional[Match]:
    if node.op_type != "Conv" or node.domain not in ("", "ai.onnx"):
        return None
    big_stride = s2d.match(node, g)
    if big_stride is not None:
        big_stride.data["s2d"] = True
        return big_stride
    sw = g.shape(node.input[1])
    if sw is None or len(sw) != 4 or max(sw[2:]) <= g.target.max_kernel:
        return None
    return Match([node])


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    if m.data.get("s2d"):
        reason = s2d.check(m, g, target)
        sw = g.shape(node.input[1])
        if reason is None or max(sw[2:]) <= target.max_kernel:
            return reason
        m.data["s2d"] = False              # the kernel split alone still makes the kernel legal
    if not g.is_const(node.input[1]) or (inp(node, 2) and not g.is_const(node.input[2])):
        return "weight or bias is not constant"
    if g.shape(node.input[0]) is None or g.shape(node.output[0]) is None:
        return "shapes are not static"
    if attr(node, "pads") is None or attr(node, "strides") is None:
        return "attributes not explicit yet"
    if g.opset < 10:
        return "opset < 10 Slice has no input form"
    m.data["max"] = target.max_kernel
    return None


def _window(start, kt, out, stride, dil, size):
    """Input rows a tile reads: (slice begin, slice end, pad begin, pad end)."""
    span = (kt - 1) * dil + 1
    end = start + (out - 1) * stride + span
    begin, stop, pad_b = max(start, 0), min(end, size), max(0, -start)
    if stop < size and (size - begin + pad_b - span) // stride + 1 == out:
        stop = size   # the rows after the last window make no extra output: no end trim (no Slice)
    return begin, stop, pad_b, max(0, end - size)


def _fit(r0, r1, pad, out, stride, dil, size, limit):
    """(leading zero taps, trailing zero taps, window) of the tile of kernel rows [r0, r1): zero
    taps (within ``limit``) stretch its window to the image edges so that it needs no Slice
    (KWS DS-CNN's 10x4 stride-2 first conv). An end cut that changes no output is not made
    (``_window``), so a window still short of the end here does need the trailing taps."""
    start, kt, lead, trail = -pad + r0 * dil, r1 - r0, 0, 0
    if start > 0 and kt + -(-start // dil) <= limit:
        lead = -(-start // dil)
        start, kt = start - lead * dil, kt + lead
    window = _window(start, kt, out, stride, dil, size)
    if window[1] < size:
        end = start + (out - 1) * stride + (kt - 1) * dil + 1
        more = -(-(size - end) // dil)
        if kt + more <= limit:
            trail, kt = more, kt + more
            window = _window(start, kt, out, stride, dil, size)
    return lead, trail, window


def unclean_split(node, g) -> Optional[str]:
    """Why splitting ``node``'s kernel (explicit attributes, static shapes) into tiles would leave
    CPU work behind: a tile that needs a Slice of its input window or pads above max_pad["conv"]
    (None when every tile is a plain Conv on the whole input)."""
    w = g.shape(node.input[1])
    _, _, h, wd = g.shape(node.input[0])
    _, _, ho, wo = g.shape(node.output[0])
    sh, sw = attr(node, "strides")
    dh, dw = attr(node, "dilations") or [1, 1]
    pt, pl, _, _ = attr(node, "pads")
    limit, pad_limit = g.target.max_kernel, g.target.max_pad["conv"]
    for r0, r1 in _chunks(w[2], limit):
        for c0, c1 in _chunks(w[3], limit):
            fr, fc = _fit(r0, r1, pt, ho, sh, dh, h, limit), _fit(c0, c1, pl, wo, sw, dw, wd, limit)
            (ys, ye, pb_, pe_), (xs, xe, qb, qe) = fr[2], fc[2]
            if not (ys < ye and xs < xe):
                continue
            if (ys, ye, xs, xe) != (0, h, 0, wd):
                return f"kernel tile rows {r0}:{r1} cols {c0}:{c1} needs a Slice of its input"
            if max(pb_, pe_, qb, qe) > pad_limit:
                return f"kernel tile rows {r0}:{r1} cols {c0}:{c1} needs pads {[pb_, qb, pe_, qe]}"
    return None


def rewrite(m: Match, g) -> str:
    if m.data.get("s2d"):
        return s2d.rewrite(m, g)
    node = m.node
    w = g.const(node.input[1])
    b = g.const(node.input[2]) if inp(node, 2) else None
    _, _, h, wd = g.shape(node.input[0])
    _, _, ho, wo = g.shape(node.output[0])
    sh, sw = attr(node, "strides")
    dh, dw = attr(node, "dilations") or [1, 1]
    pt, pl, _, _ = attr(node, "pads")
    origin = m.origin
    g.remove(node)
    tiles = []
    for r0, r1 in _chunks(w.shape[2], m.data["max"]):
        for c0, c1 in _chunks(w.shape[3], m.data["max"]):
            rows = _window(-pt + r0 * dh, r1 - r0, ho, sh, dh, h)
            cols = _window(-pl + c0 * dw, c1 - c0, wo, sw, dw, wd)
            if rows[0] < rows[1] and cols[0] < cols[1]:  # a tile seeing only padding adds 0
                fr = _fit(r0, r1, pt, ho, sh, dh, h, m.data["max"])
                fc = _fit(c0, c1, pl, wo, sw, dw, wd, m.data["max"])
                tiles.append(((r0, r1), (c0, c1), fr[2], fc[2], fr[:2] + fc[:2]))
    acc, padded = None, {}
    for k, ((r0, r1), (c0, c1), (ys, ye, pb_, pe_), (xs, xe, qb, qe), zeros) in enumerate(tiles):
        x = node.input[0]
        if (ys, ye, xs, xe) != (0, h, 0, wd):
            xt = g.fresh(f"{x}/tile{k}")
            g.make("Slice", [x, g.add_const(f"{node.name}/t{k}/starts", [ys, xs], np.int64),
                             g.add_const(f"{node.name}/t{k}/ends", [ye, xe], np.int64),
                             g.add_const(f"{node.name}/t{k}/axes", [2, 3], np.int64)], [xt],
                   near=node, origin=origin, name=f"{node.name}/slice{k}")
            sx = g.shape(x)
            g.set_shape(xt, [sx[0], sx[1], ye - ys, xe - xs], g.dtype(x))
            x = xt
        limit = g.target.max_pad["conv"]
        extra = tuple(max(p - limit, 0) for p in (pb_, qb, pe_, qe))
        if any(extra):
            key = (x, extra)
            if key not in padded:
                padded[key] = pad_chain(g, x, extra, limit, near=node, origin=origin, suffix=f"tile{k}_pad",
                                        pads_const=f"{node.name}/t{k}/pads", node_name=f"{node.name}/pad{k}")
            x = padded[key]
            pb_, qb, pe_, qe = (p - e for p, e in zip((pb_, qb, pe_, qe), extra))
        wt = np.pad(w[:, :, r0:r1, c0:c1], [(0, 0), (0, 0), zeros[:2], zeros[2:]])
        ins = [x, g.add_const(f"{node.name}/W{k}", np.ascontiguousarray(wt))]
        if k == 0 and b is not None:
            ins.append(node.input[2])
        y = node.output[0] if len(tiles) == 1 else g.fresh(f"{node.output[0]}/tile{k}")
        conv = g.make("Conv", ins, [y], near=node, origin=origin, name=f"{node.name}/tile{k}")
        for a in node.attribute:
            if a.name not in ("pads", "kernel_shape"):
                conv.attribute.append(a)
        conv.attribute.append(helper.make_attribute("kernel_shape", list(wt.shape[2:])))
        conv.attribute.append(helper.make_attribute("pads", [pb_, qb, pe_, qe]))
        if acc is None:
            acc = y
        else:
            out = node.output[0] if k == len(tiles) - 1 else g.fresh(f"{node.output[0]}/acc{k}")
            g.make("Add", [acc, y], [out], near=node, origin=origin, name=f"{node.name}/add{k}")
            acc = out
    return f"{w.shape[2]}x{w.shape[3]} kernel -> {len(tiles)} tile Convs + {len(tiles) - 1} Add"
