"""Whether the input shapes a user pinned (``input_shapes`` / ``--input-shape``) make the model
invalid, asked of onnxruntime on the model as given.

``convert`` asks only when something already went wrong with the pinned shapes (legalize's
onnxruntime shape probe failed, or a stage raised an exception that is not ours): the happy path
pays nothing, and a contradiction that ONNX shape inference or a rule saw (strict inference has
false positives on valid models) accuses the user only when onnxruntime refuses the model too.
Seeded normal floats / zero integers and all-ones inputs must both fail, so an input that is a
size or an index at a bad value does not count; a session that cannot be built even with the
model's declared shapes (a custom op, a missing weight) judges nothing.
"""
from __future__ import annotations

import re
from typing import Callable, Dict, List, Optional, Tuple

import onnx

from . import file_weights
from .errors import UsageError
from .legalize.shapes import is_tensor, pin_inputs, probe_feeds

_AT_RUN = re.compile(r"running (\S+) node\. Name:'([^']*)' Status Message: (.*)", re.S)   # op, node, why
_AT_LOAD = re.compile(r"Node \(([^)]*)\) Op \(([^)]*)\) (.*)", re.S)                  # node, op, why


def _pinned(model: onnx.ModelProto, input_shapes: Dict[str, List[int]]) -> onnx.ModelProto:
    """A copy of ``model`` with its inputs pinned as legalize pins them (none: as declared)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.ir_version = min(m.ir_version, 10)
    if input_shapes:    # refusal(): every input not given is static already
        pin_inputs(m.graph, input_shapes, {t.name for t in m.graph.initializer})
    return m


def refusal(model: onnx.ModelProto, input_shapes: Dict[str, List[int]]) -> Optional[Tuple[Optional[str], str]]:
    """(node, onnxruntime's message) when onnxruntime refuses ``model`` with its inputs pinned to
    ``input_shapes``; None when it runs it, or cannot judge."""
    import onnxruntime as ort
    inits = {t.name for t in model.graph.initializer}
    inputs = [vi for vi in model.graph.input if vi.name not in inits]
    if not input_shapes or not all(is_tensor(vi) for vi in inputs) or \
            any(vi.name not in input_shapes and any(not d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim)
                for vi in inputs):
        return None    # non-tensor inputs, or a symbolic dim the user left open: no feeds to make
    pinned = _pinned(model, input_shapes)
    try:
        feeds = [probe_feeds(pinned.graph, ones=ones) for ones in (False, True)]
    except (KeyError, ValueError, TypeError):   # an input of no numpy type
        return None
    if any(a.dtype.kind not in "biuf" for a in feeds[0].values()):
        return None    # strings: no feed of ours says anything about the shapes
    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        sess = ort.InferenceSession(file_weights.serialized(pinned), so, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - refused at load: by the pinned shapes, or by anything?
        try:
            ort.InferenceSession(file_weights.serialized(_pinned(model, {})), so, providers=["CPUExecutionProvider"])
        except Exception:  # noqa: BLE001 - onnxruntime cannot load the model at all: nothing is known
            return None
        return _named(str(exc), "load")
    errors = []
    for feed in feeds:
        try:
            sess.run(None, feed)
            return None
        except Exception as exc:  # noqa: BLE001 - onnxruntime's refusal is the answer
            errors.append(str(exc))
    return _named(errors[0], "run")


def _named(message: str, stage: str) -> Tuple[Optional[str], str]:
    """(node, "<stage>: <op>: <onnxruntime's reason>") from onnxruntime's message (unparsed when
    it names no node); ``stage``: "load" (its shape inference refused) or "run"."""
    hit = _AT_RUN.search(message)
    if hit:
        return hit.group(2), f"{stage}: {hit.group(1)}: {hit.group(3).strip()}"
    hit = _AT_LOAD.search(message)
    if hit:
        return hit.group(1), f"{stage}: {hit.group(2)}: {hit.group(3).strip()}"
    return None, f"{stage}: " + message.replace("[ONNXRuntimeError] : ", "").strip()


def check_symbols(model: onnx.ModelProto, input_shapes) -> None:
    """A symbolic dimension the model's inputs share (``batch`` of the audio and of the LSTM state)
    given different sizes: ``check_fit`` (onnxruntime judges: it does not enforce the names itself),
    its hint naming the sizes given."""
    seen: Dict[str, Dict[str, int]] = {}
    for vi in model.graph.input:
        if vi.name in (input_shapes or {}) and vi.type.HasField("tensor_type"):
            for d, size in zip(vi.type.tensor_type.shape.dim, input_shapes[vi.name]):
                if d.dim_param:
                    seen.setdefault(d.dim_param, {})[vi.name] = int(size)
    clash = {p: v for p, v in seen.items() if len(set(v.values())) > 1}
    if clash:
        check_fit(model, input_shapes, note="; ".join(
            f"'{p}' is {' and '.join(f'{n} in {k}' for k, n in v.items())}" for p, v in clash.items()))


def check_legalized(given: Callable[[], Optional[onnx.ModelProto]], input_shapes, report) -> None:
    """``check_fit`` of the model as ``given()`` reads it when legalize's ``report`` (a LegalizeReport)
    saw trouble with the pinned shapes: its onnxruntime shape probe failed, or a rule's check found a
    contradiction (rules/base.py ``Contradiction``)."""
    if input_shapes and (report.probe_error or report.contradictions):
        check_fit(given(), input_shapes)


def check_fit(model: Optional[onnx.ModelProto], input_shapes: Optional[Dict[str, List[int]]],
              cause: Optional[BaseException] = None, note: str = "") -> None:
    """``UsageError`` naming the node and onnxruntime's reason when ``model`` (the model as given,
    with its weights) cannot run with ``input_shapes``; nothing otherwise (``cause``: what went
    wrong first, chained)."""
    if model is None or not input_shapes:
        return
    found = refusal(model, input_shapes)
    if found is None:
        return
    node, why = found
    inits = {t.name for t in model.graph.initializer}
    declared = {vi.name: [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                          for d in vi.type.tensor_type.shape.dim]
                for vi in model.graph.input if vi.name in input_shapes and vi.name not in inits}
    given = ", ".join(f"{k}:{','.join(map(str, v))}" for k, v in input_shapes.items())
    stage, why = why.split(": ", 1)
    at_load = (" (onnxruntime infers every branch of an If when it loads the model, the one a run would not "
               "take too: a model switching on an input, such as a sample rate, may take no fixed size)"
               if stage == "load" and "Graph attribute inferencing failed" in why else "")
    raise UsageError(
        f"the input shapes given ({given}) do not fit the model: onnxruntime cannot {stage} it with them "
        f"({why[:400]})", node=node,
        hint=(f"{note}: give a symbolic dimension one size in every input; " if note else "")
        + f"give the sizes the model is made for (its inputs are declared {declared}); a size too small "
          f"for a window, pad or stride of the node named is the usual cause{at_load}") from cause
