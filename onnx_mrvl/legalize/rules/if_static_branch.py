"""An ``If`` whose condition the static shapes decide -> the nodes of the branch it takes.

torch.onnx's TorchScript exporter writes ``x.squeeze(dim)`` of an axis whose size it does not know
at export time as ``If(Equal(Gather(Shape(x), dim), 1), then: Squeeze(x, dim), else: Identity(x))``
(Silero-style VAD heads, ``akiki``'s GRU VAD: 2 such Ifs cut it into 2 regions). With the shapes
static (a model input of fixed size, or ``input_shapes=``) the condition is a constant: its cone
(constants, ``Shape`` / ``Size`` of tensors of static shape, and small deterministic ops on them) is
evaluated here and the If replaced by its taken branch, renamed into the graph (exact: that is the
branch onnxruntime runs for these shapes).

Left alone: a condition that reads data (a run-time value) or no shape at all (a constant condition,
as the model states it), a cone of more than ``MAX_CONE`` nodes,
a branch with nested control flow (its bodies read the branch's names), or a branch that reads no
run-time tensor (constant / shape bookkeeping such as torchvision's empty-boxes test or the ONNX
AffineGrid function's rank test: it cuts no data path, and a constant branch output can break
onnxruntime's static checks, tests/test_legalize_passthrough.py).
fold_constants does not fold the cone itself (an If's condition stays a tensor: see its docstring)."""
from __future__ import annotations

from typing import Optional

import numpy as np
import onnx
from onnx import numpy_helper

from ...graph_index import subgraph_reads
from .base import Match, attr
from .fold_constants import NON_DETERMINISTIC, evaluate

NAME = "if_static_branch"
OPS = ("If",)
MAX_CONE = 64


def match(node, g) -> Optional[Match]:
    if node.op_type != "If" or node.domain not in ("", "ai.onnx") or not node.input:
        return None
    return Match([node])


def _value(name: str, g, memo: dict, budget: list):
    """The value of tensor ``name`` from constants and static shapes, or a reason (str); ``budget``:
    [nodes left to evaluate, Shape / Size nodes read so far]."""
    if name in memo:
        return memo[name]
    if g.is_const(name):
        memo[name] = g.const(name)
        return memo[name]
    p = g.producer.get(name)
    if p is None:
        return f"'{name}' is a graph input"
    budget[0] -= 1
    if budget[0] < 0:
        return f"the condition's cone has more than {MAX_CONE} nodes"
    if p.op_type in ("Shape", "Size"):
        budget[1] += 1
        s = g.shape(p.input[0])
        if s is None:
            return f"'{p.input[0]}' has no static shape"
        dims = np.asarray(s, np.int64)
        if p.op_type == "Size":
            val = np.asarray(int(np.prod(dims)), np.int64)
        else:
            r = len(dims)
            lo, hi = attr(p, "start", 0), attr(p, "end", r)
            lo, hi = (max(0, min(r, v + r if v < 0 else v)) for v in (lo, hi))
            val = dims[lo:hi]
        memo[name] = val
        return val
    if p.domain not in ("", "ai.onnx") or p.op_type in NON_DETERMINISTIC or subgraph_reads([p]):
        return f"'{name}' comes from {p.op_type}, which is not evaluated here"
    ins = {}
    for i in p.input:
        if i:
            v = _value(i, g, memo, budget)
            if isinstance(v, str):
                return v
            ins[i] = v
    try:
        outs = evaluate(p, g, ins)
    except Exception as exc:   # noqa: BLE001 - a reason, not a crash
        return f"cannot evaluate {p.op_type} '{p.name}': {exc}"
    for o, v in zip([o for o in p.output if o], outs):
        memo[o] = np.asarray(v)
    return memo[name]


def check(m: Match, g, target) -> Optional[str]:
    node, budget = m.node, [MAX_CONE, 0]   # nodes left to evaluate, Shape / Size nodes read
    cond = _value(node.input[0], g, {}, budget)
    if isinstance(cond, str):
        return f"the condition is not static: {cond}"
    if not budget[1]:
        return "the condition reads no shape (a constant condition is left to onnxruntime)"
    if cond.size != 1:
        return f"the condition has {cond.size} elements"
    branch = attr(node, "then_branch" if bool(cond.reshape(-1)[0]) else "else_branch")
    if subgraph_reads(list(branch.node)):
        return "the branch taken holds nested control flow"
    if len(branch.output) != len(node.output):
        return "the branch has another number of outputs than the If"
    inner = {o for n in branch.node for o in n.output if o} | {t.name for t in branch.initializer}
    outer = {i for n in branch.node for i in n.input if i} | {b.name for b in branch.output}
    if all(g.is_const(t) or (g.producer.get(t) is not None and g.producer[t].op_type == "Constant")
           for t in outer - inner):
        return ("the branch reads no run-time tensor (constant / shape bookkeeping, which cuts no data "
                "path: left to onnxruntime)")
    m.data["branch"], m.data["cond"] = branch, bool(cond.reshape(-1)[0])
    return None


def rewrite(m: Match, g) -> str:
    node, branch = m.node, m.data["branch"]
    origin = m.origin
    internal = {o for n in branch.node for o in n.output if o} | {t.name for t in branch.initializer}
    rename = {}
    for b, o in zip(branch.output, node.output):   # a branch result written straight to the If's output
        if o and b.name in internal and b.name not in rename and b.name not in {t.name for t in branch.initializer}:
            rename[b.name] = o
    for t in sorted(internal - set(rename)):
        rename[t] = g.fresh(f"{node.name}/{t}")
    g.remove(node)
    for t in branch.initializer:
        g.set_const(rename[t.name], numpy_helper.to_array(t))
    for n in branch.node:
        new = onnx.NodeProto()
        new.CopyFrom(n)
        new.name = f"{node.name}/{n.name or n.op_type}"
        for k, i in enumerate(new.input):
            new.input[k] = rename.get(i, i)
        for k, o in enumerate(new.output):
            new.output[k] = rename.get(o, o)
        g.add(new, near=node, origin=origin)
    for b, o in zip(branch.output, node.output):   # an outer value, a constant, or a result read twice
        if o and rename.get(b.name) != o:
            g.make("Identity", [rename.get(b.name, b.name)], [o], near=node, origin=origin, name=f"{node.name}/{o}/out")
    g.pinned = set(g.outputs) | subgraph_reads(g.node_list())
    return (f"If with a static condition ({m.data['cond']}): the {'then' if m.data['cond'] else 'else'} "
            f"branch's {len(branch.node)} nodes inlined")
