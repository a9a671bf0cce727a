"""What legalize keeps so split can put a rewrite back when none of its products is offloaded
(TVM BYOC's "inline back what is not offloaded"; split/restore.py applies it).

Per rule application: the rule, the original node names it replaced (its provenance) and whether the
rule is restorable (``RESTORABLE = True`` on the rule module: a pure float re-expression whose
original nodes onnxruntime runs as they stand; default False: a rewrite the CPU run itself needs, an
opset / dtype / QDQ-form fix, stays). For restorable applications it keeps copies of the original
nodes it consumed (as they stood before the first rule: named, opset upgraded), the original
initializers they read and the inferred type of every tensor at their ends. Data flows one way:
legalize writes this record, split reads it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

import onnx

from .. import provenance


@dataclass
class Application:
    rule: str
    origin: List[str]
    restorable: bool


@dataclass
class RestoreRecord:
    applications: List[Application] = field(default_factory=list)
    originals: Dict[str, onnx.NodeProto] = field(default_factory=dict)   # name -> copy of the original node
    position: Dict[str, float] = field(default_factory=dict)             # name -> its place in the original graph
    initializers: Dict[str, onnx.TensorProto] = field(default_factory=dict)   # original initializers they read
    types: Dict[str, Tuple[int, Optional[tuple]]] = field(default_factory=dict)  # tensor -> (dtype, shape)
    original_inits: Set[str] = field(default_factory=set, repr=False)

    @classmethod
    def start(cls, g) -> "RestoreRecord":
        """Before the first rule: which initializers are the model's own."""
        return cls(original_inits=set(g.inits))

    def capture(self, rule, match, g) -> None:
        """Before ``rule.rewrite(match, g)``: the application, and for a restorable rule the original
        nodes among ``match.nodes`` with what they read."""
        restorable = bool(getattr(rule, "RESTORABLE", False))
        self.applications.append(Application(rule.NAME, list(match.origin), restorable))
        if not restorable:
            return
        for n in match.nodes:
            if n.name in self.originals or provenance.has_origin(n):
                continue   # captured already, or a product of an earlier rewrite (captured there)
            copy = onnx.NodeProto()
            copy.CopyFrom(n)
            self.originals[n.name] = copy
            self.position[n.name] = g.order[id(n)][0]
            for t in list(n.input) + list(n.output):
                if not t:
                    continue
                if t in self.original_inits and t in g.inits and t not in self.initializers:
                    init = onnx.TensorProto()
                    init.CopyFrom(g.inits[t])
                    self.initializers[t] = init
                elif t not in self.types and g.dtype(t):
                    shape = g.shape(t)
                    self.types[t] = (g.dtype(t), None if shape is None else tuple(shape))

    def groups(self) -> List[Tuple[List[str], List[Application]]]:
        """Applications joined when their original nodes overlap: (original names, applications)."""
        parent: Dict[int, int] = {}

        def find(i):
            while parent.setdefault(i, i) != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i
        owner: Dict[str, int] = {}
        for i, app in enumerate(self.applications):
            find(i)
            for name in app.origin:
                if name in owner:
                    parent[find(i)] = find(owner[name])
                else:
                    owner[name] = i
        out: Dict[int, Tuple[List[str], List[Application]]] = {}
        for i, app in enumerate(self.applications):
            names, apps = out.setdefault(find(i), ([], []))
            apps.append(app)
            names.extend(n for n in app.origin if n not in names)
        return list(out.values())
