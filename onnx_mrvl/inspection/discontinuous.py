"""Which tensors are discontinuous functions of the model's inputs.

A tensor is discontinuous when walking the graph backwards from it reaches an op whose output
jumps as its input moves across a threshold -- comparisons, rounding, sign, arg-max, the indices of
TopK, a Where or If on a computed condition, a float -> integer Cast... -- and that op's deciding
input depends on the values of a model input. Shape computations do not count: ``Shape`` and
``Size`` read no values, so the walk stops there. For such tensors an fp16 rounding of a value
near the threshold flips the result (tf2onnx's Atan2 jumps by 2*pi where an fp16 sign flips), so
they are judged by how many elements flip, not by a tolerance meant for smooth outputs
(``baseline_report``).
"""
from __future__ import annotations

from collections import deque
from typing import Dict, List, Optional, Sequence, Set, Tuple

import onnx

ALL = None
# op_type -> (deciding input indices or ALL, discontinuous output indices or ALL)
DISCONTINUOUS_OPS: Dict[str, Tuple[Optional[Sequence[int]], Optional[Sequence[int]]]] = {
    "Sign": (ALL, ALL), "Round": (ALL, ALL), "Floor": (ALL, ALL), "Ceil": (ALL, ALL),
    "Greater": (ALL, ALL), "Less": (ALL, ALL), "Equal": (ALL, ALL), "GreaterOrEqual": (ALL, ALL),
    "LessOrEqual": (ALL, ALL), "IsInf": (ALL, ALL), "IsNaN": (ALL, ALL),
    "ArgMax": (ALL, ALL), "ArgMin": (ALL, ALL), "Hardmax": (ALL, ALL), "TopK": ((0,), (1,)),
    "Where": ((0,), ALL), "If": ((0,), ALL), "Mod": (ALL, ALL), "NonZero": (ALL, ALL),
    "Compress": ((1,), ALL), "Unique": (ALL, ALL), "NonMaxSuppression": ((0, 1), ALL),
    "QuantizeLinear": ((0,), ALL), "DynamicQuantizeLinear": ((0,), ALL),
}
NO_VALUES = {"Shape", "Size"}           # outputs that do not depend on their input's values
FLOATS = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16}


def _is_standard(node: onnx.NodeProto) -> bool:
    return node.domain in ("", "ai.onnx")


class Discontinuities:
    """Backward walks over one model's graph (main graph; If/Loop bodies count as their node)."""

    def __init__(self, model: onnx.ModelProto, dtypes: Optional[Dict[str, object]] = None):
        g = model.graph
        self.producer: Dict[str, Tuple[int, onnx.NodeProto]] = {}
        for n in g.node:
            for k, t in enumerate(n.output):
                if t:
                    self.producer[t] = (k, n)
        inits = {t.name for t in g.initializer}
        self.float_inputs = {vi.name: vi.type.tensor_type.elem_type in FLOATS
                             for vi in g.input if vi.name not in inits}
        self.dtypes = dtypes or {}
        self._clean: Set[str] = set()     # tensors known to have no discontinuous op upstream
        # tensors whose values change with a model input's values (one pass: nodes are sorted)
        self._valued: Set[str] = {t for t, is_float in self.float_inputs.items() if is_float}
        for n in g.node:
            if n.op_type in NO_VALUES and _is_standard(n):
                continue
            if any(i in self._valued for i in n.input if i) or _reads_outer_values(n):
                self._valued.update(t for t in n.output if t)

    def depends_on_values(self, tensor: str) -> bool:
        """True when ``tensor``'s values change with the values of a (float) model input."""
        return tensor in self._valued

    def _is_jump(self, node: onnx.NodeProto, out_index: int) -> bool:
        if not _is_standard(node):
            return False
        if node.op_type == "Cast":        # float -> integer/bool truncates
            to = next((a.i for a in node.attribute if a.name == "to"), None)
            src = self.dtypes.get(node.input[0]) if node.input else None
            return to is not None and to not in FLOATS and (src is None or getattr(src, "kind", "f") == "f") \
                and self.depends_on_values(node.input[0])
        spec = DISCONTINUOUS_OPS.get(node.op_type)
        if spec is None:
            return False
        ins, outs = spec
        if outs is not ALL and out_index not in outs:
            return False
        idx = range(len(node.input)) if ins is ALL else [i for i in ins if i < len(node.input)]
        return any(node.input[i] and self.depends_on_values(node.input[i]) for i in idx)

    def sources(self, tensor: str, limit: int = 8) -> List[str]:
        """Names (or op types) of the discontinuous nodes upstream of ``tensor``, nearest first."""
        if tensor in self._clean:
            return []
        found: List[str] = []
        seen: Set[str] = set()
        todo = deque([tensor])
        while todo and len(found) < limit:
            t = todo.popleft()
            if t in seen or t in self._clean:
                continue
            seen.add(t)
            prod = self.producer.get(t)
            if prod is None:
                continue
            k, node = prod
            if self._is_jump(node, k):
                label = f"{node.op_type} {node.name}" if node.name else node.op_type
                if label not in found:
                    found.append(label)
            if node.op_type in NO_VALUES:
                continue
            todo.extend(i for i in node.input if i)
        if not found:
            self._clean |= seen           # every ancestor was visited and none jumps
        return found


def _reads_outer_values(node: onnx.NodeProto) -> bool:
    """A node with a subgraph (If/Loop/Scan) may read outer tensors by name: assume it does."""
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)
