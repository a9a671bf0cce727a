"""int8 data flow in the static plan (static_plan.py): codes between native int8 kernels, each
kernel bound once to its arena buffers, and the residual Sum2D fused into its conv
(docs/simulator.md "int8 kernels")."""
from __future__ import annotations

from typing import Dict, List, Mapping, Sequence, Set, Tuple

import numpy as np


def plan_int8(entries: Sequence, output_ids: Sequence[int], aliases: Mapping[int, int]) -> Tuple[Set[int], int]:
    """Set each native int8 entry's ``codes_in`` / ``codes_out`` and ``bound`` call; returns (the
    coded tensors, the number of fused conv + Sum2D pairs).

    A tensor written by a native int8 kernel and read only by native int8 kernels that quantize it
    as it was quantized (``int8_io``, int8_native.py), and not a program output or an alias, holds
    the bytes ``q + off`` in (the start of) its buffer instead of the dequantized float32 values:
    no float write, no re-quantization. The same codes either way, so the same results."""
    io = {id(e): getattr(e.py, "int8_io", None) for e in entries}
    readers: Dict[int, List[Tuple[object, int]]] = {}
    for e in entries:
        for k, t in enumerate(e.step.ins):
            readers.setdefault(t, []).append((e, k))
    outputs, alias_ids = set(output_ids), set(aliases) | set(aliases.values())
    coded = set()
    for e in entries:
        t, mine = e.step.out, io[id(e)]
        if mine is None or t in outputs or t in alias_ids:
            continue
        rs = readers.get(t, [])
        if rs and all(io[id(r)] is not None and k < len(io[id(r)][0]) and io[id(r)][0][k] == mine[1] for r, k in rs):
            coded.add(t)
    for e in entries:
        if io[id(e)] is not None:
            e.codes_in = tuple(t in coded for t in e.step.ins)
            e.codes_out = e.step.out in coded
            try:                                        # its call on these buffers, made once
                e.bound = e.py.bind(*e.in_views, out=e.out_view, codes_in=e.codes_in, codes_out=e.codes_out)
            except (ValueError, IndexError, TypeError):
                e.bound = None                          # the per-call path reports the error
    return coded, _fuse_residuals(entries, coded, readers)


def _fuse_residuals(entries: Sequence, coded: Set[int], readers) -> int:
    """A native int8 conv immediately followed by the int8 Sum2D that alone reads its (coded)
    output runs as one call: the sum is taken on the conv's codes in its epilogue, the conv
    output is never stored (the fp16 convs' residual fusion, residual_steps.py, for int8). Skipped when
    the sum's output buffer overlaps the conv's inputs (it is written while they are read)."""
    fused = 0
    for e, a in zip(entries, entries[1:]):
        t = e.step.out
        if (e.bound is None or a.bound is None or not hasattr(e.py, "bind_fused")
                or not hasattr(a.py, "add_prm") or t not in coded or len(readers.get(t, ())) != 1
                or readers[t][0][0] is not a or len(a.step.ins) != 2 or a.step.ins[0] == a.step.ins[1]):
            continue
        if any(np.may_share_memory(a.out_view, v) for v in e.in_views):
            continue
        slot = readers[t][0][1]
        prm = a.py.add_prm.copy()
        prm[7 + 8 * (1 - slot)] = float(a.codes_in[1 - slot])
        prm[23] = float(a.codes_out)
        try:
            call = e.py.bind_fused(*e.in_views, out=a.out_view, codes_in=e.codes_in, add_prm=prm, slot=slot,
                                   other=a.in_views[1 - slot])
        except (ValueError, IndexError, TypeError):
            continue
        if call is None:
            continue
        e.bound, a.bound = call, _done_already
        fused += 1
    return fused


def _done_already() -> int:
    """The bound call of a step another step's call already computed (a fused int8 Sum2D)."""
    return 1


_done_already.native = (2, 0, 0, 0, 0, 0, 0)


def batchable(e) -> bool:
    """A bound native call that ``batch_records`` can take (``native``: its C function and arguments)."""
    return e.bound is not None and getattr(e.bound, "native", None) is not None


def batch_records(entries: Sequence) -> Tuple[np.ndarray, List[int]]:
    """The ``i8call`` records (_native_int8.c ``i8_run_calls``) of consecutive bound int8 steps,
    and the entry of each record: one C call runs them all, instead of a Python step and a ctypes
    call each (~3 us a step, 5% of a MobileNetV2 run). The arguments are those of each step's
    bound call (kept alive by it); a call of several kernels (a Concat) gives a list of records."""
    rows, owners = [], []
    for k, e in enumerate(entries):
        native = e.bound.native
        for rec in (native if isinstance(native, list) else [native]):
            rows.append(rec)
            owners.append(k)
    return np.array(rows, np.int64).reshape(-1, 7), owners
