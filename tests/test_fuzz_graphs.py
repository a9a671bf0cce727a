"""Fuzzing convert() with hypothesis: random tiny CNN-shaped graphs must convert without any
exception outside the MrvlError family (and without convert's internal-failure fallback), and the
converted model, run through onnx_mrvl.InferenceSession, must match onnxruntime on the original.

A graph is a list of op specs applied to a 1xCxHxW tensor (C <= 8, H, W <= 12): Conv (kernel,
stride, pad, dilation, groups incl. depthwise, with/without bias, fused activation),
BatchNormalization, activations (Relu, Clip, LeakyRelu, Sigmoid, Tanh, HardSigmoid, HardSwish,
x*Sigmoid(x)), MaxPool/AveragePool, Add residuals, Concat, Resize, per-channel Add, and optionally a
GlobalAveragePool+Flatten+Gemm head. Specs whose output would be empty are skipped.

``MRVL_FUZZ_EXAMPLES`` (default 2000) examples per run, split over ``MRVL_FUZZ_WORKERS`` (default 2)
forked processes, each a derandomized hypothesis run with its own sequence (deadline=None).
Anything found is kept below as an explicit regression test.
"""
import logging
import os
import shutil
import tempfile
import time
import traceback
from typing import List, Tuple

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import onnx_mrvl
from onnx_mrvl.errors import MrvlError

ACTIVATIONS = ("Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Swish")

conv_spec = st.fixed_dictionaries({
    "op": st.just("Conv"), "co": st.integers(1, 8), "k": st.sampled_from([1, 2, 3, 5]),
    "kw": st.sampled_from([None, 1, 3]), "stride": st.sampled_from([1, 1, 2, 3]),
    "pad": st.integers(0, 2), "dil": st.sampled_from([1, 1, 2]),
    "groups": st.sampled_from(["1", "1", "depthwise", "2"]), "bias": st.booleans(),
    "act": st.sampled_from((None,) + ACTIVATIONS)})
act_spec = st.fixed_dictionaries({"op": st.just("Act"), "kind": st.sampled_from(ACTIVATIONS),
                                  "alpha": st.sampled_from([0.01, 0.1, 0.2, 0.5])})
pool_spec = st.fixed_dictionaries({"op": st.sampled_from(["MaxPool", "AveragePool"]), "k": st.sampled_from([1, 2, 3]),
                                   "stride": st.sampled_from([1, 2]), "pad": st.integers(0, 1),
                                   "count_include_pad": st.integers(0, 1)})
other_spec = st.fixed_dictionaries({"op": st.sampled_from(["BN", "Residual", "Concat", "Resize", "AddConst"]),
                                    "mode": st.sampled_from(["nearest", "linear"]), "act": st.sampled_from(ACTIVATIONS)})
graph_spec = st.fixed_dictionaries({
    "c": st.integers(1, 6), "h": st.integers(3, 12), "w": st.integers(3, 12), "seed": st.integers(0, 2 ** 16),
    "ops": st.lists(st.one_of(conv_spec, conv_spec, act_spec, pool_spec, other_spec), min_size=1, max_size=6),
    "head": st.booleans(), "classes": st.integers(1, 10), "opset": st.sampled_from([14, 17])})


class _Builder:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: List[onnx.NodeProto] = []
        self.inits: List[onnx.TensorProto] = []

    def name(self, base: str) -> str:
        return f"{base}{len(self.nodes)}"

    def const(self, base: str, value: np.ndarray) -> str:
        n = f"{base}{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.asarray(value), n))
        return n

    def node(self, op: str, inputs, **attrs) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=out, **attrs))
        return out

    def act(self, x: str, kind: str, alpha: float = 0.1) -> str:
        if kind == "Clip":
            return self.node("Clip", [x, self.const("lo", np.float32(0.0)), self.const("hi", np.float32(6.0))])
        if kind == "LeakyRelu":
            return self.node("LeakyRelu", [x], alpha=alpha)
        if kind == "HardSigmoid":
            return self.node("HardSigmoid", [x], alpha=0.2, beta=0.5)
        if kind == "Swish":
            return self.node("Mul", [x, self.node("Sigmoid", [x])])
        return self.node(kind, [x])

    def conv(self, x: str, ci: int, co: int, k: Tuple[int, int], groups: int = 1, bias: bool = True, **attrs) -> str:
        fan_in = ci // groups * k[0] * k[1]
        w = (self.rng.standard_normal((co, ci // groups) + k) / np.sqrt(fan_in)).astype(np.float32)
        ins = [x, self.const("w", w)] + ([self.const("b", self.rng.normal(0, 0.1, co).astype(np.float32))] if bias else [])
        return self.node("Conv", ins, kernel_shape=list(k), group=groups, **attrs)


def _out(size: int, k: int, s: int, p: int, d: int = 1) -> int:
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def build(spec: dict) -> onnx.ModelProto:
    """The ONNX model of a ``graph_spec`` draw."""
    b = _Builder(spec["seed"])
    c, h, w = spec["c"], spec["h"], spec["w"]
    x = "input"
    shapes = {x: (c, h, w)}
    for op in spec["ops"]:
        kind = op["op"]
        if kind == "Conv":
            kh, kw = op["k"], op["kw"] or op["k"]
            pad, s, d = min(op["pad"], kh - 1, kw - 1), op["stride"], op["dil"]
            if op["groups"] == "depthwise":
                g, co = c, c * (1 + op["co"] % 2)
            elif op["groups"] == "2" and c % 2 == 0:
                g, co = 2, 2 * max(1, op["co"] // 2)
            else:
                g, co = 1, op["co"]
            oh, ow = _out(h, kh, s, pad, d), _out(w, kw, s, pad, d)
            if oh < 1 or ow < 1:
                continue
            x = b.conv(x, c, co, (kh, kw), g, op["bias"], strides=[s, s], pads=[pad] * 4, dilations=[d, d])
            if op["act"]:
                x = b.act(x, op["act"])
            c, h, w = co, oh, ow
        elif kind == "Act":
            x = b.act(x, op["kind"], op["alpha"])
        elif kind in ("MaxPool", "AveragePool"):
            k, s, pad = op["k"], op["stride"], min(op["pad"], op["k"] - 1)
            oh, ow = _out(h, k, s, pad), _out(w, k, s, pad)
            if oh < 1 or ow < 1:
                continue
            attrs = {"count_include_pad": op["count_include_pad"]} if kind == "AveragePool" else {}
            x = b.node(kind, [x], kernel_shape=[k, k], strides=[s, s], pads=[pad] * 4, **attrs)
            h, w = oh, ow
        elif kind == "BN":
            scale = b.rng.uniform(0.5, 1.5, c).astype(np.float32)
            bias, mean = (b.rng.normal(0, 0.1, c).astype(np.float32) for _ in range(2))
            var = b.rng.uniform(0.5, 1.5, c).astype(np.float32)
            x = b.node("BatchNormalization", [x] + [b.const(n, v) for n, v in
                                                    (("s", scale), ("bb", bias), ("m", mean), ("v", var))])
        elif kind == "Residual":            # x + act(conv3x3 same(x))
            y = b.act(b.conv(x, c, c, (3, 3), pads=[1, 1, 1, 1]), op["act"])
            x = b.node("Add", [x, y])
        elif kind == "Concat":              # concat(x, conv1x1(x)) on channels
            y = b.conv(x, c, max(1, c // 2), (1, 1))
            x = b.node("Concat", [x, y], axis=1)
            c = c + max(1, c // 2)
        elif kind == "Resize":
            scales = b.const("scales", np.array([1, 1, 2, 2], np.float32))
            x = b.node("Resize", [x, "", scales], mode=op["mode"])
            h, w = 2 * h, 2 * w
        elif kind == "AddConst":            # broadcast per-channel bias (Add with a constant)
            x = b.node("Add", [x, b.const("bc", b.rng.normal(0, 0.5, (1, c, 1, 1)).astype(np.float32))])
        shapes[x] = (c, h, w)
    if spec["head"]:
        x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
        n = spec["classes"]
        wgt = (b.rng.standard_normal((n, c)) / np.sqrt(c)).astype(np.float32)
        x = b.node("Gemm", [x, b.const("fc", wgt), b.const("fcb", np.zeros(n, np.float32))], transB=1)
        out_shape = [1, n]
    else:
        out_shape = [1, c, h, w]
    if not b.nodes:
        x = b.node("Relu", [x])
    b.nodes[-1].output[0] = "output"
    graph = helper.make_graph(b.nodes, "fuzz", [helper.make_tensor_value_info("input", T.FLOAT, [1, spec["c"], spec["h"], spec["w"]])],
                              [helper.make_tensor_value_info("output", T.FLOAT, out_shape)], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", spec["opset"])])
    model.ir_version = 8
    return model


# ------------------------------------------------------------------------------------- checking

RTOL, ATOL = 2e-2, 2e-2          # fp16 accelerator; atol relative to max(1, max |reference|)
INTERNAL_FAILURE = "conversion failed internally"
# Open bugs the fuzzer keeps hitting: failure text -> regression test below. A hit is counted as
# "known" (not a failure) so the run goes on looking for new ones; delete the entry once fixed.
KNOWN_BUGS = {}


def check(model: onnx.ModelProto, workdir: str) -> str:
    """Converts, runs both ways, compares. Returns "offloaded" / "cpu" / "rejected: <error>";
    raises AssertionError (or the converter's exception) when something is wrong."""
    x = np.random.default_rng(0).standard_normal(
        [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    try:
        result = onnx_mrvl.convert(model)
    except MrvlError as exc:          # our own family is allowed (and counted)
        return f"rejected: {type(exc).__name__}"
    internal = [w for w in result.report.warnings if INTERNAL_FAILURE in w]
    assert not internal, internal[0]
    path = result.save(workdir, overwrite=True)   # the shard's folder, one conversion after another
    got = onnx_mrvl.InferenceSession(path).run(None, {"input": x})[0]
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape)
    atol = ATOL * max(1.0, float(np.max(np.abs(want))))
    err = float(np.max(np.abs(got - want)))
    assert np.allclose(got, want, rtol=RTOL, atol=atol), f"max abs error {err:.3g} (atol {atol:.3g})"
    return "offloaded" if result.subgraphs else "cpu"


def _shard_run(shard: int, examples: int, queue) -> None:
    """One derandomized hypothesis run (its own sequence); reports counts and the shrunk failure."""
    logging.disable(logging.WARNING)
    stats = {"examples": 0, "offloaded": 0, "cpu": 0, "rejected": 0, "known": 0, "failure": None, "spec": None}
    workdir = tempfile.mkdtemp(prefix=f"mrvl-fuzz{shard}-")

    def body(spec):
        stats["examples"] += 1
        try:
            outcome = check(build(spec), workdir)
        except Exception as exc:
            if any(sig in str(exc) for sig in KNOWN_BUGS):
                stats["known"] += 1
                return
            stats["failure"] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=6)}"
            stats["spec"] = spec
            raise
        stats[outcome.split(":")[0]] += 1
    body._hypothesis_internal_add_digest = f"shard-{shard}".encode()
    test = settings(max_examples=examples, derandomize=True, deadline=None, database=None, print_blob=False,
                    suppress_health_check=list(HealthCheck))(given(graph_spec)(body))
    try:
        test()
        stats["failure"], stats["spec"] = None, None
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        if stats["failure"] is None:
            stats["failure"] = f"{type(exc).__name__}: {exc}"
    finally:
        shutil.rmtree(workdir, ignore_errors=True)     # the examples' converted models (every run left it)
    queue.put((shard, stats))


def run_fuzz(examples: int, workers: int):
    import gc
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    per = [examples // workers + (k < examples % workers) for k in range(workers)]
    procs = [ctx.Process(target=_shard_run, args=(k, per[k], queue)) for k in range(workers)]
    # the earlier tests' unreachable onnxruntime sessions are freed here, with their thread pools,
    # and what is left is frozen: a forked shard's collector then never finalizes a session whose
    # pool's threads it does not have (one hung in pthread_cond_destroy when this worker ran other
    # files first)
    gc.collect()
    gc.freeze()
    try:
        for p in procs:
            p.start()
    finally:
        gc.unfreeze()
    results = dict(queue.get() for _ in procs)
    for p in procs:
        p.join()
    return [results[k] for k in range(workers)]


def test_fuzz_cnn_graphs():
    examples = int(os.environ.get("MRVL_FUZZ_EXAMPLES", "2000"))
    workers = int(os.environ.get("MRVL_FUZZ_WORKERS", "2"))
    t0 = time.perf_counter()
    shards = run_fuzz(examples, workers)
    total = {k: sum(s[k] for s in shards) for k in ("examples", "offloaded", "cpu", "rejected", "known")}
    print(f"fuzz: {total} in {time.perf_counter() - t0:.0f} s")
    for s in shards:
        assert s["failure"] is None, f"falsifying spec: {s['spec']}\n{s['failure']}"
    assert total["examples"] >= examples
    assert total["offloaded"] >= examples // 2, total          # the generator must reach the accelerator


# ------------------------------------------------------------------------------ generator sanity

def test_generator_builds_valid_models_of_every_kind():
    specs = [{"c": 4, "h": 9, "w": 7, "seed": 1, "head": True, "classes": 3, "opset": 14,
              "ops": [{"op": "Conv", "co": 4, "k": 3, "kw": None, "stride": 2, "pad": 1, "dil": 1,
                       "groups": "depthwise", "bias": True, "act": "HardSwish"},
                      {"op": "Act", "kind": "Swish", "alpha": 0.1},
                      {"op": "AveragePool", "k": 3, "stride": 1, "pad": 1, "count_include_pad": 0},
                      {"op": "BN", "mode": "nearest", "act": "Relu"},
                      {"op": "Residual", "mode": "nearest", "act": "Clip"},
                      {"op": "Concat", "mode": "nearest", "act": "Relu"},
                      {"op": "Resize", "mode": "linear", "act": "Relu"}]}]
    for spec in specs:
        m = build(spec)
        onnx.checker.check_model(m, full_check=True)
        ops = [n.op_type for n in m.graph.node]
        for op in ("Conv", "HardSwish", "Sigmoid", "Mul", "AveragePool", "BatchNormalization", "Add", "Clip",
                   "Concat", "Resize", "GlobalAveragePool", "Flatten", "Gemm"):
            assert op in ops, op
        with tempfile.TemporaryDirectory() as d:
            assert check(m, d) == "offloaded"


def test_check_catches_a_wrong_result(monkeypatch):
    m = build({"c": 2, "h": 5, "w": 5, "seed": 0, "head": False, "classes": 1, "opset": 14,
               "ops": [{"op": "Conv", "co": 2, "k": 3, "kw": None, "stride": 1, "pad": 1, "dil": 1,
                        "groups": "1", "bias": True, "act": None}]})
    real = ort.InferenceSession.run

    def off_by_one(self, names, feed, *a, **k):
        return [o + 1.0 for o in real(self, names, feed, *a, **k)]
    monkeypatch.setattr(onnx_mrvl.InferenceSession, "run", off_by_one)
    with tempfile.TemporaryDirectory() as d, pytest.raises(AssertionError, match="max abs error"):
        check(m, d)


# ---------------------------------------------------------------- regressions found by the fuzzer

REGRESSIONS = {
    # Found by the fuzzer (since fixed): Conv1x1 -> Relu -> Relu -> BN -> Relu -> Relu -> GAP -> Flatten
    # -> Gemm on 1x1x3x3: emit got a region tensor without a shape (emit/nodes_json.py emit_json:
    # g.shape(t) is None -> TypeError) and convert() fell back to the CPU.
    "test_regression_emit_tensor_without_shape": {
        "c": 1, "h": 3, "w": 3, "seed": 0, "head": True, "classes": 1, "opset": 14,
        "ops": [{"op": "Conv", "co": 1, "k": 1, "kw": None, "stride": 1, "pad": 0, "dil": 1, "groups": "1",
                 "bias": False, "act": None}] + [{"op": "Act", "kind": "Relu", "alpha": 0.01}] * 2
        + [{"op": "BN", "mode": "nearest", "act": "Relu"}] + [{"op": "Act", "kind": "Relu", "alpha": 0.01}] * 2},
}


def test_regression_emit_tensor_without_shape(tmp_path):
    m = build(REGRESSIONS["test_regression_emit_tensor_without_shape"])
    onnx_mrvl.convert(m)
    assert check(m, str(tmp_path)) == "offloaded"


def test_known_bugs_have_regression_tests():
    assert set(KNOWN_BUGS.values()) <= set(REGRESSIONS) and all(n in globals() for n in REGRESSIONS)
