"""onnxruntime's fused layer norms -> standard ops (``LayerNormalization`` at opset 17, which fuse runs
as the Mrvl LayerNorm; the RMS norm written out):

    SkipLayerNormalization(x, skip, gamma[, beta][, bias])   -> s = x + skip [+ bias]; LayerNormalization(s)
        outputs: y, mean, inv_std_var (the LayerNormalization's; fuse then leaves it on the CPU),
        input_skip_bias_sum (s); epsilon 1e-12
    SkipSimplifiedLayerNormalization(x, skip, gamma[, bias]) -> s = x + skip [+ bias]; s / rms(s) * gamma
    SimplifiedLayerNormalization(x, gamma)  (ORT registers it in the default domain; RMSNorm)
    LayerNormalization (com.microsoft; and ORT's default-domain one below opset 17) -> LayerNormalization-17

Normalisation over the last axis only (the ops' axis -1; another axis keeps the node with its reason).
"""
from __future__ import annotations

from typing import Optional

from .base import Match, attr, inp, is_float
from .contrib_ops import MS, Writer, float32_check, float_attr, opset_reason, shape_of, used
from .contrib_ops import REPORT_SKIPS  # noqa: F401  (the contrib rules' own)

NAME = "contrib_norm"
RESTORABLE = True   # a float re-expression: put back when none of it is offloaded (split/restore.py)
OPS = ("SkipLayerNormalization", "SkipSimplifiedLayerNormalization", "SimplifiedLayerNormalization",
       "LayerNormalization")
DEFAULT_EPS = {"SkipLayerNormalization": 1e-12, "SkipSimplifiedLayerNormalization": 1e-12,
               "SimplifiedLayerNormalization": 1e-5, "LayerNormalization": 1e-5}


def match(node, g) -> Optional[Match]:
    if node.op_type == "LayerNormalization":
        ok = node.domain == MS or (node.domain in ("", "ai.onnx") and g.opset < 17)
    elif node.op_type == "SimplifiedLayerNormalization":
        ok = node.domain in ("", "ai.onnx", MS)
    else:
        ok = node.domain == MS
    return Match([node]) if ok else None


@float32_check
def check(m: Match, g, n) -> Optional[str]:
    x = n.input[0]
    sx = shape_of(g, x)
    if sx is None or not is_float(g, x):
        return f"{n.op_type} '{n.name}': input '{x}' has no static float shape"
    axis = attr(n, "axis", -1)
    if n.op_type in ("LayerNormalization", "SimplifiedLayerNormalization") and axis % len(sx) != len(sx) - 1:
        return f"{n.op_type} '{n.name}' normalises from axis {axis} (only the last axis is decomposed)"
    if n.op_type.startswith("Skip"):
        if shape_of(g, n.input[1]) is None:
            return f"{n.op_type} '{n.name}': skip '{n.input[1]}' has no static shape"
        if n.op_type == "SkipSimplifiedLayerNormalization" and (used(g, n, 1) or used(g, n, 2)):
            return f"{n.op_type} '{n.name}': its mean / inv_std_var output is used"
    elif n.op_type == "SimplifiedLayerNormalization" and any(used(g, n, k) for k in (1, 2)):
        return f"{n.op_type} '{n.name}': its inv_std_var output is used"
    if n.op_type in ("SkipLayerNormalization", "LayerNormalization"):
        why = opset_reason(g)
        if why:
            return f"{n.op_type} '{n.name}' needs LayerNormalization (opset 17): {why}"
    return None


def rewrite(m: Match, g) -> str:
    n = m.node
    w = Writer(g, n, m.origin)
    eps = float_attr(n, "epsilon", DEFAULT_EPS[n.op_type])
    shape = list(shape_of(g, n.input[0]))
    outs = list(n.output) + [""] * 4
    g.remove(n)
    x = n.input[0]
    if n.op_type.startswith("Skip"):
        bias = inp(n, 4) if n.op_type == "SkipLayerNormalization" else inp(n, 3)
        # bias first: x is usually a MatMul's output, whose bias Add matmul_to_gemm folds into the FC
        # (onnxruntime adds x + skip + bias; fp32 reassociation only)
        if bias:
            x = w.op("Add", [x, bias], list(shape_of(g, x)), tag="bias_add")
        s = w.op("Add", [x, n.input[1]], shape, tag="skip_add", out=outs[3] or None)
        x = s
    if n.op_type in ("SkipLayerNormalization", "LayerNormalization"):
        beta = inp(n, 3) if n.op_type == "SkipLayerNormalization" else inp(n, 2)
        stats = [outs[1] if used(g, n, 1) else "", outs[2] if used(g, n, 2) else ""]
        w.layer_norm(x, shape, n.input[2] if n.op_type.startswith("Skip") else n.input[1], beta, eps,
                     out=outs[0], stats=stats)
        kind = "LayerNormalization"
    else:
        gamma = n.input[2] if n.op_type.startswith("Skip") else n.input[1]
        w.rms_norm(x, shape, gamma, eps, out=outs[0])
        kind = "x / Sqrt(ReduceMean(x*x) + eps) * gamma"
    return f"{n.domain or 'ai.onnx'}.{n.op_type} -> {'Add + ' if n.op_type.startswith('Skip') else ''}{kind}"
