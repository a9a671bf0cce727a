"""A mutable view over an ONNX GraphProto for the legalization rules, built on the read-only
primitives of ``onnx_mrvl/graph_index.py`` (``attr``, ``subgraph_reads``; fuse and split use its
``GraphIndex`` snapshot); docs/architecture.md "Graph model" says why two layers.

Keeps producer/consumer maps, initializers (lazily as numpy), inferred shapes and fresh names, so
each rule stays small and every sweep stays linear in the number of nodes. Nodes are standalone
``NodeProto`` objects keyed by ``id()``; removed nodes are dropped and new ones ordered at
``commit()`` by a stable topological sort (new nodes sit where the node they replace stood;
``stable_order.py``). One class, whose every edit keeps all its indexes consistent: an edit and
the index it must update sit together.
"""
from __future__ import annotations

import itertools
from typing import Dict, List, Optional, Sequence, Set, Tuple

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .. import file_weights, provenance
from . import fresh_arena
from .stable_order import stable_toposort
from ..graph_index import attr, extend_copies, subgraph_reads  # attr: the package's one attribute reader (strings as str)

BIG_ARRAY = 1 << 20   # cached values at least this big are dropped by commit() (read again when asked)

str_attr = attr   # the old name of the string reader: ``attr`` itself decodes now (one semantics)


def set_attr(node: onnx.NodeProto, name: str, value) -> None:
    del_attr(node, name)
    node.attribute.append(helper.make_attribute(name, value))


def del_attr(node: onnx.NodeProto, name: str) -> None:
    keep = [a for a in node.attribute if a.name != name]
    if len(keep) != len(node.attribute):
        del node.attribute[:]
        node.attribute.extend(keep)


class Graph:
    """Editable graph: nodes, initializers, shapes, producer and consumer maps."""

    def __init__(self, model: onnx.ModelProto):
        self.model = model
        g = model.graph
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
        self.nodes: Dict[int, onnx.NodeProto] = {}
        self.by_op: Dict[str, Dict[int, onnx.NodeProto]] = {}
        self.order: Dict[int, Tuple[float, int]] = {}
        self._seq = itertools.count()
        self.producer: Dict[str, onnx.NodeProto] = {}
        # tensor -> {id(node): [node, number of its inputs reading the tensor]}
        self.consumers: Dict[str, Dict[int, list]] = {}
        self.inits: Dict[str, onnx.TensorProto] = {i.name: i for i in g.initializer}
        self._arrays: Dict[str, np.ndarray] = {}
        self._pending: Dict[str, np.ndarray] = {}   # big new constants: a stub in inits until commit()
        self.inputs = [i.name for i in g.input]
        self.outputs = {o.name for o in g.output}
        self.pinned: Set[str] = set(self.outputs)
        self.shapes: Dict[str, Tuple[Optional[int], ...]] = {}
        self.dtypes: Dict[str, int] = {}
        self.non_tensors: Set[str] = set()  # sequence / optional / map values (pass through)
        self.names: Set[str] = set()
        self.tensor_names: Set[str] = set(self.inits) | set(self.inputs) | self.outputs
        self.changed = False
        self.edits = 0        # bumped by every change of nodes or edges: the key of the cached order
        self._topo: Optional[Tuple[tuple, List[onnx.NodeProto]]] = None
        self._new_inits: Set[str] = set()
        self._counters: Dict[str, int] = {}
        self.target = None  # set by the driver; rules may read limits in match()
        self.consumed = False   # set by the driver: nothing else holds ``model`` (fresh_arena.py)
        # original node name -> what a rewrite changed that the user must know (its decision says it;
        # "{precision}" is filled in with where the node ended up): LegalizeReport.notes
        self.notes: Dict[str, str] = {}
        self.probe_error: Optional[str] = None   # onnxruntime's refusal of the shape probe (shapes.ort_fill)
        for pos, n in enumerate(g.node):
            node = onnx.NodeProto()
            node.CopyFrom(n)
            self._add(node, (float(pos), 0))
            self.pinned |= subgraph_reads([node])
        del g.node[:]

    # ----- nodes
    def _add(self, node: onnx.NodeProto, key: Tuple[float, int]) -> None:
        self.edits += 1
        self.nodes[id(node)] = node
        self.by_op.setdefault(node.op_type, {})[id(node)] = node
        self.order[id(node)] = (key[0], next(self._seq))
        self.names.add(node.name)
        for o in node.output:
            if o:
                self.producer[o] = node
                self.tensor_names.add(o)
        for i in node.input:
            if i:
                self._use(i, node)
                self.tensor_names.add(i)

    def alive(self, node: onnx.NodeProto) -> bool:
        return id(node) in self.nodes

    def node_list(self) -> List[onnx.NodeProto]:
        """Live nodes by position (replacements sit where the node they replace stood, which
        keeps dataflow order for the rules); ``toposort`` gives a strict topological order."""
        order = self.order
        return sorted(self.nodes.values(), key=lambda n: order[id(n)])

    def nodes_of(self, ops) -> List[onnx.NodeProto]:
        """Live nodes whose op_type is in ``ops`` (all nodes for None), by position."""
        if ops is None:
            return self.node_list()
        found = [n for op in ops for n in self.by_op.get(op, {}).values()]
        order = self.order
        return sorted(found, key=lambda n: order[id(n)])

    def toposort(self) -> List[onnx.NodeProto]:
        return list(self._toposort())

    def remove(self, node: onnx.NodeProto) -> None:
        if id(node) not in self.nodes:
            return
        self.edits += 1
        del self.nodes[id(node)]  # its order key stays: replacements are placed there
        self.by_op.get(node.op_type, {}).pop(id(node), None)
        self.names.discard(node.name)
        for o in node.output:
            if o and self.producer.get(o) is node:
                del self.producer[o]
        for i in node.input:
            if i:
                self._unuse(i, node)
        self.changed = True

    def _use(self, name: str, node: onnx.NodeProto) -> None:
        self.edits += 1
        d = self.consumers.setdefault(name, {})
        e = d.get(id(node))
        if e is None:
            d[id(node)] = [node, 1]
        else:
            e[1] += 1

    def _unuse(self, name: str, node: onnx.NodeProto) -> None:
        self.edits += 1
        d = self.consumers.get(name)
        e = d.get(id(node)) if d else None
        if e is not None:
            e[1] -= 1
            if e[1] <= 0:
                del d[id(node)]
                if not d and name in self._arrays and name not in self.pinned:
                    del self._arrays[name]   # an initializer nobody reads: its cached values go (read again if used)

    def users(self, name: str) -> List[onnx.NodeProto]:
        """Nodes reading tensor ``name`` (each once)."""
        return [e[0] for e in self.consumers.get(name, {}).values()]

    def add(self, node: onnx.NodeProto, near: Optional[onnx.NodeProto] = None,
            origin: Optional[Sequence[str]] = None) -> onnx.NodeProto:
        """Insert ``node`` (ordered where ``near`` stands), naming it and recording provenance."""
        if not node.name or node.name in self.names:
            node.name = self.fresh_node_name(node.name or node.op_type)
        if origin is not None:
            provenance.set_origin(node, origin)
        key = self.order.get(id(near), (float(len(self.nodes)), 0)) if near is not None else \
            (float("inf"), 0)
        self._add(node, key)
        self.changed = True
        return node

    def make(self, op_type: str, inputs: Sequence[str], outputs: Sequence[str], *, near,
             origin: Sequence[str], name: Optional[str] = None, domain: str = "",
             **attrs) -> onnx.NodeProto:
        node = helper.make_node(op_type, list(inputs), list(outputs),
                                name=name or f"{near.name}/{op_type}", domain=domain, **attrs)
        return self.add(node, near=near, origin=origin)

    def set_input(self, node: onnx.NodeProto, idx: int, name: str) -> None:
        old = node.input[idx]
        if old == name:
            return
        if old:
            self._unuse(old, node)
        node.input[idx] = name
        if name:
            self._use(name, node)
        self.changed = True

    def trim_inputs(self, node: onnx.NodeProto, n: int) -> None:
        """Keep only the first ``n`` inputs of ``node``."""
        for idx in range(n, len(node.input)):
            self.set_input(node, idx, "")
        del node.input[n:]

    def replace_uses(self, old: str, new: str) -> None:
        """Point every consumer of tensor ``old`` at ``new``."""
        for c in self.users(old):
            for k, i in enumerate(c.input):
                if i == old:
                    self.set_input(c, k, new)

    def rename_output(self, node: onnx.NodeProto, idx: int, new: str) -> None:
        self.edits += 1
        old = node.output[idx]
        if self.producer.get(old) is node:
            del self.producer[old]
        node.output[idx] = new
        self.producer[new] = node
        self.tensor_names.add(new)
        if old in self.shapes and new not in self.shapes:
            self.shapes[new] = self.shapes[old]
        if old in self.dtypes and new not in self.dtypes:
            self.dtypes[new] = self.dtypes[old]
        self.changed = True

    def bypass(self, node: onnx.NodeProto, src: str, dst: str) -> bool:
        """Make consumers of ``dst`` read ``src`` so ``node`` can go. False when impossible
        (``dst`` is a graph output and ``src`` has no producer that can be renamed)."""
        if dst in self.pinned:
            p = self.producer.get(src)
            if p is None or src in self.pinned or src in self.inputs:
                return False
            self.replace_uses(src, dst)
            self.remove(node)
            self.rename_output(p, list(p.output).index(src), dst)
            return True
        self.replace_uses(dst, src)
        self.remove(node)
        return True

    # ----- names
    def _unique(self, base: str, taken: Set[str]) -> str:
        name, k = base, self._counters.get(base, 1)
        while name in taken:
            name, k = f"{base}_{k}", k + 1
        self._counters[base] = k
        taken.add(name)
        return name

    def fresh_node_name(self, base: str) -> str:
        return self._unique(base, self.names)

    def fresh(self, base: str) -> str:
        """A new tensor name."""
        return self._unique(base, self.tensor_names)

    # ----- constants
    def is_const(self, name: str) -> bool:
        return name in self.inits

    def const(self, name: str) -> Optional[np.ndarray]:
        if name not in self.inits:
            return None
        arr = self._arrays.get(name)
        if arr is None:
            arr = self._pending.get(name)
        if arr is None:
            arr = file_weights.array(self.inits[name])
            self._arrays[name] = arr
        return arr

    def add_const(self, base: str, value, dtype=None) -> str:
        arr = np.asarray(value, dtype=dtype)
        name = self.fresh(base)
        self.set_const(name, arr)
        return name

    def set_const(self, name: str, arr: np.ndarray) -> None:
        arr = np.asarray(arr)
        if not arr.flags.c_contiguous:  # (np.ascontiguousarray would make scalars 1-D)
            arr = arr.copy(order="C")
        if arr.nbytes >= BIG_ARRAY and arr.dtype.kind == "f":
            # the array is its one copy until commit(); inits holds a stub (name, type, dims)
            stub = onnx.TensorProto(name=name, data_type=helper.np_dtype_to_tensor_dtype(arr.dtype))
            stub.dims.extend(arr.shape)
            self.inits[name], self._pending[name] = stub, arr
        else:
            self.inits[name] = numpy_helper.from_array(arr, name)
            self._pending.pop(name, None)
        self._new_inits.add(name)
        self._arrays[name] = arr
        self.tensor_names.add(name)
        self.shapes[name] = tuple(int(d) for d in arr.shape)
        self.dtypes[name] = helper.np_dtype_to_tensor_dtype(arr.dtype)
        self.changed = True

    def scalar_like(self, base: str, value: float, like: str) -> str:
        """A scalar constant with the element type of tensor ``like``."""
        np_dtype = helper.tensor_dtype_to_np_dtype(self.dtypes.get(like, onnx.TensorProto.FLOAT))
        return self.add_const(base, np.array(value, dtype=np_dtype))

    # ----- shapes
    def shape(self, name: str) -> Optional[Tuple[int, ...]]:
        """Static shape of a tensor, or None when unknown or not fully static."""
        if name in self.inits:
            return tuple(int(d) for d in self.inits[name].dims)
        s = self.shapes.get(name)
        if s is None or any(d is None or d < 0 for d in s):
            return None
        return s

    def dtype(self, name: str) -> Optional[int]:
        if name in self.inits:
            return self.inits[name].data_type
        return self.dtypes.get(name)

    def set_shape(self, name: str, shape, dtype: Optional[int] = None) -> None:
        # (a partly known shape keeps its unknown dims as None: shape() reports it as not static)
        self.shapes[name] = tuple(None if d is None else int(d) for d in shape)
        if dtype is not None:
            self.dtypes[name] = dtype

    def only_consumer(self, name: str) -> Optional[onnx.NodeProto]:
        """The single consumer of ``name`` (None when several, none, or a graph output)."""
        cons = self.consumers.get(name)
        if not cons or len(cons) != 1 or name in self.pinned:
            return None
        return next(iter(cons.values()))[0]

    def used(self, name: str) -> bool:
        return bool(self.consumers.get(name)) or name in self.pinned

    # ----- write back
    def commit(self) -> onnx.ModelProto:
        """Write nodes (topologically sorted, dead ones dropped) and live initializers back.
        Existing initializers stay in place (no copy of big weights); unused ones are dropped."""
        self.remove_dead()
        g = self.model.graph
        order = self._toposort()
        used = set(self.pinned)
        for n in order:
            used.update(n.input)
        present = set()
        drop = 0
        for t in g.initializer:
            if t.name in used and t.name not in self._new_inits and t.name not in present:
                present.add(t.name)
            else:
                drop += 1
        if drop and self.consumed and fresh_arena.worth_it(g.initializer, present, BIG_ARRAY):
            self.model = fresh_arena.rebuilt(self.model, present)   # the source's arena goes with its last reference
            g = self.model.graph
            fresh_arena.detached(self.inits, self.model, self._new_inits)
            drop = 0
        del g.node[:]
        g.node.extend(order)
        if drop:
            g.initializer.sort(key=lambda t: t.name in present)  # stable: dropped ones first
            del g.initializer[:drop]
        for name, t in list(self.inits.items()):
            if name in used and name not in present:
                arr = self._pending.pop(name, None)
                if arr is not None:   # made here, one at a time: the array goes once copied in
                    self._arrays.pop(name, None)
                    t = numpy_helper.from_array(arr, name)
                    del arr
                extend_copies(g.initializer, [t])
                del t
                self.inits[name] = g.initializer[-1]   # the standalone copy goes now, not with the Graph
        self._pending.clear()
        for name in [n for n, v in self._arrays.items() if n not in used or v.nbytes >= BIG_ARRAY]:
            del self._arrays[name]   # the values of dropped initializers; big ones are read again if asked
        self._new_inits.clear()
        return self.model

    def remove_dead(self) -> None:
        """Drop nodes none of whose outputs is used (linear: worklist over producers)."""
        work = list(self.nodes.values())
        while work:
            n = work.pop()
            if id(n) not in self.nodes or any(self.used(o) for o in n.output if o):
                continue
            self.remove(n)
            for i in n.input:
                p = self.producer.get(i)
                if p is not None:
                    work.append(p)

    def _toposort(self) -> List[onnx.NodeProto]:
        """Strict topological order, ties by insertion key; computed once per state of the graph
        (a sweep without rewrites, commit and the final shape inference sort the same graph)."""
        key = (self.edits, len(self.nodes), len(self.producer))
        if self._topo is None or self._topo[0] != key:
            self._topo = (key, stable_toposort(self.nodes, self.producer, self.order))
        return self._topo[1]


def origin_of(*nodes: onnx.NodeProto) -> List[str]:
    return provenance.merge_origin(*nodes)


__all__ = ["Graph", "attr", "set_attr", "del_attr", "origin_of"]
