"""A batch run as one image per core: each thread runs whole images on its own batch-1 static plan.

At batch N, layer by layer, every layer is one dispatch and one barrier of the worker pool, and a
MobileNet's maps (7-40 MB at batch 8) leave the caches between the layers: measured single-
threaded, 8 batch-1 runs take 22% less CPU than one batch-8 run of MobileNetV2 (ResNet-50: the
same, its weights dominate). Here each core takes the next image, runs the whole program on it
in its own arena (single-threaded kernels: no barrier at all until the batch ends), and writes
its slice of the outputs (the last ``batch % threads`` images run one at a time with each layer
split over the threads, so that no thread idles at the end). Every layer that qualifies computes each image independently, so the
values are the same bits as the batch run (tests/test_sim_batch_split.py).

It is used when every layer is per-image (convs, FC, pools, Sum2D / Mul2D, layout, reshapes that
keep the batch axis, Softmax over the last axis), every tensor has the batch as its first axis,
and an image does at least 32 MACs per weight (CNNs: 100-3000; each image reads the weights
again, which an FC-heavy model would pay for). An fp16 overflow in any image re-runs the batch on the batch plan, so the
overflow report is the batch run's. ``ONNX_MRVL_SIM_BATCH_SPLIT=0`` turns it off.
"""
from __future__ import annotations

import itertools
import os
import threading
from typing import List, Mapping, Optional, Sequence, Tuple

import numpy as np

from . import parallel
from .fc import FC
from .kernels import Conv2D
from .static_plan import StaticPlan, Unsupported
from .static_records import size as _size

ENABLED = os.environ.get("ONNX_MRVL_SIM_BATCH_SPLIT", "1").strip().lower() not in ("0", "false", "no", "off")
_PER_IMAGE = {"conv2d", "fc", "maxpool2d", "avgpool2d", "globalavgpool2d", "globalmaxpool2d", "sum2d", "mul2d",
              "reshape", "flatten", "squeeze", "layout_transform"}
_MIN_REUSE = 32        # MACs per weight and image below which a batch run's single pass over the weights wins


def _per_image(step, shapes) -> bool:
    spec = step.spec
    if str(spec.params.get("precision", "fp16")) != "fp16":
        return False
    if spec.layer_name.lower() == "softmax" and len(step.ins) == 1:   # over each row's last axis: per image
        try:
            nd = len(shapes[step.ins[0]])
            return nd >= 2 and int(spec.params.get("axis")) in (-1, nd - 1)
        except (TypeError, ValueError):
            return False
    if spec.layer_name.lower() not in _PER_IMAGE:
        return False
    if spec.layer_name.lower() in ("sum2d", "mul2d") and len(step.ins) == 1:
        op = spec.weight("operand")                   # a constant operand must not vary over the batch
        if op is None or (op.ndim >= len(shapes[step.out]) and op.shape[0] != 1):
            return False
    return True


def _weights_and_macs(steps, shapes) -> Tuple[int, int]:
    """(weight elements, MACs of one image) of the convs and FCs."""
    n = macs = 0
    for s in steps:
        f = s.fn.conv if s.inner is not None else getattr(s.fn, "__self__", None)
        if isinstance(f, Conv2D):
            w = f.out_channels * f.kh * f.kw * f.cin_g
            n += w
            macs += w * _size(shapes[s.out][1:3])
        elif isinstance(f, FC):
            n += f.in_features * f.out_features
            macs += f.in_features * f.out_features
    return n, macs


class BatchSplit:
    """Batch-1 static plans (one per thread, built on first use) and the run that shares images among them."""

    def __init__(self, steps: Sequence, input_ids: Sequence[int], output_ids: Sequence[int],
                 shapes: Mapping[int, Tuple[int, ...]], batch: int):
        self.steps, self.input_ids, self.output_ids = list(steps), list(input_ids), list(output_ids)
        self.batch = batch
        self.shapes1 = {t: (1,) + tuple(s[1:]) for t, s in shapes.items()}
        self.plans: List[StaticPlan] = []
        self._lock = threading.Lock()

    def _plan(self, k: int) -> StaticPlan:
        with self._lock:
            while len(self.plans) <= k:
                self.plans.append(StaticPlan(self.steps, self.input_ids, self.output_ids, self.shapes1))
            return self.plans[k]

    def run(self, sim, arrays: Sequence[np.ndarray], nthreads: int) -> Optional[List[np.ndarray]]:
        """The outputs of the batch, or None when an image overflowed (the caller runs the batch plan)."""
        slots = max(1, min(nthreads, self.batch))
        plans = [self._plan(k) for k in range(slots)]
        outs = [np.empty((self.batch,) + self.shapes1[int(o["tensor"])][1:], np.float32) for o in sim._outputs]
        images = itertools.count()                    # next() is atomic under the GIL
        flags = [False] * slots
        errors: List[BaseException] = []

        # whole images per thread while every thread has one; the last batch % threads images
        # run one at a time on all threads (batch 3 on 2 threads: the third image's layers split)
        whole = self.batch - self.batch % slots

        def one(plan: StaticPlan, i: int, threads: int) -> bool:
            res, overflow = plan.run(sim, [a[i:i + 1] for a in arrays], threads)
            if overflow is not None:
                return False                          # the batch plan reports it
            for o, r in zip(outs, res):
                o[i:i + 1] = r
            return True

        def slot(k: int) -> None:
            for i in images:
                if i >= whole or flags[k] or errors:
                    return
                try:
                    if not one(plans[k], i, 1):
                        flags[k] = True
                        return
                except BaseException as exc:          # every slot stops before the caller sees it
                    errors.append(exc)
                    return
        parallel.run_all(slot, list(range(slots)))
        if errors:
            raise errors[0]
        if any(flags):
            return None
        for i in range(whole, self.batch):
            if not one(plans[0], i, nthreads):
                return None
        return outs


def batch_split(steps: Sequence, input_ids: Sequence[int], output_ids: Sequence[int],
                shapes: Mapping[int, Tuple[int, ...]]) -> Optional[BatchSplit]:
    """A BatchSplit for a program that qualifies (module docstring), else None."""
    if not ENABLED or not steps:
        return None
    tensors = set(input_ids) | set(output_ids) | {s.out for s in steps} | {t for s in steps for t in s.ins}
    if any(t not in shapes or len(shapes[t]) < 1 for t in tensors):
        return None
    batch = int(shapes[next(iter(input_ids))][0]) if input_ids else 0
    if batch < 2 or any(int(shapes[t][0]) != batch for t in tensors):
        return None
    if not all(_per_image(s, shapes) for s in steps):
        return None
    weights, macs = _weights_and_macs(steps, shapes)
    if macs < _MIN_REUSE * weights:                    # weight-bound (FC-heavy): read them once per batch
        return None
    try:
        split = BatchSplit(steps, input_ids, output_ids, shapes, batch)
        split._plan(0)                                # fails here (Unsupported) rather than in a run
    except Unsupported:
        return None
    return split
