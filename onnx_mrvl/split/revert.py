"""Revert Mrvl nodes that end outside every region back to standard ONNX (the RFC's
``revert_mrvl_mod_to_orig``): inline each node's reference body, then clean up the layout changes
that inlining leaves (constant transposes folded, inverse transpose pairs cancelled, transposes
pushed through elementwise ops, reshape chains merged), so the CPU part is plain NCHW again.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Dict, List, Set

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .. import file_weights
from ..graph_index import attr, node_reads
from ..provenance import get_origin, set_origin

UNARY = {"Relu", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid", "HardSwish", "Identity", "Clip"}
BINARY = {"Add", "Mul", "Sub", "Div", "Max", "Min"}


def _std(node: onnx.NodeProto) -> bool:
    """A standard-domain node (Mrvl ops reuse names such as Reshape and Concat)."""
    return node.domain in ("", "ai.onnx")


def inline_nodes(model: onnx.ModelProto, names: Set[str]) -> None:
    """Replace the named function-call nodes of the main graph by their bodies, in place."""
    funcs = {(f.domain, f.name, f.overload): f for f in model.functions}
    out: List[onnx.NodeProto] = []
    inits = model.graph.initializer
    for idx, node in enumerate(model.graph.node):
        if node.name not in names:
            out.append(node)
            continue
        f = funcs[(node.domain, node.op_type, node.overload)]
        prefix = f"{node.name}/"
        rename: Dict[str, str] = {"": ""}
        for formal, actual in zip(f.input, node.input):
            rename[formal] = actual
        for formal in f.input[len(node.input):]:
            rename[formal] = ""
        for formal, actual in zip(f.output, node.output):
            rename[formal] = actual
        origin = get_origin(node)
        for i, b in enumerate(f.node):
            if b.op_type == "Constant":
                t = onnx.TensorProto()
                t.CopyFrom(attr(b, "value"))
                t.name = rename.setdefault(b.output[0], prefix + b.output[0])
                inits.append(t)
                continue
            new = onnx.NodeProto()
            new.CopyFrom(b)
            new.name = f"{node.name}/{b.op_type}_{i}"
            for k, v in enumerate(b.input):
                new.input[k] = rename.setdefault(v, prefix + v)
            for k, v in enumerate(b.output):
                new.output[k] = rename.setdefault(v, prefix + v)
            set_origin(new, origin)
            out.append(new)
    del model.graph.node[:]
    model.graph.node.extend(out)


class _Cleaner:
    def __init__(self, model: onnx.ModelProto):
        self.model = model
        self.g = model.graph
        self.inits = {t.name: t for t in self.g.initializer}
        self.outputs = {o.name for o in self.g.output}
        self.after: Dict[int, List[onnx.NodeProto]] = {}   # sweep index -> nodes to insert after it
        self.before: Dict[int, List[onnx.NodeProto]] = {}  # sweep index -> nodes to insert before it
        self._shapes = None

    def const(self, name):
        t = self.inits.get(name)
        return None if t is None else file_weights.array(t)

    def add_const(self, name, arr):
        t = numpy_helper.from_array(np.ascontiguousarray(arr), name)
        self.inits[name] = t
        self.g.initializer.append(t)
        return name

    def run(self) -> None:
        # transposes that only move size-1 axes become Reshapes last: earlier they would hide
        # transpose pairs that cancel
        for as_reshape in (False, True):
            self.as_reshape = as_reshape
            for _ in range(50):
                if not self.sweep():
                    break
        self.prune()

    def sweep(self) -> bool:
        self._drop_dead()                   # Identity nodes would hide producers from the rules
        nodes = list(self.g.node)
        producer = {o: n for n in nodes for o in n.output}
        users = defaultdict(list)
        for n in nodes:
            for i in n.input:
                users[i].append(n)
        alias: Dict[str, str] = {}
        changed = False
        idx_of = {id(n): k for k, n in enumerate(nodes)}
        for idx, n in enumerate(nodes):
            for k, i in enumerate(n.input):
                while i in alias:
                    i = alias[i]
                n.input[k] = i
            if not _std(n):
                continue
            if n.op_type == "Transpose" and n.input[0] in self.inits:
                perm = attr(n, "perm")
                self._replace_with_const(n, self.const(n.input[0]).transpose(perm))
                changed = True
            elif n.op_type == "Transpose":
                src = producer.get(n.input[0])
                perm = list(attr(n, "perm"))
                if src is not None and src.op_type == "Transpose" and _std(src):
                    inner = list(attr(src, "perm"))
                    comp = [inner[p] for p in perm]
                    if comp == sorted(comp) and n.output[0] not in self.outputs:
                        alias[n.output[0]] = src.input[0]
                        n.op_type = "Identity"
                        del n.attribute[:]
                        changed = True
                    elif comp != perm or n.input[0] != src.input[0]:
                        n.input[0] = src.input[0]
                        del n.attribute[:]
                        n.attribute.append(helper.make_attribute("perm", comp))
                        changed = True
                elif perm == sorted(perm) and n.output[0] not in self.outputs:
                    alias[n.output[0]] = n.input[0]
                    n.op_type = "Identity"
                    del n.attribute[:]
                    changed = True
                elif src is not None and _std(src) and src.op_type in UNARY | BINARY:
                    changed |= self._pull(n, src, idx_of, producer, users)
                if n.op_type == "Transpose" and self.as_reshape:
                    changed |= self._transpose_as_reshape(n, perm)
            elif n.op_type in UNARY | BINARY:
                changed |= self._push(idx, n, producer, users)
            elif n.op_type == "Reshape":
                src = producer.get(n.input[0])
                if (src is not None and src.op_type == "Reshape" and _std(src)
                        and len(users[src.output[0]]) == 1 and src.output[0] not in self.outputs):
                    n.input[0] = src.input[0]
                    changed = True
            elif n.op_type == "Identity" and n.output[0] not in self.outputs:
                alias[n.output[0]] = n.input[0]
        if self.after or self.before:
            self._insert_pending(nodes)
        if alias:
            for n in self.g.node:
                for k, i in enumerate(n.input):
                    while i in alias:
                        i = alias[i]
                    n.input[k] = i
        self._drop_identity_reshapes()
        return changed

    def _replace_with_const(self, n, value):
        name = self.add_const(n.output[0] + "__c", value)
        n.op_type = "Identity"
        del n.input[:]
        del n.attribute[:]
        n.input.append(name)

    def _push(self, idx, n, producer, users) -> bool:
        """op(T(x), [T(y) | const]) -> T(op(x, ...)) so transposes meet and cancel."""
        data = [i for i in n.input if i and i not in self.inits]
        srcs = [producer.get(i) for i in data]
        if not srcs or any(s is None or s.op_type != "Transpose" or not _std(s) for s in srcs):
            return False
        perms = {tuple(attr(s, "perm")) for s in srcs}
        if len(perms) != 1 or any(len(users[s.output[0]]) != 1 for s in srcs):
            return False
        perm = list(perms.pop())
        inv = list(np.argsort(perm))
        new_inputs = []
        for i in n.input:
            if i in self.inits and n.op_type in BINARY:
                c = self.const(i)
                rank = len(perm)
                if c.ndim > rank:
                    return False
                c = c.reshape((1,) * (rank - c.ndim) + c.shape).transpose(inv)
                new_inputs.append(self.add_const(f"{i}__t{''.join(map(str, inv))}_{n.name}", c))
            elif i and i not in self.inits:
                new_inputs.append(producer[i].input[0])
            else:
                new_inputs.append(i)
        out = n.output[0]
        mid = out + "__pre_t"
        del n.input[:]
        n.input.extend(new_inputs)
        n.output[0] = mid
        t = helper.make_node("Transpose", [mid], [out], name=n.name + "/transpose", perm=perm)
        set_origin(t, get_origin(n))
        self.after.setdefault(idx, []).append(t)
        return True

    def _shape(self, name: str):
        if self._shapes is None:
            self._shapes = {}
            for vi in list(self.g.value_info) + list(self.g.input) + list(self.g.output):
                dims = vi.type.tensor_type.shape.dim
                if dims and all(d.HasField("dim_value") for d in dims):
                    self._shapes[vi.name] = [d.dim_value for d in dims]
        return self._shapes.get(name)

    def _transpose_as_reshape(self, n, perm) -> bool:
        """A transpose that moves only size-1 axes (e.g. NHWC [1,1,1,C] -> NCHW) is a Reshape."""
        shape = self._shape(n.input[0])
        out = self._shape(n.output[0])
        if shape is None and out is not None and len(out) == len(perm):
            shape = [0] * len(perm)
            for k, p in enumerate(perm):
                shape[p] = out[k]
        if shape is None or len(shape) != len(perm):
            return False
        moved = [p for p in perm if shape[p] != 1]
        if moved != sorted(moved):
            return False
        target = self.add_const(f"{n.output[0]}__shape", np.array([shape[p] for p in perm], np.int64))
        n.op_type = "Reshape"
        del n.attribute[:]
        n.input.append(target)
        return True

    def _pull(self, t, op, idx_of, producer, users) -> bool:
        """T_p(op(T_q(x), y)) with q then p the identity -> op(x, T_p(y)): the transposes around an
        elementwise op cancel at the cost of one on each other input (done when that is no more)."""
        perm = list(attr(t, "perm"))
        if len(users[op.output[0]]) != 1 or op.output[0] in self.outputs:
            return False
        cancel, other = 0, 0
        for i in op.input:
            src = producer.get(i)
            if i in self.inits or not i:
                continue
            if (src is not None and _std(src) and src.op_type == "Transpose" and len(users[i]) == 1
                    and [list(attr(src, "perm"))[p] for p in perm] == list(range(len(perm)))):
                cancel += 1
            else:
                other += 1
        if cancel == 0 or other > cancel:
            return False
        new_inputs = []
        for i in op.input:
            src = producer.get(i)
            if not i:
                new_inputs.append(i)
            elif i in self.inits:
                c = self.const(i)
                if c.ndim > len(perm):
                    return False
                c = c.reshape((1,) * (len(perm) - c.ndim) + c.shape).transpose(perm)
                new_inputs.append(self.add_const(f"{i}__t{''.join(map(str, perm))}_{op.name}", c))
            elif (src is not None and _std(src) and src.op_type == "Transpose" and len(users[i]) == 1
                  and [list(attr(src, "perm"))[p] for p in perm] == list(range(len(perm)))):
                new_inputs.append(src.input[0])
            else:
                name = f"{i}__t{''.join(map(str, perm))}_{op.name}"
                pre = helper.make_node("Transpose", [i], [name], name=f"{op.name}/transpose_{len(new_inputs)}",
                                       perm=perm)
                set_origin(pre, get_origin(op))
                self.before.setdefault(idx_of[id(op)], []).append(pre)
                new_inputs.append(name)
        del op.input[:]
        op.input.extend(new_inputs)
        old = op.output[0]
        op.output[0] = t.output[0]          # the op now yields the transposed tensor itself
        t.op_type = "Identity"              # t is dead: prune drops it
        del t.attribute[:]
        t.input[0] = op.output[0]
        t.output[0] = old + "__dead"
        return True

    def _insert_pending(self, snapshot: List[onnx.NodeProto]) -> None:
        """Put the transposes ``_push`` created right after their producers (one pass, O(n))."""
        nodes = []
        for idx, n in enumerate(snapshot):
            nodes.extend(self.before.get(idx, ()))
            nodes.append(n)
            nodes.extend(self.after.get(idx, ()))
        self.after, self.before = {}, {}
        copies = [_copy(n) for n in nodes]
        del self.g.node[:]
        self.g.node.extend(copies)

    def _drop_identity_reshapes(self):
        shapes = {}
        for vi in list(self.g.value_info) + list(self.g.input) + list(self.g.output):
            dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
            shapes[vi.name] = dims
        for n in self.g.node:
            if n.op_type == "Reshape" and _std(n) and n.output[0] not in self.outputs:
                target = self.const(n.input[1])
                src = shapes.get(n.input[0])
                if target is not None and src and list(target) == src and all(d > 0 for d in src):
                    n.op_type = "Identity"
                    del n.input[1:]

    def _rename_into_outputs(self) -> bool:
        """An Identity (or identity Transpose) that only renames a tensor into a graph output: its
        producer writes the graph output directly."""
        inputs = {i.name for i in self.g.input}
        producer = {o: n for n in self.g.node for o in n.output}
        uses: Dict[str, int] = defaultdict(int)
        for n in self.g.node:
            for i in n.input:
                uses[i] += 1
        changed = False
        for n in self.g.node:
            if not (_identity_like(n) and n.output[0] in self.outputs):
                continue
            src = n.input[0]
            p = producer.get(src)
            if p is None or uses[src] != 1 or src in self.outputs or src in inputs:
                continue
            p.output[list(p.output).index(src)] = n.output[0]
            producer[n.output[0]] = p
            n.op_type, n.input[0], n.output[0] = "Identity", n.output[0], src + "__dead"
            del n.attribute[:]
            changed = True
        return changed

    def prune(self) -> None:
        """Drop Identity nodes, dead nodes and unused initializers; let producers write graph
        outputs directly."""
        self._drop_dead()
        if self._rename_into_outputs():
            self._drop_dead()

    def _drop_dead(self) -> None:
        alias = {n.output[0]: n.input[0] for n in self.g.node
                 if n.op_type == "Identity" and _std(n) and n.output[0] not in self.outputs and n.input}
        keep = [n for n in self.g.node if not (n.op_type == "Identity" and _std(n) and n.output[0] in alias)]
        for n in keep:
            for k, i in enumerate(n.input):
                while i in alias:
                    i = alias[i]
                n.input[k] = i
        needed = set(self.outputs)
        live = []
        for n in reversed(keep):
            if any(o in needed for o in n.output):
                live.append(n)
                needed.update(node_reads(n))
        live.reverse()
        del self.g.node[:]
        self.g.node.extend(live)
        for idx in reversed(range(len(self.g.initializer))):   # in place: weights are not copied
            if self.g.initializer[idx].name not in needed:
                del self.g.initializer[idx]


def _identity_like(n: onnx.NodeProto) -> bool:
    if not _std(n):
        return False
    if n.op_type == "Identity":
        return True
    perm = attr(n, "perm") if n.op_type == "Transpose" else None
    return perm is not None and list(perm) == sorted(perm)


def _copy(n: onnx.NodeProto) -> onnx.NodeProto:
    c = onnx.NodeProto()
    c.CopyFrom(n)
    return c


def revert(model: onnx.ModelProto, names: Set[str]) -> None:
    """Inline the named Mrvl nodes and tidy the layout changes, in place."""
    if not names:
        return
    inline_nodes(model, names)
    _Cleaner(model).run()
