"""The log of a power on the host: ``Log(sum of squares)`` of computed values whose range nothing
declared.

A power (``x * x`` / ``Pow(x, 2)``, then sums, square roots, constant scalings, layout moves) has
twice the dynamic range of its input in octaves: fp16 holds 2^-24 .. 2^16, so |x| < 2^-7 squares into
fp16's subnormals (fewer mantissa bits the smaller it is) and |x| < 2^-12 into 0; its Log turns those
few bits -- or log(0) -- into errors of whole units, which a per-sample min-max rescale of the log
spectrum then spreads over every bin (basic-pitch's CQT: power 3.5e-8 .. 4.3 on ordinary audio, 3.6%
of it subnormal in fp16, 0.18 max|err| / max|ref|; 1.8e-2 with the power and its log in fp32). The
convs producing x keep their fp16 range (their outputs are normal); only the squaring is moved.

So when the log spectrum leaves the accelerator anyway (a graph output, or read by an op with no
accelerator layer: basic-pitch's per-sample min-max normalisation), the chain from the squares to the
Log and the constant affine steps right after the Log (the dB ``* 10 / ln 10``, the floor
``max(., c)``) run on the host in fp32 as onnxruntime computes them: the region boundary moves up to
the squares' inputs, no region is added. Not when ``log_range_scale`` computed the chain at a declared
power-of-two scale (the Log's reader is its ``/unscale`` shift: the range is known to fit), and only
when every path from the Log back reaches a square through these ops (anything else: unchanged).
"""
from __future__ import annotations

from typing import Collection, List, Optional, Set

import numpy as np

from ..graph_index import GraphIndex

REASON = ("the log of a power (squares of computed values, range not declared): fp16 squares |x| < 2^-7 "
          "into subnormals and |x| < 2^-12 into 0, which the Log turns into whole-unit errors; runs on "
          "the host in fp32 (declare the input range, mrvl.input_range.<input>, for log_range_scale)")
CARRY = ("Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Sqrt", "Abs", "ReduceSum",
         "Split", "Slice", "Concat")
SCALAR = ("Mul", "Div", "Add", "Max", "Clip")       # by a constant (Add: eps, Max / Clip: a floor)
TAIL = ("Mul", "Div", "Add", "Sub", "Max", "Min")


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


def host_nodes(g: GraphIndex, order, accelerated: Collection[str]) -> Set[str]:
    """Names of the nodes of every undeclared power -> Log chain and the Log's constant affine tail,
    where that tail's result leaves the accelerator anyway: a graph output, or read by an op type not
    in ``accelerated`` (no accelerator layer). A log spectrum the next conv reads stays in the region
    (one region; fp16's power range is then the price of not cutting it)."""
    keep: Set[str] = set()
    for n in order:
        if n.op_type != "Log" or n.domain not in ("", "ai.onnx") or not g.is_float(n.output[0]):
            continue
        if any(r.name == f"{n.name}/unscale" for r in g.consumers.get(n.output[0], [])):
            continue                                  # log_range_scale: a declared, scaled range
        chain = _chain(g, n.input[0])
        if chain is None:
            continue
        tail, y = [n.name], n.output[0]
        while True:                                   # Log -> * c -> + c -> max(., c): on the host too
            r = g.single_consumer(y)
            if r is None or r.op_type not in TAIL or len(_data(g, r)) != 1 or len(r.output) != 1:
                break
            tail.append(r.name)
            y = r.output[0]
        if y in g.output_set or any(r.op_type not in accelerated for r in g.consumers.get(y, [])):
            keep |= chain | set(tail)
    return keep
