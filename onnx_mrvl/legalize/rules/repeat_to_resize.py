"""``repeat(x, r, axis=a)`` as exporters write it, ``Reshape(Tile(Unsqueeze(x, a+1), r on axis
a+1), x's shape with axis a times r)`` (Keras 3 UpSampling2D through tf2onnx, tf.repeat,
torch.repeat_interleave by a constant), -> a nearest Resize by r on axis a (a pixel repeat, an
accelerator op). On a 4-D tensor a repeat of axis 1 or 2 (TensorFlow's NHWC H, W) is done as
``Transpose`` to NCHW, Resize, ``Transpose`` back: merge_transposes cancels those against the
exporter's own layout Transposes.

TFLite models through tf2onnx write the same repeat with ``Reshape`` as ExpandDims, merge the
closing Reshape of one repeat with the ExpandDims of the next (``[1, H, 2, W, C] -> [1, 2H, W, 1, C]``)
and, when quantized, put a ``Q -> DQ`` pair of one scale between the moves. A closing Reshape to
another shape of the same size is kept after the Resize (a Reshape reads the data in the same
order: exact), and identity pairs inside the chain are looked through: the Resize then reads the
dequantized values and is followed by one pair of that scale (the QDQ form of an int8 Resize)."""
from __future__ import annotations

from typing import Optional

import numpy as np
import onnx

from .base import Match, attr

NAME = "repeat_to_resize"
OPS = ("Reshape",)
TO_NCHW, TO_NHWC = [0, 3, 1, 2], [0, 2, 3, 1]


def _scalar(g, name):
    if not name:
        return ("", 0.0)
    v = g.const(name)
    return None if v is None or v.size != 1 else (str(v.dtype), float(v.reshape(-1)[0]))


def _pair(g, dq):
    """``Q(s, z) -> DQ(s, z)`` ending in ``dq``, the Q read only by it: (Q node, (s, z) values)."""
    if dq is None or dq.op_type != "DequantizeLinear" or dq.domain not in ("", "ai.onnx"):
        return None
    q = g.producer.get(dq.input[0])
    if q is None or q.op_type != "QuantizeLinear" or g.only_consumer(q.output[0]) is not dq:
        return None
    pq = (_scalar(g, q.input[1]), _scalar(g, q.input[2] if len(q.input) > 2 else ""))
    pd = (_scalar(g, dq.input[1]), _scalar(g, dq.input[2] if len(dq.input) > 2 else ""))
    if None in pq or None in pd or pq[0] != pd[0] or pq[1][1] != pd[1][1] or \
            any(a.name == "axis" for a in list(q.attribute) + list(dq.attribute)):
        return None
    return q, pq


def _up(g, name, reader, pairs):
    """The node writing ``name``, read only by ``reader``, looking through identity Q -> DQ pairs
    (appended to ``pairs`` as (Q, DQ)); None when another node reads a tensor on the way."""
    p = g.producer.get(name)
    while p is not None and g.only_consumer(p.output[0]) is reader:
        found = _pair(g, p)
        if found is None:
            return p
        pairs.append((found[0], p))
        reader, p = found[0], g.producer.get(found[0].input[0])
    return None


def match(node, g) -> Optional[Match]:
    if node.op_type != "Reshape" or node.domain not in ("", "ai.onnx"):
        return None
    pairs = []
    prev = _up(g, node.input[0], node, pairs)
    perm, trans = None, None
    if prev is not None and prev.op_type == "Transpose":
        # tf2onnx pushes its NCHW -> NHWC Transpose up to the Tile: Reshape(Transpose(Tile(..)))
        perm = [int(v) for v in (attr(prev, "perm") or [])]
        trans, prev = prev, _up(g, prev.input[0], prev, pairs)
    tile = prev
    if tile is None or tile.op_type != "Tile":
        return None
    unsq = _up(g, tile.input[0], tile, pairs)
    if unsq is None or unsq.op_type not in ("Reshape", "Unsqueeze"):
        return None
    params = {_pair(g, dq)[1] for _, dq in pairs}
    if len(params) > 1 or (pairs and g.dtype(unsq.input[0]) != onnx.TensorProto.FLOAT):
        return None
    reps = g.const(tile.input[1])
    x = unsq.input[0]
    sx, su, sy = g.shape(x), g.shape(tile.input[0]), g.shape(node.output[0])
    if reps is None or sx is None or su is None or sy is None:
        return None
    reps = [int(v) for v in reps.reshape(-1)]
    big = [k for k, v in enumerate(reps) if v != 1]
    if len(big) != 1 or len(su) != len(sx) + 1:
        return None
    k, r = big[0], reps[big[0]]
    if su[k] != 1 or list(su[:k]) + list(su[k + 1:]) != list(sx):
        return None
    if perm is None:
        perm = list(range(len(su)))
    if sorted(perm) != list(range(len(su))):
        return None
    q = perm.index(k)
    if q == 0 or perm[q - 1] == k:
        return None
    j = perm[q - 1] if perm[q - 1] < k else perm[q - 1] - 1    # the x axis repeated
    rest = [p if p < k else p - 1 for p in perm if p != k]       # Transpose after the Resize
    sz = list(sx)
    sz[j] *= r
    if int(np.prod(sy)) != int(np.prod(sz)):
        return None
    shape = None if list(sy) == [sz[p] for p in rest] else [int(v) for v in sy]
    nodes = [node] + ([trans] if trans is not None else []) + [tile] + [n for pr in pairs for n in pr] + [unsq]
    return Match(nodes, {"x": x, "axis": j, "r": r, "rank": len(sx), "rest": rest, "shape": shape,
                         "pair": pairs[0] if pairs else None})


def check(m: Match, g, target) -> Optional[str]:
    a, r, rank = m.data["axis"], m.data["r"], m.data["rank"]
    if rank == 3 and (a != 1 or m.data["rest"] != [0, 1, 2]):
        return "repeat of a 3-D tensor on another axis than 1 (the time axis of [N, T, C])"
    if rank not in (3, 4):
        return f"repeat on a {rank}-D tensor (the accelerator resizes 4-D)"
    if a == 0:
        return "repeat along the batch axis"
    if r > target.resize_max_scale:
        return f"repeat {r} > target.resize_max_scale ({target.resize_max_scale})"
    return None


def _wrap(g, x, j, rest) -> bool:
    """Resize a 4-D tensor's axis 1/2 through an NCHW view? (TensorFlow's H, W in NHWC)."""
    if j == 1:
        return True
    if j != 2:
        return False
    if rest != list(range(4)):
        return rest != TO_NHWC          # the exporter's own Transpose says x is NCHW
    p = g.producer.get(x)
    return not (p is not None and p.op_type == "Transpose" and
                [int(v) for v in (attr(p, "perm") or [])] == TO_NCHW)


def rewrite(m: Match, g) -> str:
    x, a, r, rest = m.data["x"], m.data["axis"], m.data["r"], m.data["rest"]
    node, unsq = m.nodes[0], m.nodes[-1]
    origin = m.origin
    dt = g.dtype(node.output[0])
    sx = list(g.shape(x))
    shape, pair = m.data["shape"], m.data["pair"]
    final = node.output[0]
    y = final if shape is None else g.fresh(f"{final}/repeated")
    if shape is not None:
        sz = list(sx)
        sz[a] *= r
        g.set_shape(y, [sz[p] for p in rest], dt)
    qparams = (list(pair[0].input[1:]), g.dtype(pair[0].output[0])) if pair else None
    for n in m.nodes[:-1]:
        g.remove(n)
    if not g.used(unsq.output[0]):
        g.remove(unsq)
    if len(sx) == 3:
        # [N, T, C] (Keras UpSampling1D): as the 4-D NHWC [N, T, 1, C], reshaped back after
        x4 = g.fresh(f"{x}/4d")
        g.make("Reshape", [x, g.add_const(f"{node.name}/shape4", np.array(sx[:2] + [1, sx[2]], np.int64))],
               [x4], near=node, origin=origin, name=f"{node.name}/to4d")
        g.set_shape(x4, sx[:2] + [1, sx[2]], dt)
        x, sx, y3, y = x4, sx[:2] + [1, sx[2]], y, g.fresh(f"{y}/4d")
        rest = [0, 1, 2, 3]
    else:
        y3 = None
    wrap = _wrap(g, x, a, rest)
    pre = TO_NCHW if wrap else list(range(4))
    src, ax = x, pre.index(a)
    if wrap:
        src = g.fresh(f"{x}/nchw")
        g.make("Transpose", [x], [src], near=node, origin=origin, name=f"{node.name}/to_nchw",
               perm=TO_NCHW)
        g.set_shape(src, [sx[p] for p in TO_NCHW], dt)
    scales = np.ones(4, np.float32)
    scales[ax] = r
    post = [pre.index(v) for v in rest]            # y axis i = Resize output axis post[i]
    out = g.fresh(f"{y}/resized") if post != list(range(4)) else y
    res = out if qparams is None else g.fresh(f"{y}/resize_float")
    g.make("Resize", [src, "", g.add_const(f"{node.name}/scales", scales)], [res], near=node,
           origin=origin, name=f"{node.name}/resize", mode="nearest",
           coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    if qparams is not None:     # the int8 Resize's output pair (the chain's one scale)
        so = [sx[p] for p in pre]
        so[ax] *= r
        codes = g.fresh(f"{y}/resize_codes")
        g.set_shape(res, so, dt)
        g.set_shape(codes, so, qparams[1])
        g.make("QuantizeLinear", [res] + qparams[0], [codes], near=node, origin=origin,
               name=f"{node.name}/resize_QuantizeLinear")
        g.make("DequantizeLinear", [codes] + qparams[0], [out], near=node, origin=origin,
               name=f"{node.name}/resize_DequantizeLinear")
    if out != y:
        so = [sx[p] for p in pre]
        so[ax] *= r
        g.set_shape(out, so, dt)
        g.make("Transpose", [out], [y], near=node, origin=origin, name=f"{node.name}/transpose",
               perm=post)
    if y3 is not None:
        so = list(sx)
        so[a] *= r
        g.set_shape(y, so, dt)
        g.make("Reshape", [y, g.add_const(f"{node.name}/shape3", np.array(so[:2] + so[3:], np.int64))],
               [y3], near=node, origin=origin, name=f"{node.name}/to3d")
    if shape is not None:
        g.make("Reshape", [y, g.add_const(f"{node.name}/shape", np.array(shape, np.int64))], [final], near=node,
               origin=origin, name=f"{node.name}/reshape")
    return f"repeat x{r} on axis {a} -> nearest Resize" + (" (NHWC: transposed)" if wrap else "") + \
        (" between its Q -> DQ pair" if pair else "") + (f", reshaped to {shape}" if shape else "")
