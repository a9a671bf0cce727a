"""Arrays of at least 2 MB (packed weights, a static plan's arena) on transparent huge pages
(native.empty): aligned, writable, and the simulator's results the same bits as on numpy's memory."""
import re

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_mrvl
from onnx_mrvl.sim import Simulator, native


def _thp_mode():
    try:
        text = open("/sys/kernel/mm/transparent_hugepage/enabled").read()
    except OSError:
        return None
    m = re.search(r"\[(\w+)\]", text)
    return m.group(1) if m else None


def _on_huge_pages(address):
    """Whether the mapping that holds ``address`` (/proc/self/smaps) starts on a 2 MB boundary and is
    advised for huge pages (VmFlags ``hg``): madvise splits the advised stretch off as a mapping of
    its own. The flag, not AnonHugePages, so that a kernel short of free 2 MB blocks (it then backs
    the stretch with 4 KB pages) does not fail the test."""
    span = None
    for line in open("/proc/self/smaps"):
        m = re.match(r"([0-9a-f]+)-([0-9a-f]+) ", line)
        if m:
            lo, hi = int(m.group(1), 16), int(m.group(2), 16)
            span = (lo, hi) if lo <= address < hi else None
        elif span and line.startswith("VmFlags:"):
            return span[0] % native.HUGE_PAGE == 0 and "hg" in line.split()[1:]
    return False


@pytest.mark.parametrize("huge", [True, False])
def test_large_arrays_are_aligned_and_writable(monkeypatch, huge):
    monkeypatch.setattr(native, "_HUGE", huge and native._HUGE)
    for shape in [(native.HUGE_PAGE // 4,), (3, 1000, 1001), (7, 5)]:
        a = native.empty(shape)
        assert a.shape == shape and a.dtype == np.float32 and a.flags.c_contiguous and a.flags.writeable
        assert a.ctypes.data % 64 == 0
        a[...] = np.arange(a.size, dtype=np.float32).reshape(shape)
        assert a.reshape(-1)[-1] == a.size - 1


@pytest.mark.skipif(not native._HUGE or _thp_mode() not in ("always", "madvise"),
                    reason="no transparent huge pages here")
def test_a_large_array_lies_on_huge_pages():
    a = native.empty((3 * native.HUGE_PAGE // 4,))
    a[...] = 1.0                                   # touched: faulted in
    assert _on_huge_pages(a.ctypes.data)


@pytest.mark.skipif(not native._HUGE or _thp_mode() not in ("always", "madvise"),
                    reason="no transparent huge pages here")
def test_a_large_fc_weight_panel_lies_on_huge_pages():
    w = np.random.default_rng(2).standard_normal((2048, 1040)).astype(np.float16)    # 4.3 MB as fp16
    p = native.pack_weights_f16(w)
    assert p.ctypes.data % 64 == 0 and p.shape == (65, 2048, 16)
    assert np.array_equal(p.transpose(1, 0, 2).reshape(2048, -1)[:, :1040], w)
    assert _on_huge_pages(p.ctypes.data)


def _model():
    """two 3x3 convs of 256 channels (2.4 MB of packed weights each) at 6x6, ReLU between"""
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array((rng.standard_normal((256, 256, 3, 3)) / 48).astype(np.float32), f"w{i}")
             for i in range(2)]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Conv", ["r", "w1"], ["y"], pads=[1, 1, 1, 1])]
    g = helper.make_graph(nodes, "huge", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 256, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 256, 6, 6])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.skipif(not native.on(), reason=f"native kernels off: {native.why_disabled()}")
def test_same_bits_on_huge_pages(monkeypatch):
    binary = onnx_mrvl.convert(_model()).subgraphs[0].binary
    x = np.random.default_rng(1).standard_normal((2, 256, 6, 6)).astype(np.float32)
    outs = []
    for huge in (False, True):
        monkeypatch.setattr(native, "_HUGE", huge)
        outs.append(Simulator(binary).run([x])[0])
    assert np.isfinite(outs[0]).all() and np.abs(outs[0]).max() > 0
    assert np.array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))
