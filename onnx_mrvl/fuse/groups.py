"""What a fusion pattern builds (``Group``: one future Mrvl node) and the shape/type checks every
pattern shares (each returns the reason a tensor rules a match out, or None)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np
import onnx

from ..graph_index import GraphIndex
from ..provenance import merge_origin
from ..target import Target


@dataclass
class Group:
    """One future Mrvl node: the original nodes it absorbs and what it needs."""
    op: str
    composite: str
    nodes: List[onnx.NodeProto]
    inputs: List[str]                  # data inputs (original tensor names)
    output: str                        # original tensor name the group produces
    attrs: dict = field(default_factory=dict)
    weights: Dict[str, np.ndarray] = field(default_factory=dict)   # logical (NCHW-side) layout
    output_suffix: str = ""            # set when the output no longer holds the original tensor
    note: str = ""                     # what the decisions of its nodes must say first (qdq_fallback.py)

    @property
    def anchor(self) -> onnx.NodeProto:
        return self.nodes[0]

    @property
    def origin(self) -> List[str]:
        return merge_origin(*self.nodes)


def float_static(g: GraphIndex, names) -> Optional[str]:
    for t in names:
        if not t:
            continue
        shape = g.shape(t)
        if shape is None:
            return f"tensor '{t}' has no static shape"
        if any(d == 0 for d in shape):
            return f"tensor '{t}' is empty (shape {list(shape)}): no accelerator work"
        if not g.is_float(t):
            return f"tensor '{t}' is not float32 (the accelerator takes float32 models)"
    return None


def batch_limit(g: GraphIndex, t: str, target: Target, spatial: bool = True) -> Optional[str]:
    """The image batch limit (4-D and 5-D tensors); the leading axes of a 2-D / 3-D tensor hold
    rows (an FC's M rows, [B, T, D] tokens or frames), computed one by one like the rows of an N-D
    FC: no limit there; nor on the leading axis of a recurrent layer's Y ``[T, D, B, H]`` (time
    steps, not images: ``time_major``). ``spatial=False`` (element-wise, requantize, norms, batched
    matmuls): no limit either when the model holds one image (``model_images``), whose 4-D tensors
    leading with T are rows (attention's sequence-first [T, 1, 3, E])."""
    shape = g.shape(t)
    if shape and len(shape) > 3 and shape[0] > target.max_batch and (spatial or model_images(g) != 1) \
            and not time_major(g, t, target):
        return f"batch {shape[0]} exceeds the accelerator's limit of {target.max_batch}"
    return None


def model_images(g: GraphIndex) -> Optional[int]:
    """The images one run of the model holds: the largest leading dimension of its inputs of rank
    >= 2 (None when it has none, or one is not static). 1: no tensor of the model holds a second
    image, whatever its leading axis (a sequence-first tensor [T, B, 3, E] inside attention)."""
    lead = [g.shape(t) for t in g.inputs]
    lead = [s for s in lead if s is None or len(s) >= 2]
    if not lead or any(s is None or s[0] is None or s[0] < 1 for s in lead):
        return None
    return max(s[0] for s in lead)


RECURRENT_OPS = ("LSTM", "GRU", "RNN")
TIME_KEEPING = ("QuantizeLinear", "DequantizeLinear", "Identity")   # element-wise: axis 0 stays time


def time_major(g: GraphIndex, t: str, target: Target, depth: int = 6) -> bool:
    """``t``'s leading axis is the time axis of a layout-0 recurrent node's Y (``[T, D, B, H]``), through
    Q / DQ and Transposes that keep axis 0 (PyTorch's ``[T, B, D, H]`` idiom before its Reshape), and
    that node is an accelerator recurrent layer (``recurrent.build`` or ``qdq_recurrent.build`` takes
    it: its region cannot be recompiled for another batch, emit/recurrent.py, so axis 0 is never
    read as one)."""
    for _ in range(depth):
        p = g.producer.get(t)
        if p is None:
            return False
        if p.op_type in RECURRENT_OPS:
            from . import qdq_recurrent, recurrent   # (they import this module)
            layout = next((a.i for a in p.attribute if a.name == "layout"), 0)
            return p.output[0] == t and layout == 0 and any(
                isinstance(build(g, p, target), Group) for build in (recurrent.build, qdq_recurrent.build))
        if p.op_type == "Transpose":
            perm = next((list(a.ints) for a in p.attribute if a.name == "perm"), [])
            if not perm or perm[0] != 0:
                return False
        elif p.op_type not in TIME_KEEPING:
            return False
        t = p.input[0]
    return False


def image_batch_moved(in_shape, out_shape, images: Optional[int] = None) -> Optional[str]:
    """Why a reshape cannot run on the accelerator because it mixes the images of a batch, or None.

    The leading axis of a 4-D/5-D tensor holding more than one image is the batch the compile step
    may change (``--batch``); a reshape merging or splitting it is refused. The leading axis of a
    2-D/3-D tensor holds rows ([T, D], [B*H, T, d]) and a batch of 1 holds no other image, so the
    token reshapes of attention ([1,T,D] <-> [T,D], [1,T,H,d] <-> [T,H*d], [B*H,T,d] <-> [1,H,T,d])
    are a plain copy of the stored data (docs/fusion.md). ``images`` = 1 (``model_images``): the
    model holds one image, so a leading axis > 1 is not a batch (nn.MultiheadAttention's packed
    projection [T, 1, 3, E] -> [1, T, 1, 3, E] under the dynamo exporter)."""
    if in_shape[0] == out_shape[0] or images == 1:
        return None
    for shape in (in_shape, out_shape):
        if len(shape) > 3 and shape[0] > 1:
            return (f"reshape {list(in_shape)} -> {list(out_shape)} moves data across the batch axis "
                    f"of {shape[0]} images")
    return None
