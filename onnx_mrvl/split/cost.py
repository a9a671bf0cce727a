"""The cost model behind ``partition="cost"``: is a region worth offloading?

Accelerator time (``Target.arch``), the simulator's cycle model (docs/simulator.md) applied before
compilation: per layer max(compute, memory) cycles plus a fixed overhead, where compute is
MACs / (MACs per cycle per tile x tiles) plus vector-unit work (LayerNorm, Softmax, smooth
activations) / (vector lanes x tiles) and memory is the fp16 weights plus any activation too large
for the on-chip memory, streamed from DRAM; plus the fp32 transfer of the region's inputs and outputs
to and from the host and a per-call overhead. ``compiled_estimate`` redoes the accelerator part with
the simulator's own report on the compiled program (exact OCM placement).

CPU time (``Target.cpu``): MACs at the CPU's measured throughput, the bytes every op reads and
writes at its measured streaming bandwidth, and a fixed cost per op. ``tools/calibrate_cpu.py``
measures these for a machine; ``Target.with_calibration()`` loads them.

All figures are estimates; ``estimate`` returns every term so reports can show why a region was
kept or dropped.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List

import numpy as np
import onnx

from ..graph_index import GraphIndex
from ..costmodel import RECURRENT_LAYERS, recurrent_fp16_macs, roofline, streamed_weight_bytes
from ..target import DEFAULT_TARGET, VECTOR_LOWERINGS, Target, lrn_ops_per_element, norm_blocked_extra_ops


def _elems(g: GraphIndex, name: str) -> int:
    shape = g.shape(name)
    return int(np.prod(shape, dtype=np.int64)) if shape is not None else 0


def layer_cycles(g: GraphIndex, node: onnx.NodeProto, target: Target) -> Dict[str, int]:
    """Accelerator cycles of one Mrvl node: compute, memory and their bound."""
    from . import node_macs

    arch = target.arch
    macs = node_macs(g, node)
    # an int8 layer (docs/fusion.md "int8"): 1-byte weights and tensors, MACs at the int8 rate
    precision = next((a.s for a in node.attribute if a.name == "precision"), b"")
    # int8-in / fp16-out (fuse/qdq_int8_in.py): int8 weights and input at the int8 rate, fp16 output
    int8 = precision in (b"int8", b"int8_in")
    size = 1 if int8 else 2
    weights = sum(_elems(g, i) for i in node.input if i and g.is_const(i)) * size
    acts_in = [_elems(g, i) * size for i in node.input if i and not g.is_const(i)]
    acts_out = [_elems(g, o) * (1 if precision == b"int8" else 2) for o in node.output if o]
    ocm = arch.ocm_size * arch.num_tiles
    spilled = sum(b for b in acts_in + acts_out if b > ocm)
    steps, fp16_macs = 0, 0
    if node.op_type in RECURRENT_LAYERS and g.shape(node.input[0]):   # serial timesteps (costmodel.py)
        steps, batch = g.shape(node.input[0])[:2]
        kernels = sum(_elems(g, i) for i in node.input[1:3] if i) * size
        weights += streamed_weight_bytes(steps, kernels, ocm)
        a = {x.name: onnx.helper.get_attribute_value(x) for x in node.attribute}
        dirs = 2 if a.get("direction") in (b"bidirectional", "bidirectional") else 1
        if int8:   # an int8 recurrent layer: the fp16 state's products at the fp16 rate
            fp16_macs = recurrent_fp16_macs(node.op_type, steps, dirs, batch, int(a.get("hidden_size", 0)),
                                            float(a.get("state_scale", 0.0) or 0.0) > 0)
    c = roofline(macs, vector_ops(g, node, target), weights + spilled, dataclasses.asdict(arch), steps=steps, int8=int8,
                 fp16_macs=fp16_macs)
    return {"macs": macs, **c}


def vector_ops(g: GraphIndex, node: onnx.NodeProto, target: Target = DEFAULT_TARGET) -> int:
    """Vector-unit operations of a Mrvl node (``target.VECTOR_LOWERINGS``, as the simulator's perf
    model counts them): LayerNorm / Softmax / LogSoftmax / LRN per element (a LayerNorm row above
    ``max_channels``: + its blocked passes' extra reads), a smooth activation per output element."""
    out = _elems(g, node.output[0]) if node.output else 0
    kind = "LogSoftmax" if node.op_type == "Softmax" and any(
        a.name == "log" and a.i for a in node.attribute) else node.op_type
    if kind == "LRN" and node.input and g.shape(node.input[0]):   # + the window sum's taps (as emit/lrn_layer.py)
        size = next((a.i for a in node.attribute if a.name == "size"), 1)
        ops = out * lrn_ops_per_element(size, g.shape(node.input[0])[-1])
    else:
        ops = out * VECTOR_LOWERINGS[kind][1] if kind in VECTOR_LOWERINGS else 0
    if kind == "LayerNorm" and node.input and g.shape(node.input[0]):
        shape = g.shape(node.input[0])
        axis = next((a.i for a in node.attribute if a.name == "axis"), -1)
        ops += out * norm_blocked_extra_ops(shape[axis], target)
    act = next((a.s.decode() for a in node.attribute if a.name == "activation"), "none")
    return ops + (out * VECTOR_LOWERINGS[act][1] if act in VECTOR_LOWERINGS else 0)


def cpu_seconds(g: GraphIndex, nodes: List[onnx.NodeProto], target: Target) -> float:
    """Estimated onnxruntime time of ``nodes`` run as standard ONNX on the host."""
    from . import node_macs

    cpu = target.cpu
    total = 0.0
    for n in nodes:
        if n.op_type == "LayoutTransform":
            continue                    # exists only because of the accelerator
        moved = sum(_elems(g, i) for i in list(n.input) + list(n.output) if i and not g.is_const(i)) * 4
        total += node_macs(g, n) / cpu.macs_per_s + moved / cpu.bytes_per_s + cpu.op_overhead_s
    return total


def estimate(g: GraphIndex, nodes: List[onnx.NodeProto], target: Target) -> dict:
    """Every term of the offload decision for one region (times in seconds)."""
    from .regions import boundary

    arch = target.arch
    cycles, macs = 0, 0
    for n in nodes:
        c = layer_cycles(g, n, target)
        cycles += c["cycles"]
        macs += c["macs"]
    ins, outs = boundary(g, nodes)
    transfer = sum(_elems(g, t) * 4 for t in ins + outs) / arch.transfer_bytes_per_s
    compute_s = cycles / arch.clock_hz
    accel_s = compute_s + transfer + arch.call_overhead_s
    cpu_s = cpu_seconds(g, nodes, target)
    return {"macs": macs, "cycles": cycles, "accel_compute_s": compute_s, "transfer_s": transfer,
            "call_overhead_s": arch.call_overhead_s, "accel_s": accel_s, "cpu_s": cpu_s,
            "speedup": cpu_s / accel_s if accel_s > 0 else float("inf"), "offload": accel_s < cpu_s}


def compiled_estimate(est: dict, binary: bytes, calls: int = 1) -> dict:
    """``est`` with the accelerator compute time taken from the simulator's cycle model of the
    compiled region (``onnx_mrvl.costmodel``); transfers and CPU time unchanged. ``calls``: hardware
    batches (batch_chunks.py): the program runs that many times, each call with its overhead."""
    from ..artifact import load
    from ..costmodel import perf_report

    rep = perf_report(load(binary).meta)
    out = dict(est, cycles=rep.cycles * calls, accel_compute_s=rep.latency_s * calls, source="simulator")
    out["accel_s"] = out["accel_compute_s"] + est["transfer_s"] + est["call_overhead_s"] * calls
    out["speedup"] = est["cpu_s"] / out["accel_s"] if out["accel_s"] > 0 else float("inf")
    out["offload"] = out["accel_s"] < est["cpu_s"]
    return out


def describe(est: dict) -> str:
    """One line for reports: why the cost model dropped (or kept) a region."""
    verdict = "<" if est["offload"] else ">="
    us = lambda key: f"{est[key] * 1e6:.4g}"  # noqa: E731
    return (f"cost model: accelerator {us('accel_s')} us (compute {us('accel_compute_s')} + transfers "
            f"{us('transfer_s')} + call {us('call_overhead_s')}) {verdict} CPU {us('cpu_s')} us")
