"""Which tensor of a converted model is which tensor of the original, and in which layout.

Conventions of the fuse stage (``onnx_mrvl/fuse/materialize.py``): a Mrvl node's output keeps the
logical name of the last original output of its group; a tensor stored in another layout is named
``<t>__nhwc`` / ``<t>__nchw`` / ``<t>__perm`` (``_<k>`` appended when the name is taken). Spatial
Mrvl ops store NHWC, elementwise ops, Concat and Slice2D keep their inputs' storage, ``Reshape`` /
``Flatten`` / ``Squeeze`` reshape the *stored* data (so a flatten of an NHWC tensor lists its
elements in NHWC order). ``Storage`` records how to turn a stored array back into the logical one.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np
import onnx

from ..graph_index import attr

NHWC = (0, 2, 3, 1)
LAYOUT_PERMS = {"NHWC": NHWC}
SPATIAL = {"Conv2D", "MaxPool2D", "AvgPool2D", "GlobalAvgPool2D", "GlobalMaxPool2D", "Resize", "LRN"}
SHARED = {"Sum2D", "Mul2D", "Concat", "Slice2D"}   # keep the storage of their (first) input
RESHAPES = {"Reshape", "Flatten", "Squeeze"}
IDENTITY_OPS = ("Identity", "Dropout")   # value-preserving at inference (legalization removes them)
QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
_SUFFIX = re.compile(r"__(nhwc|nchw|perm)(_\d+)?$")


@dataclass(frozen=True)
class Storage:
    """How a stored array relates to its logical tensor.

    ``perm``: stored axis j holds logical axis ``perm[j]`` (None: stored as logical);
    ``flat_from``: the array is a row-major reshape of a tensor stored with ``flat_perm`` and shape
    ``flat_from`` (a Reshape/Flatten run on stored data); ``known`` False: the stored order is not
    known (nothing maps)."""
    perm: Optional[Tuple[int, ...]] = None
    flat_from: Optional[Tuple[int, ...]] = None
    flat_perm: Optional[Tuple[int, ...]] = None
    known: bool = True

    def to_logical(self, x: np.ndarray, shape: Sequence[int]) -> Optional[np.ndarray]:
        """The logical array of logical ``shape`` (None when the stored data cannot be mapped)."""
        if not self.known:
            return None
        shape = tuple(int(d) for d in shape)
        try:
            if self.flat_from is not None:
                if int(np.prod(self.flat_from)) != x.size:
                    return None
                y = x.reshape(self.flat_from)
                if self.flat_perm is not None:
                    y = y.transpose(_inverse(self.flat_perm))
                y = y.reshape(shape) if y.size == int(np.prod(shape)) else None
            elif self.perm is not None and x.ndim == len(self.perm):
                y = x.transpose(_inverse(self.perm))
            else:
                y = x
        except ValueError:
            return None
        if y is None or tuple(y.shape) != shape:
            return None
        return y

    def describe(self) -> str:
        if not self.known:
            return "order not known"
        if self.flat_from is not None:
            return f"reshaped from stored {list(self.flat_from)}" + (" (NHWC)" if self.flat_perm == NHWC else "")
        if self.perm is None:
            return "logical"
        return "NHWC" if self.perm == NHWC else f"perm {list(self.perm)}"


LOGICAL = Storage()
UNKNOWN = Storage(known=False)


def _inverse(p: Sequence[int]) -> List[int]:
    out = [0] * len(p)
    for i, v in enumerate(p):
        out[v] = i
    return out


def _norm(p: Optional[Sequence[int]]) -> Optional[Tuple[int, ...]]:
    if p is None:
        return None
    p = tuple(int(i) for i in p)
    return None if p == tuple(range(len(p))) else p


def logical_name(tensor: str) -> str:
    """``conv1_out__nhwc_2`` -> ``conv1_out``."""
    return _SUFFIX.sub("", tensor)


def _text(v) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def graph_storage(model: onnx.ModelProto, order: Iterable[onnx.NodeProto],
                  shapes: Dict[str, Tuple[int, ...]],
                  overrides: Optional[Dict[str, Storage]] = None,
                  reference: Optional[Dict[str, onnx.NodeProto]] = None) -> Dict[str, Tuple[str, Storage]]:
    """tensor name -> (logical tensor name, Storage) for every node output of ``model``.

    ``order``: the nodes in topological order; ``shapes``: stored shapes of the tensors (from a run),
    needed to resolve reshapes of NHWC data; ``overrides``: known storage of some tensors (e.g.
    region outputs, from the layout their program declares); ``reference``: the reference model's
    tensor -> producer map, to see through Transposes the fuse stage folded before a reshape."""
    out: Dict[str, Tuple[str, Storage]] = {}
    overrides = overrides or {}

    def perm_of(t: str) -> Optional[Tuple[int, ...]]:
        return out[t][1].perm if t in out else None

    for n in order:
        mrvl = n.domain == "mrvl"
        for k, t in enumerate(n.output):
            if not t:
                continue
            logical = logical_name(t)
            st = LOGICAL
            if mrvl and n.op_type == "LayoutTransform":
                st = Storage(LAYOUT_PERMS.get(_text(attr(n, "dst_layout", ""))))
            elif mrvl and n.op_type in SPATIAL:
                st = Storage(NHWC)
            elif mrvl and n.op_type in SHARED and n.input:
                st = Storage(perm_of(n.input[0]))
            elif mrvl and n.op_type in RESHAPES and n.input:
                src = perm_of(n.input[0])
                base = out[n.input[0]][0] if n.input[0] in out else logical_name(n.input[0])
                if reference is not None:
                    src = reshape_source_perm(reference, logical, base, src)
                if src is not None and n.input[0] in shapes:
                    st = Storage(flat_from=tuple(shapes[n.input[0]]), flat_perm=src)
            elif t in overrides:
                st = overrides[t]
            elif not mrvl and n.op_type == "Transpose" and n.input and _SUFFIX.search(t):
                # a layout change the fuse stage inserted: same logical tensor, other storage (its
                # input may be an alias of another tensor, so trust the suffix where it says)
                kind = _SUFFIX.search(t).group(1)
                if kind != "perm":
                    out[t] = (logical, Storage(NHWC) if kind == "nhwc" else LOGICAL)
                    continue
                src = perm_of(n.input[0])
                q = list(attr(n, "perm", []) or [])
                if src is None:
                    src = tuple(range(len(q)))
                st = Storage(_norm([src[j] for j in q])) if len(q) == len(src) else LOGICAL
            out[t] = (logical, st)
    return out


def reshape_source_perm(producers: Dict[str, onnx.NodeProto], out_logical: str, base: str,
                        base_perm: Optional[Tuple[int, ...]]) -> Optional[Tuple[int, ...]]:
    """Storage permutation, relative to the logical input of the reference's reshape producing
    ``out_logical``, of the stored tensor a Mrvl reshape read (logical ``base`` stored with
    ``base_perm``). The fuse stage folds Transposes into storage, so that input may be a chain of
    Transposes of ``base`` (``folded_perm``). Returns ``base_perm`` when the chain does not lead to ``base``."""
    node = producers.get(out_logical)
    if node is None or not node.input:
        return base_perm
    return folded_perm(producers, node.input[0], base, base_perm)[1]


KEEP_ORDER = {"Requantize", "Lookup"} | SHARED   # program layers that write in their input's order


def layer_storage_in_reference(layer: dict, a_node: onnx.NodeProto, src: str, in_store: Optional[Storage],
                               producers: Dict[str, onnx.NodeProto]) -> Storage:
    """The storage of a captured program ``layer`` (``runner.capture_region``) whose first input is the
    reference's tensor ``src`` stored as ``in_store`` and whose output is ``a_node``'s: a reshape
    reads its input as stored (``reshape_source_perm``); a layer that keeps its input's order holds
    the reference's tensor permuted by the Transposes the fuse stage folded into storage
    (``folded_perm``: a square tensor and its transpose have one shape, so the stored order would
    otherwise pass for the logical one) or, after a reshape, that reshape's stored order."""
    st: Storage = layer["storage"]
    in_perm = in_store.perm if in_store is not None else None
    if layer["layer_name"] in RESHAPES and (layer["in_layout"] in LAYOUT_PERMS or in_perm):
        perm = reshape_source_perm(producers, a_node.output[0], src, in_perm or LAYOUT_PERMS[layer["in_layout"]])
        return Storage(flat_from=layer["in_shape"], flat_perm=perm)
    if layer["layer_name"] in KEEP_ORDER and st.perm is None and st.flat_from is None and a_node.input:
        reached, perm = folded_perm(producers, a_node.input[0], src, in_perm)
        if reached and perm is not None:
            return Storage(perm)
        if reached and in_store is not None and in_store.flat_from is not None:
            return in_store
    return st


def folded_perm(producers: Dict[str, onnx.NodeProto], start: str, base: str,
                base_perm: Optional[Tuple[int, ...]]) -> Tuple[bool, Optional[Tuple[int, ...]]]:
    """(reached, perm): the storage permutation, relative to the reference's tensor ``start``, of the
    stored tensor ``base`` (stored with ``base_perm``) when ``start`` is ``base`` through a chain of
    Transposes the fuse stage folded into storage, identity ops and Q / DQ (value-moving in a QDQ
    model: the program's Requantize of one scale). With S = base.transpose(p) and I =
    base.transpose(q), S = I.transpose(r), r[j] = q^-1[p[j]]. ``(False, base_perm)`` when the chain
    does not lead to ``base``."""
    chain, t = [], start
    for _ in range(64):
        if t == base:
            break
        prod = producers.get(t)
        if prod is None or prod.op_type not in ("Transpose",) + IDENTITY_OPS + QDQ_OPS or not prod.input:
            return False, base_perm
        if prod.op_type == "Transpose":
            chain.append(prod)
        t = prod.input[0]
    else:
        return False, base_perm
    r: Optional[Sequence[int]] = base_perm
    for tr in reversed(chain):
        q = [int(v) for v in (attr(tr, "perm", None) or [])]
        if r is None:
            r = list(range(len(q)))
        if not q:
            q = list(range(len(r)))[::-1]
        if len(q) != len(r):
            return False, base_perm
        inv = _inverse(q)
        r = [inv[r[j]] for j in range(len(r))]
    return True, _norm(r)


def layer_storage(meta: dict) -> Dict[int, Storage]:
    """tensor id -> Storage for every tensor of a compiled program (docs/program.md)."""
    tensors = {int(t["id"]): t for t in meta.get("tensors") or []}
    out: Dict[int, Storage] = {}
    for tid, t in tensors.items():
        out[tid] = Storage(LAYOUT_PERMS.get(str(t.get("layout", ""))))
    for layer in meta.get("layers") or []:
        if layer.get("layer_name") in RESHAPES and layer.get("inputs"):
            src = tensors.get(int(layer["inputs"][0]))
            if src is not None and src.get("layout") in LAYOUT_PERMS:
                for o in layer.get("outputs") or []:
                    out[int(o)] = Storage(flat_from=tuple(int(d) for d in src["shape"]),
                                          flat_perm=LAYOUT_PERMS[src["layout"]])
    return out


def _kinds(x: np.ndarray) -> np.ndarray:
    """Per value: 0 finite, 1 NaN, 2 +inf, 3 -inf."""
    k = np.zeros(x.shape, np.int8)
    k[np.isnan(x)] = 1
    k[x == np.inf] = 2
    k[x == -np.inf] = 3
    return k


_KIND_NAMES = ("finite values", "NaN", "+inf", "-inf")


def nonfinite_reason(r: np.ndarray, g: np.ndarray) -> str:
    """Where ``g`` (ours) and ``r`` (the reference) disagree on NaN / inf, e.g. "3 NaN where the
    reference is finite; 1 +inf where the reference is -inf"; empty when they agree."""
    kr, kg = _kinds(r), _kinds(g)
    parts = []
    for want in range(4):
        for have in range(4):
            n = int(np.count_nonzero((kr == want) & (kg == have))) if want != have else 0
            if n:
                what = _KIND_NAMES[have] if have or n != 1 else "finite value"
                ref = "finite" if want == 0 else _KIND_NAMES[want]
                parts.append(f"{n} {what} where the reference is {ref}")
    return "; ".join(parts)


def error_stats(ref: np.ndarray, got: np.ndarray, atol: float, rtol: float) -> Dict[str, object]:
    """max abs / max rel error, cosine similarity and pass (max_abs <= atol + rtol * max|ref|).

    Non-finite values pass only where both sides agree (same inf, or both NaN); integer and bool
    tensors must be equal. Float tensors also get ``nan`` / ``inf`` (counts in ``got``), ``ref_nan`` /
    ``ref_inf`` (in ``ref``); a failure gets ``reason``, naming non-finite mismatches first (the
    errors above are over the values finite on both sides)."""
    ref_a, got_a = np.asarray(ref), np.asarray(got)
    if ref_a.dtype.kind in "biu" or got_a.dtype.kind in "biu":
        same = ref_a.shape == got_a.shape and bool(np.array_equal(ref_a, got_a))
        diff = 0.0 if same else float(np.max(np.abs(ref_a.astype(np.float64) - got_a.astype(np.float64)))) \
            if ref_a.shape == got_a.shape and ref_a.size else float("inf")
        out = {"max_abs": diff, "max_rel": 0.0 if same else float("inf"), "cosine": 1.0 if same else 0.0,
               "ref_max_abs": float(np.max(np.abs(ref_a))) if ref_a.size else 0.0, "pass": same}
        if not same:
            out["reason"] = (f"shape {list(got_a.shape)}, the reference has {list(ref_a.shape)}"
                             if ref_a.shape != got_a.shape else
                             f"{int(np.count_nonzero(ref_a != got_a))} of {ref_a.size} values differ "
                             f"(integer tensors must be equal)")
        return out
    r, g = ref_a.astype(np.float64).ravel(), got_a.astype(np.float64).ravel()
    fin_r, fin_g = np.isfinite(r), np.isfinite(g)
    nonfinite_ok = bool(np.array_equal(fin_r, fin_g)
                        and np.array_equal(np.nan_to_num(r[~fin_r], nan=0.0), np.nan_to_num(g[~fin_g], nan=0.0))
                        and np.array_equal(np.isnan(r), np.isnan(g)))
    counts = {"nan": int(np.isnan(g).sum()), "inf": int(np.isinf(g).sum()),
              "ref_nan": int(np.isnan(r).sum()), "ref_inf": int(np.isinf(r).sum())}
    reason = "" if nonfinite_ok else nonfinite_reason(r, g)
    both = fin_r & fin_g
    r, g = r[both], g[both]
    d = np.abs(r - g)
    scale = float(np.max(np.abs(r))) if r.size else 0.0
    max_abs = float(d.max()) if d.size else 0.0
    nr, ng = float(np.linalg.norm(r)), float(np.linalg.norm(g))
    if nr == 0.0 and ng == 0.0:
        cos = 1.0
    elif nr == 0.0 or ng == 0.0:
        cos = 0.0
    else:
        cos = float(np.dot(r, g) / (nr * ng))
    limit = atol + rtol * scale
    stats: Dict[str, object] = {"max_abs": max_abs, "max_rel": max_abs / scale if scale > 0 else
                                (0.0 if max_abs == 0 else float("inf")),
                                "cosine": cos, "ref_max_abs": scale,
                                "pass": bool(nonfinite_ok and max_abs <= limit), **counts}
    if not max_abs <= limit:
        reason = "; ".join(p for p in (reason, f"max_abs {max_abs:.4g} > {atol:g} + {rtol:g} * "
                                               f"{scale:.4g} = {limit:.4g}") if p)
    if not nonfinite_ok:
        stats["nonfinite_mismatch"] = int(np.sum(fin_r != fin_g))
    if reason:
        stats["reason"] = reason
    return stats
