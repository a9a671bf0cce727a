"""Which output of its original node a region layer holds.

compare maps a layer onto an output of the last node of A (the reference) among the layer's
origin. A node of one output leaves no choice. A node of several outputs whose lowering writes
each result in its own layer, all with the node as origin (an If inlined at convert time, a Split,
an LSTM's Y / Y_h / Y_c), does: taking its first output compared Silero VAD's LSTM cell state
with the hidden state (a false FAIL). The layer holds:

- for a ``Slice2D`` of a Split, the output whose channel range starts where the layer's does;
- the output a region output names (the program's outputs are the converted model's tensors);
- the output its readers name: of the node's outputs that the nodes of A behind each layer
  reading it read (through layout changes, directly or through identity ops; layers of the same
  node only finish it), exactly one is read by every such reader;
- the node's only output that A reads or returns (an unused Dropout mask is no candidate).

Otherwise which output it holds is not known: compare lists the layer as not compared, with the reason.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

import onnx

from . import quantized_map
from .tensors import IDENTITY_OPS


def _slice_output(outs: Sequence[str], layer: Dict[str, Any], shapes: Mapping[str, Sequence[int]]
                  ) -> Optional[str]:
    """For a Slice2D of a multi-output Split, the output whose channel range starts where the layer's does."""
    if layer["layer_name"] != "Slice2D":
        return None
    start = 0
    for o in outs:
        shape = shapes.get(o)
        if shape is None or len(shape) < 2:
            return None
        if start == layer["params"].get("start"):
            return o
        start += int(shape[1])
    return None


class LayerOutputs:
    """Resolves the output of A's node a layer of one region holds (module docstring)."""

    def __init__(self, ma: onnx.ModelProto, by_origin: Mapping[str, List[int]], layers: List[Dict[str, Any]],
                 region_outputs: Mapping[int, str], shapes: Mapping[str, Sequence[int]]):
        self.nodes = list(ma.graph.node)
        self.by_origin, self.region_outputs, self.shapes = by_origin, region_outputs, shapes
        self.live = {t for n in self.nodes for t in n.input} | {o.name for o in ma.graph.output}
        self.producers = {t: n for n in self.nodes for t in n.output if t}
        self.readers: Dict[int, List[Dict[str, Any]]] = {}
        for layer in layers:
            for t in layer["inputs"]:
                self.readers.setdefault(t, []).append(layer)

    def resolve(self, a_node: onnx.NodeProto, layer: Dict[str, Any]) -> Tuple[Optional[str], str]:
        """(A's tensor the layer holds, "") or (None, why it is not known)."""
        every = [o for o in a_node.output if o]
        outs = [o for o in every if o in self.live] or every[:1]
        if len(outs) <= 1:
            return (outs[0] if outs else None), "" if outs else f"{a_node.name!r} has no output"
        sliced = _slice_output(every, layer, self.shapes)
        if sliced is not None:
            return sliced, ""
        named = self.region_outputs.get(layer["output"])
        if named in outs:
            return named, ""
        read = self._read_by_readers(layer, set(outs))
        if read is not None and len(read) == 1:
            return read.pop(), ""
        which = ("no region output or reader names one" if read is None else
                 f"its readers read {sorted(read)}" if read else "its readers disagree")
        return None, (f"{a_node.op_type} {a_node.name!r} has outputs {outs}: which one layer "
                      f"{layer['name']} holds is not known ({which})")

    def _reader_layers(self, layer: Dict[str, Any]) -> List[Dict[str, Any]]:
        todo, out, seen = [layer["output"]], [], set()
        while todo:
            t = todo.pop()
            if t in seen:
                continue
            seen.add(t)
            for r in self.readers.get(t, []):
                if r["layer_name"] == "layout_transform":
                    todo.append(r["output"])
                else:
                    out.append(r)
        return out

    def _source(self, t: str) -> str:
        """``t`` back through identity ops (legalization removes them)."""
        for _ in range(64):
            p = self.producers.get(t)
            if p is None or p.op_type not in IDENTITY_OPS or not p.input:
                break
            t = p.input[0]
        return t

    def _read_by_readers(self, layer: Dict[str, Any], outs: Set[str]) -> Optional[Set[str]]:
        """The outputs every reader that reads any of ``outs`` reads (each such reader reads the
        layer's value, so the value is one of them); None when no reader reads any."""
        mine, read = set(layer["origin"]), None
        for r in self._reader_layers(layer):
            if mine & set(r["origin"]):
                continue                      # a later piece of the same node: no name
            these = {self._source(t) for o in r["origin"] for i in quantized_map.positions(self.by_origin, o)
                     for t in self.nodes[i].input if t} & outs
            if these:
                read = these if read is None else read & these
        return read
