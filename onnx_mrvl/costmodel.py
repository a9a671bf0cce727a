"""Cycle-approximate performance model of a program (static: it depends on the program only).

Per layer: compute_cycles = ceil(macs / (macs_per_cycle_per_tile * num_tiles)) + ceil(vector_ops /
(vector_ops_per_cycle_per_tile * num_tiles)) (LayerNorm, Softmax, smooth activations),
memory_cycles = ceil(dram_bytes / dram_bytes_per_cycle), cycles = max(compute, memory) +
layer_overhead_cycles; the larger term names the bound. The arch parameters come from
meta["arch"], missing keys from ``onnx_mrvl.target.ArchProfile`` (all assumptions, see
docs/simulator.md). ``macs`` / ``dram_bytes`` come from the compile step; when a layer lacks
them they are derived from the tensor shapes and weight sizes in meta.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional

from .target import VECTOR_LOWERINGS, ArchProfile, lrn_ops_per_element

_ITEMSIZE = {"float16": 2, "int8": 1, "float32": 4, "int32": 4}
_ARCH_KEYS = ("num_tiles", "ocm_size", "macs_per_cycle_per_tile", "clock_hz",
              "dram_bytes_per_cycle", "layer_overhead_cycles", "vector_ops_per_cycle_per_tile",
              "recurrent_step_cycles", "int8_macs_factor")


@dataclass
class LayerPerf:
    name: str
    layer_name: str
    origin: List[str]
    macs: int
    dram_bytes: int
    compute_cycles: int
    memory_cycles: int
    cycles: int
    bound: str                      # "compute" | "memory"


@dataclass
class PerfReport:
    layers: List[LayerPerf]
    arch: Dict[str, float]
    cycles: int = 0
    latency_s: float = 0.0
    dram_bytes: int = 0
    macs: int = 0
    utilization: float = 0.0        # macs / (cycles * peak macs per cycle)
    derived: List[str] = field(default_factory=list)   # layers whose macs/bytes were derived here

    def to_dict(self) -> Dict:
        return {"layers": [dataclasses.asdict(r) for r in self.layers], "arch": dict(self.arch),
                "totals": {"cycles": self.cycles, "latency_s": self.latency_s,
                           "dram_bytes": self.dram_bytes, "macs": self.macs,
                           "utilization": self.utilization},
                "derived": list(self.derived)}

    def table(self) -> str:
        """Aligned text: one row per layer, then the totals."""
        head = ["#", "layer", "type", "macs", "dram_bytes", "compute", "memory", "cycles", "bound", "origin"]
        rows = [[str(i), r.name, r.layer_name, f"{r.macs:,}", f"{r.dram_bytes:,}", f"{r.compute_cycles:,}",
                 f"{r.memory_cycles:,}", f"{r.cycles:,}", r.bound, ",".join(r.origin)]
                for i, r in enumerate(self.layers)]
        rows.append(["", "TOTAL", "", f"{self.macs:,}", f"{self.dram_bytes:,}", "", "", f"{self.cycles:,}",
                     "", ""])
        widths = [max(len(h), *(len(row[k]) for row in rows)) for k, h in enumerate(head)]
        right = {0, 3, 4, 5, 6, 7}

        def fmt(cells):
            return "  ".join(c.rjust(w) if k in right else c.ljust(w)
                             for k, (c, w) in enumerate(zip(cells, widths))).rstrip()
        lines = [fmt(head), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows]
        a = self.arch
        lines.append(f"latency {self.latency_s * 1e3:.4f} ms at {a['clock_hz'] / 1e9:g} GHz, "
                     f"{int(a['num_tiles'])} tiles x {int(a['macs_per_cycle_per_tile'])} MAC/cycle, "
                     f"utilization {self.utilization * 100:.1f}%")
        return "\n".join(lines)


def arch_params(meta: Mapping) -> Dict[str, float]:
    """meta["arch"] completed with the ArchProfile defaults."""
    given = dict(meta.get("arch") or {})
    base = ArchProfile()
    out = {k: given.get(k, getattr(base, k)) for k in _ARCH_KEYS}
    for k, v in given.items():
        out.setdefault(k, v)
    if int(out["num_tiles"]) < 1 or float(out["macs_per_cycle_per_tile"]) <= 0 or float(out["int8_macs_factor"]) <= 0 \
            or float(out["dram_bytes_per_cycle"]) <= 0 or float(out["clock_hz"]) <= 0:
        raise ValueError(f"arch parameters must be positive: {out}")
    return out


def _prod(xs) -> int:
    p = 1
    for x in xs:
        p *= int(x)
    return p


def derive_macs(layer: Mapping, shapes: Mapping[int, List[int]], weight_shapes: Mapping[str, List[int]]) -> int:
    """MACs of one layer from shapes (multiply-accumulates; pools count one per window tap)."""
    kind = str(layer.get("layer_name", ""))
    outs = [shapes.get(t) for t in layer.get("outputs") or []]
    ins = [shapes.get(t) for t in layer.get("inputs") or []]
    out = outs[0] if outs and outs[0] is not None else None
    params = layer.get("params") or {}
    wnames = layer.get("weights") or {}
    if out is None:
        return 0
    if kind in ("Conv2D", "FC"):
        kshape = weight_shapes.get(wnames.get("kernel"))
        if kshape is None:
            return 0
        return _prod(out) * _prod(kshape[1:])          # each output: KH*KW*I/g (or K) MACs
    if kind in ("Maxpool2D", "Avgpool2D"):
        return _prod(out) * _prod(params.get("kernel_size") or [1, 1])
    if kind in ("GlobalAvgpool2D", "GlobalMaxpool2D"):
        return _prod(ins[0]) if ins and ins[0] is not None else 0
    if kind in ("Sum2D", "Mul2D"):
        return _prod(out)
    if kind == "BatchMatMul" and ins and ins[0]:
        # assumption: the FC's MAC array, B operand streamed from OCM: batch*M*N*K (B*H*T*T*d for Q*K^T)
        return _prod(out) * int(ins[0][-1])
    return 0


def vector_ops(layer: Mapping, shapes: Mapping[int, List[int]]) -> int:
    """Vector-unit operations of a layer (``target.VECTOR_LOWERINGS``): the compile step's
    ``vector_ops`` (LayerNorm, Softmax) or per output element of the layer kind, plus those of a
    smooth activation (gelu, gelu_tanh, elu, mish) in its epilogue. 0 for the other layers (their
    epilogue is not charged, as before)."""
    outs = [shapes.get(t) for t in layer.get("outputs") or []]
    elems = _prod(outs[0]) if outs and outs[0] is not None else 0
    kind = str(layer.get("layer_name", ""))
    ops = layer.get("vector_ops")
    if ops is None:
        size = (layer.get("params") or {}).get("size")
        if kind == "LRN" and size and outs[0]:   # + the window sum's taps (as emit/lrn_layer.py)
            ops = elems * lrn_ops_per_element(size, outs[0][-1])
        else:
            ops = elems * VECTOR_LOWERINGS[kind][1] if kind in VECTOR_LOWERINGS else 0
    act = str((layer.get("params") or {}).get("activation") or "none")
    if act in VECTOR_LOWERINGS:
        ops += elems * VECTOR_LOWERINGS[act][1]
    return int(ops) + length_mask_ops(layer)


def length_mask_ops(layer: Mapping) -> int:
    """Vector-unit selects of a recurrent layer with per-row lengths (``sequence_lens`` data): per
    step, direction, row and unit one select of h (and of an LSTM's c) between the new and the held
    state and one of Y's row against 0 (assumption: predicated writes on the vector unit; every row
    runs all T steps in lockstep, a short row saves nothing)."""
    p = layer.get("params") or {}
    if str(layer.get("layer_name", "")) not in RECURRENT_LAYERS or "sequence_lens" not in (p.get("state_inputs") or []):
        return 0
    dirs = 2 if p.get("direction") == "bidirectional" else 1
    per = 3 if str(layer.get("layer_name")) == "LSTM" else 2
    return int(p.get("steps", 1)) * dirs * int(p.get("batch", 1)) * int(p.get("hidden_size", 0)) * per


def derive_dram_bytes(layer: Mapping, tensors: Mapping[int, Mapping], weight_bytes: Mapping[str, int]) -> int:
    """fp16 weight bytes plus the bytes of DRAM-placed tensors the layer reads or writes."""
    total = sum(weight_bytes.get(w, 0) for w in (layer.get("weights") or {}).values())
    for t in list(layer.get("inputs") or []) + list(layer.get("outputs") or []):
        info = tensors.get(t) or {}
        if info.get("placement", "dram") == "dram":
            total += int(info.get("nbytes", 2 * _prod(info.get("shape") or [])))
    return total


RECURRENT_LAYERS = ("LSTM", "GRU", "RNN")
def recurrent_compute_cycles(macs: int, steps: int, peak: float, step_cycles: int) -> int:
    """Cycles of a recurrent layer's compute: timesteps run one after the other (h_t needs
    h_{t-1}); per timestep the MAC array does that step's gate GEMMs of every direction (the
    directions of a bidirectional layer run side by side on different tiles: assumption) at peak
    throughput, then ``step_cycles`` (assumption: MAC pipeline drain, the vector unit's
    activations and cell update, the state write) pass before the next step's GEMM can start."""
    steps = max(int(steps), 1)
    return steps * (math.ceil(int(macs) / steps / float(peak)) + int(step_cycles))


def streamed_weight_bytes(steps: int, weight_bytes: int, capacity: int) -> int:
    """Extra DRAM bytes of a recurrent layer whose W and R do not fit the on-chip memory
    (``capacity``): they are read again at every timestep after the first (assumption: no
    reuse across timesteps without residency)."""
    return (max(int(steps), 1) - 1) * int(weight_bytes) if weight_bytes > capacity else 0


def recurrent_fp16_macs(cell: str, steps: int, dirs: int, batch: int, hidden: int, state_int8: bool) -> int:
    """The MACs of an int8 recurrent layer that run at the fp16 rate: its recurrent products
    ``h_{t-1} R^T`` when the state stays fp16 (fp16 h times the int8 R codes, expanded to fp16 on
    the MAC array: assumption), T * D * B * G*H*H; 0 when the state is quantized per step."""
    from .opset_recurrent import macs as recurrent_macs
    return 0 if state_int8 else recurrent_macs(cell, steps, dirs, batch, hidden, 0)


def roofline(macs: int, vector_ops: int, dram_bytes: int, arch: Mapping, steps: int = 0,
             int8: bool = False, fp16_macs: int = 0) -> Dict[str, int]:
    """One layer's cycles: compute (MAC array + vector unit; ``steps`` > 0: a recurrent layer's
    serial timesteps; ``int8``: MACs at ``int8_macs_factor`` x the fp16 rate), memory (DRAM), and
    max(compute, memory) + the fixed per-layer overhead. ``arch``: ``arch_params`` keys. The one
    formula of the project: the simulator's report and split's ``partition="cost"`` estimate use it."""
    tiles = int(arch["num_tiles"])
    peak = float(arch["macs_per_cycle_per_tile"]) * tiles * (float(arch["int8_macs_factor"]) if int8 else 1.0)
    if int8 and fp16_macs:   # part of an int8 layer at the fp16 rate: fp16-rate equivalent MACs
        peak = float(arch["macs_per_cycle_per_tile"]) * tiles
        macs = (int(macs) - int(fp16_macs)) / float(arch["int8_macs_factor"]) + int(fp16_macs)
    compute = recurrent_compute_cycles(macs, steps, peak, int(arch["recurrent_step_cycles"])) if steps \
        else math.ceil(macs / peak)
    compute += math.ceil(vector_ops / (float(arch["vector_ops_per_cycle_per_tile"]) * tiles))
    memory = math.ceil(dram_bytes / float(arch["dram_bytes_per_cycle"]))
    return {"compute": compute, "memory": memory, "cycles": max(compute, memory) + int(arch["layer_overhead_cycles"])}


def perf_report(meta: Mapping) -> PerfReport:
    """Build the static performance report of a program."""
    arch = arch_params(meta)
    tensors = {int(t["id"]): t for t in meta.get("tensors") or [] if "id" in t}
    shapes = {tid: list(t.get("shape") or []) for tid, t in tensors.items()}
    for io in list(meta.get("inputs") or []) + list(meta.get("outputs") or []):
        if "tensor" in io and io.get("shape") is not None:
            shapes.setdefault(int(io["tensor"]), list(io["shape"]))
    wshapes, wbytes = {}, {}
    for w in meta.get("weights") or []:
        shape = list(w.get("shape") or [])
        wshapes[w.get("name")] = shape
        wbytes[w.get("name")] = int(w.get("nbytes", _prod(shape) * _ITEMSIZE.get(w.get("dtype"), 4)))
    peak = float(arch["macs_per_cycle_per_tile"]) * int(arch["num_tiles"])
    rows, derived = [], []
    for i, layer in enumerate(meta.get("layers") or []):
        name = str(layer.get("name", f"layer_{i}"))
        macs, dram = layer.get("macs"), layer.get("dram_bytes")
        if macs is None or dram is None:
            derived.append(name)
        if macs is None:
            macs = derive_macs(layer, shapes, wshapes)
        if dram is None:
            dram = derive_dram_bytes(layer, tensors, wbytes)
        macs, dram = int(macs), int(dram)
        steps = 0
        if str(layer.get("layer_name", "")) in RECURRENT_LAYERS:   # serial timesteps, W and R re-read
            steps = int((layer.get("params") or {}).get("steps", 1))
            names = layer.get("weights") or {}
            wb = sum(wbytes.get(names.get(k), 0) for k in ("kernel", "recurrence"))
            dram += streamed_weight_bytes(steps, wb, int(arch["num_tiles"]) * int(arch["ocm_size"]))
        # int8 and int8-in layers: MACs at the int8 rate (their bytes are in the tensors' dtypes)
        p = layer.get("params") or {}
        int8 = str(p.get("precision", "fp16")) in ("int8", "int8_in")
        fp16_macs = recurrent_fp16_macs(str(layer["layer_name"]), steps, 2 if p.get("direction") == "bidirectional" else 1,
                                        int(p.get("batch", 1)), int(p.get("hidden_size", 0)),
                                        p.get("state_scale") is not None) if steps and int8 else 0
        c = roofline(macs, vector_ops(layer, shapes), dram, arch, steps=steps, int8=int8, fp16_macs=fp16_macs)
        # an int8 conv beyond the per-pass limits (int8_conv_passes.py): each extra pass into its
        # int32 accumulator costs a pass setup (assumption: the per-layer overhead again)
        c["cycles"] += (int(layer.get("passes", 1)) - 1) * int(arch["layer_overhead_cycles"])
        comp, mem = c["compute"], c["memory"]
        rows.append(LayerPerf(name=name, layer_name=str(layer.get("layer_name", "")),
                              origin=[str(o) for o in layer.get("origin") or []], macs=macs,
                              dram_bytes=dram, compute_cycles=comp, memory_cycles=mem, cycles=c["cycles"],
                              bound="compute" if comp >= mem else "memory"))
    cycles = sum(r.cycles for r in rows)
    total_macs = sum(r.macs for r in rows)
    return PerfReport(layers=rows, arch=arch, cycles=cycles, latency_s=cycles / float(arch["clock_hz"]),
                      dram_bytes=sum(r.dram_bytes for r in rows), macs=total_macs,
                      utilization=(total_macs / (cycles * peak)) if cycles else 0.0, derived=derived)


def summary(report: Optional[PerfReport]) -> str:
    if report is None:
        return "no performance report"
    return (f"{len(report.layers)} layers, {report.cycles:,} cycles, {report.latency_s * 1e3:.4f} ms, "
            f"{report.macs:,} MACs, {report.dram_bytes:,} DRAM bytes, "
            f"utilization {report.utilization * 100:.1f}%")
