"""The cost model behind ``partition="cost"``: is a region worth offloading?

Accelerator time: per layer max(compute, weight streaming) cycles plus a fixed overhead, at the
clock of the target's arch profile, plus the transfer of the region's inputs and outputs and a
per-call overhead. CPU time: the same MACs at the CPU's measured throughput plus a per-op cost
(``Target.cpu``; calibrate for a machine with ``tools/calibrate_cpu.py``). All figures are
estimates; the report prints them so a user can see why a region was kept or dropped.
"""
from __future__ import annotations

import math
from typing import List

import numpy as np
import onnx

from .._graph import GraphIndex
from ..target import Target


def _bytes(g: GraphIndex, name: str, itemsize: int) -> int:
    shape = g.shape(name)
    return int(np.prod(shape, dtype=np.int64)) * itemsize if shape is not None else 0


def estimate(g: GraphIndex, nodes: List[onnx.NodeProto], target: Target) -> dict:
    from . import node_macs
    from .regions import boundary

    arch, cpu = target.arch, target.cpu
    cycles, macs = 0, 0
    for n in nodes:
        m = node_macs(g, n)
        macs += m
        weight_bytes = sum(_bytes(g, i, 2) for i in n.input if g.is_const(i))
        compute = math.ceil(m / (arch.macs_per_cycle_per_tile * arch.num_tiles))
        memory = math.ceil(weight_bytes / arch.dram_bytes_per_cycle)
        cycles += max(compute, memory) + arch.layer_overhead_cycles
    ins, outs = boundary(g, nodes)
    transfer = sum(_bytes(g, t, 4) for t in ins + outs) / arch.transfer_bytes_per_s
    accel_s = cycles / arch.clock_hz + transfer + arch.call_overhead_s
    cpu_s = macs / cpu.macs_per_s + len(nodes) * cpu.op_overhead_s
    return {"macs": macs, "cycles": cycles, "transfer_s": transfer, "accel_s": accel_s, "cpu_s": cpu_s,
            "offload": accel_s < cpu_s}
