"""The simulator: executes a compiled program (docs/program.md) on fp16 values, fast, with a
cycle-approximate performance model. Knows nothing of ONNX.

``Simulator(binary).run(inputs)``, ``Simulator.from_program(meta, weights)``; the kernels are in
``onnx_mrvl.sim.kernels``; the numeric and performance models in docs/simulator.md.
"""
from .fp16 import round_fp16_, to_fp16_values  # noqa: F401
from ..costmodel import LayerPerf, PerfReport, perf_report  # noqa: F401
from .simulator import Simulator  # noqa: F401

__all__ = ["Simulator", "PerfReport", "LayerPerf", "perf_report", "round_fp16_", "to_fp16_values"]
