"""Which float-model nodes are quantizable layers, which tensors they quantize, and which nodes
must stay float for a tensor to stay float (the mixed-precision policy's unit)."""
from __future__ import annotations

from typing import Dict, List, Optional, Set

import onnx

FOLDED = ("Relu", "Clip")            # folded into the int8 layer before them (or removed by the quantizer)
MOVES = ("Concat", "Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Split", "Slice")   # move values


def layer_ops() -> Set[str]:
    from ..fuse.qdq import ANCHORS
    from ..fuse.qdq_pool import POOL_ANCHORS
    return set(ANCHORS) | set(POOL_ANCHORS)


class Structure:
    """Producers and consumers of a float model's tensors."""

    def __init__(self, model: onnx.ModelProto):
        self.nodes = {n.name: n for n in model.graph.node}
        self.producer = {o: n for n in model.graph.node for o in n.output}
        self.consumers: Dict[str, List[onnx.NodeProto]] = {}
        for n in model.graph.node:
            for i in n.input:
                self.consumers.setdefault(i, []).append(n)
        self.ops = layer_ops()

    def layers(self) -> List[onnx.NodeProto]:
        return [n for n in self.nodes.values() if n.op_type in self.ops]

    def output_layers(self, outputs: List[str]) -> Set[str]:
        """Names of the layers that write a model output, directly or through ops that are no layer
        and read one tensor (Softmax, Flatten, Relu, ...): with those, the nodes in between."""
        out: Set[str] = set()
        for t in outputs:
            p = self.producer.get(t)
            while p is not None:
                out.add(p.name)
                if p.op_type in self.ops or len([i for i in p.input if i in self.producer]) != 1:
                    break
                p = self.producer.get(next(i for i in p.input if i in self.producer))
        return out

    def keep_float(self, tensor: str) -> Set[str]:
        """Node names to exclude from quantization so that ``tensor`` is not quantized: the layer
        that writes it (through a Relu/Clip or data moves) and every reader up to the next layers."""
        out: Set[str] = set()
        p = self.producer.get(tensor)
        while p is not None and p.op_type not in self.ops and p.op_type in FOLDED + MOVES:
            out.add(p.name)
            p = self.producer.get(p.input[0])
        if p is not None and p.op_type in self.ops:
            out.add(p.name)
        todo, seen = [tensor], set()
        while todo:
            t = todo.pop()
            if t in seen:
                continue
            seen.add(t)
            for c in self.consumers.get(t, []):
                out.add(c.name)
                if c.op_type not in self.ops:
                    todo.extend(c.output)
        return out


def quantized_tensors(qdq: onnx.ModelProto, node_name: str, qparams: Dict[str, tuple]):
    """(the float tensors the node ``node_name`` of the QDQ model reads through a Q -> DQ pair,
    the float tensor after it that a Q reads (its output, or the Relu/Clip after it) or None)."""
    producer = {o: n for n in qdq.graph.node for o in n.output}
    consumers: Dict[str, List[onnx.NodeProto]] = {}
    for n in qdq.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    node = next((n for n in qdq.graph.node if n.name == node_name), None)
    if node is None:
        return [], None
    ins = []
    for i in node.input:
        dq = producer.get(i)
        q = producer.get(dq.input[0]) if dq is not None and dq.op_type == "DequantizeLinear" else None
        if q is not None and q.op_type == "QuantizeLinear" and q.input[0] in qparams:
            ins.append(q.input[0])
    out: Optional[str] = node.output[0]
    for _ in range(3):
        if out in qparams:
            break
        readers = consumers.get(out, [])
        out = readers[0].output[0] if len(readers) == 1 and readers[0].op_type in FOLDED else None
        if out is None:
            break
    return ins, (out if out in qparams else None)
