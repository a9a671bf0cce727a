"""A homogeneous chain into a Log whose values exceed fp16 -> the same chain on values scaled by a
power of two, the scale undone after the Log by an added constant.

Audio front ends (openWakeWord's melspectrogram, torchaudio / librosa-style log-mel exports) compute
``Log(max(mel(|STFT(x)|^2), eps))`` on int16-scale audio (|x| up to 32767): the STFT conv already
exceeds fp16's 65504, the power spectrum by far, and the region fails with the fp16 overflow error.
The chain from the linear front (Conv / MatMul / Gemm with constant weights: the *sources*) to the
Log is homogeneous: scaling the sources' weights (and biases) by ``s = 2^-k`` scales every tensor of
degree ``d`` (1 after a source, 2 after a square ``x * x`` / ``Pow(x, 2)``, the sum of both factors'
degrees after a Mul, half after a Sqrt of an even degree; Abs / Relu / Neg / Div by a constant keep
it) by ``s^d``; ``Add`` / ``Sub`` need equal degrees (a constant term is scaled by ``s^d``),
a lower clamp ``Max(x, eps)`` / ``Clip(x, eps[, hi])`` scales its bounds, and
``Log(s^d * y) = Log(y) - d k ln 2`` is undone by adding ``d k ln 2`` after the Log. In exact math
and in fp32 math the rewrite is exact (a power-of-two scale is exact in floating point, bar
underflow).

``k`` comes from a static bound, never from a guess: the sources' input magnitude ``X`` is *declared*
-- by an integer dtype the input is cast from (``Cast(int16 -> float)``: 32768), or by the model's
metadata ``mrvl.input_range.<graph input>`` (max |x| of that input, e.g. "32768" for int16-scale
audio; ``onnx.helper.set_model_props``) -- and propagated through the chain (a source: the largest
row sum of |w| times X plus |bias|; a square: the bound squared; MatMul: the largest column sum of
|W| times the bound; Add: the sum). ``k`` is the smallest that puts every bound times ``s^d`` under
98% of fp16's largest value (the bounds hold in exact math; 2% for the fp16 rounding of weights and
inputs; a value above still fails closed); none needed: no rewrite. The input takes the scale down to
max |x| <= 1 (a Mul by ``2^-a``), the sources' weights the rest (weights at 2^-16 would be fp16
subnormals); the last linear op before the Log lifts its output back up as far as its bound allows
(``2^lift``: the log's input keeps its small values above the subnormals); a floor clamp read only by
the Log moves after it (``max(Log(v), log eps)``: a scaled eps is 0 in fp16). The Log's shift is
``(d k - lift) ln 2``. fp16 holds ~2^40 of a power's range: values more than that below the declared
full scale reach the log as 0 and come out at the floor (docs/legalize.md).

Without a declared range, a tensor of the chain read outside it (or a graph output), a chain that is
not homogeneous (e.g. ``x^2 + x``, a Sigmoid on the way), or an additive term / bound the scale would
flush below fp16's normals (``log(v + 1e-10)``), nothing changes: such a model still fails closed with
the fp16 overflow error when its values overflow."""
from __future__ import annotations

import math
from typing import Dict, Optional, Tuple

import numpy as np

from .base import Match, inp, is_float, origin_of

NAME = "log_range_scale"
RESTORABLE = True   # a float re-expression: put back when none of it is offloaded (split/restore.py)
OPS = ("Log",)
FP16_MAX = 65504.0
FP16_MIN_NORMAL = 2.0 ** -14
HEADROOM = 0.98   # the bounds are exact-math bounds: 2% for the fp16 rounding of weights and inputs
LAYOUT = ("Unsqueeze", "Squeeze", "Reshape", "Transpose", "Identity", "Flatten")
LINEAR = ("Conv", "MatMul", "Gemm")
INT_RANGE = {2: 255.0, 3: 128.0, 4: 65535.0, 5: 32768.0, 6: 2.0 ** 31, 12: 2.0 ** 32}  # TensorProto ids
META = "mrvl.input_range."


class _Refuse(Exception):
    pass


def match(node, g) -> Optional[Match]:
    if node.op_type != "Log" or node.domain not in ("", "ai.onnx") or not is_float(g, node.input[0]):
        return None
    try:
        walk = _Walk(g)
        deg, bound = walk.visit(node.input[0])
    except _Refuse:
        return None
    if deg < 1 or not walk.closed(node):
        return None
    limit = FP16_MAX * HEADROOM
    k = 0
    for name, (d, b) in walk.info.items():
        if b > limit and d > 0:
            k = max(k, math.ceil(math.log2(b / limit) / d))
    if k == 0:
        return None
    # the last linear op before the Log (the mel MatMul) lifts what it feeds the Log back up by 2^lift
    # where the range allows: the log's input then keeps its small values above fp16's subnormals
    tail, last = walk.tail(node)
    lift = 0
    if last is not None:
        top = max(walk.info[t][1] for t in tail) * 2.0 ** (-k * deg)
        lift = max(0, math.floor(math.log2(limit / top))) if top > 0 else 0
    c = floor_clamp(g, node)
    eps = float(g.const(inp(c, 1)).reshape(-1)[0]) if c is not None else None
    tail_ids = {id(walk.g.producer[t]) for t in tail}
    for n, d, idx in walk.scale:    # an additive term or a bound the scale would flush below fp16's
        if n is c or n.op_type in LINEAR:   # normals (``log(v + 1e-10)``: log(0) for silence): refuse
            continue
        v = float(np.abs(g.const(n.input[idx])).max())
        e = -k * d + (lift if id(n) in tail_ids else 0)
        if 0 < v < np.inf and v * 2.0 ** e < FP16_MIN_NORMAL:
            return None
    return Match([node], {"walk": walk, "k": k, "deg": deg, "lift": lift, "last": last, "eps": eps,
                          "tail": tail_ids})


def check(m: Match, g, target) -> Optional[str]:
    return None


def rewrite(m: Match, g) -> str:
    walk, k, node, lift, tail = m.data["walk"], m.data["k"], m.node, m.data["lift"], m.data["tail"]
    clamp = floor_clamp(g, node)
    todo = [(n, -k * d + (lift if id(n) in tail else 0), idx) for n, d, idx in walk.scale if n is not clamp]
    if lift:
        todo.append((m.data["last"], lift, 1))
    inputs = {}
    for n, x in walk.sources:               # the input takes the scale down to max |x| <= 1, the weights
        a = min(k, max(0, math.ceil(math.log2(x))))   # the rest: both stay clear of fp16's subnormals
        if a:
            key = (n.input[0], a)
            if key not in inputs:
                inputs[key] = g.fresh(f"{n.input[0]}/scaled")
                g.make("Mul", [n.input[0], g.scalar_like(f"{n.name}/input_scale", 2.0 ** -a, n.input[0])],
                       [inputs[key]], near=n, origin=m.origin, name=g.fresh_node_name(f"{n.name}/input_scale"))
            g.set_input(n, 0, inputs[key])
        if k - a:
            todo.append((n, a - k, 1))
    for n, e, idx in todo:                  # constants scaled by 2^e: weights, biases, terms, bounds
        arr = g.const(n.input[idx])
        new = (arr.astype(np.float64) * 2.0 ** e).astype(arr.dtype)
        g.set_input(n, idx, g.add_const(f"{n.name}/scaled", new))
    y = node.output[0]
    mid = g.fresh(f"{y}/scaled_log")
    g.rename_output(node, 0, mid)
    e = k * m.data["deg"] - lift
    shift = g.scalar_like(f"{node.name}/unscale", e * math.log(2.0), mid)
    if clamp is None:
        g.make("Add", [mid, shift], [y], near=node, origin=m.origin, name=f"{node.name}/unscale")
    else:   # log(max(v, eps)) = max(log v, log eps): the floor in the log domain, where fp16's
        # range cannot flush it (a scaled eps, like 1e-10 itself, is 0 in fp16: log(0) = -inf)
        g.set_input(node, 0, clamp.input[0])
        g.remove(clamp)
        unscaled = g.fresh(f"{y}/unscaled")
        g.make("Add", [mid, shift], [unscaled], near=node, origin=m.origin, name=f"{node.name}/unscale")
        floor = g.scalar_like(f"{clamp.name}/log_floor", math.log(m.data["eps"]), mid)
        g.make("Max", [unscaled, floor], [y], near=node, origin=origin_of(clamp, node), name=f"{clamp.name}/log_floor")
    return (f"chain into Log computed at 2^-{k} (the sources' input and weights; 2^{lift} at the last linear op) -> Log + {e} ln 2 "
            f"(declared input range {walk.x:g}: fits fp16)")


def floor_clamp(g, log):
    """The lower clamp ``Max(v, eps)`` / ``Clip(v, eps[, +inf])`` (eps > 0) read only by the Log."""
    c = g.producer.get(log.input[0])
    if c is None or c.op_type not in ("Max", "Clip") or len(g.users(c.output[0])) != 1 or c.output[0] in g.pinned:
        return None
    lo = g.const(inp(c, 1))
    hi = g.const(inp(c, 2)) if c.op_type == "Clip" and inp(c, 2) else None
    if lo is None or lo.size != 1 or not float(lo.reshape(-1)[0]) > 0:
        return None
    if hi is not None and not (hi.size == 1 and float(hi.reshape(-1)[0]) == np.inf):
        return None
    if c.op_type == "Clip" and inp(c, 2) and hi is None:
        return None
    return c


class _Walk:
    """The chain feeding a Log: per tensor its degree and bound; the constants to scale."""

    def __init__(self, g):
        self.g = g
        self.info: Dict[str, Tuple[int, float]] = {}
        self.scale = []                     # (node, degree, input index)
        self.sources = []                   # (linear op at the front, declared max |input|)
        self.inside: Dict[int, object] = {}  # nodes of the chain
        self.x = 0.0

    def visit(self, name: str) -> Tuple[int, float]:
        if name in self.info:
            return self.info[name]
        g = self.g
        n = g.producer.get(name)
        if n is None or n.domain not in ("", "ai.onnx") or name in g.pinned:
            raise _Refuse(name)
        self.inside[id(n)] = n
        res = self._op(n)
        self.info[name] = res
        return res

    def tail(self, log):
        """The tensors from the Log back through clamps / layout ops to the last linear op that is
        not a source (None when there is none), and that op."""
        names, name = [], log.input[0]
        sources = {id(n) for n, _ in self.sources}
        while True:
            n = self.g.producer[name]
            names.append(name)
            if n.op_type in LAYOUT + ("Max", "Clip"):
                name = n.input[0]
                continue
            return names, (n if n.op_type in LINEAR and id(n) not in sources else None)

    def closed(self, log) -> bool:
        """Every reader of the chain's tensors is in the chain or is the Log: nothing else sees the
        scaled values."""
        for n in self.inside.values():
            for o in n.output:
                if o in self.g.pinned or any(u is not log and id(u) not in self.inside for u in self.g.users(o)):
                    return False
        return True

    def _op(self, n) -> Tuple[int, float]:
        g, op = self.g, n.op_type
        if op in LAYOUT:
            return self.visit(n.input[0])
        if op in LINEAR:
            return self._linear(n)
        if op == "Pow":
            e = g.const(inp(n, 1))
            if e is None or e.size != 1 or float(e.reshape(-1)[0]) != 2.0:
                raise _Refuse(op)
            d, b = self.visit(n.input[0])
            return 2 * d, b * b
        if op == "Mul":
            return self._mul(n)
        if op in ("Add", "Sub"):
            return self._add(n)
        if op in ("Max", "Clip"):
            return self._clamp(n)
        if op in ("Abs", "Relu", "Neg"):     # positively homogeneous, bound kept
            return self.visit(n.input[0])
        if op == "Sqrt":                     # a magnitude |X| = sqrt(re^2 + im^2): an even degree halves
            d, b = self.visit(n.input[0])
            if d % 2:
                raise _Refuse("Sqrt of an odd degree")
            return d // 2, math.sqrt(b)
        if op == "Div":                      # by a constant (not of the chain)
            c = g.const(inp(n, 1))
            if c is None or not c.size or float(np.abs(c).min()) == 0 or g.is_const(n.input[0]):
                raise _Refuse(op)
            d, b = self.visit(n.input[0])
            return d, b / float(np.abs(c).min())
        raise _Refuse(op)                    # not homogeneous (or unknown): leave

    def _linear(self, n) -> Tuple[int, float]:
        g = self.g
        w = g.const(inp(n, 1))
        if w is None or g.is_const(n.input[0]):
            raise _Refuse(n.op_type)
        if n.op_type == "Gemm" and any(a.name in ("transA",) and a.i for a in n.attribute):
            raise _Refuse("transA")
        bias = inp(n, 2)
        b = g.const(bias) if bias else None
        if bias and b is None:
            raise _Refuse("bias")
        a = np.abs(w.astype(np.float64))
        if n.op_type == "Conv":
            gain = float(a.reshape(a.shape[0], -1).sum(axis=1).max())
        elif n.op_type == "Gemm" and any(x.name == "transB" and x.i for x in n.attribute):
            gain = float(a.sum(axis=1).max())
        elif a.ndim == 2:
            gain = float(a.sum(axis=0).max())
        else:
            raise _Refuse("batched weights")
        if n.op_type == "Gemm":
            alpha = [x.f for x in n.attribute if x.name == "alpha"]
            gain *= abs(alpha[0]) if alpha else 1.0
        bmax = float(np.abs(b).max()) if b is not None and b.size else 0.0
        saved = (dict(self.info), dict(self.inside), list(self.scale))
        try:                                # a linear op after the chain's front: passes the degree on
            d, xb = self.visit(n.input[0])
            if d < 1:
                raise _Refuse("degree 0")
        except _Refuse:                     # the front: its weights take the scale
            self.info, self.inside, self.scale = saved
            d, xb = 1, self._declared(n.input[0])
            self.sources.append((n, xb))
        if bias:
            self.scale.append((n, d, 2))
        return d, gain * xb + bmax

    def _mul(self, n) -> Tuple[int, float]:
        g = self.g
        a, b = n.input[0], n.input[1]
        ca, cb = g.const(a), g.const(b)
        if ca is not None and cb is not None:
            raise _Refuse("constant Mul")
        if ca is not None or cb is not None:
            c = ca if ca is not None else cb
            d, bd = self.visit(b if ca is not None else a)
            return d, bd * float(np.abs(c).max())
        da, ba = self.visit(a)
        db, bb = self.visit(b)
        return da + db, ba * bb

    def _add(self, n) -> Tuple[int, float]:
        g = self.g
        terms = []
        for i, t in enumerate(n.input[:2]):
            c = g.const(t)
            terms.append((i, c))
        if all(c is not None for _, c in terms):
            raise _Refuse("constant Add")
        out = [self.visit(t) for (i, c), t in zip(terms, n.input) if c is None]
        if len({d for d, _ in out}) != 1:
            raise _Refuse("terms of different degree")
        d = out[0][0]
        bound = sum(b for _, b in out)
        for i, c in terms:
            if c is not None:
                self.scale.append((n, d, i))
                bound += float(np.abs(c).max())
        return d, bound

    def _clamp(self, n) -> Tuple[int, float]:
        g = self.g
        lo = g.const(inp(n, 1))
        if lo is None or lo.size != 1 or (n.op_type == "Max" and len(n.input) != 2):
            raise _Refuse("clamp")
        if n.op_type == "Clip" and inp(n, 2):
            hi = g.const(inp(n, 2))
            if hi is None or hi.size != 1:
                raise _Refuse("clamp")
        d, b = self.visit(n.input[0])
        self.scale.append((n, d, 1))
        if n.op_type == "Clip" and inp(n, 2):
            self.scale.append((n, d, 2))
        return d, max(b, float(np.abs(lo).max()))

    def _declared(self, name: str) -> float:
        """max |x| of a source's input: an integer dtype it is cast from, or the model's metadata
        ``mrvl.input_range.<graph input>``; through layout ops only."""
        g = self.g
        while True:
            n = g.producer.get(name)
            if n is None:
                break
            if n.op_type == "Cast" and g.dtype(n.input[0]) in INT_RANGE:
                x = INT_RANGE[g.dtype(n.input[0])]
                self.x = max(self.x, x)
                return x
            if n.op_type not in LAYOUT:
                raise _Refuse("undeclared range")
            name = n.input[0]
        for p in g.model.metadata_props:
            if p.key == META + name:
                try:
                    x = abs(float(p.value))
                except ValueError:
                    raise _Refuse("bad range")
                if not math.isfinite(x) or x == 0:
                    raise _Refuse("bad range")
                self.x = max(self.x, x)
                return x
        raise _Refuse("undeclared range")
