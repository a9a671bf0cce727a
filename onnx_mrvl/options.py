"""Checks of what the user passes to ``convert()`` and the command line: node names in
``exclude``/``cut_after`` that match nothing, tile counts and sizes that are not positive, input
shapes that contradict the model's static dimensions.

A typo must not be accepted silently: an unknown name raises ``UsageError`` listing the close
matches (difflib), so ``--exclude conv_1`` on a model whose node is ``conv1`` says so.
"""
from __future__ import annotations

import difflib
import math
import numbers
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import onnx

from .errors import UsageError


def close_matches(word: str, candidates: Iterable[str], n: int = 3) -> List[str]:
    """Up to ``n`` candidates that look like ``word`` (difflib, case-insensitive first)."""
    candidates = sorted(set(candidates))
    lower = {c.lower(): c for c in candidates}
    hits = difflib.get_close_matches(word.lower(), list(lower), n=n, cutoff=0.6)
    return [lower[h] for h in hits]


def suggest(words: Sequence[str], candidates: Iterable[str]) -> str:
    """``"did you mean 'conv1' for 'conv_1'?"`` for the words that have close matches, else ``""``."""
    candidates = list(candidates)
    parts = []
    for w in words:
        hits = close_matches(w, candidates)
        if hits:
            parts.append(f"{' or '.join(repr(h) for h in hits)} for {w!r}")
    return f"did you mean {'; '.join(parts)}?" if parts else ""


def as_names(value: Optional[Iterable[str]]) -> Tuple[str, ...]:
    """``"conv1"`` and ``["conv1"]`` both mean one name (a bare string is not a list of letters)."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    out = tuple(value)
    bad = [v for v in out if not isinstance(v, str)]
    if bad:
        raise UsageError(f"node names must be strings, got {bad[:3]!r}",
                         hint="give node names or op types as strings, e.g. ['conv1', 'Softmax']")
    return out


def known_names(*models: onnx.ModelProto, bodies: bool = False) -> Tuple[set, set]:
    """(node names, op types) of ``models``; unnamed nodes get the names legalization gives them.
    ``bodies``: also the nodes of If / Loop / Scan bodies (each body is converted on its own)."""
    from .opset import OPS
    names, ops = set(), set(OPS)

    def walk(graph):
        for i, n in enumerate(graph.node):
            names.add(n.name or f"{n.op_type}_{i}")
            ops.add(n.op_type)
            if bodies:
                for a in n.attribute:
                    if a.type == onnx.AttributeProto.GRAPH:
                        walk(a.g)
    for m in models:
        walk(m.graph)
    return names, ops


def check_node_names(exclude: Iterable[str], cut_after: Iterable[str], *models: onnx.ModelProto,
                     fused: Optional[onnx.ModelProto] = None) -> None:
    """Every ``exclude``/``cut_after`` entry names a node or an op type of one of ``models`` (the
    original and the legalized model: names a user sees in Netron or with ``--stage legalize``), or
    a Mrvl op. ``cut_after`` may also name a node of the ``fused`` model (split matches those);
    ``exclude`` may not (fuse never sees them); ``exclude`` may name a node inside an If / Loop /
    Scan body (its conversion takes the names it holds). Raises ``UsageError`` with close matches."""
    names, ops = known_names(*models)
    in_bodies, body_ops = known_names(*models, bodies=True)
    fused_names = known_names(fused)[0] if fused is not None else set()
    allowed = {"exclude": in_bodies | body_ops, "cut_after": names | ops | fused_names}
    unknown = {option: [v for v in values if v not in allowed[option]]
               for option, values in (("exclude", exclude), ("cut_after", cut_after))}
    unknown = {k: v for k, v in unknown.items() if v}
    if unknown:
        hint = suggest([u for v in unknown.values() for u in v], names | ops)
        raise UsageError(
            "; ".join(f"{option} (CLI --{option.replace('_', '-')}): {', '.join(repr(u) for u in values)} "
                      f"match{'es' if len(values) == 1 else ''} no node name or op type of the model"
                      for option, values in unknown.items()),
            hint=(hint + " " if hint else "") + "use node names as the model spells them (see `onnx-mrvl convert "
                 "--explain`, or open the model in Netron); op types are case-sensitive, e.g. Conv")


def check_positive(**values: Optional[int]) -> None:
    """``num_tiles=0`` or ``ocm_size=-1`` is a mistake, not a request for the default (None is)."""
    for key, value in values.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0):
            raise UsageError(f"{key}={value!r} is not a positive integer",
                             hint=f"pass a positive {key} or leave it out (None) for the target's default")


def check_input_shapes(model: onnx.ModelProto, input_shapes) -> Optional[Dict[str, List[int]]]:
    """``input_shapes`` ({graph input name: [dims]}, CLI ``--input-shape NAME:D1,D2,...``) checked
    against ``model``'s graph inputs: a known name, positive integer dims, the input's rank, and a
    static dimension only at its own value (a symbolic / unknown one may take any size). Raises
    ``UsageError`` naming the input, the dimension, the model's value and the given one; returns the
    shapes as lists of ints (None when none are given)."""
    if not input_shapes:
        return None
    if not isinstance(input_shapes, Mapping):
        raise UsageError(f"input_shapes must be a dict {{input name: [dims]}}, got {type(input_shapes).__name__}",
                         hint="e.g. input_shapes={'x': [1, 3, 224, 224]} (CLI: --input-shape x:1,3,224,224)")
    inits = {t.name for t in model.graph.initializer}
    inputs = {vi.name: vi for vi in model.graph.input if vi.name not in inits}
    out: Dict[str, List[int]] = {}
    for name, dims in input_shapes.items():
        given = f"input_shapes[{name!r}] (CLI --input-shape {name}:...)"
        if name not in inputs:
            hint = suggest([str(name)], inputs)
            what = "an initializer (a weight of the model, its shape fixed)" if name in inits else "no input"
            raise UsageError(f"{given} names {what} of the model (inputs: {sorted(inputs)})", node=str(name),
                             hint=(hint + " " if hint else "") + "use the model's input names")
        if isinstance(dims, (str, bytes)) or not isinstance(dims, Iterable):
            raise UsageError(f"{given} is {dims!r}, not a list of dimensions", node=name,
                             hint=f"e.g. input_shapes={{{name!r}: [1, 3, 224, 224]}}")
        dims = list(dims)
        t = inputs[name].type.tensor_type
        declared = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or "?")
                    for d in t.shape.dim] if t.HasField("shape") else None
        bad = [d for d in dims if isinstance(d, bool) or not isinstance(d, numbers.Integral) or d < 1]
        if bad:   # ([] is the shape of a 0-D input: the rank check below)
            raise UsageError(f"{given} is {dims}: every dimension must be a positive integer", node=name,
                             hint="give the input's full shape, e.g. 1,3,224,224")
        shown = ",".join(map(str, dims))
        if declared is not None and len(declared) != len(dims):
            raise UsageError(f"input '{name}': --input-shape {name}:{shown} has rank {len(dims)}, the model's "
                             f"input has rank {len(declared)} {declared}", node=name,
                             hint=f"give {len(declared)} dimensions" if declared else
                             f"a 0-D (scalar) input takes no dimensions: input_shapes={{{name!r}: []}} "
                             f"(CLI --input-shape {name}:), or leave it out")
        for k, (want, got) in enumerate(zip(declared or [], dims)):
            if isinstance(want, int) and want != got:
                raise UsageError(
                    f"input '{name}': dimension {k} is {want} in the model (static), --input-shape "
                    f"{name}:{shown} (input_shapes) gives {got}", node=name,
                    hint=f"a static dimension can only be set to its own value: give {want} for dimension {k} "
                         f"(the model's input is {declared}; only its symbolic dimensions take other sizes)")
        out[name] = [int(d) for d in dims]
    return out


def check_tolerances(**values) -> None:
    """``atol=-1`` / ``rtol=nan`` fail every comparison (a "difference" that is the argument's
    mistake): each must be a finite real number >= 0 (``UsageError`` otherwise)."""
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < 0:
            raise UsageError(f"{key}={value!r} is not a finite number >= 0",
                             hint=f"pass a tolerance such as {key}=1e-3, or leave it out for the default")
