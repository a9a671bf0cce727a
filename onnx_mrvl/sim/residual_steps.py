"""Execution plan of a program: its layers as steps, with residual Conv2D + Sum2D pairs run as one.

A residual block ends in a Conv2D whose output only a Sum2D reads (ResNet, MobileNetV2,
YOLO). Run apart, the conv writes its output and the sum reads it back with the residual and
writes again; the native kernel instead adds the residual to the finished fp16 conv values in its
register tile (``Conv2D.apply_with_residual``), which gives the same bits as the two layers one
after the other and saves two passes over memory. The fused step runs where the Sum2D stood, so
the residual is ready whichever order the program computes the two branches in. The program
itself is unchanged: its layers, perf model and overflow report still name both layers (an
overflow in the conv is reported at the conv). Pairs are fused only when the conv output is read
by nothing else and is not a program output (the layer capture of inspection/runner.py makes every
layer output a program output, so it sees every layer), and when both activations are ones the
native kernel finishes itself.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Mapping, NamedTuple, Optional, Set, Tuple

from . import jit
from .kernels import Conv2D


class Step(NamedTuple):
    spec: object                 # layers.LayerSpec
    fn: Callable                 # f(*inputs) -> (y, ok); fused: (y, conv ok, sum ok)
    ins: List[int]
    out: int
    index: int                   # the layer's position in the program
    inner: Optional[Tuple[object, int]] = None     # fused: the conv's (spec, index)


def _sum_act(spec, channels: int):
    a = spec.activation()
    try:
        code, p0, p1, slope = jit.act_args(a["activation"], a["activation_params"], a["slope"], channels)
    except ValueError:
        return None
    return None if code < 0 else (code, p0, p1, slope)


def fuse_residuals(steps: List[Step], out_ids: Set[int], shapes: Mapping[int, Tuple[int, ...]]) -> List[Step]:
    """``steps`` with each fusable Conv2D + Sum2D pair replaced by one step (see the module doc)."""
    producer: Dict[int, int] = {s.out: i for i, s in enumerate(steps)}
    readers: Dict[int, int] = {}
    for s in steps:
        for t in set(s.ins):
            readers[t] = readers.get(t, 0) + 1
    fused_into: Dict[int, Step] = {}
    dropped: Set[int] = set()
    for j, s in enumerate(steps):
        if s.spec.layer_name.lower() != "sum2d" or len(s.ins) != 2 or s.ins[0] == s.ins[1] \
                or str(s.spec.params.get("precision", "fp16")) == "int8":   # int8 Sum2D: sim/int8.py
            continue
        for k in (0, 1):
            t, r = s.ins[k], s.ins[1 - k]
            i = producer.get(t)
            if i is None or i in dropped or i in fused_into or readers.get(t) != 1 or t in out_ids:
                continue
            conv = getattr(steps[i].fn, "__self__", None)
            if not isinstance(conv, Conv2D) or steps[i].inner is not None or len(steps[i].ins) != 1:
                continue
            shape = shapes.get(t)
            if shape is None or shapes.get(r) != shape or shapes.get(s.out) != shape:
                continue
            in_shape = shapes.get(steps[i].ins[0])
            act = _sum_act(s.spec, shape[-1])
            if in_shape is None or act is None or not conv.fusable_sum(in_shape):
                continue
            fused_into[j] = Step(s.spec, _fused(conv, act), [steps[i].ins[0], r], s.out, s.index,
                                 (steps[i].spec, steps[i].index))
            dropped.add(i)
            break
    return [fused_into.get(j, s) for j, s in enumerate(steps) if j not in dropped]


def _fused(conv: Conv2D, act) -> Callable:
    def run(x, res):
        return conv.apply_with_residual(x, res, act)
    run.conv, run.sum_act = conv, act          # for the static plan (static_plan.py)
    return run
