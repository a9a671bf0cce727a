"""A float tensor (an LRN's output, left float by quantize_static) -> MaxPool -> Q -> DQ: an int8
max pool that quantizes its input (fuse/qdq_float_max.py), bit-equal to onnxruntime, which moves
the Q above the pool. The fp16 pool it replaces rounded the input to fp16 before the Q."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import onnx_mrvl
from onnx_mrvl.testing import int8_zoo, qdq_variants as qv
from onnx_mrvl.testing.qdq_variant_models import lrn_maxpool


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_lrn_maxpool_int8_bit_equal(tmp_path, act):
    m = lrn_maxpool()
    src, dst = str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx")
    onnx.save(m, src)
    int8_zoo.quantize_static_qdq(src, dst, [qv.feeds_for(m, k) for k in range(4)], act=act)
    q = onnx.load(dst)
    assert not any(n.op_type == "DequantizeLinear" and any(c.op_type == "MaxPool" for c in q.graph.node
                                                               if n.output[0] in c.input) for n in q.graph.node)
    res = onnx_mrvl.convert(q)
    pool = [d for d in res.report.decisions.values() if d.op_type == "MaxPool"]
    assert pool and all(d.placement == "accelerator" and d.precision == "int8" for d in pool), pool
    res.save(str(tmp_path / "out"))
    r = qv.compare(q, str(tmp_path / "out" / "model.onnx"))
    assert r["identical"] == 1.0, r


def test_float_maxpool_without_q_stays_float():
    """No Q after the pool: the pattern does not apply (the float pool's fp16 layer)."""
    from onnx_mrvl.fuse import qdq_float_max
    from onnx_mrvl.graph_index import GraphIndex
    from onnx_mrvl.target import get_target
    m = lrn_maxpool()
    g = GraphIndex(m)
    g.excluded = set()
    pool = next(n for n in m.graph.node if n.op_type == "MaxPool")
    assert qdq_float_max.build(g, pool, get_target(None)) is None
