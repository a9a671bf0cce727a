"""Independent accelerator regions (no path between them) become one region (split/merge.py);
regions linked through a CPU op stay apart. Structure, then numbers against onnxruntime."""
import pytest

from onnx_mrvl.graph_index import GraphIndex, topological_order
from onnx_mrvl.pipeline import convert
from onnx_mrvl.split.merge import merge_independent
from onnx_mrvl.split.regions import is_convex
from test_split_strategies import _Builder, check_deployable


def two_heads_model(hw=8, ch=8):
    """Two conv chains from two inputs, each ending at a CPU op (Softsign) and a graph output:
    the chains never meet, so region growing alone gives two regions."""
    b = _Builder(5)
    a = b.op("Relu", [b.conv("x1", 3, ch, "a1")], "ar")
    b.op("Softsign", [b.conv(a, ch, 4, "a2")], "out_a")
    c = b.op("Relu", [b.conv("x2", 2, ch, "b1", k=1)], "br")
    b.op("Softsign", [b.conv(c, ch, 6, "b2")], "out_b")
    return b.model([("x1", [1, 3, hw, hw]), ("x2", [1, 2, hw, hw])],
                   [("out_a", [1, 4, hw, hw]), ("out_b", [1, 6, hw, hw])])


def shared_input_model():
    """Two heads on one input (a multi-head model) and a third on another input through a CPU op."""
    b = _Builder(6)
    b.conv("x", 3, 4, "h1")
    b.op("Relu", [b.conv("x", 3, 5, "h2", k=1)], "h2r")
    s = b.op("Softsign", ["y"], "pre")
    b.conv(s, 3, 6, "h3")
    return b.model([("x", [1, 3, 8, 8]), ("y", [1, 3, 8, 8])],
                   [("h1", [1, 4, 8, 8]), ("h2r", [1, 5, 8, 8]), ("h3", [1, 6, 8, 8])])


def cpu_linked_model():
    """conv -> Softsign (CPU) -> conv: merging the two regions would close a cycle through the CPU op."""
    b = _Builder(7)
    a = b.op("Relu", [b.conv("x", 3, 8, "c1")], "r1")
    s = b.op("Softsign", [a], "sm")
    b.conv(s, 8, 4, "out")
    return b.model([("x", [1, 3, 8, 8])], [("out", [1, 4, 8, 8])])


def mixed_model():
    """Branch 1: conv -> CPU -> conv; branch 2 (other input): conv. Branch 2's region is independent
    of both of branch 1's, but those two are linked: 2 regions, never 1."""
    b = _Builder(8)
    a = b.op("Relu", [b.conv("x1", 3, 8, "a1")], "ar")
    s = b.op("Softsign", [a], "sm")
    b.conv(s, 8, 4, "out_a")
    b.conv("x2", 3, 6, "out_b")
    return b.model([("x1", [1, 3, 8, 8]), ("x2", [1, 3, 8, 8])],
                   [("out_a", [1, 4, 8, 8]), ("out_b", [1, 6, 8, 8])])


def _region_names(result):
    return [sorted(r["origin"]) for r in result.report.regions]


@pytest.mark.parametrize("partition", ["max", "cost"])
def test_independent_branches_form_one_region(partition):
    m = two_heads_model(*((8, 8) if partition == "max" else (64, 64)))   # cost: worth offloading
    r = convert(m, partition=partition, reference=True)
    assert len(r.report.regions) == 1
    reg = r.report.regions[0]
    assert {"a1", "a2", "b1", "b2"} <= set(reg["origin"])
    assert set(reg["inputs"]) == {"x1", "x2"} and len(reg["outputs"]) == 2
    check_deployable(m, r)


def test_heads_on_one_input_merge_around_a_cpu_op():
    m = shared_input_model()
    r = convert(m, reference=True)
    assert len(r.report.regions) == 1
    assert {"h1", "h2", "h3"} <= set(r.report.regions[0]["origin"])
    check_deployable(m, r)


def test_regions_linked_through_a_cpu_op_stay_apart():
    m = cpu_linked_model()
    r = convert(m, reference=True)
    assert len(r.report.regions) == 2
    check_deployable(m, r)


def test_independent_region_joins_one_of_two_linked_ones():
    m = mixed_model()
    r = convert(m, reference=True)
    assert len(r.report.regions) == 2
    origins = _region_names(r)
    assert any("out_b" in o and "a1" in o for o in origins), origins   # joins the earliest it may
    check_deployable(m, r)


def test_cut_after_and_exclude_are_respected():
    m = two_heads_model()
    r = convert(m, cut_after=["ar"], reference=True)
    # a1/ar | a2 are linked (cut), b's chain joins the first of them
    assert len(r.report.regions) == 2
    check_deployable(m, r)
    r = convert(m, exclude=["b1"], reference=True)
    assert all("b1" not in reg["origin"] for reg in r.report.regions)
    check_deployable(m, r)


def test_single_keeps_its_one_region():
    m = two_heads_model()
    r = convert(m, partition="single", reference=True)
    assert len(r.report.regions) == 1
    check_deployable(m, r)


def test_io_limit_stops_merging():
    """Four independent heads, each a region of 1 input and 1 output; max_io=2 allows pairs only."""
    b = _Builder(9)
    outs = []
    for i in range(4):
        outs.append((b.op("Softsign", [b.conv(f"x{i}", 3, 4, f"c{i}")], f"o{i}"), [1, 4, 8, 8]))
    m = b.model([(f"x{i}", [1, 3, 8, 8]) for i in range(4)], outs)
    g = GraphIndex(m)
    order = topological_order(g.nodes, g.inputs)
    convs = [[n] for n in order if n.op_type == "Conv"]

    def fits(nodes):
        return len(nodes) <= 2   # one input and one output per conv here: at most 2 of each
    merged = merge_independent(g, order, convs, fits)
    assert [[n.name for n in grp] for grp in merged] == [["c0", "c1"], ["c2", "c3"]]
    for grp in merged:
        assert is_convex(g, [n.name for n in grp])
    assert len(merge_independent(g, order, convs, lambda nodes: True)) == 1


def test_no_merge_across_a_path_through_other_regions():
    """A -> CPU -> B -> CPU -> C with D independent: A, B, C stay apart (each pair is linked)."""
    b = _Builder(10)
    x = "x"
    names = []
    for i in range(3):
        c = b.conv(x, 3, 3, f"c{i}")
        names.append(c)
        x = b.op("Softsign", [c], f"s{i}")
    b.conv("y", 3, 3, "d")
    m = b.model([("x", [1, 3, 8, 8]), ("y", [1, 3, 8, 8])], [(x, [1, 3, 8, 8]), ("d", [1, 3, 8, 8])])
    g = GraphIndex(m)
    order = topological_order(g.nodes, g.inputs)
    regs = [[g.by_name[n]] for n in names + ["d"]]
    merged = merge_independent(g, order, regs, lambda nodes: True)
    assert sorted(sorted(n.name for n in grp) for grp in merged) == [["c0", "d"], ["c1"], ["c2"]]


def test_batch_above_max_batch_keeps_unchunkable_parts_apart(tmp_path):
    """Batch 10 > max_batch 8: the head on x runs in hardware batches; the head on y (batch 1)
    cannot, so merging them would send both to the CPU: they stay two regions, both offloaded."""
    import numpy as np
    import onnx_mrvl
    from test_split_strategies import _feeds, _run
    b = _Builder(11)
    b.op("Softsign", [b.conv("x", 3, 4, "hx")], "ox")
    b.op("Softsign", [b.conv("y", 3, 4, "hy")], "oy")
    m = b.model([("x", [10, 3, 8, 8]), ("y", [1, 3, 8, 8])], [("ox", [10, 4, 8, 8]), ("oy", [1, 4, 8, 8])])
    r = convert(m)
    assert len(r.report.regions) == 2 and not r.report.dropped
    assert sorted(reg.get("hardware_batches", {}).get("calls", 1) for reg in r.report.regions) == [1, 2]
    feeds = _feeds(m)
    want = _run(m, feeds)
    got = onnx_mrvl.InferenceSession(r.save(str(tmp_path / "m"))).run(None, feeds)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-2, atol=1e-2)
    # the same heads at batch 2 and 1 merge
    m2 = b.model([("x", [2, 3, 8, 8]), ("y", [1, 3, 8, 8])], [("ox", [2, 4, 8, 8]), ("oy", [1, 4, 8, 8])])
    assert len(convert(m2).report.regions) == 1
