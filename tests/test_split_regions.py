"""Region finding on hand-built graphs of Mrvl nodes: convexity, merging, cut_after, single."""
import time

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnx_mrvl.graph_index import GraphIndex, topological_order
from onnx_mrvl.split.regions import boundary, find_regions, is_convex


def _graph(spec, outputs=("out",)):
    """spec: [(name, op, [inputs])]; op "cpu" is a standard Softmax, anything else a mrvl Sum2D."""
    nodes = []
    for name, op, ins in spec:
        if op == "cpu":
            nodes.append(helper.make_node("Softmax", ins, [name], name=name))
        else:
            nodes.append(helper.make_node("Sum2D" if len(ins) > 1 else "MaxPool2D", ins, [name],
                                          name=name, domain="mrvl"))
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4])  # noqa: E731
    inputs = sorted({i for _, _, ins in spec for i in ins} - {n for n, _, _ in spec})
    g = helper.make_graph(nodes, "t", [vi(i) for i in inputs], [vi(o) for o in outputs])
    return GraphIndex(helper.make_model(g))


def _regions(g, cut=(), single=False, accel=None):
    order = topological_order(g.nodes, g.inputs)
    accel = {n.name for n in g.nodes if n.domain == "mrvl"} if accel is None else set(accel)
    assign = find_regions(g, order, accel, cut, single=single)
    groups = {}
    for name, r in assign.items():
        groups.setdefault(r, set()).add(name)
    return [groups[r] for r in sorted(groups)]


def _acyclic_after_collapse(g, groups) -> bool:
    owner = {n: i for i, grp in enumerate(groups) for n in grp}
    key = lambda name: ("r", owner[name]) if name in owner else ("n", name)  # noqa: E731
    edges = {}
    for n in g.nodes:
        for i in n.input:
            p = g.producer.get(i)
            if p is not None and key(p.name) != key(n.name):
                edges.setdefault(key(p.name), set()).add(key(n.name))
    state = {}

    def visit(v):  # iterative DFS for cycles
        stack = [(v, iter(edges.get(v, ())))]
        state[v] = 1
        while stack:
            u, it = stack[-1]
            w = next(it, None)
            if w is None:
                state[u] = 2
                stack.pop()
            elif state.get(w) == 1:
                return False
            elif w not in state:
                state[w] = 1
                stack.append((w, iter(edges.get(w, ()))))
        return True
    return all(visit(v) for v in list(edges) if v not in state)


def test_cpu_op_between_two_regions():
    g = _graph([("a", "m", ["x"]), ("s", "cpu", ["a"]), ("b", "m", ["s"]), ("c", "m", ["a"]),
                ("d", "m", ["b", "c"]), ("out", "m", ["d"])])
    groups = _regions(g)
    assert groups == [{"a", "c"}, {"b", "d", "out"}]
    ins, outs = boundary(g, [g.by_name[n] for n in ("a", "c")])
    assert ins == ["x"] and outs == ["a", "c"]          # multiple outputs; "a" used inside and outside
    assert _regions(g, single=True) == [{"a", "c"}]


def test_diamond_with_cpu_branch_never_cycles():
    # a -> softmax -> join, a -> m -> join: the join cannot be in a's region
    g = _graph([("a", "m", ["x"]), ("s", "cpu", ["a"]), ("m", "m", ["a"]), ("out", "m", ["s", "m"])])
    groups = _regions(g)
    assert groups == [{"a", "m"}, {"out"}]
    assert all(is_convex(g, grp) for grp in groups) and _acyclic_after_collapse(g, groups)


def test_independent_chains_merge_at_concat():
    g = _graph([("a1", "m", ["x1"]), ("a2", "m", ["a1"]), ("b1", "m", ["x2"]), ("b2", "m", ["b1"]),
                ("out", "m", ["a2", "b2"])])
    assert _regions(g) == [{"a1", "a2", "b1", "b2", "out"}]


def test_merge_refused_when_one_region_reaches_the_other_through_the_cpu():
    # region A = {a}; a -> softmax -> y (in B = {b, y, b2}); join(a, b2) may not merge A and B
    g = _graph([("a", "m", ["x1"]), ("s", "cpu", ["a"]), ("b", "m", ["x2"]), ("y", "m", ["b", "s"]),
                ("b2", "m", ["b"]), ("out", "m", ["a", "b2"])], outputs=("out", "y"))
    groups = _regions(g)
    assert all(is_convex(g, grp) for grp in groups) and _acyclic_after_collapse(g, groups)
    assert {"a"} in groups or {"a", "out"} in groups
    assert len(groups) == 2


def test_cut_after_ends_the_region_only_downstream():
    g = _graph([("a", "m", ["x"]), ("b", "m", ["a"]), ("c", "m", ["b"]), ("p", "m", ["a"]),
                ("out", "m", ["c", "p"])])
    assert _regions(g) == [{"a", "b", "c", "p", "out"}]
    groups = _regions(g, cut=["b"])
    assert groups == [{"a", "b", "p"}, {"c", "out"}]
    assert _acyclic_after_collapse(g, groups)
    assert _regions(g, cut=["b"], single=True) == [{"a", "b", "p"}]


def test_single_region_is_fed_by_model_inputs_only():
    g = _graph([("a", "m", ["x"]), ("s", "cpu", ["a"]), ("b", "m", ["s"]), ("c", "m", ["a", "b"]),
                ("out", "m", ["c"])])
    assert _regions(g, single=True) == [{"a"}]
    assert _regions(g) == [{"a"}, {"b", "c", "out"}]


def _random_dag(rng, n, p_cpu):
    spec = []
    for k in range(n):
        k_in = 1 if k == 0 else int(rng.integers(1, 3))
        ins = ["x"] if k == 0 else sorted({f"n{int(j)}" for j in rng.integers(max(0, k - 6), k, k_in)})
        spec.append((f"n{k}", "cpu" if rng.random() < p_cpu and len(ins) == 1 else "m", ins))
    consumed = {i for _, _, ins in spec for i in ins}
    outs = tuple(name for name, _, _ in spec if name not in consumed)
    return _graph(spec, outputs=outs)


@pytest.mark.parametrize("seed", range(30))
def test_random_dags_give_convex_regions(seed):
    rng = np.random.default_rng(seed)
    g = _random_dag(rng, 40, 0.25)
    names = [n.name for n in g.nodes if n.domain == "mrvl"]
    cut = [n for n in names if rng.random() < 0.1]
    groups = _regions(g, cut=cut)
    assert all(is_convex(g, grp) for grp in groups)
    assert _acyclic_after_collapse(g, groups)
    assert sorted(n for grp in groups for n in grp) == sorted(names)   # every Mrvl node placed
    for grp in groups:                                  # nothing downstream of a cut joins its region
        for c in set(cut) & grp:
            seen, todo = set(), [c]
            while todo:
                for o in g.by_name[todo.pop()].output:
                    for u in g.consumers.get(o, []):
                        assert u.name not in grp, (c, u.name)
                        if u.name not in seen:
                            seen.add(u.name)
                            todo.append(u.name)


def test_region_finding_is_near_linear():
    def build(n):
        spec, x = [], "x"
        for k in range(n):   # chains of Mrvl ops broken by a CPU op every 7 nodes, plus skips
            ins = [x] + ([f"n{k - 5}"] if k % 5 == 0 and k >= 5 else [])
            spec.append((f"n{k}", "cpu" if k % 7 == 3 else "m", ins if k % 7 != 3 else [x]))
            x = f"n{k}"
        return _graph(spec, outputs=(x,))

    times = {}
    for n in (2000, 8000):
        g = build(n)
        best = float("inf")
        for _ in range(3):                     # best of three: the machine is shared
            t = time.process_time()
            groups = _regions(g)
            best = min(best, time.process_time() - t)
        times[n] = best
        assert len(groups) > n // 14
    assert times[8000] < 8 * times[2000] + 0.05, times       # 4x the nodes: well under 16x the time
