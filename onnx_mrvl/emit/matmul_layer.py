"""Compile of a ``BatchMatMul`` Nodes-JSON layer (two activations; docs/json-format.md).

Lowering (docs/fusion.md, ``onnx_mrvl/target.py``): the FC's MAC array with the second operand
streamed from on-chip memory instead of read from the weights; ``transpose_b=1`` is the FC
kernel's own [N, K] (OI) order, so K^T costs no data movement. MACs = batch * M * N * K.
"""
from __future__ import annotations

from typing import List, Tuple

import numpy as np

from .json_attrs import NodeAttrs


def batch_matmul(a: NodeAttrs, in_shapes: List[List[int]], params: dict) -> Tuple[List[int], int]:
    """(output shape, MACs) of ``A [..., M, K] x B [..., K, N]`` (``B [..., N, K]`` with
    transpose_b), leading axes equal or 1."""
    if len(in_shapes) != 2:
        a.fail(f"BatchMatMul takes two inputs, the node lists {len(in_shapes)}")
    sa, sb = (list(s) for s in in_shapes)
    tb = a.int("transpose_b", 0)
    if tb not in (0, 1):
        a.fail(f"transpose_b={tb} (0 or 1)")
    alpha = a.float("alpha", 1.0)
    if not np.isfinite(alpha) or alpha == 0:
        a.fail(f"alpha={alpha} must be finite and non-zero")
    if len(sa) != len(sb) or not 2 <= len(sa) <= 4:
        a.fail(f"BatchMatMul inputs {sa} and {sb} must have one rank, 2 to 4")
    k, n = (sb[-1], sb[-2]) if tb else (sb[-2], sb[-1])
    if sa[-1] != k:
        a.fail(f"BatchMatMul inputs {sa} and {sb} disagree on the inner dimension (transpose_b={tb})")
    lead = []
    for x, y in zip(sa[:-2], sb[:-2]):
        if x != y and 1 not in (x, y):
            a.fail(f"BatchMatMul inputs {sa} and {sb} do not broadcast over their leading axes")
        lead.append(max(x, y))
    out = lead + [sa[-2], n]
    params.update(transpose_b=tb, alpha=alpha)
    return out, int(np.prod(out, dtype=np.int64)) * k
