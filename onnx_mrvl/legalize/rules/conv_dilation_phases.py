"""A Conv dilated beyond ``max_dilation`` along H with a one-column kernel (``[k, 1]``, stride 1, no W
pads, H pads multiples of the dilation d) -> the undilated conv over the d phase rows laid side by side:

    x [N, C, H, W] -> (zero rows to H' = ceil(H / d) * d: a Concat) -> Reshape [N, C, H' / d, d * W]
      -> Conv [k, 1], dilation 1, pads [p_top / d, 0, p_bottom / d, 0]
      -> Reshape [N, O, Q * d, W] -> (the first H_out rows)

Row ``h = q * d + r`` of the input is row q of phase r; a dilated tap steps q by one, and a
one-column kernel never mixes the d * W columns, so every output is the same sum of the same products
(exact; the extra zero rows only add outputs that are cut away). SwiftF0's pitch CNN dilates its
[k, 1] frequency convs by 17, 27, 40, 48 over 128 bins: conv_dilation_fold found no factor whose
zero-filled kernel fits ``max_kernel`` (17 is prime), and the 8 convs stayed on the CPU between
3 regions. conv_dilation_fold's zero-filled kernel is the cheaper form when it fits; this rule runs
first only where that one cannot (checked with its ``fold_factor``)."""
from __future__ import annotations

from typing import Optional

import numpy as np
from onnx import helper

from .base import Match, attr, reshape
from .conv_dilation_fold import fold_factor

NAME = "conv_dilation_phases"
OPS = ("Conv",)


def match(node, g) -> Optional[Match]:
    if node.op_type != "Conv" or node.domain not in ("", "ai.onnx"):
        return None
    dil, sw = attr(node, "dilations"), g.shape(node.input[1])
    if dil is None or sw is None or len(sw) != 4 or sw[3] != 1 or dil[0] <= g.target.max_dilation:
        return None
    if fold_factor(int(dil[0]), sw[2], g.target) is not None:   # conv_dilation_fold takes it
        return None
    return Match([node])


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    d = int(attr(node, "dilations")[0])
    pads = list(attr(node, "pads") or [0, 0, 0, 0])
    if attr(node, "auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        return "auto_pad"
    if list(attr(node, "strides") or [1, 1]) != [1, 1]:
        return "strided"
    if pads[1] or pads[3]:
        return "W pads (would pad each phase block, not the image)"
    if pads[0] % d or pads[2] % d:
        return f"H pads {pads[0]}, {pads[2]} are not multiples of the dilation {d}"
    if g.shape(node.input[0]) is None or g.shape(node.output[0]) is None:
        return "shapes are not static"
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    x, y = node.input[0], node.output[0]
    n, c, h, w = g.shape(x)
    o, h_out = g.shape(node.output[0])[1], g.shape(node.output[0])[2]
    d = int(attr(node, "dilations")[0])
    k = g.shape(node.input[1])[2]
    pads = list(attr(node, "pads") or [0, 0, 0, 0])
    hp = -(-h // d) * d
    if hp > h:   # zero rows up to a multiple of d: a Concat with a constant block (its weights)
        t = g.fresh(f"{x}/phase_pad")
        zeros = g.add_const(f"{node.name}/phase_zeros", np.zeros((n, c, hp - h, w), np.float32))
        g.make("Concat", [x, zeros], [t], near=node, origin=m.origin, name=f"{node.name}/phase_pad", axis=2)
        g.set_shape(t, [n, c, hp, w], g.dtype(x))
        x = t
    x = reshape(g, x, [n, c, hp // d, d * w], near=node, origin=m.origin, tag="phases")
    q = hp // d + pads[0] // d + pads[2] // d - (k - 1)
    mid = g.fresh(f"{y}/phases")
    keep = [a for a in node.attribute if a.name not in ("dilations", "pads")]
    g.set_input(node, 0, x)
    g.rename_output(node, 0, mid)
    del node.attribute[:]
    node.attribute.extend(keep + [helper.make_attribute("dilations", [1, 1]),
                                  helper.make_attribute("pads", [pads[0] // d, 0, pads[2] // d, 0])])
    g.set_shape(mid, [n, o, q, d * w], g.dtype(y))
    if q * d == h_out:
        reshape(g, mid, [n, o, h_out, w], near=node, origin=m.origin, out=y, tag="unphase")
    else:
        t = reshape(g, mid, [n, o, q * d, w], near=node, origin=m.origin, tag="unphase")
        consts = [g.add_const(f"{node.name}/rows_{s}", np.array(v, np.int64)) for s, v in
                  (("start", [0]), ("end", [h_out]), ("axis", [2]))]
        g.make("Slice", [t] + consts, [y], near=node, origin=m.origin, name=f"{node.name}/rows")
    g.changed = True
    return f"[{k}, 1] conv dilated {d} over {h} rows -> an undilated conv over {d} phases ({hp - h} zero rows)"
