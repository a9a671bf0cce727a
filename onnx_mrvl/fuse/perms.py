"""Permutation arithmetic for tensors stored in a permuted layout (NHWC storage of a logical NCHW
tensor, and what reshapes and transposes make of it).

A storage order ``P`` lists logical axes in the order the stored data nests them (NHWC of a
logical NCHW tensor: ``(0, 2, 3, 1)``). A reshape splits and merges contiguous runs of logical
axes; it can run on the stored data as it is when every merged run is also contiguous and in
order in storage, and the result is then stored in a permuted order too.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

NHWC = (0, 2, 3, 1)
Perm = Optional[Tuple[int, ...]]   # None = stored as logical
Block = Tuple[List[int], List[int]]   # (input axes, output axes) of equal total size


def reshape_blocks(in_shape: Sequence[int], out_shape: Sequence[int]) -> Optional[List[Block]]:
    """Pair contiguous runs of input and output axes of equal size (None when sizes differ)."""
    blocks: List[Block] = []
    i = j = 0
    while i < len(in_shape) or j < len(out_shape):
        ia: List[int] = []
        oa: List[int] = []
        pi = pj = 1
        if i < len(in_shape):
            ia.append(i)
            pi *= in_shape[i]
            i += 1
        if j < len(out_shape):
            oa.append(j)
            pj *= out_shape[j]
            j += 1
        while pi != pj:
            if pi < pj and i < len(in_shape):
                ia.append(i)
                pi *= in_shape[i]
                i += 1
            elif pj < pi and j < len(out_shape):
                oa.append(j)
                pj *= out_shape[j]
                j += 1
            else:
                return None
        blocks.append((ia, oa))
    return blocks


def stored_after_reshape(blocks: List[Block], in_shape: Sequence[int], order: Sequence[int]
                         ) -> Optional[List[int]]:
    """Storage order of the output when the reshape runs on data stored in ``order``, or None
    when some run of merged input axes is not contiguous and in order in storage."""
    nonunit = [a for a in order if in_shape[a] != 1]
    pos = {a: k for k, a in enumerate(nonunit)}
    block_of = {}
    for b, (ia, _) in enumerate(blocks):
        axes = [a for a in ia if in_shape[a] != 1]
        if any(pos[axes[k + 1]] != pos[axes[k]] + 1 for k in range(len(axes) - 1)):
            return None
        for a in ia:
            block_of[a] = b
    out: List[int] = []
    done = set()
    for a in order:
        b = block_of[a]
        # a block goes where its data is: a unit axis places only an all-unit block
        if in_shape[a] == 1 and any(in_shape[i] != 1 for i in blocks[b][0]):
            continue
        if b not in done:
            done.add(b)
            out += blocks[b][1]
    for b, (ia, oa) in enumerate(blocks):
        if b not in done:
            out += oa
    return out


def stored_before_reshape(blocks: List[Block], out_shape: Sequence[int], want: Sequence[int]
                          ) -> Optional[List[int]]:
    """The input storage order for which the reshape yields output storage ``want``, or None."""
    out_nonunit = [a for a in want if out_shape[a] != 1]
    pos = {a: k for k, a in enumerate(out_nonunit)}
    block_of = {}
    for b, (_, oa) in enumerate(blocks):
        axes = [a for a in oa if out_shape[a] != 1]
        if any(pos[axes[k + 1]] != pos[axes[k]] + 1 for k in range(len(axes) - 1)):
            return None
        for a in oa:
            block_of[a] = b
    order: List[int] = []
    done = set()
    for a in want:
        b = block_of[a]
        if out_shape[a] == 1 and any(out_shape[o] != 1 for o in blocks[b][1]):
            continue
        if b not in done:
            done.add(b)
            order += blocks[b][0]
    for b, (ia, oa) in enumerate(blocks):
        if b not in done:
            order += ia
    return order


MAX_ROTATIONS = 3   # LayoutTransforms a general transpose of accelerator data may take


def rotations(shape: Sequence[int], q: Sequence[int]) -> Optional[List[List[int]]]:
    """A transpose ``y = x.transpose(q)`` of data of ``shape`` as block rotations: each step views
    the current data as ``[A, B, R, 1]`` (A: axes already in place, B: the axes before the next
    wanted one, R: the rest) and moves B last, ``[A, R, 1, B]``, which is an NCHW->NHWC layout
    change of that view (ShuffleNet's channel shuffle, [N, C, T] <-> [N, T, C]: one step). Unit
    axes are ignored. Returns the 4-D views, or None when more than ``MAX_ROTATIONS`` are needed."""
    keep = [a for a in range(len(shape)) if shape[a] != 1]
    rank = {a: i for i, a in enumerate(keep)}
    target = [rank[a] for a in q if shape[a] != 1]
    dims = [shape[a] for a in keep]
    cur = list(range(len(keep)))
    views: List[List[int]] = []
    prod = lambda axes: int(np.prod([dims[a] for a in axes], dtype=np.int64))  # noqa: E731
    for i in range(len(cur)):
        if cur[i] == target[i]:
            continue
        j = cur.index(target[i])
        views.append([prod(cur[:i]), prod(cur[i:j]), prod(cur[j:]), 1])
        cur = cur[:i] + cur[j:] + cur[i:j]
        if len(views) > MAX_ROTATIONS:
            return None
    return views or None


def norm_perm(p) -> Perm:
    """``p`` as a tuple, or None for the identity (stored as logical)."""
    if p is None:
        return None
    p = tuple(int(i) for i in p)
    return None if p == tuple(range(len(p))) else p


def inverse_perm(p: Sequence[int]) -> List[int]:
    """The permutation that undoes ``p``."""
    out = [0] * len(p)
    for i, v in enumerate(p):
        out[v] = i
    return out


def stored_shape(shape, perm: Perm):
    """The shape of the data as stored in ``perm`` order."""
    return list(shape) if perm is None else [shape[i] for i in perm]


def canonical_perm(order: Sequence[int], shape, nhwc_first: bool = False) -> Perm:
    """``order`` or, when it nests the non-unit axes the same way, the logical or NHWC order
    (unit axes may sit anywhere: the data is the same)."""
    nonunit = [a for a in order if shape[a] != 1]
    cands = ([NHWC, None] if nhwc_first else [None, NHWC]) if len(shape) == 4 else [None]
    for cand in cands:
        full = list(cand) if cand else list(range(len(shape)))
        if [a for a in full if shape[a] != 1] == nonunit:
            return cand
    return norm_perm(order)
