"""The initializers and nodes of a hand-written QDQ test graph (the toolkit-placement builders
``quark_qdq``, ``nncf_c2f``, ``nncf_qdq``): named constants and Q -> DQ pairs."""
from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper


class QdqParts:
    def __init__(self):
        self.inits, self.nodes = [], []

    def init(self, name: str, arr) -> str:
        """Adds initializer ``name`` holding ``arr`` (its dtype kept) and returns the name."""
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def pair(self, x: str, name: str, scale, zero) -> str:
        """``x -> QuantizeLinear -> DequantizeLinear`` with scale ``scale`` (float32) and zero point
        ``zero`` (its dtype picks int8 / uint8); nodes ``<name>_Q`` / ``<name>_DQ``; returns ``<name>_dq``."""
        s, z = self.init(f"{name}_s", np.float32(scale)), self.init(f"{name}_z", zero)
        self.nodes.extend([helper.make_node("QuantizeLinear", [x, s, z], [f"{name}_q"], name=f"{name}_Q"),
                           helper.make_node("DequantizeLinear", [f"{name}_q", s, z], [f"{name}_dq"], name=f"{name}_DQ")])
        return f"{name}_dq"
