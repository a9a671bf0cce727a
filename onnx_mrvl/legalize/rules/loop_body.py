"""What a ``Loop`` body does per iteration, found by reading and running it (for ``loop_to_rnn``).

:func:`analyze` splits the body into its *control* part (the condition, the integer counters and
the index of the one step it reads from an outer ``[T, B, I]`` sequence) and its *cell* (everything
else: a function of the step ``x_t`` and the float loop-carried states). The control part is run
once per iteration (it reads only the iteration number, the counters and constants) to learn how
many iterations run and which rows they read; the cell is left to ``loop_cell.py``. Returns a
:class:`LoopBody` or the reason the Loop is not a scan over one sequence.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper

from ... import file_weights
from .base import attr, inp

INTS = (TensorProto.INT32, TensorProto.INT64)
MAX_TRIPS = 4096          # iterations run to learn the trip count (a recurrent layer's time steps)
MAX_CONST_CONE = 16       # nodes evaluated for the initial condition (tf2onnx: Less, And of constants)


@dataclass
class LoopBody:
    body: onnx.GraphProto
    x: str                           # outer sequence [T, B, I] read one row per iteration
    step: str                        # the body's name of that row (the Gather's output) [B, I]
    steps: int                       # iterations run (= T)
    consts: Dict[str, np.ndarray]    # body initializers, outer constants and loop-invariant carried values
    cell: List[onnx.NodeProto]       # body nodes of the cell (topological order), the step read excluded
    states: List[int]                # carried indices of the float states
    final: Dict[int, np.ndarray] = field(default_factory=dict)   # carried index -> constant final value
    carried_in: List[str] = field(default_factory=list)
    carried_out: List[str] = field(default_factory=list)
    scans: List[str] = field(default_factory=list)
    inits: List[str] = field(default_factory=list)    # the Loop's initial value of each carried value


class Runner:
    """``nodes`` as a model run by onnxruntime: inputs (name -> (elem type, shape)), outputs by name."""

    def __init__(self, nodes: Sequence[onnx.NodeProto], inputs: Dict[str, tuple], outputs: Sequence[str],
                 consts: Dict[str, np.ndarray], model: onnx.ModelProto):
        import onnxruntime as ort
        used = {i for n in nodes for i in n.input if i}
        graph = helper.make_graph(
            list(nodes), "probe", [helper.make_tensor_value_info(k, t, list(s)) for k, (t, s) in inputs.items()],
            [helper.make_empty_tensor_value_info(o) for o in outputs],
            [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items() if k in used and k not in inputs])
        probe = helper.make_model(graph, opset_imports=list(model.opset_import))
        probe.ir_version = max(7, min(model.ir_version or 8, 10))
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        self.sess = ort.InferenceSession(file_weights.serialized(probe), opts, providers=["CPUExecutionProvider"])
        self.outputs = list(outputs)

    def __call__(self, feeds: Dict[str, np.ndarray]) -> List[np.ndarray]:
        return self.sess.run(self.outputs, feeds)


def graph_of(node: onnx.NodeProto, name: str = "body") -> Optional[onnx.GraphProto]:
    return next((a.g for a in node.attribute if a.name == name and a.type == onnx.AttributeProto.GRAPH), None)


def const_value(g, name: str) -> Optional[np.ndarray]:
    """The value of ``name`` when it is an initializer or a small computation of initializers (the
    initial condition tf2onnx writes as ``And(Less(c1, c2), ...)``; fold_constants leaves a Loop's
    condition cone alone)."""
    if not name:
        return None
    if g.is_const(name):
        return np.asarray(g.const(name))
    nodes, todo, seen, shapes = [], [name], set(), {}
    while todo:
        t = todo.pop()
        if t in seen or g.is_const(t):
            continue
        seen.add(t)
        p = g.producer.get(t)
        if p is None or graph_of(p) is not None or len(nodes) >= MAX_CONST_CONE:
            return None
        if p.op_type == "Shape" and g.shape(p.input[0]) is not None:   # a static shape (pinned input)
            dims = list(g.shape(p.input[0]))
            shapes[t] = np.array(dims[int(attr(p, "start", 0)):attr(p, "end", None) or len(dims)], np.int64)
            continue
        nodes.append(p)
        todo.extend(i for i in p.input if i)
    nodes = list({id(n): n for n in reversed(nodes)}.values())
    if not nodes:
        return shapes.get(name)
    leaves = {i: np.asarray(g.const(i)) for n in nodes for i in n.input if i and g.is_const(i)}
    leaves.update(shapes)
    try:
        from onnx.reference import ReferenceEvaluator
        ordered = _toposort(nodes, set(leaves))
        if ordered is None:
            return None
        graph = helper.make_graph(ordered, "cone", [], [helper.make_empty_tensor_value_info(name)],
                                  [onnx.numpy_helper.from_array(v, k) for k, v in leaves.items()])
        model = helper.make_model(graph, opset_imports=list(g.model.opset_import))
        return np.asarray(ReferenceEvaluator(file_weights.inline(model)).run(None, {})[0])
    except Exception:   # noqa: BLE001 - not computable here: the condition is not a known constant
        return None


def _toposort(nodes: Sequence[onnx.NodeProto], known: set) -> Optional[List[onnx.NodeProto]]:
    known, todo, out = set(known), list(nodes), []
    while todo:
        ready = [n for n in todo if all(not i or i in known for i in n.input)]
        if not ready:
            return None
        for n in ready:
            out.append(n)
            known.update(o for o in n.output if o)
        todo = [n for n in todo if all(n is not r for r in ready)]
    return out


def _cone(nodes: Sequence[onnx.NodeProto], targets: Sequence[str]) -> List[onnx.NodeProto]:
    producer = {o: n for n in nodes for o in n.output if o}
    keep, todo = {}, list(targets)
    while todo:
        p = producer.get(todo.pop())
        if p is not None and id(p) not in keep:
            keep[id(p)] = p
            todo.extend(i for i in p.input if i)
    return [n for n in nodes if id(n) in keep]


def analyze(loop: onnx.NodeProto, g) -> "LoopBody | str":
    body = graph_of(loop)
    carried = len(loop.input) - 2
    if body is None or carried < 1 or len(body.input) != carried + 2 or len(body.output) < carried + 1:
        return "not a Loop with a body and loop-carried values"
    if any(graph_of(n, a.name) is not None for n in body.node for a in n.attribute):
        return "the body has nested control flow"
    trip = const_value(g, inp(loop, 0))
    cond = const_value(g, inp(loop, 1))
    if inp(loop, 0) and (trip is None or trip.size != 1):
        return f"trip count '{inp(loop, 0)}' is not a constant"
    if inp(loop, 1) and (cond is None or cond.size != 1):
        return f"initial condition '{inp(loop, 1)}' is not a constant"
    trip = int(trip.reshape(-1)[0]) if trip is not None else MAX_TRIPS + 1
    run = bool(cond.reshape(-1)[0]) if cond is not None else True
    it, cin = body.input[0].name, body.input[1].name
    c_in = [v.name for v in body.input[2:]]
    c_out = [v.name for v in body.output[1:carried + 1]]
    scans = [v.name for v in body.output[carried + 1:]]
    defined = {v.name for v in body.input} | {i.name for i in body.initializer} | \
        {o for n in body.node for o in n.output if o}
    consts = {i.name: onnx.numpy_helper.to_array(i) for i in body.initializer}
    outer = []
    for n in body.node:
        for i in n.input:
            if i and i not in defined and i not in consts and i not in outer:
                v = const_value(g, i)   # an initializer, or T from a pinned Shape (dynamic-axis exports)
                if v is not None:
                    consts[i] = v
                else:
                    outer.append(i)
    final, counters, states = {}, [], []
    for k, (a, b) in enumerate(zip(c_in, c_out)):
        init = inp(loop, k + 2)
        if a == b:   # loop-invariant (tf2onnx passes the weights through the loop)
            v = const_value(g, init)
            if v is None:
                return f"loop-invariant value '{init}' is not a constant"
            consts[a] = final[k] = np.asarray(v)
        elif g.dtype(init) in INTS:
            counters.append(k)
        elif g.dtype(init) == TensorProto.FLOAT:
            states.append(k)
        else:
            return f"loop-carried value '{init}' is neither a float state nor an integer counter"
    if not states:
        return "no float state is carried through the loop"
    reads = [n for n in body.node if n.op_type == "Gather" and n.input[0] in outer]
    other = sorted({i for n in body.node if n not in reads for i in n.input if i in outer})
    if len(reads) != 1 or other:
        names = sorted({n.input[0] for n in reads}) + other
        if len(reads) > 1:
            return (f"the body reads {len(reads)} sequences per step ({', '.join(names)}): an ONNX LSTM / GRU "
                    "reads one (a Keras Masking mask selects between the new and the previous state)")
        return f"the body does not read one row of one outer sequence per iteration (outer tensors: {names})"
    read = reads[0]
    x = read.input[0]
    xs = g.shape(x)
    if int(attr(read, "axis", 0)) != 0 or xs is None or len(xs) != 3 or g.dtype(x) != TensorProto.FLOAT:
        return f"the step read of '{x}' is not a row of a float32 [T, B, I] tensor of static shape"
    index = read.input[1]
    control = _cone(body.node, [body.output[0].name] + [c_out[k] for k in counters] + [index])
    control_ids = {id(n) for n in control}
    allowed = {it, cin} | {c_in[k] for k in counters} | set(consts)
    if any(i and i not in allowed and i not in {o for n in control for o in n.output}
           for n in control for i in n.input):
        return "the loop's condition or step index depends on the computed values"
    cell = [n for n in body.node if id(n) not in control_ids and n is not read]
    if any(i in {it, cin} | {c_in[k] for k in counters} for n in cell for i in n.input):
        return "the cell reads the iteration number or a counter"
    inits = {}
    for k in counters:
        v = const_value(g, inp(loop, k + 2))
        if v is None:
            return f"counter '{inp(loop, k + 2)}' does not start from a constant"
        inits[c_in[k]] = np.asarray(v)
    feeds_t = {it: (TensorProto.INT64, [])} | {c_in[k]: (g.dtype(inp(loop, k + 2)), list(inits[c_in[k]].shape))
                                                for k in counters}
    if any(i == cin for n in control for i in n.input):
        feeds_t[cin] = (TensorProto.BOOL, [])
    outs = [body.output[0].name, index] + [c_out[k] for k in counters]
    runner = Runner(control, feeds_t, outs, consts, g.model)
    rows, steps, values = [], 0, dict(inits)
    while run and steps < trip:
        if steps >= MAX_TRIPS:
            return f"the loop runs more than {MAX_TRIPS} iterations"
        feeds = {it: np.array(steps, np.int64), **values}
        if cin in feeds_t:
            feeds[cin] = np.array(run)
        res = runner(feeds)
        run = bool(np.asarray(res[0]).reshape(-1)[0])
        rows.append(int(np.asarray(res[1]).reshape(-1)[0]) if np.asarray(res[1]).size == 1 else None)
        values = {c_in[k]: np.asarray(v) for k, v in zip(counters, res[2:])}
        steps += 1
    if steps != xs[0] or rows != list(range(steps)):
        shown = rows if len(rows) <= 6 else rows[:3] + ["..."] + rows[-2:]
        return f"the loop reads rows {shown} of '{x}' ({xs[0]} rows): not each step once in order"
    for k in counters:
        final[k] = values[c_in[k]]
    return LoopBody(body, x, read.output[0], steps, consts, cell, states, final, c_in, c_out, scans, list(loop.input[2:]))
