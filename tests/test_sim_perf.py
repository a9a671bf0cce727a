"""The cycle-approximate performance model: scaling with tiles and DRAM traffic, bounds, totals."""
import math

import numpy as np
import pytest

from onnx_mrvl.sim import Simulator
from onnx_mrvl.costmodel import arch_params, perf_report
from onnx_mrvl.target import ArchProfile


def program(arch=None, conv_dram=4096, fc_dram=2_000_000):
    layers = [
        {"name": "conv", "layer_name": "Conv2D", "inputs": [0], "outputs": [1], "origin": ["Conv_0"],
         "macs": 50_000_000, "dram_bytes": conv_dram, "weights": {"kernel": "w"}, "params": {}},
        {"name": "fc", "layer_name": "FC", "inputs": [2], "outputs": [3], "origin": ["Gemm_1"],
         "macs": 1_000_000, "dram_bytes": fc_dram, "weights": {"kernel": "f"}, "params": {}},
        {"name": "flat", "layer_name": "Reshape", "inputs": [1], "outputs": [2], "params": {"shape": [1, 8]}},
    ]
    layers = [layers[0], layers[2], layers[1]]
    meta = {"name": "p", "arch": dict(arch or {}),
            "inputs": [{"name": "x", "tensor": 0, "shape": [1, 2, 2, 3]}],
            "outputs": [{"name": "y", "tensor": 3, "shape": [1, 5]}],
            "tensors": [{"id": 0, "shape": [1, 2, 2, 3]}, {"id": 1, "shape": [1, 2, 2, 2]},
                        {"id": 2, "shape": [1, 8]}, {"id": 3, "shape": [1, 5]}],
            "weights": [{"name": "w", "shape": [2, 1, 1, 3], "dtype": "float16"},
                        {"name": "f", "shape": [5, 8], "dtype": "float16"}],
            "layers": layers}
    weights = {"w": np.ones((2, 1, 1, 3), np.float16), "f": np.ones((5, 8), np.float16)}
    return meta, weights


def test_formulas_defaults_and_bounds():
    meta, _ = program()
    rep = perf_report(meta)
    a = ArchProfile()
    conv, flat, fc = rep.layers
    assert conv.compute_cycles == math.ceil(50_000_000 / (a.macs_per_cycle_per_tile * a.num_tiles))
    assert conv.memory_cycles == math.ceil(4096 / a.dram_bytes_per_cycle)
    assert conv.cycles == conv.compute_cycles + a.layer_overhead_cycles and conv.bound == "compute"
    assert fc.memory_cycles == math.ceil(2_000_000 / a.dram_bytes_per_cycle) and fc.bound == "memory"
    assert fc.cycles == fc.memory_cycles + a.layer_overhead_cycles
    assert flat.macs == 0 and flat.name in rep.derived            # no macs/dram_bytes given: derived
    assert rep.cycles == sum(r.cycles for r in rep.layers)
    assert rep.latency_s == pytest.approx(rep.cycles / a.clock_hz)
    assert rep.macs == 51_000_000 and rep.dram_bytes == 4096 + 2_000_000 + flat.dram_bytes
    assert rep.utilization == pytest.approx(rep.macs / (rep.cycles * a.macs_per_cycle_per_tile * a.num_tiles))
    assert 0 < rep.utilization < 1
    assert conv.origin == ["Conv_0"]
    d = rep.to_dict()
    assert d["totals"]["cycles"] == rep.cycles and d["layers"][0]["bound"] == "compute"
    table = rep.table()
    assert "conv" in table and "memory" in table and "TOTAL" in table and "Gemm_1" in table
    assert arch_params({"arch": {"num_tiles": 8}})["num_tiles"] == 8


def test_doubling_tiles_halves_compute_bound_cycles():
    r4 = perf_report(program({"num_tiles": 4, "layer_overhead_cycles": 0})[0])
    r8 = perf_report(program({"num_tiles": 8, "layer_overhead_cycles": 0})[0])
    c4, c8 = r4.layers[0], r8.layers[0]
    assert c4.bound == c8.bound == "compute"
    assert c8.cycles == pytest.approx(c4.cycles / 2, rel=1e-3)
    assert r8.layers[2].cycles == r4.layers[2].cycles          # the memory-bound FC does not care
    assert r8.cycles < r4.cycles


def test_more_dram_traffic_raises_memory_cycles_and_can_flip_the_bound():
    small = perf_report(program(conv_dram=4096)[0])
    big = perf_report(program(conv_dram=40_000_000)[0])        # e.g. less OCM: activations streamed
    assert big.layers[0].memory_cycles > small.layers[0].memory_cycles
    assert small.layers[0].bound == "compute" and big.layers[0].bound == "memory"
    assert big.cycles > small.cycles and big.dram_bytes > small.dram_bytes
    fast = perf_report(program({"dram_bytes_per_cycle": 64.0}, conv_dram=40_000_000)[0])
    assert fast.layers[0].memory_cycles == pytest.approx(big.layers[0].memory_cycles / 2, abs=1)


def test_derived_macs_from_shapes_when_compile_gave_none():
    meta, weights = program()
    for layer in meta["layers"]:
        layer.pop("macs", None)
        layer.pop("dram_bytes", None)
    rep = perf_report(meta)
    conv, flat, fc = rep.layers
    assert conv.macs == 1 * 2 * 2 * 2 * 3            # N*OH*OW*O * KH*KW*I
    assert fc.macs == 5 * 8
    assert conv.dram_bytes == 6 * 2 + 12 * 2 + 8 * 2       # fp16 weight + dram-placed input and output
    assert set(rep.derived) == {"conv", "flat", "fc"}


def test_simulator_exposes_static_perf():
    meta, weights = program({"num_tiles": 2})
    sim = Simulator.from_program(meta, weights)
    assert sim.last_perf is None and sim.perf.arch["num_tiles"] == 2
    sim.run([np.ones((1, 2, 2, 3), np.float32)])
    assert sim.last_perf is sim.perf
    with pytest.raises(Exception, match="positive"):
        Simulator.from_program(program({"num_tiles": 0})[0], weights)
