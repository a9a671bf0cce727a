"""Permutation arithmetic for tensors stored in a permuted layout (NHWC storage of a logical NCHW
tensor, and what reshapes and transposes make of it).

A storage order ``P`` lists logical axes in the order the stored data nests them (NHWC of a
logical NCHW tensor: ``(0, 2, 3, 1)``). A reshape splits and merges contiguous runs of logical
axes; it can run on the stored data as it is when every merged run is also contiguous and in
order in storage, and the result is then stored in a permuted order too.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

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
        if in_shape[a] == 1 and any(in_shape[x] != 1 for x in blocks[b][0]):
            continue          # a block sits where its data is, not where a unit axis of it is stored
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
        if out_shape[a] == 1 and any(out_shape[x] != 1 for x in blocks[b][1]):
            continue          # (as in stored_after_reshape)
        if b not in done:
            done.add(b)
            order += blocks[b][0]
    for b, (ia, oa) in enumerate(blocks):
        if b not in done:
            order += ia
    return order
