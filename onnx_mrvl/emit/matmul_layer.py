"""Compile of a ``BatchMatMul`` Nodes-JSON layer (two activations; docs/json-format.md).

Lowering (docs/fusion.md, ``onnx_mrvl/target.py``): the FC's MAC array with the second operand
streamed from on-chip memory instead of read from the weights; ``transpose_b=1`` is the FC
kernel's own [N, K] (OI) order. The operand streams read each operand in its stored order
(``a_perm`` / ``b_perm``: stored axis k holds logical axis perm[k]) when its rows are contiguous
(A: K innermost; B: N, or K with transpose_b) -- a DMA with strides over the outer axes -- and
write the output in the order ``out_perm`` (N innermost). MACs = batch * M * N * K.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np

from .json_attrs import NodeAttrs


def _perm(a: NodeAttrs, key: str, rank: int, inner, default: Optional[List[int]] = None) -> List[int]:
    p = a.ints(key) if a.has(key) else (default or list(range(rank)))
    if sorted(p) != list(range(rank)):
        a.fail(f"{key} {p} is not a permutation of {rank} axes")
    if p[-1] not in inner:
        a.fail(f"{key} {p} puts logical axis {p[-1]} innermost (the operand stream needs one of {list(inner)} "
               f"contiguous)")
    return p


def batch_matmul(a: NodeAttrs, in_shapes: List[List[int]], params: dict) -> Tuple[List[int], int]:
    """(output shape as stored, MACs) of ``A [..., M, K] x B [..., K, N]``, leading axes equal
    or 1; the inputs come in their stored orders."""
    if len(in_shapes) != 2:
        a.fail(f"BatchMatMul takes two inputs, the node lists {len(in_shapes)}")
    sa, sb = (list(s) for s in in_shapes)
    if len(sa) != len(sb) or not 2 <= len(sa) <= 4:
        a.fail(f"BatchMatMul inputs {sa} and {sb} must have one rank, 2 to 4")
    r = len(sa)
    tb = a.int("transpose_b", 0)
    if tb not in (0, 1):
        a.fail(f"transpose_b={tb} (0 or 1)")
    alpha = a.float("alpha", 1.0)
    if not np.isfinite(alpha) or alpha == 0:
        a.fail(f"alpha={alpha} must be finite and non-zero")
    swap = list(range(r - 2)) + [r - 1, r - 2]
    pa = _perm(a, "a_perm", r, (r - 1,))
    pb = _perm(a, "b_perm", r, (r - 2, r - 1), swap if tb else None)
    if int(pb[-1] == r - 2) != tb:
        a.fail(f"b_perm {pb} and transpose_b={tb} disagree (transpose_b=1 exactly when K is innermost)")
    po = _perm(a, "out_perm", r, (r - 1,))
    la = [sa[pa.index(i)] for i in range(r)]       # logical shapes: stored axis k holds logical perm[k]
    lb = [sb[pb.index(i)] for i in range(r)]
    if la[-1] != lb[-2]:
        a.fail(f"BatchMatMul inputs {sa} and {sb} disagree on the inner dimension (transpose_b={tb}, "
               f"a_perm {pa}, b_perm {pb})")
    lead = []
    for x, y in zip(la[:-2], lb[:-2]):
        if x != y and 1 not in (x, y):
            a.fail(f"BatchMatMul inputs {sa} and {sb} do not broadcast over their leading axes")
        lead.append(max(x, y))
    logical = lead + [la[-2], lb[-1]]
    params.update(transpose_b=tb, alpha=alpha)
    for key, p in (("a_perm", pa), ("b_perm", pb), ("out_perm", po)):
        if p != list(range(r)) and not (key == "b_perm" and tb and p == swap):
            params[key] = p
    return [logical[i] for i in po], int(np.prod(logical, dtype=np.int64)) * la[-1]
