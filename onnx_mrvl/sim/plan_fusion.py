"""Static-plan fusion of a depthwise conv with the 1x1 conv that reads it (``dw_pw`` in _native_conv.c).

MobileNet's blocks end in depthwise 3x3 -> 1x1 projection (with or without a residual Sum2D,
which ``residual_steps.py`` has already fused into the projection). Run one after the other,
each is a dispatch and a barrier on the worker pool, and at batch 8 the depthwise output
leaves the caches before the projection reads it back. Fused, each part computes a band of
depthwise rows and then the projection of those pixels while they are in its cache: the same
kernels on the same values, so the same bits (tests/test_sim_dwpw.py).

``pairs(steps, ...)`` finds the candidates before the memory plan (their depthwise input must stay
live until the projection, whose output must not overwrite rows another band still reads);
``fuse(entries, ...)`` rewrites the two records (kinds 10 and 11 of ``run_steps``) after it.
``ONNX_MRVL_SIM_DWPW=0`` turns it off.
"""
from __future__ import annotations

import os
from typing import Dict, List, Mapping, Sequence, Tuple

from .static_records import has_post_in_c

ENABLED = os.environ.get("ONNX_MRVL_SIM_DWPW", "1").strip().lower() not in ("0", "false", "no", "off")


def _conv(step):
    """The prepared Conv2D of a step (its fused residual's conv too), or None."""
    from .kernels import Conv2D
    conv = step.fn.conv if step.inner is not None else getattr(step.fn, "__self__", None)
    return conv if isinstance(conv, Conv2D) else None


def pairs(steps: Sequence) -> Dict[int, int]:
    """{index of a depthwise step: index of the 1x1 conv right after it that reads its output}:
    the structural candidates (fp16, no channel multiplier, a dense 1x1 stride-1 unpadded conv).
    The memory plan keeps the depthwise input alive through the partner's step."""
    if not ENABLED:
        return {}
    found = {}
    for i in range(len(steps) - 1):
        a, b = steps[i], steps[i + 1]
        ca, cb = _conv(a), _conv(b)
        if ca is None or cb is None or a.inner is not None or len(a.ins) != 1:
            continue
        if any(str(s.spec.params.get("precision", "fp16")) != "fp16" for s in (a, b)):
            continue
        if not (ca.depthwise and ca.og == 1) or cb.depthwise or cb.groups != 1:
            continue
        if (cb.kh, cb.kw, tuple(cb.strides), tuple(cb.padding)) != (1, 1, (1, 1), (0, 0, 0, 0)):
            continue
        if not b.ins or b.ins[0] != a.out:
            continue
        found[i] = i + 1
    return found


def _span(ptr: int, shape) -> Tuple[int, int]:
    n = 4
    for d in shape:
        n *= int(d)
    return ptr, ptr + n


def _disjoint(u: Tuple[int, int], v: Tuple[int, int]) -> bool:
    return u[1] <= v[0] or v[1] <= u[0]


def fuse(entries: List, candidates: Mapping[int, int], shapes: Mapping) -> int:
    """Rewrite each candidate pair whose native records and memory allow it: the depthwise
    record becomes kind 10 (both layers' arguments), the 1x1 conv's kind 11 (its own, run by the
    record before). Returns the number of pairs fused."""
    done = 0
    for i, j in candidates.items():
        a, b = entries[i], entries[j]
        if a.rec is None or b.rec is None or a.rec[0] != 2 or b.rec[0] != 1 or a.post is not None \
                or has_post_in_c(a.rec) or has_post_in_c(b.rec):   # dw_pw has no activation pass: it would drop it
            continue
        dd, cd = a.keep[1], b.keep[1]
        if a.keep[2] != a.rec[1] or b.keep[2] != b.rec[1]:
            continue
        n, _, _, c = (int(v) for v in dd[:4])
        oh, ow = int(dd[4]), int(dd[5])
        if tuple(int(v) for v in cd[:6]) != (n, oh, ow, c, oh, ow) or tuple(int(v) for v in cd[6:14]) != (
                1, 1, 1, 1, 1, 1, 0, 0) or int(cd[27]) != 1:
            continue
        x, mid = a.rec[2], a.rec[3]
        out, res = b.rec[3], b.rec[4]
        if b.rec[2] != mid:
            continue
        step_a, step_b = a.step, b.step
        sx = _span(x, shapes[step_a.ins[0]])
        smid = _span(mid, shapes[step_a.out])
        sout = _span(out, shapes[step_b.out])
        if not (_disjoint(sout, sx) and _disjoint(sout, smid)):
            continue
        if res and not _disjoint(_span(res, shapes[step_b.ins[1]]), smid):
            continue
        a.rec = (10, a.rec[1], x, mid, b.rec[1], out, res)
        b.rec = (11,) + tuple(b.rec[1:])
        done += 1
    return done
