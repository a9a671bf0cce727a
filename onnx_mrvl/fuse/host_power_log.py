"""The log of a power on the host: ``Log(sum of squares)`` of computed values whose range nothing
declared.

A power (``x * x`` / ``Pow(x, 2)``, then sums, square roots, constant scalings, layout moves) has
twice the dynamic range of its input in octaves: fp16 holds 2^-24 .. 2^16, so |x| < 2^-7 squares into
fp16's subnormals (fewer mantissa bits the smaller it is) and |x| < 2^-12 into 0; its Log turns those
few bits -- or log(0) -- into errors of whole units, which a per-sample min-max rescale of the log
spectrum then spreads over every bin (basic-pitch's CQT: power 3.5e-8 .. 4.3 on ordinary audio, 3.6%
of it subnormal in fp16, 0.18 max|err| / max|ref|; 1.8e-2 with the power and its log in fp32). The
convs producing x keep their fp16 range (their outputs are normal); only the squaring is moved.

So when the log spectrum leaves the accelerator anyway (a graph output, or read only by ops with no
accelerator layer: basic-pitch's per-sample min-max normalisation, openWakeWord's per-call
``max - 80 dB`` floor), the Log and the constant affine steps right after it (the dB ``* 10 / ln 10``,
log_range_scale's shift, the floor ``max(., c)``) run on the host in fp32 as onnxruntime computes
them, and so does the chain from the squares into it unless log_range_scale computed that chain at
a declared power-of-two scale. The region boundary moves up (to the squares' inputs, or to the Log's
input); no region is added. The Log alone moves for precision too: an fp16 region output of the
log spectrum is rounded to 2^-11 of |log| (0.06 at 100 dB), an fp16 power rounded to 2^-11 of
itself moves its log by 2^-11 only.

A Log of a value scaled by a constant beyond fp16 (``Log(x * 2^20 + 1)``: Silero VAD v4) runs on
the host with its constant steps wherever its result goes: the Mul stays on the host (its weight
would be inf), so a region starting after it would take the scaled value as an input -- inf in fp16
for |x| > 2^-4 -- while the log of it is a few units.
"""
from __future__ import annotations

from typing import Collection, Dict, List, Optional, Set

import numpy as np

from ..graph_index import GraphIndex

POWER = ("the power into a Log whose result leaves the accelerator anyway (squares of computed values, range "
         "not declared): fp16 squares |x| < 2^-7 into subnormals and |x| < 2^-12 into 0, which the Log turns "
         "into whole-unit errors; runs on the host in fp32 (declare the input range, "
         "mrvl.input_range.<input>, for log_range_scale)")
LOG = ("a Log (with its constant affine tail) whose result leaves the accelerator anyway: on the host in fp32 "
       "(an fp16 region output of a log is rounded to 2^-11 of |log|); no region added")
CARRY = ("Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Sqrt", "Abs", "ReduceSum",
         "Split", "Slice", "Concat")
SCALAR = ("Mul", "Div", "Add", "Max", "Clip")       # by a constant (Add: eps, Max / Clip: a floor)
TAIL = ("Mul", "Div", "Add", "Sub", "Max", "Min")
SCALED = ("a Log of a value the host scaled beyond fp16 (a Mul by a constant above 65504: on the host) and "
          "its constant steps: on the host in fp32, the region reads the log (the scaled value would "
          "overflow fp16 at the region's input)")
FP16_MAX = 65504.0


def _data(g: GraphIndex, n) -> List[str]:
    return [i for i in n.input if i and not g.is_const(i)]


def _is_square(g: GraphIndex, n) -> bool:
    if n.op_type == "Mul":
        return len(n.input) == 2 and n.input[0] == n.input[1] and not g.is_const(n.input[0])
    if n.op_type == "Pow" and g.is_const(n.input[1]):
        e = np.asarray(g.const(n.input[1]))
        return e.size == 1 and float(e.reshape(-1)[0]) == 2.0
    return False


def _chain(g: GraphIndex, start: str, depth: int = 0) -> Optional[Set[str]]:
    """The nodes from the squares to the tensor ``start`` (inclusive), or None when a path reaches
    anything else; a square of a power (``|X|^2`` of ``|X| = sqrt(re^2 + im^2)``) takes the inner
    squares too."""
    nodes, todo, squares = set(), [start], 0
    while todo:
        t = todo.pop()
        n = g.producer.get(t)
        if n is None or n.domain not in ("", "ai.onnx") or not g.is_float(t):
            return None
        if n.name in nodes:
            continue
        data = _data(g, n)
        if _is_square(g, n):
            squares += 1
            inner = _chain(g, n.input[0], depth + 1) if depth < 4 else None
            nodes |= inner or set()
        elif n.op_type in CARRY and data and (n.op_type in ("Concat", "Split") or data == [n.input[0]]):
            todo.extend(data)
        elif n.op_type in SCALAR and len(data) == 1 and data[0] == n.input[0]:
            todo.append(data[0])
        elif n.op_type == "Add" and len(data) == 2:     # a ReduceSum as Split + Add (legalize)
            todo.extend(data)
        else:
            return None
        nodes.add(n.name)
        if len(nodes) > 256:
            return None
    return nodes if squares else None


def _host_op(g: GraphIndex, r, y: str, accelerated) -> bool:
    """``r`` (a reader of ``y``) runs on the host: its op type has no accelerator layer, or another of
    its inputs is a statistic of ``y`` the host computes (``y - min(y)``: legalize's ``Add(y,
    Neg(ReduceMin(y)))``; openWakeWord's ``Clip(y, max(y) - 80)``)."""
    if r.op_type not in accelerated:
        return True
    return any(_from_host(g, t, y, accelerated, 8)[1] for t in _data(g, r) if t != y)


def _from_host(g: GraphIndex, t: str, y: str, accelerated, depth: int):
    """(``t`` is computed from ``y``, through an op with no accelerator layer) within ``depth`` ops."""
    n = g.producer.get(t)
    if n is None or depth == 0:
        return False, False
    host = n.op_type not in accelerated
    reach = via = False
    for i in _data(g, n):
        r, v = (True, False) if i == y else _from_host(g, i, y, accelerated, depth - 1)
        reach, via = reach or r, via or v or (r and host)
    return reach, via


def _scaled_beyond_fp16(g: GraphIndex, t: str) -> Optional[List[str]]:
    """The nodes from a ``Mul`` by a constant above fp16's range (which fuse leaves on the host: its
    weight would be inf) through constant ``SCALAR`` steps read by nothing else to ``t``, or None.
    Silero VAD v4's ``Log(magnitude * 2^20 + 1)``: the region after the Mul received inf."""
    nodes: List[str] = []
    for _ in range(4):
        n = g.producer.get(t)
        if n is None or n.domain not in ("", "ai.onnx") or n.op_type not in SCALAR or len(n.output) != 1:
            return None
        data = _data(g, n)
        if len(data) != 1 or len(g.consumers.get(n.output[0], [])) != 1 or n.output[0] in g.output_set:
            return None
        nodes.append(n.name)
        if n.op_type == "Mul":
            k = g.const(next(i for i in n.input if i != data[0]))
            if k is not None and k.size and np.isfinite(k).all() and float(np.abs(k).min()) > FP16_MAX:
                return nodes
        t = data[0]
    return None


def host_nodes(g: GraphIndex, order, accelerated: Collection[str]) -> Dict[str, str]:
    """{name: reason} of the nodes of every Log whose result (after its constant affine tail) leaves the
    accelerator anyway -- a graph output, every reader an op type not in ``accelerated`` (no
    accelerator layer) -- with that tail and, when nothing declared its range, the power chain into
    it. A log spectrum the next conv reads stays in the region (one region; fp16's ranges are then
    the price of not cutting it)."""
    keep: Dict[str, str] = {}
    for n in order:
        if n.op_type != "Log" or n.domain not in ("", "ai.onnx") or not g.is_float(n.output[0]):
            continue
        scaled = _scaled_beyond_fp16(g, n.input[0])
        if scaled:
            keep.update(dict.fromkeys([n.name] + scaled, SCALED))
            continue
        tail, y = [n.name], n.output[0]
        while True:                                   # Log -> * c -> + c -> max(., c): on the host too
            r = g.single_consumer(y)
            if r is None or r.op_type not in TAIL or len(_data(g, r)) != 1 or len(r.output) != 1:
                break
            tail.append(r.name)
            y = r.output[0]
        readers = g.consumers.get(y, [])
        if not (readers or y in g.output_set) or not all(_host_op(g, r, y, accelerated) for r in readers):
            continue
        keep.update(dict.fromkeys(tail, LOG))
        if not any(r.name == f"{n.name}/unscale" for r in g.consumers.get(n.output[0], [])):
            keep.update(dict.fromkeys(_chain(g, n.input[0]) or (), POWER))   # (/unscale: a declared range)
    return keep
