"""What a loaded Simulator holds (docs/simulator.md "Load"): the binary's fp16 weights and one
layout per kernel (the native GEMM's packed float32 blocks), not a float32 copy of every weight."""
import gc
import sys
import types

import numpy as np
import pytest
try:
    from numpy.lib.array_utils import byte_bounds
except ImportError:                 # numpy < 2
    from numpy import byte_bounds

import onnx_mrvl
from onnx_mrvl.artifact import load
from onnx_mrvl.sim import Simulator, native
from onnx_mrvl.testing.big_weights import big_fc_model


def held_bytes(root) -> int:
    """Bytes of memory behind the numpy arrays reachable from ``root`` (the union of their address
    ranges: views count once; module namespaces and classes are not followed)."""
    skip = {id(m.__dict__) for m in list(sys.modules.values()) if m is not None}
    seen, ranges, stack = set(), [], [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or id(obj) in skip or isinstance(obj, (types.ModuleType, type)):
            continue
        seen.add(id(obj))
        if isinstance(obj, np.ndarray):
            ranges.append(byte_bounds(obj))
            continue
        if isinstance(obj, types.FunctionType):
            stack.extend(c.cell_contents for c in obj.__closure__ or () if c.cell_contents is not None)
            stack.extend(obj.__defaults__ or ())
            continue
        stack.extend(gc.get_referents(obj))
    total, end = 0, 0
    for lo, hi in sorted(ranges):
        if hi > end:
            total += hi - max(lo, end)
            end = hi
    return total


@pytest.fixture(scope="module")
def program():
    res = onnx_mrvl.convert(big_fc_model(fc_width=512, channels=32, size=8))
    assert len(res.subgraphs) == 1
    return res.subgraphs[0].binary


def test_loaded_simulator_holds_no_float32_copy_of_the_weights(program):
    stored = sum(int(w.nbytes) for w in load(program).weights.values())     # fp16: 2 bytes a value
    assert stored > 1 << 20
    sim = Simulator(program)
    x = np.random.default_rng(0).standard_normal(sim.input_shapes[0]).astype(np.float32)
    sim.run([x])
    held = held_bytes(sim)
    # the binary (its fp16 weights) + one layout per kernel (the native GEMV's packed fp16 blocks at
    # batch 1, 2 bytes a value; the GEMM's float32 blocks, 4 bytes a value) + activations: under 3.5x
    # the fp16 bytes. A float32 copy of the weight set kept beside the layouts (as before) is over 5x.
    assert held < 3.5 * stored, (held, stored)
    if native.on():
        assert held > 1.9 * stored, (held, stored)   # the walk does see the binary and the layouts


def test_weights_read_as_float32_and_stored_as_fp16(program):
    sim = Simulator(program)
    name = next(k for k in sim.weights if sim.weights.stored(k).dtype == np.float16)
    a, b = sim.weights[name], sim.weights[name]
    assert a.dtype == np.float32 and a is not b
    assert np.array_equal(a, sim.weights.stored(name).astype(np.float32))


def test_native_and_numpy_fc_layouts_agree(program, monkeypatch):
    """The numpy path builds its float32 layouts from the stored fp16 kernel on first use; the
    results are those of the native (packed) path bit for bit."""
    x = np.random.default_rng(1).standard_normal(Simulator(program).input_shapes[0]).astype(np.float32)
    want = Simulator(program).run([x])
    monkeypatch.setenv("ONNX_MRVL_SIM_STATIC", "0")
    got = Simulator(program).run([x])
    for a, b in zip(want, got):
        assert a.tobytes() == b.tobytes()
