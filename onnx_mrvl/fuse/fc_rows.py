"""Materialise an FC over N-D data ``x[..., K] x W[K, O]`` (transformer / CRNN / audio heads):
Mrvl ``Reshape [rows, K]`` -> ``FC`` -> ``Reshape [..., O]``.

The reshapes run on the stored data as it is when the features axis is stored last (the rows are
then permuted alike and the output keeps the input's storage); otherwise the input is converted to
the logical layout once. Between two such FCs (the output read only by N-D FCs) the data stays
``[rows, O]``: no reshape back and forth.
"""
from __future__ import annotations

import numpy as np

from .. import opset


def materialize(m, grp) -> None:
    """Emit the nodes of the N-D FC group ``grp`` into the Materializer ``m``."""
    src, out = grp.inputs[0], grp.output
    base = grp.anchor.name
    fc_name = m.fresh(f"mrvl_{base}")
    folded = [a for a in m.alias_of.get(src, []) if a not in m.alias_owner]
    for a in folded:
        m.alias_owner[a] = fc_name
    origin = folded + grp.origin
    if src in m.rows:                                   # written as [rows, K] by the previous FC
        flat, stored = m.rows[src]
        perm = m.loc[src][1]
    else:
        shape = m.logical_shape(src)
        name, perm = m.loc[src]
        if src in m.flat or (perm is not None and perm[-1] != len(shape) - 1):
            name, perm = m.get(src, None, for_mrvl=True, origin=origin), None
        stored = list(shape) if perm is None else [shape[i] for i in perm]
        flat = m.fresh(f"{src}__rows")
        m.add(opset.make_node("Reshape", [name], [flat], name=m.fresh(f"mrvl_{base}_rows"), origin=origin,
                              attrs={"shape": [int(np.prod(stored[:-1])), stored[-1]]},
                              composite="mrvl.reshape"), None)
        m.vinfo[flat] = [int(np.prod(stored[:-1])), stored[-1]]
        m.mrvl_tensors.add(flat)
    o = int(grp.weights["W"].shape[0])
    rows = int(np.prod(stored[:-1]))
    out_stored = stored[:-1] + [o]
    fc_out = m.fresh(f"{out}__rows")
    ins = [flat, m.init(f"{base}_kernel_oi", grp.weights["W"], dtype=grp.weights["W"].dtype),
           m.init(f"{base}_bias", grp.weights["B"], dtype=grp.weights["B"].dtype) if "B" in grp.weights else "",
           m.init(f"{base}_slope", grp.weights["slope"]) if "slope" in grp.weights else ""]
    m.add(opset.make_node("FC", ins, [fc_out], name=fc_name, origin=origin, attrs=m._act_attrs(grp),
                          composite=grp.composite), None)
    m.vinfo[fc_out] = [rows, o]
    m.mrvl_tensors.add(fc_out)
    m.mrvl_producer[fc_out] = fc_name
    m.mrvl_name[base] = fc_name
    if _only_nd_fcs(m, out) and not grp.output_suffix:
        m.rows[out] = (fc_out, out_stored)
        m.loc[out] = (fc_out, perm)
        m.produced.add(fc_out)
        return
    back = m.define(out, perm, mrvl=True, suffix=grp.output_suffix)
    m.mrvl_producer[back] = fc_name
    m.add(opset.make_node("Reshape", [fc_out], [back], name=m.fresh(f"mrvl_{base}_back"), origin=grp.origin,
                          attrs={"shape": out_stored}, composite="mrvl.reshape"), perm)
    if out in m.g.output_set and back != out:
        m.get(out, None, for_mrvl=True, origin=grp.origin)


def _only_nd_fcs(m, t: str) -> bool:
    """True when every reader of ``t`` is an N-D FC group reading it as its input."""
    users = m.g.consumers.get(t, [])
    if not users or t in m.g.output_set:
        return False
    for c in users:
        grp = m.group_of.get(c.name)
        if grp is None or grp.op != "FC" or grp.anchor is not c or grp.inputs[0] != t:
            return False
        if len(m.logical_shape(t)) <= 2:
            return False
    return True
