"""InstanceNormalization -> LayerNormalization over the flattened spatial axis + the per-channel affine.

Both PyTorch exporters write ``nn.GroupNorm`` (wav2vec2's feature extractor, FCOS / diffusion heads)
as ``Reshape [N, G, -1] -> InstanceNormalization(scale=1, B=0) -> Reshape back -> Mul(gamma) ->
Add(beta)``, and ``nn.InstanceNorm1d/2d`` as the op alone. The accelerator has no instance norm but
normalises one axis of a stored tensor (Mrvl ``LayerNorm``): with the spatial axes of each (n, c)
flattened into the last one, instance norm *is* a layer norm over that axis:

    x [N, C, d1..dk] -> Reshape [N, C, S] (S = d1*..*dk; none when k = 1)
      -> LayerNormalization(axis=-1, gamma=ones[S], epsilon) -> Reshape back
      -> Mul(scale [C, 1..1]) -> Add(B [C, 1..1])   (each dropped when all ones / zeros)

Same mean and biased variance over the same values, epsilon inside the square root as the ONNX
spec writes it: exact up to fp32 reassociation. Needs opset 17 (the model is raised when it can
be, as for onnxruntime's fused layer norms)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, attr, is_float
from .contrib_ops import Writer, opset_reason, shape_of

NAME = "instance_norm"
OPS = ("InstanceNormalization",)


def match(node, g) -> Optional[Match]:
    return Match([node]) if node.op_type == "InstanceNormalization" and node.domain in ("", "ai.onnx") else None


def check(m: Match, g, target) -> Optional[str]:
    n = m.node
    x = n.input[0]
    shape = shape_of(g, x)
    if shape is None or not is_float(g, x) or len(shape) < 3:
        return f"InstanceNormalization '{n.name}': input '{x}' has no static float shape of rank >= 3"
    if len(n.input) < 3 or not (g.is_const(n.input[1]) and g.is_const(n.input[2])):
        return f"InstanceNormalization '{n.name}': scale / B are not constants"
    why = opset_reason(g)
    if why:
        return f"InstanceNormalization '{n.name}' needs LayerNormalization (opset 17): {why}"
    return None


def rewrite(m: Match, g) -> str:
    n = m.node
    w = Writer(g, n, m.origin)
    shape = list(shape_of(g, n.input[0]))
    c, s = shape[1], int(np.prod(shape[2:]))
    eps = float(attr(n, "epsilon", 1e-5))
    scale = np.asarray(g.const(n.input[1]), np.float32).reshape(-1)
    bias = np.asarray(g.const(n.input[2]), np.float32).reshape(-1)
    out = n.output[0]
    g.remove(n)
    flat = [shape[0], c, s]
    per_channel = [c] + [1] * (len(shape) - 2)
    affine = [(op, tag, v) for op, tag, v, keep in (("Mul", "scale", scale, not np.all(scale == 1)),
                                                    ("Add", "bias", bias, not np.all(bias == 0))) if keep]
    x = n.input[0] if len(shape) == 3 else w.reshape(n.input[0], flat, "flatten")
    last = not affine
    y = w.layer_norm(x, flat, w.const("ones", np.ones(s, np.float32)), "", eps,
                     out=out if last and len(shape) == 3 else None)
    if len(shape) != 3:
        y = w.reshape(y, shape, "unflatten", out=out if last else None)
    for k, (op, tag, v) in enumerate(affine):
        y = w.op(op, [y, w.const(tag, v.reshape(per_channel))], shape, tag=tag,
                 out=out if k == len(affine) - 1 else None)
    return f"InstanceNormalization -> LayerNormalization over the {s} spatial values of each channel"
