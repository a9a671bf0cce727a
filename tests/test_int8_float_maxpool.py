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


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_prelu_before_quantized_maxpool_is_an_int8_lookup(tmp_path, act):
    """MTCNN P-Net's ``DQ -> PRelu -> MaxPool -> Q``: legalize's qdq_pair_before_move copies the Q in
    front of the pool (exact: a positive-scale Q is monotone, Q(max y) = max Q(y)), so the per-channel
    PRelu is an int8 lookup between a DQ and a Q instead of an fp16 layer whose rounding moved codes
    at ties (facenet-pytorch P-Net: 62% identical at the outputs before)."""
    from onnx_mrvl.legalize import legalize
    from onnx_mrvl.testing.qdq_variant_models import prelu_maxpool
    m = prelu_maxpool()
    src, dst = str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx")
    onnx.save(m, src)
    int8_zoo.quantize_static_qdq(src, dst, [qv.feeds_for(m, k) for k in range(6)], act=act)
    q = onnx.load(dst)
    prelu = next(n for n in q.graph.node if n.name == "prelu1")
    assert not any(n.op_type == "QuantizeLinear" and n.input[0] == prelu.output[0] for n in q.graph.node)
    res = legalize(q)
    assert any(w == "qdq_pair_before_move" and "MaxPool" in str(d) for w, _, d in res.log), res.log
    legal = {n.name: n for n in res.model.graph.node}
    pool = next(n for n in legal.values() if n.op_type == "MaxPool")
    assert res.model.graph.node and any(n.op_type == "DequantizeLinear" and n.output[0] == pool.input[0]
                                        for n in legal.values())
    r = onnx_mrvl.convert(q)
    assert len(r.report.regions) == 1 and not r.report.cpu_nodes()
    d = r.report.decisions["prelu1"]
    assert d.placement == "accelerator" and d.precision == "int8", d
    r.save(str(tmp_path / "out"))
    cmp = qv.compare(q, str(tmp_path / "out" / "model.onnx"))
    assert cmp["identical"] == 1.0, cmp
