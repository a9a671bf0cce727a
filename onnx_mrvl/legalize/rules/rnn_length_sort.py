"""A recurrent layer run on batch rows sorted by length and put back -> the layer on the rows as
they are (its per-row ``sequence_lens`` makes the order irrelevant).

PyTorch's ``pack_padded_sequence(x, lens, enforce_sorted=False)`` (the default) exports as

    TopK(lens, k=B, largest) -> (sorted, perm);  X' = Gather(x, perm, batch axis)
    LSTM | GRU | RNN(X', ..., sequence_lens = Cast(sorted)) -> Y -> Transpose / Reshape ...
    -> Gather(., ScatterElements(zeros[B], perm, arange(B)), batch axis)      (the inverse permutation)

Each row's output depends only on that row and its length, so the sort and the unsort cancel:

    -> LSTM | GRU | RNN(x, ..., sequence_lens = Cast(lens)) -> Y -> Transpose / Reshape ...

leaving the data-dependent Gathers (CPU) out of the model. Check: TopK of all B rows along the
lengths' only axis; X's batch-axis Gather by that permutation (through Casts); the inverse is
``ScatterElements`` of ``arange(B)`` by the permutation on zeros; Y read only through Transpose /
Reshape / Squeeze / Unsqueeze that keep the batch rows whole, ending in one Gather by the inverse on
that axis, and so are Y_h / Y_c when read (PyTorch's ``h_n.index_select(1, unsorted_indices)``);
constant initial states equal on every row.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, attr, inp, origin_of

NAME = "rnn_length_sort"
OPS = ("LSTM", "GRU", "RNN")
MOVES = ("Transpose", "Reshape", "Squeeze", "Unsqueeze")


def _through_casts(g, t: str) -> str:
    p = g.producer.get(t)
    while p is not None and p.op_type == "Cast":
        t = p.input[0]
        p = g.producer.get(t)
    return t


def _batch_axis_after(g, node, axis: int) -> Optional[int]:
    """Where the batch axis ``axis`` of ``node``'s input lands in its output (rows kept whole), or None."""
    si, so = g.shape(node.input[0]), g.shape(node.output[0])
    if si is None or so is None:
        return None
    if node.op_type == "Transpose":
        perm = list(attr(node, "perm", list(range(len(si)))[::-1]))
        return perm.index(axis)
    before = int(np.prod(si[:axis]))
    for k in range(len(so)):
        if int(np.prod(so[:k])) == before and so[k] == si[axis]:
            return k
    return None


def match(node, g) -> Optional[Match]:
    if node.op_type not in OPS or node.domain not in ("", "ai.onnx") or not inp(node, 4):
        return None
    topk = g.producer.get(_through_casts(g, inp(node, 4)))
    gather = g.producer.get(node.input[0])
    if topk is None or topk.op_type != "TopK" or gather is None or gather.op_type != "Gather":
        return None
    return Match([node, topk, gather])


def check(m: Match, g, target) -> Optional[str]:
    node, topk, gather = m.nodes
    if _through_casts(g, inp(node, 4)) != topk.output[0] or _through_casts(g, gather.input[1]) != topk.output[1]:
        return "the layer's lengths and X's rows are not the same TopK's values and permutation"
    lens, layout = topk.input[0], int(attr(node, "layout", 0))
    b_ax = 0 if layout else 1
    ls, xs = g.shape(lens), g.shape(gather.input[0])
    k = g.const(topk.input[1])
    if ls is None or len(ls) != 1 or xs is None or k is None or int(np.asarray(k).reshape(-1)[0]) != ls[0] \
            or not int(attr(topk, "largest", 1)) or int(attr(gather, "axis", 0)) % 3 != b_ax or xs[b_ax] != ls[0]:
        return "not a TopK of all the lengths permuting X's batch rows"
    batch = ls[0]
    for i in (5, 6):   # constant initial states must not differ per row (they would be permuted)
        v = g.const(inp(node, i)) if inp(node, i) else None
        if inp(node, i) and (v is None or not np.all(v == np.take(v, [0], axis=1 - layout))):
            return "initial states that differ per row"
    backs = []
    for k, out in enumerate(node.output[:3]):   # Y [T, D, B, H] (layout 1: [B, T, D, H]), Y_h / Y_c [D, B, H]
        if not out or not g.used(out):
            continue
        back = _put_back(g, out, (2 if k == 0 else 1) if not layout else 0, topk.output[1], batch)
        if isinstance(back, str):
            return back
        backs.append(back)
    if not backs:
        return "the layer's outputs are not read"
    m.data.update(backs=backs, lens=lens)
    return None


def _put_back(g, t: str, axis: int, perm: str, batch: int):
    """The Gather that puts ``t``'s batch rows (axis ``axis``) back in order after Transpose / Reshape /
    Squeeze / Unsqueeze that keep them whole, or the reason there is none."""
    while True:
        users = g.users(t)
        if len(users) != 1 or t in g.outputs:
            return f"'{t}' is read by {len(users)} nodes before the rows are put back"
        u = users[0]
        if u.op_type == "Gather":
            break
        if u.op_type not in MOVES:
            return f"{u.op_type} '{u.name}' before the rows are put back"
        axis = _batch_axis_after(g, u, axis)
        if axis is None:
            return f"{u.op_type} '{u.name}' does not keep the batch rows whole"
        t = u.output[0]
    inv = g.producer.get(_through_casts(g, u.input[1]))
    if u.input[0] != t or int(attr(u, "axis", 0)) % len(g.shape(t)) != axis:
        return "the rows are not put back by a Gather on the batch axis"
    zeros, upd = (g.const(inv.input[0]), g.const(inv.input[2]) if len(inv.input) > 2 else None) \
        if inv is not None and inv.op_type == "ScatterElements" else (None, None)
    if zeros is None or upd is None or _through_casts(g, inv.input[1]) != perm \
            or int(attr(inv, "axis", 0)) != 0 or not np.array_equal(np.asarray(upd).reshape(-1), np.arange(batch)) \
            or np.asarray(zeros).size != batch:
        return "the put-back index is not the inverse permutation (ScatterElements of arange by the TopK order)"
    return u


def rewrite(m: Match, g) -> str:
    node, topk, gather = m.nodes
    backs, lens = m.data["backs"], m.data["lens"]
    g.set_input(node, 0, gather.input[0])
    seq = g.fresh(f"{node.name}/lens_i32")
    casts, t = [], inp(node, 4)   # the new Cast stands for the exporter's Casts of the sorted lengths
    while g.producer.get(t) is not None and g.producer[t].op_type == "Cast":
        casts.append(g.producer[t])
        t = casts[-1].input[0]
    g.make("Cast", [lens], [seq], near=node, origin=origin_of(*casts) if casts else origin_of(topk),
           name=f"{node.name}/lens_cast", to=6)
    g.set_shape(seq, list(g.shape(lens)), 6)
    g.set_input(node, 4, seq)
    note = f"the length sort and its inverse cancel around {node.op_type} '{node.name}' (rnn_length_sort)"
    for n in [topk, gather] + backs + [g.producer.get(_through_casts(g, b.input[1])) for b in backs]:
        for o in origin_of(n):
            g.notes.setdefault(o, note)
    for back in backs:
        g.bypass(back, back.input[0], back.output[0])
    return f"{node.op_type} on the rows in their order (the length sort and its inverse cancel)"
