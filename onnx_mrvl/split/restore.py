"""Put legalize's rewrites back where none of their products is offloaded (TVM BYOC's "partitioning
inlines back what is not offloaded"): the CPU runs the user's own nodes, not our re-expression of
them (bit-identical to onnxruntime on the original model, and as readable).

Reads the record legalize kept (legalize/restore.py). A group is the rule applications whose
original nodes overlap; it is restored when every rule of it is restorable (``RESTORABLE``), none of
its original nodes went into a region, and every node of the deployable graph that came from its
original nodes (its products, by provenance) came from them alone; then the products are replaced
by copies of the original nodes, exactly at the same boundary: every product output read outside
the products is an original output, every tensor the originals read is still there (graph input,
another node's output, initializer: original initializers are put back), with the types legalize
inferred for them. Anything else (some products in a region, a product shared with other original
nodes, a boundary tensor gone or retyped) leaves the group as it is.
"""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Set

import onnx

from .. import file_weights
from ..errors import ModelError
from ..graph_index import extend_copies, node_reads, subgraph_reads, topological_order
from ..provenance import get_origin
from .deploy import is_subgraph


class _Index:
    """The deployable main graph's producers, readers and types (rebuilt after each restore)."""

    def __init__(self, model: onnx.ModelProto):
        g = model.graph
        self.nodes = list(g.node)
        self.by_origin: Dict[str, List[int]] = {}
        self.producer: Dict[str, int] = {}
        self.readers: Dict[str, Set[int]] = {}
        for i, n in enumerate(self.nodes):
            for o in get_origin(n):
                self.by_origin.setdefault(o, []).append(i)
            for o in n.output:
                if o:
                    self.producer[o] = i
            for t in set(node_reads(n)) | subgraph_reads([n]):
                self.readers.setdefault(t, set()).add(i)
        self.inputs = {i.name for i in g.input}
        self.outputs = {o.name for o in g.output}
        self.inits = {t.name for t in g.initializer}
        self.types = {v.name: v.type for v in list(g.value_info) + list(g.input) + list(g.output)}
        self.types.update({t.name: t for t in g.initializer})
        self.domains = {o.domain or "" for o in model.opset_import}


def _type_of(entry):
    """(dtype, shape or None) of a value_info type or an initializer."""
    if isinstance(entry, onnx.TensorProto):
        return entry.data_type, tuple(entry.dims)
    if not entry.HasField("tensor_type"):
        return None, None
    tt = entry.tensor_type
    if not tt.HasField("shape") or any(not d.HasField("dim_value") for d in tt.shape.dim):
        return tt.elem_type, None
    return tt.elem_type, tuple(d.dim_value for d in tt.shape.dim)


def _same_type(idx: _Index, record, t: str, there: str) -> bool:
    """Original tensor ``t`` and the deployable's ``there`` have the same dtype and shape (where known)."""
    want, have = record.types.get(t), idx.types.get(there)
    if want is None or have is None:
        return True
    dtype, shape = _type_of(have)
    if dtype and dtype != want[0]:
        return False
    return shape is None or want[1] is None or None in want[1] or tuple(want[1]) == shape


def _same_values(a: onnx.TensorProto, b: onnx.TensorProto) -> bool:
    if a.data_type != b.data_type or list(a.dims) != list(b.dims):
        return False
    x, y = file_weights.array(a), file_weights.array(b)
    return x.tobytes() == y.tobytes()


def _logical_copy(idx: _Index, t: str, prods: Set[int]) -> Optional[str]:
    """The tensor the products read from outside that holds original tensor ``t`` in its own layout
    under fuse's name for it (``<t>__nchw``, ``_<k>`` when taken: inspection/tensors.py), or None."""
    pat = re.compile(re.escape(t) + r"__nchw(_\d+)?$")
    found = {x for i in prods for x in node_reads(idx.nodes[i])
             if pat.match(x) and idx.producer.get(x) not in prods}
    return found.pop() if len(found) == 1 else None


def _plan(idx: _Index, names: List[str], record, offloaded: Set[str]):
    """Why the group of original ``names`` stays rewritten (a str), or the renames of its original
    inputs (a dict: original tensor -> the deployable tensor holding it) when it can be restored."""
    if set(names) & offloaded:
        return "partly on the accelerator"
    prods = sorted({i for o in names for i in idx.by_origin.get(o, ())})
    if not prods:
        return "no product left in the deployable graph"
    mine = set(names)
    for i in prods:
        n = idx.nodes[i]
        if is_subgraph(n) or not set(get_origin(n)) <= mine:
            return f"product {n.name} also comes from other nodes"
    orig = [record.originals[n] for n in names]
    if any((n.domain or "") not in idx.domains for n in orig):
        return "an original node's domain is not imported by the deployable model"
    made = {o for n in orig for o in n.output if o}
    inside = set(prods)
    for i in prods:
        for o in idx.nodes[i].output:
            if o and (o in idx.outputs or idx.readers.get(o, set()) - inside) and \
                    (o not in made or not _same_type(idx, record, o, o)):
                return f"product output {o} is read outside and is not an original output"
    for t in made:
        if t in idx.inputs or t in idx.inits or idx.producer.get(t, -1) not in (-1, *inside):
            return f"original output {t} is written by another node"
    alias: Dict[str, str] = {}
    for t in {i for n in orig for i in node_reads(n)} | subgraph_reads(orig):
        if t in made:
            continue
        have = t
        p = idx.producer.get(t)
        there = t in idx.inputs or t in idx.inits or (p is not None and p not in inside)
        if not there and t not in record.initializers:
            have = _logical_copy(idx, t, inside)
            if have is None:
                return f"original input {t} is gone"
            alias[t], there = have, True
        if there and not _same_type(idx, record, t, have):
            return f"original input {t} changed type"
        if t in idx.inits and t in record.initializers and not _same_values(idx.types[t], record.initializers[t]):
            return f"original initializer {t} was changed"
    return alias


def _restore(model: onnx.ModelProto, idx: _Index, names: List[str], record, alias: Dict[str, str]
             ) -> Optional[List[str]]:
    """Replace the group's products by its original nodes, in place; returns the products' names
    (None, the model untouched, when the result would not be acyclic)."""
    g = model.graph
    prods = sorted({i for o in names for i in idx.by_origin[o]})
    gone = set(prods)
    orig = []
    for name in sorted(names, key=lambda n: record.position[n]):
        node = onnx.NodeProto()
        node.CopyFrom(record.originals[name])
        keep = [p for p in node.metadata_props if not p.key.startswith("mrvl.")]
        del node.metadata_props[:]
        node.metadata_props.extend(keep)
        for k, t in enumerate(node.input):
            if t in alias:
                node.input[k] = alias[t]
        orig.append(node)
    nodes = [n for i, n in enumerate(idx.nodes) if i not in gone]
    at = sum(1 for i in range(prods[0]) if i not in gone)
    try:
        order = topological_order(nodes[:at] + orig + nodes[at:], idx.inputs)
    except ModelError:   # the originals would close a cycle with what fuse made around them: keep the rewrite
        return None
    dead_calls = {(n.domain, n.op_type, n.overload) for i, n in enumerate(idx.nodes) if i in gone}
    del g.node[:]
    g.node.extend(order)
    read = {t for n in order for t in node_reads(n)} | subgraph_reads(order) | idx.outputs
    made = {o for n in order for o in n.output if o}
    extend_copies(g.initializer, (record.initializers[t] for t in sorted(read - idx.inits - idx.inputs - made)
                                  if t in record.initializers))
    dead = {t for i in prods for t in node_reads(idx.nodes[i])} - read   # the products' own constants
    for k in reversed(range(len(g.initializer)) if dead & idx.inits else ()):
        if g.initializer[k].name in dead:
            del g.initializer[k]
    vis = [v for v in g.value_info if v.name in made]
    have = {v.name for v in vis}
    for n in orig:
        for o in n.output:
            if o and o not in have and o not in idx.outputs and o in record.types:
                dtype, shape = record.types[o]
                if shape is not None and all(isinstance(d, int) and d >= 0 for d in shape):
                    vis.append(onnx.helper.make_tensor_value_info(o, dtype, list(shape)))
    del g.value_info[:]
    g.value_info.extend(vis)
    live = {(n.domain, n.op_type, n.overload) for n in order}
    funcs = [f for f in model.functions if (f.domain, f.name, f.overload) not in dead_calls - live]
    if len(funcs) != len(model.functions):
        del model.functions[:]
        model.functions.extend(funcs)
    return [idx.nodes[i].name for i in prods]


def restore(model: onnx.ModelProto, record, offloaded: Set[str]) -> List[dict]:
    """Restore every group of restorable rewrites whose products all run on the CPU in the
    deployable ``model`` (in place); ``offloaded``: the original names inside regions. Returns one
    ``{"rules", "origin", "replaced"}`` per restored group."""
    if record is None or not record.originals:
        return []
    groups = [(names, apps) for names, apps in record.groups()
              if all(a.restorable for a in apps) and all(n in record.originals for n in names)]
    done: List[dict] = []
    idx = _Index(model) if groups else None
    for names, apps in groups:
        plan = _plan(idx, names, record, offloaded)
        if isinstance(plan, str):
            continue
        replaced = _restore(model, idx, names, record, plan)
        if replaced is None:
            continue
        done.append({"rules": list(dict.fromkeys(a.rule for a in apps)), "origin": list(names),
                     "replaced": replaced})
        idx = _Index(model)
    return done
