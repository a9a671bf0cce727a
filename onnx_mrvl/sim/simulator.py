"""Execute a compiled program (docs/program.md) on fp16 values: ``Simulator(binary).run(inputs)``.

Construction validates every layer and prepares its kernel once (weights laid out as float32
containers of fp16 values, built from the stored fp16 weights; see ``weights.py``); ``run`` only executes. ``run`` keeps all per-call state local, so
several threads may call it on one Simulator; only ``last_perf`` / ``last_overflow`` are shared,
and they are written under a lock.
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import ArtifactError, CompileError, MrvlRuntimeError
from . import int8, native
from .blas import configure_once
from .activations_smooth import only_log_of_zero
from .fp16 import round_fp16_
from .residual_steps import Step, fuse_residuals
from .parallel import workers
from .static_plan import StaticPlan, Unsupported
from .batch_split import batch_split
from .layers import build_layer, layer_list
from .weights import StoredWeights
from ..costmodel import PerfReport, perf_report

log = logging.getLogger(__name__)
_F32 = np.dtype(np.float32)


def _load_binary(binary):
    """bytes / path / loaded Binary -> (meta, weights)."""
    if hasattr(binary, "meta") and hasattr(binary, "weights"):
        return binary.meta, binary.weights
    if isinstance(binary, (bytes, bytearray, memoryview, str, os.PathLike)):
        try:
            from ..artifact import load
        except ImportError as exc:
            raise ArtifactError(f"cannot read a model binary: onnx_mrvl.artifact.load is unavailable ({exc})",
                                hint="pass a loaded Binary or use Simulator.from_program(meta, weights)") from None
        b = load(bytes(binary) if isinstance(binary, (bytearray, memoryview)) else binary)
        return b.meta, b.weights
    raise TypeError(f"Simulator needs bytes, a path or a loaded Binary, not {type(binary).__name__}")


def _all_finite(arrays: List[np.ndarray]) -> bool:
    with np.errstate(all="ignore"):
        return all(bool(np.isfinite(a).all()) for a in arrays)


def _overflow_at(spec, index: int) -> Dict:
    return {"name": spec.name, "layer_name": spec.layer_name, "origin": list(spec.origin), "index": index}


class Simulator:
    """Runs one program; see the module docstring."""

    def __init__(self, binary=None, *, _program=None):
        configure_once()
        meta, weights = _program if _program is not None else _load_binary(binary)
        if not isinstance(meta, Mapping):
            raise ArtifactError("program meta must be a dict", hint="rebuild the binary")
        self.meta = meta
        self.name = str(meta.get("name", "program"))
        self.weights = StoredWeights(weights or {})     # float32 per read, no second copy kept
        self._inputs = self._io_list("inputs")
        self._outputs = self._io_list("outputs")
        self._input_shapes = tuple(tuple(int(d) for d in i["shape"]) for i in self._inputs)
        self._layers = []
        known = {int(t["tensor"]) for t in self._inputs}
        for i, layer in enumerate(layer_list(meta)):
            spec, fn = build_layer(layer, self.weights)
            ins = [int(t) for t in layer.get("inputs") or []]
            outs = [int(t) for t in layer.get("outputs") or []]
            missing = [t for t in ins if t not in known]
            if missing:
                raise CompileError(f"reads tensor(s) {missing} before any layer writes them",
                                   node=spec.name, origin=spec.origin, hint="recompile the region")
            if len(outs) != 1:
                raise CompileError(f"must write exactly one tensor, writes {outs}", node=spec.name,
                                   origin=spec.origin, hint="recompile the region")
            known.update(outs)
            self._layers.append(Step(spec, fn, ins, outs[0], i))
        for o in self._outputs:
            if int(o["tensor"]) not in known:
                raise CompileError(f"output {o.get('name')!r} (tensor {o['tensor']}) is never written",
                                   node=self.name, hint="recompile the region")
        self._shapes = {int(t["id"]): tuple(int(d) for d in t["shape"])
                        for t in meta.get("tensors") or [] if "id" in t and t.get("shape") is not None}
        out_ids = {int(o["tensor"]) for o in self._outputs}
        if native.on():
            self._layers = fuse_residuals(self._layers, out_ids, self._shapes)
        self._static = None                     # static_plan.StaticPlan, when every tensor has a shape
        self._static_lock = threading.Lock()
        # int8 region inputs (program.md "tensor dtypes"): quantized on the host, not rounded to fp16
        input_ids = {int(i["tensor"]) for i in self._inputs}
        self._input_quant = {int(t["id"]): (float(t["scale"]), int(t["zero_point"]), str(t["dtype"]))
                             for t in meta.get("tensors") or []
                             if "id" in t and int(t["id"]) in input_ids and t.get("dtype", "float16") in int8.QRANGE}
        io_match = all(self._shapes.get(int(t["tensor"])) == tuple(int(d) for d in t["shape"])
                       for t in self._inputs + self._outputs)
        if native.on() and io_match and os.environ.get("ONNX_MRVL_SIM_STATIC", "1") != "0":
            try:
                self._static = StaticPlan(self._layers, [int(t["tensor"]) for t in self._inputs],
                                          [int(o["tensor"]) for o in self._outputs], self._shapes,
                                          quantized_inputs=self._input_quant)
            except Unsupported as exc:
                log.debug("program %r runs layer by layer: %s", self.name, exc)
        self._split = None                      # batch_split.BatchSplit: whole images per core
        if self._static is not None and not self._input_quant:
            self._split = batch_split(self._layers, [int(t["tensor"]) for t in self._inputs],
                                      [int(o["tensor"]) for o in self._outputs], self._shapes)
        last_use: Dict[int, int] = {}
        for i, step in enumerate(self._layers):
            for t in step.ins:
                last_use[t] = i
        self._free_after = [[t for t in set(step.ins) if last_use[t] == i and t not in out_ids]
                            for i, step in enumerate(self._layers)]
        try:
            self.perf: PerfReport = perf_report(meta)
        except (ValueError, TypeError, KeyError) as exc:
            raise CompileError(f"bad performance parameters: {exc}", node=self.name,
                               hint="fix meta['arch'] / per-layer macs and dram_bytes") from None
        self._lock = threading.Lock()
        self._last_perf: Optional[PerfReport] = None
        self._last_overflow: Optional[Dict] = None

    @classmethod
    def from_program(cls, meta: Mapping, weights: Mapping[str, np.ndarray]) -> "Simulator":
        return cls(_program=(meta, weights))

    def _io_list(self, key: str) -> List[Dict]:
        items = self.meta.get(key)
        if not isinstance(items, list) or not items:
            raise CompileError(f"program meta has no {key}", node=self.name, hint="recompile the region")
        shapes = {int(t["id"]): t.get("shape") for t in self.meta.get("tensors") or [] if "id" in t}
        out = []
        for it in items:
            it = dict(it)
            if "tensor" in it and it.get("shape") is None:
                it["shape"] = shapes.get(int(it["tensor"]))
            if "tensor" not in it or it.get("shape") is None:
                raise CompileError(f"each of meta[{key!r}] needs a 'tensor' with a known shape: {it}",
                                   node=self.name, hint="recompile the region")
            out.append(it)
        return out

    @property
    def input_names(self) -> List[str]:
        return [str(i.get("name", f"input_{k}")) for k, i in enumerate(self._inputs)]

    @property
    def output_names(self) -> List[str]:
        return [str(o.get("name", f"output_{k}")) for k, o in enumerate(self._outputs)]

    @property
    def input_shapes(self) -> List[List[int]]:
        return [[int(d) for d in i["shape"]] for i in self._inputs]

    @property
    def output_shapes(self) -> List[List[int]]:
        return [[int(d) for d in o["shape"]] for o in self._outputs]

    @property
    def last_perf(self) -> Optional[PerfReport]:
        with self._lock:
            return self._last_perf

    @property
    def last_overflow(self) -> Optional[Dict]:
        """The first layer of the last run whose output overflowed (name, layer_name, origin, index)."""
        with self._lock:
            return None if self._last_overflow is None else dict(self._last_overflow)

    def _bind_inputs(self, inputs) -> List[np.ndarray]:
        if type(inputs) in (list, tuple) and len(inputs) == len(self._input_shapes):
            for a, want in zip(inputs, self._input_shapes):     # the usual call: float32 arrays in order
                if type(a) is not np.ndarray or a.dtype is not _F32 or a.shape != want:
                    break
            else:
                return list(inputs)
        names = self.input_names
        if isinstance(inputs, Mapping):
            unknown = sorted(set(map(str, inputs)) - set(names))
            if unknown:
                raise MrvlRuntimeError(f"program {self.name!r}: unknown input(s) {unknown}; "
                                       f"expected {names}", node=self.name)
            missing = [n for n in names if n not in inputs]
            if missing:
                raise MrvlRuntimeError(f"program {self.name!r}: missing input(s) {missing}", node=self.name,
                                       hint=f"pass all of {names}")
            arrays = [inputs[n] for n in names]
        elif isinstance(inputs, np.ndarray) and len(names) == 1:
            arrays = [inputs]
        else:
            arrays = list(inputs)
            if len(arrays) != len(names):
                raise MrvlRuntimeError(f"program {self.name!r} takes {len(names)} input(s) {names}, "
                                       f"got {len(arrays)}", node=self.name)
        out = []
        for name, spec, a in zip(names, self._inputs, arrays):
            want = tuple(int(d) for d in spec["shape"])
            if not isinstance(a, np.ndarray) or a.dtype != np.float32:
                got = a.dtype if isinstance(a, np.ndarray) else type(a).__name__
                raise MrvlRuntimeError(f"program {self.name!r}: input {name!r} must be float32 with shape "
                                       f"{list(want)}, got dtype {got}", node=self.name,
                                       hint="cast the input to float32 (fp16 rounding happens inside)")
            if a.shape != want:
                raise MrvlRuntimeError(f"program {self.name!r}: input {name!r} has shape {list(a.shape)}, "
                                       f"expected {list(want)}", node=self.name,
                                       hint="feed the shape the region was compiled for")
            out.append(a)
        return out

    def run(self, inputs: Union[Sequence[np.ndarray], Mapping[str, np.ndarray], np.ndarray], *,
            on_overflow: str = "warn") -> List[np.ndarray]:
        """Execute the program; returns float32 C-contiguous arrays in meta['outputs'] order.

        ``on_overflow``: what an fp16 overflow (a layer turning finite inputs into inf/NaN) does:
        "warn" logs it and lets the infs flow on, as on the device; "raise" raises
        ``MrvlRuntimeError`` naming the layer and its original nodes when an inf/NaN reaches an
        output (infs that a later layer absorbs, e.g. a -inf attention mask before a Softmax, are
        the model's intent and only logged)."""
        if on_overflow not in ("warn", "raise"):
            raise ValueError(f"on_overflow must be 'warn' or 'raise', not {on_overflow!r}")
        arrays = self._bind_inputs(inputs)
        if self._static is not None and self._static_lock.acquire(blocking=False):
            try:                                    # fixed memory, one call per native step
                nw = workers()
                results = self._split.run(self, arrays, nw) if self._split is not None else None
                if results is not None:             # None: an image overflowed, the batch plan reports it
                    return self._finish(results, None, on_overflow)
                results, overflow = self._static.run(self, arrays, nw)
            finally:
                self._static_lock.release()
            return self._finish(results, overflow, on_overflow)
        return self._run_dynamic(arrays, on_overflow)

    def _finish(self, results: List[np.ndarray], overflow: Optional[Dict], on_overflow: str) -> List[np.ndarray]:
        with self._lock:
            self._last_perf = self.perf
            self._last_overflow = overflow
        if overflow is not None:
            where = f"{overflow['layer_name']} {overflow['name']}"
            origin = ", ".join(overflow["origin"]) or "-"
            if on_overflow == "raise" and not _all_finite(results):
                raise MrvlRuntimeError(
                    f"program {self.name!r}: fp16 overflow: {where} turned finite inputs into inf/NaN, "
                    f"which reach the region's outputs (original nodes: {origin})", node=overflow["name"], origin=tuple(overflow["origin"]),
                    hint="its values exceed fp16's range (65504): keep these nodes on the CPU (convert with "
                         "exclude=[...] / --exclude), rescale the inputs, or accept the device's inf "
                         "(InferenceSession(..., fp16_overflow='inf') / onnx-mrvl run --allow-overflow)")
            log.warning("program %r: fp16 overflow (inf/nan) first in %s (original nodes: %s)",
                        self.name, where, origin)
        return results

    def _run_dynamic(self, arrays: List[np.ndarray], on_overflow: str = "warn") -> List[np.ndarray]:
        return self._finish(*self._run_layers(arrays), on_overflow)

    def _run_layers(self, arrays: List[np.ndarray]) -> Tuple[List[np.ndarray], Optional[Dict]]:
        """Layer by layer, every output a fresh array (no static plan, or another thread is in it)."""
        env: Dict[int, np.ndarray] = {}
        finite: Dict[int, bool] = {}
        overflow: Optional[Dict] = None
        for name, spec, a in zip(self.input_names, self._inputs, arrays):
            if native.on():
                x = native.empty(np.shape(a))       # 64-byte aligned, as every native kernel writes
                x[...] = a
            else:
                x = np.array(a, dtype=np.float32, order="C", copy=True)
            with np.errstate(all="ignore"):
                ok_in = bool(np.isfinite(a).all())
            tid = int(spec["tensor"])
            if tid in self._input_quant:            # the host's quantize (qscale): exact int8 codes
                x[...] = int8.fake_quant(a, *self._input_quant[tid])
                ok = True
            else:
                ok = round_fp16_(x)
            env[tid], finite[tid] = x, ok
            if ok_in and not ok and overflow is None:
                overflow = {"name": f"input:{name}", "layer_name": "input", "origin": [], "index": -1}
        shapes, free_after = self._shapes, self._free_after
        for i, (spec, fn, ins, out_id, index, inner) in enumerate(self._layers):
            try:
                if inner is None:
                    y, ok = fn(*[env[t] for t in ins])
                else:                               # fused Conv2D + Sum2D (residual_steps.py)
                    y, conv_ok, ok = fn(*[env[t] for t in ins])
            except (ValueError, IndexError) as exc:
                raise MrvlRuntimeError(f"program {self.name!r}: {spec.layer_name} layer failed: {exc}",
                                       node=spec.name, origin=spec.origin,
                                       hint="the program's tensor shapes are inconsistent; recompile") from None
            want = shapes.get(out_id)
            if want is not None and y.shape != want:
                raise MrvlRuntimeError(f"program {self.name!r}: {spec.layer_name} layer produced shape "
                                       f"{list(y.shape)}, meta says {list(want)}", node=spec.name,
                                       origin=spec.origin, hint="recompile the region")
            in_ok = finite[ins[0]] if len(ins) == 1 else all([finite[t] for t in ins])
            if inner is not None:                   # the conv's own flag, then the sum's inputs
                if finite[ins[0]] and not conv_ok and overflow is None:
                    overflow = _overflow_at(*inner)
                in_ok = in_ok and conv_ok
            env[out_id], finite[out_id] = y, bool(ok and in_ok)
            if in_ok and not ok and overflow is None and not only_log_of_zero(spec.params, y):
                overflow = _overflow_at(spec, index)
            for t in free_after[i]:
                env.pop(t, None)
        results, seen = [], set()
        input_ids = {int(s["tensor"]) for s in self._inputs}
        for o in self._outputs:
            tid = int(o["tensor"])
            y = env[tid]
            if tid in seen or tid in input_ids or not y.flags.c_contiguous or y.dtype != np.float32:
                y = np.array(y, dtype=np.float32, order="C", copy=True)
            seen.add(tid)
            want = tuple(int(d) for d in o["shape"])
            if y.shape != want:
                raise MrvlRuntimeError(f"program {self.name!r}: output {o.get('name')!r} has shape "
                                       f"{list(y.shape)}, meta says {list(want)}", node=self.name,
                                       hint="recompile the region")
            results.append(y)
        return results, overflow

    def __repr__(self) -> str:
        return (f"Simulator({self.name!r}, {len(self._layers)} layers, inputs={self.input_shapes}, "
                f"outputs={self.output_shapes})")
