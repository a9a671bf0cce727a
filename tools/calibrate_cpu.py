"""Measure this machine's CPU for the ``partition="cost"`` model and write the profile as JSON.

Times onnxruntime (fp32, default threads) on a few single-layer models: 3x3 and 1x1 convolutions
and Gemms of several sizes (MAC throughput), large Add/Relu (streaming bandwidth) and tiny Relus
(fixed per-op cost). Fits ``time = macs / macs_per_s + bytes / bytes_per_s + op_overhead_s`` by
non-negative least squares on the medians and writes ``{"macs_per_s", "bytes_per_s",
"op_overhead_s", ...}`` to ``$ONNX_MRVL_CPU_PROFILE`` or ``~/.cache/onnx_mrvl/cpu.json`` (or
``--output``). Use it with ``onnx_mrvl.target.Target().with_calibration()``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from typing import Dict, List, Optional, Tuple

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from onnx_mrvl.target import default_cpu_profile_path  # noqa: E402
from onnx_mrvl.testing.timing import median_seconds  # noqa: E402


def _model(nodes, inputs, outputs, inits) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "calib", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def conv_case(c_in: int, c_out: int, hw: int, k: int, rng) -> Tuple[onnx.ModelProto, Dict, int, int]:
    w = numpy_helper.from_array(rng.standard_normal((c_out, c_in, k, k)).astype(np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[k // 2] * 4)
    m = _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c_in, hw, hw])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c_out, hw, hw])], [w])
    x = rng.standard_normal((1, c_in, hw, hw)).astype(np.float32)
    return m, {"x": x}, c_out * hw * hw * c_in * k * k, 4 * hw * hw * (c_in + c_out), 1


def gemm_case(m_: int, k: int, n: int, rng):
    w = numpy_helper.from_array(rng.standard_normal((k, n)).astype(np.float32), "w")
    node = helper.make_node("Gemm", ["x", "w"], ["y"])
    m = _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m_, k])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m_, n])], [w])
    return m, {"x": rng.standard_normal((m_, k)).astype(np.float32)}, m_ * k * n, 4 * (m_ * k + m_ * n), 1


def eltwise_case(op: str, elems: int, rng, chain: int = 1):
    """``chain`` ops in a row (separates the per-op cost from the per-run cost)."""
    ins = ["a", "b"] if op == "Add" else ["a"]
    nodes, x = [], "a"
    for k in range(chain):
        y = "y" if k == chain - 1 else f"t{k}"
        nodes.append(helper.make_node(op, [x] + ins[1:], [y]))
        x = y
    vis = [helper.make_tensor_value_info(i, TensorProto.FLOAT, [1, elems]) for i in ins]
    m = _model(nodes, vis, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, elems])], [])
    feeds = {i: rng.standard_normal((1, elems)).astype(np.float32) for i in ins}
    return m, feeds, 0, 4 * elems * (len(ins) + 1) * chain, chain


def time_model(model: onnx.ModelProto, feeds: Dict, repeats: int) -> float:
    """Median seconds of one run (after two warm-up runs)."""
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return median_seconds(lambda: sess.run(None, feeds), repeats, warmup=2)


def cases(quick: bool, rng) -> List[Tuple[str, tuple]]:
    out = [("conv3x3 16->32 @56", conv_case(16, 32, 56, 3, rng)),
           ("conv3x3 64->64 @28", conv_case(64, 64, 28, 3, rng)),
           ("conv1x1 128->256 @14", conv_case(128, 256, 14, 1, rng)),
           ("gemm 1x1024x1000", gemm_case(1, 1024, 1000, rng)),
           ("gemm 64x512x512", gemm_case(64, 512, 512, rng)),
           ("add 1M", eltwise_case("Add", 1 << 20, rng)),
           ("relu 1M", eltwise_case("Relu", 1 << 20, rng)),
           ("relu 16", eltwise_case("Relu", 16, rng)),
           ("add 16", eltwise_case("Add", 16, rng)),
           ("32 x relu 16", eltwise_case("Relu", 16, rng, chain=32)),
           ("64 x add 16", eltwise_case("Add", 16, rng, chain=64))]
    if not quick:
        out += [("conv3x3 32->64 @56", conv_case(32, 64, 56, 3, rng)),
                ("conv3x3 128->128 @14", conv_case(128, 128, 14, 3, rng)),
                ("relu 4M", eltwise_case("Relu", 1 << 22, rng))]
    return out


def fit(rows: List[Tuple[int, int, int, float]]) -> Dict[str, float]:
    """Non-negative least squares, on relative error, of
    ``seconds = macs / macs_per_s + bytes / bytes_per_s + ops * op_overhead_s + run_overhead_s``."""
    a = np.array([[m, b, k, 1.0] for m, b, k, _ in rows], dtype=np.float64)
    t = np.array([s for *_, s in rows], dtype=np.float64)
    scale = np.abs(a).max(axis=0)
    scale[scale == 0] = 1.0
    a = a / scale
    w = 1.0 / t                                  # relative residuals: small ops count as much
    active = [0, 1, 2, 3]
    while True:
        coef, *_ = np.linalg.lstsq(a[:, active] * w[:, None], t * w, rcond=None)
        if (coef > 0).all() or len(active) == 1:
            break
        active = [c for c, v in zip(active, coef) if v > 0] or [active[int(np.argmax(coef))]]
    full = np.zeros(4)
    full[active] = np.maximum(coef, 0)
    inv_mac, inv_byte, overhead, run = full / scale
    return {"macs_per_s": 1.0 / inv_mac if inv_mac > 0 else 1e13,
            "bytes_per_s": 1.0 / inv_byte if inv_byte > 0 else 1e12,
            "op_overhead_s": overhead if overhead > 0 else 1e-7, "run_overhead_s": run}


def calibrate(quick: bool = False, repeats: int = 20, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    rows, measured = [], []
    for name, (model, feeds, macs, moved, ops) in cases(quick, rng):
        s = time_model(model, feeds, repeats)
        rows.append((macs, moved, ops, s))
        measured.append({"case": name, "macs": macs, "bytes": moved, "ops": ops, "seconds": s})
    profile = fit(rows)
    profile.update({"machine": platform.machine(), "processor": platform.processor(),
                    "cpu_count": os.cpu_count(), "onnxruntime": ort.__version__,
                    "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "measured": measured})
    return profile


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", default=None, help=f"default: {default_cpu_profile_path()}")
    ap.add_argument("--quick", action="store_true", help="fewer, smaller cases")
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args(argv)
    profile = calibrate(args.quick, args.repeats)
    path = args.output or default_cpu_profile_path()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(profile, f, indent=1)
    os.replace(tmp, path)
    print(f"wrote {path}: {profile['macs_per_s'] / 1e9:.1f} GMAC/s, {profile['bytes_per_s'] / 1e9:.1f} GB/s, "
          f"{profile['op_overhead_s'] * 1e6:.1f} us per op")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
