"""One core's fp32 FMA peak and a model's multiply-adds: the floor under any conv kernel's time.

A direct (or GEMM) convolution that keeps the simulator's numerics -- every product of fp16 values
summed in float32 over k in order, one FMA per product -- needs one 16-lane FMA instruction per 16
MACs, so ``MACs / (16 x FMA instructions per second)`` is the least one core can spend on a
model; no bit-identical kernel can go under it. ``fma_peak`` in _native_conv.c times 12
independent FMA chains and nothing else (thread CPU time, the best of a few runs).
"""
from __future__ import annotations

import ctypes
import time

import numpy as np


def fma_peak_gflops(runs: int = 5, n: int = 20_000_000) -> float:
    """One core's fp32 FMA peak in GFLOP/s (2 per MAC), thread CPU time, best of ``runs``; nan
    without the native kernels."""
    from onnx_mrvl.sim import native
    if not native.on():
        return float("nan")
    lib = native.lib()
    fn = lib.fma_peak
    fn.restype = None
    fn.argtypes = [ctypes.c_long, ctypes.c_void_p]
    out = ctypes.c_float()
    fn(n // 10, ctypes.byref(out))
    best = float("inf")
    for _ in range(runs):
        t0 = time.thread_time_ns()
        fn(n, ctypes.byref(out))
        best = min(best, time.thread_time_ns() - t0)
    return n * 12 * 16 * 2 / best


def model_macs(model) -> int:
    """Multiply-adds of an ONNX model's Conv, Gemm and MatMul nodes (shapes by onnx's inference)."""
    from onnx import shape_inference
    m = shape_inference.infer_shapes(model)
    shapes = {}
    for vi in list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output):
        dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        shapes[vi.name] = dims
    for init in m.graph.initializer:
        shapes[init.name] = list(init.dims)
    total = 0
    for node in m.graph.node:
        if node.op_type == "Conv":
            w, y = shapes.get(node.input[1]), shapes.get(node.output[0])
            if w and y and all(y):
                total += int(np.prod(y)) * int(np.prod(w[1:]))
        elif node.op_type in ("Gemm", "MatMul"):
            a, y = shapes.get(node.input[0]), shapes.get(node.output[0])
            if a and y and all(y) and a[-1]:
                trans_a = any(att.name == "transA" and att.i for att in node.attribute)
                k = a[0] if (node.op_type == "Gemm" and trans_a) else a[-1]
                total += int(np.prod(y)) * int(k)
    return total
