"""Legalization: rewrite what the accelerator cannot take as it stands into canonical ONNX.

``legalize(model, target=None, *, input_shapes=None) -> LegalizeResult`` (the stage contract,
onnx_mrvl/stage.py): ``.model`` the legalized copy, ``.log`` one ``(rule, [original node names],
detail)`` per applied rewrite, ``.report`` a :class:`LegalizeReport` (also the reasons rules did not
apply). See docs/legalize.md for the rules and the canonical forms.
"""
from __future__ import annotations

import logging
import time
import warnings
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import onnx
from onnx import helper

from .. import ort_plan
from ..errors import ModelError
from ..model_checks import ort_domain_imports
from ..stage import StageResult, as_model
from ..target import get_target
from . import fp16, prepare, shapes
from .graph import Graph, attr
from .restore import RestoreRecord
from .rules import RULE_NAMES, RULES
from .rules.base import Contradiction

logger = logging.getLogger(__name__)

MAX_SWEEPS = 10         # sweeps of rewrites other than constant folding
MAX_ALL_SWEEPS = 100    # sweeps in all: a sweep that folded constants is not counted above (below)


@dataclass
class LegalizeReport:
    """``applied``: (rule, original node names, detail) per rewrite, in order.
    ``skipped``: (rule, node name, reason) for rules that matched but did not apply (last sweep).
    ``notes``: original node name -> what a rewrite changed that its decision must say.
    ``restore``: the original nodes of restorable rewrites (restore.py), for split to put back.
    """

    applied: List[Tuple[str, List[str], str]] = field(default_factory=list)
    skipped: List[Tuple[str, str, str]] = field(default_factory=list)
    sweeps: int = 0
    opset: Tuple[int, int] = (0, 0)
    seconds: float = 0.0
    notes: Dict[str, str] = field(default_factory=dict)
    restore: RestoreRecord = field(default_factory=RestoreRecord, repr=False)
    probe_error: Optional[str] = None   # the onnxruntime shape probe's failure (convert: shape_fit.py)
    contradictions: List[Tuple[str, str, str]] = field(default_factory=list)   # (rule, node, reason): any sweep

    def by_rule(self) -> Dict[str, List[str]]:
        out: Dict[str, List[str]] = {}
        for rule, names, _ in self.applied:
            out.setdefault(rule, []).extend(names)
        return out


@dataclass
class LegalizeResult(StageResult):
    """``model``: the legalized copy; ``log``: ``report.applied``; ``decisions``: None (legalize
    decides no placement: fuse does)."""
    report: LegalizeReport = field(default_factory=LegalizeReport)

    def __getattr__(self, name):
        # legalize() returned the ModelProto itself before the stage contract: forward, with a warning
        if name.startswith("__") or name in ("model", "report", "decisions", "log"):
            raise AttributeError(name)
        warnings.warn("legalize() returns a LegalizeResult: use its .model", DeprecationWarning, stacklevel=2)
        return getattr(self.model, name)


def legalize(model: onnx.ModelProto, target=None, *, input_shapes=None, consume: bool = False) -> LegalizeResult:
    """Return a :class:`LegalizeResult` whose ``model`` is a legalized copy of ``model`` (the
    argument is not modified). ``input_shapes`` ({input name: [dims]}) fixes graph input shapes.
    ``consume=True``: the caller gives ``model`` up (it is legalized in place, its weights not
    copied; what is left of it afterwards is unspecified; when most of its weights are replaced, the
    result is built in a new model and the given one freed, provided the caller holds no reference
    to it or its parts: legalize/fresh_arena.py)."""
    if consume:
        given = [model]
        del model   # the list is legalize's one reference: _legalize lets it go
        return _legalize(given, target, input_shapes, True)
    return _legalize(model, target, input_shapes, consume)


def legalize_with_report(model: onnx.ModelProto, target=None, *, input_shapes=None
                         ) -> Tuple[onnx.ModelProto, LegalizeReport]:
    """Deprecated: ``legalize()`` returns the report too (``.model``, ``.report``)."""
    warnings.warn("legalize_with_report() is deprecated: legalize() returns a LegalizeResult "
                  "(.model, .report)", DeprecationWarning, stacklevel=2)
    result = _legalize(model, target, input_shapes)
    return result.model, result.report


def _legalize(model, target, input_shapes, consume: bool = False) -> LegalizeResult:
    """``model``: with ``consume``, a list holding the model (taken out: no other reference stays)."""
    t0 = time.perf_counter()
    tgt = get_target(target)
    if consume:
        m = as_model(model.pop(), "legalize")
    else:
        m = onnx.ModelProto()
        m.CopyFrom(as_model(model, "legalize"))
    del model
    report = LegalizeReport()
    ort_domain_imports(m)    # a body's com.microsoft op without the domain imported (model_checks.py)
    named = prepare.name_nodes(m.graph)
    if named:
        logger.info("legalize: named %d unnamed or duplicate-named nodes", named)
    prepare.drop_initializer_inputs(m.graph)
    # a QDQ model: which node groups onnxruntime runs in float (for fuse's int8 layers), asked before
    # the input shapes are pinned: onnxruntime plans the model as given differently (MiniLM-L6's
    # P x V MatMuls: float with its symbolic dims, QLinearMatMul with pinned ones)
    ort_plan.stamp(m)
    shapes.pin_inputs(m.graph, input_shapes, {i.name for i in m.graph.initializer})
    old = prepare.default_opset(m)
    m = prepare.upgrade_opset(m)
    report.opset = (old, prepare.default_opset(m))
    prepare.fix_ir_version(m)
    m, _ = fp16.float32(m, fresh=consume)
    _clear_shapes(m)
    inputs = list(m.graph.input)
    outputs = list(m.graph.output)
    g = Graph(m)
    del m   # g.model from here on (commit may build a new one: fresh_arena.py)
    g.target = tgt
    g.consumed = consume
    _run_rules(g, tgt, inputs, outputs, report)
    report.notes = dict(g.notes)
    if consume:   # standalone copies: nothing refers into the given model once commit lets it go
        inputs, outputs = _standalone(inputs), _standalone(outputs)
    g.commit()
    report.contradictions += [("shape_inference", node, why) for node, why in _write_shapes(g, inputs, outputs)]
    report.probe_error = g.probe_error
    report.seconds = time.perf_counter() - t0
    logger.info("legalize: %d rewrites in %d sweeps, %.2f s", len(report.applied), report.sweeps,
                report.seconds)
    return LegalizeResult(g.model, None, report.applied, report)


def _clear_shapes(m: onnx.ModelProto) -> None:
    """Drop value_info and the graph outputs' shapes (legalize infers them again)."""
    m.graph.ClearField("value_info")
    for o in m.graph.output:
        if o.type.HasField("tensor_type"):
            o.type.tensor_type.ClearField("shape")


def _standalone(messages):
    out = []
    for v in messages:
        copy = type(v)()
        copy.CopyFrom(v)
        out.append(copy)
    return out


def _run_rules(g: Graph, tgt, inputs, outputs, report: LegalizeReport) -> None:
    """Sweeps of every rule over the graph until one applies nothing. A sweep that folded constants
    does not count against ``MAX_SWEEPS``: folding can make a shape static (a Pad whose pads came
    from ``Shape -> Mod``) that only the next sweep's inference sees, and the Shapes after it fold
    then; the TorchScript export of torchvision's Swin needs one sweep per dynamically padded block
    (17). Folding removes nodes, so those sweeps end; ``MAX_ALL_SWEEPS`` bounds them anyway."""
    counted = 0
    report.restore = RestoreRecord.start(g)
    for sweep in range(MAX_ALL_SWEEPS):
        shapes.infer(g, inputs, outputs)
        if sweep == 0:
            _check_transposes(g)
        applied = folded = 0
        skipped = []
        for rule in RULES:
            for node in g.nodes_of(getattr(rule, "OPS", None)):
                if not g.alive(node):
                    continue
                mt = rule.match(node, g)
                if mt is None:
                    continue
                reason = rule.check(mt, g, tgt)
                if reason:
                    skipped.append((rule.NAME, node.name, reason))
                    said = (rule.NAME, node.name, reason)
                    if isinstance(reason, Contradiction) and said not in report.contradictions:
                        report.contradictions.append(said)
                    continue
                origin = mt.origin
                report.restore.capture(rule, mt, g)
                detail = rule.rewrite(mt, g)
                report.applied.append((rule.NAME, origin, detail or ""))
                logger.debug("legalize: %s on %s: %s", rule.NAME, origin, detail)
                applied += 1
                folded += rule.NAME == "fold_constants"
        report.sweeps = sweep + 1
        report.skipped = skipped
        if not applied:
            return
        counted += not folded
        if counted >= MAX_SWEEPS:
            break
    logger.warning("legalize: still rewriting after %d sweeps; stopping", report.sweeps)


def _check_transposes(g: Graph) -> None:
    """A Transpose whose perm is not a permutation of its input's axes makes an invalid model that
    onnx.checker lets through (paddle2onnx writes one when a Paddle squeeze was a no-op)."""
    for n in g.nodes_of(("Transpose",)):
        perm = attr(n, "perm")
        rank = len(g.shapes[n.input[0]]) if g.shapes.get(n.input[0]) is not None else None
        if perm is not None and rank is not None and sorted(perm) != list(range(rank)):
            raise ModelError(f"Transpose '{n.name}' has perm {list(perm)} but its input "
                             f"'{n.input[0]}' has rank {rank}",
                             hint="the model is invalid (onnxruntime refuses it too): re-export it")


def _write_shapes(g: Graph, inputs, outputs) -> List[Tuple[str, str]]:
    """Final inference; graph.value_info gets every intermediate tensor with a static shape. Returns
    ``shapes.refused_by_inference``'s (node, reason) pairs."""
    shapes.infer(g, inputs, outputs)
    m = g.model
    produced = [o for n in m.graph.node for o in n.output if o]
    # tensors ONNX inference knows nothing about are measured once with onnxruntime; partially
    # known shapes (data-dependent sizes after NonZero, NMS, ...) stay out of value_info
    # sequence / optional / map values are not tensors: they pass through with their own types
    others = g.non_tensors
    missing = [o for o in produced if o not in others and (o not in g.shapes or
                                                            o not in g.dtypes)]
    if missing:
        shapes.ort_fill(m, missing, g)
    outs = {o.name for o in m.graph.output}
    m.graph.ClearField("value_info")
    unknown = []
    for name in produced:
        if name in others:
            continue
        s, dt = g.shapes.get(name), g.dtypes.get(name)
        if not shapes.is_static(s) or not dt:
            unknown.append(name)
            continue
        if name in outs:
            continue
        m.graph.value_info.append(helper.make_tensor_value_info(name, dt, list(s)))
    for o in m.graph.output:
        if not shapes.is_tensor(o):
            continue
        s, dt = g.shapes.get(o.name), g.dtypes.get(o.name)
        if dt:
            o.type.tensor_type.elem_type = dt
        if s is not None:  # data-dependent sizes get a symbolic name
            o.type.tensor_type.ClearField("shape")
            for k, d in enumerate(s):
                dim = o.type.tensor_type.shape.dim.add()
                if d is not None and d >= 0:
                    dim.dim_value = d
                else:
                    dim.dim_param = f"{o.name}_dim{k}"
    if unknown:
        logger.warning("legalize: %d tensors without a static shape (data-dependent or not "
                       "inferable; they stay on the CPU), e.g. %s", len(unknown), unknown[:3])
    return shapes.refused_by_inference(g, unknown) if unknown else []


def notes(report: LegalizeReport) -> Tuple[Dict[str, str], Dict[str, str]]:
    """(original node -> a rewrite's note (``report.notes``), node -> ``"<rule tag> (<rule>): <reason>"``
    for rules with ``REPORT_SKIPS`` that matched it but did not apply): what the decisions of those
    nodes must say (``Decisions.annotate``)."""
    tags = {r.NAME: getattr(r, "REPORT_SKIPS", None) for r in RULES}
    refused = {node: f"{tags[rule]} ({rule}): {why}" for rule, node, why in report.skipped if tags.get(rule)}
    return dict(report.notes), refused


def rule_names() -> Sequence[str]:
    """Rule names in application order."""
    return RULE_NAMES


__all__ = ["legalize", "legalize_with_report", "notes", "LegalizeResult", "LegalizeReport", "rule_names", "RULE_NAMES",
           "RULES"]
