"""The region boundary's quantization in the Nodes-JSON (docs/json-format.md "boundary quantization"):
the MLIP metadata's ``quantize`` / ``qscale`` on an input node whose tensor the host quantizes, and
``dequantize`` / ``dscale`` on the node producing an int8 region output. Compile derives both from
the int8 layers (compile.tensor_dtypes, the binary's format 1.2 fields); ``annotate`` copies them
into the Nodes-JSON after compiling, ``check`` refuses a Nodes-JSON whose fields disagree."""
from __future__ import annotations

from typing import List

from ..artifact.io_quant import f32
from ..errors import CompileError
from .json_attrs import to_number, unwrap


def _s(v) -> List[str]:
    return [format(f32(v), ".9g")] if isinstance(v, float) else [str(v)]


def annotate(nodes_json: dict, meta: dict) -> None:
    """Copy the compiled program's boundary quantization (``meta``) into the Nodes-JSON."""
    nodes = nodes_json["nodes"]
    inputs = [n for n in nodes if isinstance(n, dict) and n.get("op") == "input"]
    for node, b in zip(inputs, meta["inputs"]):
        q = b.get("quantize")
        if q:
            node["attrs"].update(quantize=["true"], type=[q["type"]], model_type=[q["model_type"]],
                                 qscale=_s(q["qscale"]), scale=_s(q["scale"]), zero_point=_s(q["zero_point"]))
    for head, b in zip(nodes_json["heads"], meta["outputs"]):
        d = b.get("dequantize")
        if d:
            nodes[head[0]]["attrs"].update(dequantize=["true"], model_type=[d["model_type"]], dscale=_s(d["dscale"]),
                                           dequantize_zero_point=_s(d["zero_point"]))


def check(nodes_json: dict, inputs: list, outputs: list) -> None:
    """A Nodes-JSON that states boundary quantization must state what compile derives (absent: fine)."""
    nodes = nodes_json["nodes"]
    ins = [n for n in nodes if isinstance(n, dict) and n.get("op") == "input"]
    for node, b in zip(ins, inputs):
        _agree(node, "quantize", b.get("quantize"), {"model_type": "model_type", "scale": "scale",
                                                     "zero_point": "zero_point", "qscale": "qscale"})
    for head, b in zip(nodes_json.get("heads") or [], outputs):
        node = nodes[int(to_number(head[0]))]
        _agree(node, "dequantize", b.get("dequantize"), {"model_type": "model_type", "dscale": "dscale",
                                                         "dequantize_zero_point": "zero_point"})


def _agree(node: dict, flag: str, derived, keys: dict) -> None:
    attrs = node.get("attrs") or {}
    if flag not in attrs:
        return
    name = node.get("name", "?")
    stated = str(unwrap(attrs[flag])).lower() == "true"
    if stated != bool(derived):
        raise CompileError(f"node '{name}' says {flag}={attrs[flag]!r} but its int8 readers/producer "
                           f"{'need' if derived else 'do not need'} it", hint="see docs/json-format.md")
    if not derived:
        return
    for key, field in keys.items():
        if key not in attrs:
            raise CompileError(f"node '{name}' has {flag} but no '{key}'", hint="see docs/json-format.md")
        got, want = unwrap(attrs[key]), derived[field]
        same = str(got) == want if isinstance(want, str) else f32(float(to_number(got))) == f32(float(want))
        if not same:
            raise CompileError(f"node '{name}': {key} {got!r} disagrees with the int8 layers' {want!r}",
                               hint="see docs/json-format.md")
