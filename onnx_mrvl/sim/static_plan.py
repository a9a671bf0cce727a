"""Static execution of a program: memory planned once, native steps run from precomputed records.

The per-layer path (``Simulator._run_dynamic``) allocates every output, looks its kernel plan up
and fetches array addresses on each call: ~15-25 us of Python per layer, which is 10-15% of a
MobileNetV2 run and leaves the worker threads idle meanwhile. Here, once per Simulator:

* every tensor gets a fixed place in one arena, buffers reused by liveness (first fit; a step's
  output never shares memory with its inputs, but for a fused residual: ``_inplace_residuals``).
  A Reshape / Flatten / Squeeze output is its input's memory (no copy), and a residual conv's
  output that ``residual_steps.py`` fused away gets none;
* every step whose kernel is native becomes a record of precomputed integers (kind, descriptor
  and buffer addresses), and each stretch of consecutive native steps runs in one ``run_steps``
  call. Any other step runs its usual Python kernel on views of the arena and its result is
  copied into place.

The kernels and their arguments are exactly those of the per-layer path, so the results are the
same bits (tests/test_sim_static.py). The arena is per Simulator: a second thread calling ``run``
while one is inside takes the per-layer path. The arena is reused from run to run, so it stays
warm in the caches; its size is the program's peak of live tensors.
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from . import int8_native, native, plan_fusion
from .activations_smooth import only_log_of_zero
from .fp16 import round_fp16_
from ..errors import MrvlRuntimeError
from .int8_native import fake_quant_into
from .int8_plan import batch_records, batchable, plan_int8
from .static_records import fp16_record, size as _size

F32 = np.float32
_ALIASES = ("reshape", "flatten", "squeeze")
_ALIGN = 16                                     # floats: every buffer starts on a 64-byte boundary
_STEP_WORDS = 16                                # longs per run_steps record (_native_conv.c STEP_WORDS)


class Unsupported(Exception):
    """The program cannot run statically (a tensor without a static shape, ...)."""


class _Entry:
    """One step: ``rec``, its native kernel's record for ``run_steps`` (kind, arguments), or
    ``py``, its Python kernel; neither for an aliasing reshape."""
    __slots__ = ("step", "rec", "post", "py", "out_view", "in_views", "keep", "input", "codes_in", "codes_out",
                 "bound")

    def __init__(self, step):
        self.step, self.rec, self.post, self.py = step, None, None, None
        self.codes_in, self.codes_out, self.bound = None, False, None
        self.out_view, self.in_views, self.keep, self.input = None, (), (), None


class StaticPlan:
    def __init__(self, steps: Sequence, input_ids: Sequence[int], output_ids: Sequence[int],
                 shapes: Mapping[int, Tuple[int, ...]], quantized_inputs: Optional[Mapping[int, Tuple]] = None):
        self.lib = native.lib()
        self.quantized_inputs = dict(quantized_inputs or {})   # tensor -> (scale, zero point, dtype): DQ(Q(x))
        if self.lib is None:
            raise Unsupported(native.why_disabled())
        self.steps = list(steps)
        self.input_ids, self.output_ids = list(input_ids), list(output_ids)
        tensors = set(self.input_ids) | {s.out for s in self.steps} | {t for s in self.steps for t in s.ins}
        missing = [t for t in tensors if t not in shapes]
        if missing:
            raise Unsupported(f"tensors {sorted(missing)[:5]} have no static shape")
        self.shapes = {t: tuple(int(d) for d in shapes[t]) for t in tensors}
        self.dwpw = plan_fusion.pairs(self.steps)      # depthwise -> 1x1 pairs run as one pass
        self._plan_memory()
        self.entries = [self._entry(s) for s in self.steps]
        self.coded, self.int8_fused = plan_int8(self.entries, self.output_ids, self.aliases)
        self.dwpw_fused = plan_fusion.fuse(self.entries, self.dwpw, self.shapes)
        self._fuse_inputs()
        self.int8_lib = int8_native.lib() if any(batchable(e) for e in self.entries) else None
        self._segment()
        self._io_of = None                              # the Simulator whose input / output specs are cached

    # ---------------------------------------------------------------- memory
    def _plan_memory(self) -> None:
        root: Dict[int, int] = {}
        for s in self.steps:
            if (s.spec.layer_name.lower() in _ALIASES and len(s.ins) == 1
                    and _size(self.shapes[s.ins[0]]) == _size(self.shapes[s.out])):
                root[s.out] = root.get(s.ins[0], s.ins[0])
        self.aliases = dict(root)                       # the reshapes (int8_plan reads them)
        root = self._inplace_residuals(root)            # plus the residuals written over
        born = {t: -1 for t in self.input_ids}
        last: Dict[int, int] = {}
        for i, s in enumerate(self.steps):
            if s.out not in root:
                born.setdefault(s.out, i)
            for t in list(s.ins) + ([s.out] if s.out in root else []):
                r = root.get(t, t)
                last[r] = max(last.get(r, -1), i)
        for i, j in self.dwpw.items():                  # a fused depthwise's input is read until its 1x1 runs
            r = root.get(self.steps[i].ins[0], self.steps[i].ins[0])
            last[r] = max(last.get(r, -1), j)
        end = len(self.steps)
        for t in self.output_ids:
            last[root.get(t, t)] = end
        offsets: Dict[int, int] = {}
        live: List[Tuple[int, int, int]] = []          # (offset, size, last use)
        top = 0
        for t in sorted(born, key=lambda t: (born[t], t)):
            i = born[t]
            live = [b for b in live if b[2] >= i]       # buffers whose last reader has run
            size = -(-_size(self.shapes[t]) // _ALIGN) * _ALIGN
            off, prev = None, 0
            for b in sorted(live):
                if b[0] - prev >= size:
                    off = prev
                    break
                prev = b[0] + b[1]
            if off is None:
                off = prev if not live else max(b[0] + b[1] for b in live)
            live.append((off, size, last.get(t, i)))
            offsets[t] = off
            top = max(top, off + size)
        self.arena = native.empty((max(top, _ALIGN),))
        base = self.arena.ctypes.data
        self.views: Dict[int, np.ndarray] = {}
        self.ptrs: Dict[int, int] = {}
        for t in self.shapes:
            r = root.get(t, t)
            if r not in offsets:                        # read by nothing that runs: never written
                continue
            off = offsets[r]
            self.views[t] = self.arena[off:off + _size(self.shapes[t])].reshape(self.shapes[t])
            self.ptrs[t] = base + 4 * off
        self.arena_bytes = int(self.arena.nbytes)

    def _inplace_residuals(self, root: Dict[int, int]) -> Dict[int, int]:
        """``root`` plus out -> residual for each fused Conv2D + Sum2D whose residual nothing reads
        after it: the step writes its output over the residual (onnxruntime's Conv + Add accumulates
        into the Add's input likewise). A tile reads each residual row just before it stores the
        same row, so this is exact, provided the conv sums all of K in one k block (earlier blocks
        would park partial sums in the output) and the conv's input is another buffer; the reshapes
        of the output (aliases of it) move along. ResNet-50's
        64 -> 256 at 56x56: one 3.2 MB buffer instead of two, 1314 -> 1176 us single-threaded."""
        reads: Dict[int, List[int]] = {}
        for i, s in enumerate(self.steps):
            for t in s.ins:
                reads.setdefault(t, []).append(i)
        for i, j in self.dwpw.items():                  # a fused depthwise's input: read until its 1x1
            reads.setdefault(self.steps[i].ins[0], []).append(j)
        members: Dict[int, List[int]] = {}
        for t, r in root.items():
            members.setdefault(r, [r]).append(t)
        group, fixed = dict(root), set(self.input_ids) | set(self.output_ids)
        paired = set(self.dwpw.values())                # a depthwise + 1x1 pass keeps its own buffers
        for i, s in enumerate(self.steps):
            conv = getattr(s.fn, "conv", None)
            if s.inner is None or conv is None or conv.groups != 1 or conv.depthwise or i in paired \
                    or conv.kh * conv.kw * self.shapes[s.ins[0]][-1] > native.KC:
                continue
            g = group.get(s.ins[1], s.ins[1])
            mem = members.get(g, [g])
            if g == group.get(s.ins[0], s.ins[0]) or any(t in fixed for t in mem) \
                    or max(j for t in mem for j in reads.get(t, [-1])) != i \
                    or _size(self.shapes[g]) != _size(self.shapes[s.out]):
                continue
            for t in members.pop(s.out, [s.out]):      # the step's output and the reshapes of it
                group[t] = g
                members.setdefault(g, [g]).append(t)
        return group

    # ---------------------------------------------------------------- steps
    def _entry(self, step) -> _Entry:
        e = _Entry(step)
        e.out_view = self.views[step.out]
        e.in_views = tuple(self.views[t] for t in step.ins)
        name = step.spec.layer_name.lower()
        try:
            built = fp16_record(self, e, step, name)
        except (ValueError, KeyError, TypeError):
            built = False
        if not built:
            e.py = step.fn
        return e

    def _fuse_inputs(self) -> None:
        """An input read only by one NCHW -> NHWC transpose is rounded inside it, on the worker
        threads (record kind 8, its source address set per run): one parallel pass instead of a
        serial copy-and-round and a serial transpose."""
        readers: Dict[int, int] = {}
        for st in self.steps:
            for t in st.ins:
                readers[t] = readers.get(t, 0) + 1
        for e in self.entries:
            t = e.step.ins[0] if e.step.ins else None
            if (e.rec is not None and e.rec[0] == 5 and e.rec[6] == 1 and t in self.input_ids
                    and t not in self.quantized_inputs and readers.get(t) == 1 and t not in self.output_ids
                    and t not in self.aliases.values()):
                e.rec = (8, 0, e.rec[2], e.rec[3], e.rec[4], e.rec[5])
                e.input = t

    def _segment(self) -> None:
        """Group consecutive native steps into one ``run_steps`` call each; a step whose result
        numpy finishes (``post``) ends its group, since the next step reads the finished values."""
        self.segments: List[Tuple] = []
        self.input_slots: Dict[int, Tuple[np.ndarray, int]] = {}
        run: List[_Entry] = []

        def close():
            if run:
                recs = np.zeros((len(run), _STEP_WORDS), np.int64)
                for k, e in enumerate(run):
                    recs[k, :len(e.rec)] = e.rec
                ok = np.zeros(len(run), np.int32)
                want = np.array([3 if e.step.inner is not None or e.input is not None else 1 for e in run], np.int32)
                clean = not any(e.post is not None for e in run)
                for k, e in enumerate(run):
                    if e.input is not None:                  # its source address, set per run
                        self.input_slots[e.input] = (recs, k)
                self.segments.append(("native", list(run), recs, ok, recs.ctypes.data, ok.ctypes.data, want, clean,
                                      np.empty_like(ok), want.tobytes()))
                run.clear()
        bound: List[_Entry] = []

        def close_bound():                              # bound int8 calls: one i8_run_calls each stretch
            if bound:
                recs, owners = batch_records(bound)
                self.segments.append(("bound", list(bound), recs, recs.ctypes.data, len(recs), owners))
                bound.clear()
        for e in self.entries:
            if e.rec is None and e.py is None and run:  # an aliasing reshape inside a native stretch:
                e.rec = (9,)                            # a no-op record, so the stretch stays one call
            if e.rec is not None:
                close_bound()
                run.append(e)
                if e.post is not None:
                    close()
            elif e.py is not None and self.int8_lib is not None and batchable(e):
                close()
                bound.append(e)
            else:
                close()
                close_bound()
                self.segments.append(("python" if e.py is not None else "alias", [e]))
        close()
        close_bound()

    @property
    def native_steps(self) -> int:
        return sum(1 for e in self.entries if e.py is None)

    def run(self, sim, arrays: Sequence[np.ndarray], nthreads: int) -> Tuple[List[np.ndarray], Optional[Dict]]:
        """Execute once: (outputs as fresh arrays, first overflow or None). ``sim`` supplies the
        input specs, names and the error wording of the per-layer path."""
        finite: Dict[int, bool] = {}
        overflow: Optional[Dict] = None
        input_names: Dict[int, Tuple[int, str]] = {}
        input_overflow: Dict[int, Dict] = {}             # input position -> report (inputs come first)
        if self._io_of is not sim:                       # (position, name, tensor) of each input, once
            self._io = [(pos, name, int(spec["tensor"])) for pos, (name, spec) in
                        enumerate(zip(sim.input_names, sim._inputs))]
            self._outs = [self.views[int(o["tensor"])] for o in sim._outputs]
            self._io_of = sim
        for (pos, name, tid), a in zip(self._io, arrays):
            x = self.views[tid]
            if tid in self.quantized_inputs:             # the host's quantize (qscale): exact int8 codes
                fake_quant_into(a, x, self.quantized_inputs[tid])
                finite[tid] = True
                continue
            slot = self.input_slots.get(tid)
            if slot is not None:                         # rounded inside its transpose (kind 8)
                if not (a.dtype == F32 and a.flags.c_contiguous and a.shape == x.shape):
                    x[...] = a
                    a = x
                slot[0][slot[1], 1] = native.address(a)
                input_names[tid] = (pos, name)
                continue
            if a.dtype == F32 and a.flags.c_contiguous and a.shape == x.shape:
                bits = self.lib.copy_round(a.ctypes.data, x.ctypes.data, a.size)     # one pass
                ok_in, ok = bool(bits & 1), bool(bits & 2)
            else:
                x[...] = a
                with np.errstate(all="ignore"):
                    ok_in = bool(np.isfinite(a).all())
                ok = round_fp16_(x)
            finite[tid] = ok
            if ok_in and not ok:
                input_overflow[pos] = _input_overflow(name)
        all_finite = all(finite.values())            # no inf / NaN anywhere yet: flags need no bookkeeping
        for seg in self.segments:
            if seg[0] == "bound" and all_finite:        # int8 kernels: finite in, finite out
                bad = self.int8_lib.i8_run_calls(seg[3], seg[4], nthreads)
                if bad >= 0:
                    _no_scratch(sim, seg[1][seg[5][bad]].step.spec)
                continue
            if seg[0] == "native":
                self.lib.run_steps(seg[4], len(seg[1]), seg[5], nthreads)
                if all_finite and seg[7] and np.bitwise_and(seg[3], seg[6], out=seg[8]).tobytes() == seg[9]:
                    continue                            # every step finite (flags & wanted == wanted), from finite inputs
                oks = seg[3].tolist()
            for k, e in enumerate(seg[1]):
                spec, _, ins, out, index, inner = e.step
                conv_ok = True
                if seg[0] in ("python", "bound"):
                    _, ok = _python_step(sim, e)
                elif seg[0] == "alias":
                    ok = True
                else:
                    bits = oks[k]
                    if inner is not None:
                        conv_ok, ok = bool(bits & 1), bool(bits & 2)
                    elif e.input is not None:                # the input's own flags, then a move
                        finite[e.input] = bool(bits & 2)
                        if bits & 1 and not bits & 2:
                            pos, name = input_names[e.input]
                            input_overflow[pos] = _input_overflow(name)
                        ok = True
                    else:
                        ok = bool(bits & 1)
                    if e.post is not None:
                        ok = finish_post(e.out_view, e.post)
                in_ok = all([finite.get(t, True) for t in ins])     # absent: written while all was finite
                if inner is not None:
                    if finite.get(ins[0], True) and not conv_ok and overflow is None:
                        overflow = _overflow_at(*inner)
                    in_ok = in_ok and conv_ok
                finite[out] = bool(ok and in_ok)
                all_finite = all_finite and finite[out]
                if in_ok and not ok and overflow is None and not only_log_of_zero(spec.params, self.views[out]):
                    overflow = _overflow_at(spec, index)
        if input_overflow:                               # an input overflowing on entry is reported first
            overflow = input_overflow[min(input_overflow)]
        return [v.copy() for v in self._outs], overflow    # fresh C-contiguous float32 arrays


def _no_scratch(sim, spec):
    raise MrvlRuntimeError(f"program {sim.name!r}: {spec.layer_name} layer: the native int8 kernel could not "
                           "allocate its scratch buffer", node=spec.name, origin=spec.origin,
                           hint="free memory, or set ONNX_MRVL_SIM_INT8_NATIVE=0 (numpy kernels)")


def _python_step(sim, e: _Entry):
    """A Python kernel on arena views; its result copied into its place (errors as layer by layer),
    or written there by a kernel that takes ``out=`` (``writes_into``: the native int8 kernels)."""
    spec = e.step.spec
    if e.bound is not None:                             # a bound native int8 kernel (int8_native.py)
        if not e.bound():
            _no_scratch(sim, spec)
        return None, True
    into = getattr(e.py, "writes_into", False)          # a kernel that writes its output in place
    try:
        if e.codes_in is not None and (e.codes_out or any(e.codes_in)):
            y, ok = e.py(*e.in_views, out=e.out_view, codes_in=e.codes_in, codes_out=e.codes_out)
        elif into:
            y, ok = e.py(*e.in_views, out=e.out_view)
        else:
            y, ok = e.py(*e.in_views)
    except (ValueError, IndexError) as exc:
        raise MrvlRuntimeError(f"program {sim.name!r}: {spec.layer_name} layer failed: {exc}",
                               node=spec.name, origin=spec.origin,
                               hint="the program's tensor shapes are inconsistent; recompile") from None
    if y.shape != e.out_view.shape:
        raise MrvlRuntimeError(f"program {sim.name!r}: {spec.layer_name} layer produced shape "
                               f"{list(y.shape)}, meta says {list(e.out_view.shape)}", node=spec.name,
                               origin=spec.origin, hint="recompile the region")
    if not (into and np.may_share_memory(y, e.out_view)):
        np.copyto(e.out_view, y)
    return y, ok


def _input_overflow(name: str) -> Dict:
    return {"name": f"input:{name}", "layer_name": "input", "origin": [], "index": -1}


def _overflow_at(spec, index: int) -> Dict:
    return {"name": spec.name, "layer_name": spec.layer_name, "origin": list(spec.origin), "index": index}


def finish_post(view: np.ndarray, post) -> bool:
    """numpy's last step of a transcendental activation on a native kernel's output (in place)."""
    from .fp16 import round_fp16_
    y = view.reshape(-1, view.shape[-1]) if view.ndim > 1 else view
    with np.errstate(over="ignore", invalid="ignore"):
        r = post(y)
    if r is not y:
        y[...] = r
    return round_fp16_(y)
