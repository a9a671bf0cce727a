"""A read-only index over an ONNX graph: producers, consumers, constants, static shapes.

Built once per pass in linear time; passes query it instead of scanning the graph.
"""
from __future__ import annotations

import sys
from collections import defaultdict
from typing import Dict, List, Optional

import numpy as np
import onnx
from onnx import helper

from . import file_weights
from .errors import ModelError

FLOAT = onnx.TensorProto.FLOAT


def subgraph_reads(nodes) -> set:
    """Names read by nodes inside the subgraphs (If/Loop/Scan bodies) of ``nodes``, recursively:
    outer-scope values those nodes depend on without listing them as inputs."""
    out = set()
    for n in nodes:
        for a in n.attribute:
            for sg in list(a.graphs) + ([a.g] if a.HasField("g") else []):
                out.update(i for sn in sg.node for i in sn.input if i)
                out |= subgraph_reads(sg.node)
    return out


def node_reads(n) -> list:
    """Every value ``n`` reads: its inputs, then the outer values its subgraphs read."""
    extra = subgraph_reads([n]) if any(a.graphs or a.HasField("g") for a in n.attribute) else ()
    return [i for i in n.input if i] + [i for i in extra if i not in n.input]



def extend_copies(repeated, messages) -> None:
    """``repeated.extend(messages)``, each message copied by ``add().CopyFrom``: upb's extend and
    append serialise and parse every message (a weight held twice meanwhile, about 3.5x slower);
    CopyFrom copies it once. The result is the same message."""
    for m in messages:
        repeated.add().CopyFrom(m)

_TENSOR_PLAIN = {"name", "dims", "data_type", "raw_data"}
_HELD_PLAIN = {"name", "dims", "data_type", "data_location", "external_data"}   # file_weights.py


def holds_exactly(tensor: onnx.TensorProto, arr: np.ndarray) -> bool:
    """``tensor`` is what writing ``arr`` as raw little-endian data (name, data_type, dims,
    raw_data) gives, but for its name, provided ``arr`` holds its values (``GraphIndex.const_origin``):
    copying it (``CopyFrom``) then writes the same bytes without reading the values out. A tensor
    ``file_weights`` holds is such a tensor (its payload written back when a model leaves convert)."""
    held = file_weights.is_held(tensor)
    if (sys.byteorder != "little" or not (held or tensor.HasField("raw_data")) or list(tensor.dims) != list(arr.shape)
            or tensor.data_type != helper.np_dtype_to_tensor_dtype(arr.dtype)):
        return False
    for fd in tensor.DESCRIPTOR.fields:
        if fd.name in (_HELD_PLAIN if held else _TENSOR_PLAIN):
            continue
        if fd.is_repeated:
            if len(getattr(tensor, fd.name)):
                return False
        elif tensor.HasField(fd.name):
            return False
    return True


class GraphIndex:
    def __init__(self, model: onnx.ModelProto):
        self.model = model
        g = model.graph
        self.graph = g
        self.nodes: List[onnx.NodeProto] = list(g.node)
        self.initializers: Dict[str, onnx.TensorProto] = {t.name: t for t in g.initializer}
        self.inputs = [i.name for i in g.input if i.name not in self.initializers]
        self.outputs = [o.name for o in g.output]
        self.output_set = set(self.outputs)
        self.producer: Dict[str, onnx.NodeProto] = {}
        self.consumers: Dict[str, List[onnx.NodeProto]] = defaultdict(list)
        for n in self.nodes:
            for o in n.output:
                if o:
                    self.producer[o] = n
            for i in node_reads(n):
                self.consumers[i].append(n)
        self.types: Dict[str, onnx.TypeProto] = {}
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            if vi.type.HasField("tensor_type"):
                self.types[vi.name] = vi.type
        self._const_cache: Dict[str, np.ndarray] = {}
        self._const_names: Dict[int, str] = {}    # id of a cached array -> its initializer
        self.by_name = {n.name: n for n in self.nodes}
        self.excluded: set = set()   # node names no pattern may absorb

    # -- constants
    def is_const(self, name: str) -> bool:
        return name in self.initializers

    def const(self, name: str) -> Optional[np.ndarray]:
        if name not in self.initializers:
            return None
        if name not in self._const_cache:
            self._const_cache[name] = arr = file_weights.array(self.initializers[name])
            self._const_names[id(arr)] = name
        return self._const_cache[name]

    def lend_values(self, arrays: Dict[str, np.ndarray]) -> None:
        """Take ``const``'s arrays from ``arrays`` (initializer name -> a read-only array of exactly
        its values, as ``numpy_helper.to_array`` gives them) instead of decoding those initializers."""
        for name, arr in arrays.items():
            t = self.initializers.get(name)
            if t is not None and list(t.dims) == list(arr.shape):
                self._const_cache[name] = arr
                self._const_names[id(arr)] = name

    def const_origin(self, arr) -> Optional[str]:
        """The initializer whose cached ``const`` array ``arr`` is (that very object), or None."""
        name = self._const_names.get(id(arr))
        return name if name is not None and self._const_cache.get(name) is arr else None

    def forget_values(self) -> None:
        """Drop the arrays ``const`` cached (read again when asked)."""
        self._const_cache.clear()
        self._const_names.clear()

    # -- shapes and types
    def shape(self, name: str) -> Optional[List[int]]:
        """Static shape, or None when unknown or symbolic."""
        if name in self.initializers:
            return list(self.initializers[name].dims)
        t = self.types.get(name)
        if t is None or not t.tensor_type.HasField("shape"):
            return None
        dims = []
        for d in t.tensor_type.shape.dim:
            if not d.HasField("dim_value"):
                return None
            dims.append(int(d.dim_value))
        return dims

    def elem_type(self, name: str) -> Optional[int]:
        if name in self.initializers:
            return self.initializers[name].data_type
        t = self.types.get(name)
        return t.tensor_type.elem_type if t is not None else None

    def is_float(self, name: str) -> bool:
        return self.elem_type(name) == FLOAT

    @property
    def opset(self) -> int:
        """The model's default-domain opset (13 when it declares none)."""
        return next((o.version for o in self.model.opset_import if o.domain in ("", "ai.onnx")), 13)

    def single_consumer(self, name: str) -> Optional[onnx.NodeProto]:
        """The only consumer of ``name`` when it has exactly one and is not a graph output."""
        users = self.consumers.get(name, [])
        if len(users) == 1 and name not in self.output_set and users[0].name not in self.excluded:
            return users[0]
        return None


def slice_bounds(start: int, end: int, dim: int):
    """``(start, end)`` of a positive-step Slice over an axis of ``dim``, clamped into it as ONNX
    does (negatives from the end): the one reading of Slice bounds for legalize and fuse."""
    return tuple(min(max(v + dim if v < 0 else v, 0), dim) for v in (start, end))


def attr(node: onnx.NodeProto, name: str, default=None):
    """The value of attribute ``name`` of ``node`` (``default`` when absent): the package's one
    attribute reader. Strings come back as ``str`` and string lists as lists of ``str`` (onnx gives
    bytes); numbers, lists, tensors and graphs as ``onnx.helper.get_attribute_value`` gives them."""
    for a in node.attribute:
        if a.name == name:
            v = onnx.helper.get_attribute_value(a)
            if isinstance(v, bytes):
                return v.decode()
            if a.type == onnx.AttributeProto.STRINGS:
                return [x.decode() for x in v]
            return v
    return default


def topological_order(nodes: List[onnx.NodeProto], graph_inputs) -> List[onnx.NodeProto]:
    """Kahn's algorithm, stable with respect to the given order. Raises ModelError on a cycle."""
    producer = {}
    for idx, n in enumerate(nodes):
        for o in n.output:
            if o:
                producer[o] = idx
    indeg = [0] * len(nodes)
    users = defaultdict(list)
    for idx, n in enumerate(nodes):
        deps = {producer[i] for i in node_reads(n) if i in producer and producer[i] != idx}
        indeg[idx] = len(deps)
        for d in deps:
            users[d].append(idx)
    import heapq
    ready = [i for i, d in enumerate(indeg) if d == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(nodes[i])
        for u in users[i]:
            indeg[u] -= 1
            if indeg[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(nodes):
        stuck = [nodes[i].name or nodes[i].op_type for i, d in enumerate(indeg) if d > 0][:5]
        raise ModelError(f"the graph has a cycle through nodes {stuck}",
                         hint="an ONNX graph must be acyclic; re-export the model")
    return order


def tensor_value_info(name: str, elem_type: int, shape) -> onnx.ValueInfoProto:
    return onnx.helper.make_tensor_value_info(name, elem_type, shape)
