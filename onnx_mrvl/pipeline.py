"""``convert()``: legalize -> fuse -> split -> emit -> compile, and the ``ConvertResult`` it returns."""
from __future__ import annotations

import logging
import os
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Union

import onnx

from . import bodies, file_weights, shape_fit
from .compile_regions import RegionFailed, RegionNotWorth, Subgraph, emit_and_compile, lend_arrays
from .cuts import find_cuts
from .decisions import Decisions
from .errors import MrvlError, UsageError
from .fuse import fuse
from .gcpause import gc_paused
from .legalize import legalize, notes as legalize_notes
from .model_checks import validate_model
from .modelio import read_model
from .options import as_names, check_input_shapes, check_node_names, check_positive
from .placement_records import dropped_log, newly_cpu, original_names, with_removed
from .provenance import get_origin
from .quantize.dynamic_calibrated import annotate as annotate_dynamic, quantize_or_calibrate
from .report import Report
from .report_graph import account_cpu_nodes, assign_layers, reconcile_quantization, set_layer
from .split import batch_chunks, split
from .stage_snapshots import Source, StageSnapshots, has_bodies, source_reader, structure_only, weight_bytes
from .stamp import stamped
from .target import Target, get_target

log = logging.getLogger(__name__)
MAX_IR_VERSION = 10      # onnxruntime 1.31 loads up to IR 13; function overloads need IR 10
CLOCK = time.perf_counter  # the clock of ConvertResult.timings (benchmarks set time.process_time)
RELEASE_BYTES = 16 << 20   # models with fewer weight bytes keep their copies (not worth a structure copy)


@dataclass
class ConvertResult:
    model: onnx.ModelProto
    subgraphs: List[Subgraph]
    report: Report
    stages: Dict[str, onnx.ModelProto] = field(default_factory=dict)   # a StageSnapshots (stage_snapshots.py)
    timings: Dict[str, float] = field(default_factory=dict)

    def save(self, out_dir: str, *, stages: bool = False, overwrite: bool = False, consts_json: bool = True,
             progress: Optional[Callable[[str], None]] = None) -> str:
        """Write model.onnx, <name>-nodes.json, <name>-consts.json, <name>.bin, report.json and
        manifest.json (every file's size and sha256) as the folder ``out_dir``; returns the model path.

        One conversion per folder: the folder is built beside ``out_dir`` and swapped in whole, so an
        interrupted save leaves the previous folder intact. A non-empty ``out_dir`` is refused
        (``UsageError``) unless ``overwrite=True`` and it holds only an earlier conversion's files.
        ``consts_json=False`` skips the Constants-JSON (the binary holds the weights; the manifest
        records the skip). ``progress(message)``: a line per region (else INFO log records)."""
        from .save import save_result
        return save_result(self, out_dir, stages=stages, overwrite=overwrite, consts_json=consts_json,
                           progress=progress)


@stamped
def convert(model: Union[str, os.PathLike, onnx.ModelProto], *, target: Optional[Target] = None,
            partition: str = "max", exclude: Iterable[str] = (), cut_after: Iterable[str] = (),
            force: bool = False, input_shapes: Optional[Dict[str, List[int]]] = None,
            reference: bool = False, embed: bool = False, num_tiles: Optional[int] = None,
            ocm_size: Optional[int] = None, progress: Optional[Callable[[str], None]] = None,
            fallback: bool = False, strict: Optional[bool] = None, quantize: str = "float16",
            calibration=None, calibration_method: str = "minmax", fp16_layers: Iterable[str] = (),
            snr_budget_db: float = 30.0, quantize_options: Optional[Dict] = None) -> ConvertResult:
    """Convert an ONNX model for the MLIP accelerator.

    ``model`` (path or ModelProto) is never mutated. ``partition``: "max" | "single" | "cost";
    ``exclude``: node names or op types kept on the CPU; ``cut_after``: node names that end a
    region; ``force``: keep regions without conv/fc; ``input_shapes``: fix symbolic input dims;
    ``reference``: also store each region's fp32 reference body (runs in plain onnxruntime);
    ``embed``: put binaries inside the model instead of files beside it.

    Invalid input raises an ``MrvlError``; an internal failure (a bug of ours) raises too, as it is,
    and a region that cannot be compiled raises its ``CompileError``. ``fallback=True`` keeps such a
    region, or on an internal failure the whole model, on the CPU instead: it logs a warning and
    records the reason in ``report.warnings`` and in the decisions of the affected nodes.
    ``strict=`` is the deprecated inverse of ``fallback`` (``strict=False`` means ``fallback=True``).

    ``quantize``: "float16" (default: fp16 layers), "int8" or "mixed" -- the float model is first
    quantized by onnxruntime's quantizer on ``calibration`` (feed dicts, a .npz / .npy or a folder of
    them; ``calibration_method`` "minmax" | "entropy" | "percentile"), ``fp16_layers`` (node names or
    op types) kept fp16, "mixed" keeping fp16 where int8 falls under ``snr_budget_db``; the QDQ model
    is then converted (docs/quantize.md). ``quantize_options``: the recipe's options (``equalize``,
    ``activation_symmetric``, ``moving_average``, ``percentile``, ``elementwise``,
    ``output_layers_fp16``, ``bias_correction``, ``recurrent``, ``weight_bits``; docs/quantize.md).
    ``report.quantization`` records what was done.
    """
    if strict is not None:
        warnings.warn("convert(strict=...) is deprecated: errors raise by default; pass fallback=True to keep "
                      "a failing region or model on the CPU", DeprecationWarning, stacklevel=2)
        fallback = fallback or not strict
    with gc_paused():   # gcpause.py: full collections made convert time superlinear in the graph size
        return _convert_model(model, target=target, partition=partition, exclude=exclude, cut_after=cut_after,
                              force=force, input_shapes=input_shapes, reference=reference, embed=embed,
                              num_tiles=num_tiles, ocm_size=ocm_size, progress=progress, fallback=fallback,
                              quantize=quantize, calibration=calibration, calibration_method=calibration_method,
                              fp16_layers=fp16_layers, snr_budget_db=snr_budget_db,
                              quantize_options=quantize_options)


def _convert_model(model, *, target, partition, exclude, cut_after, force, input_shapes, reference, embed,
                   num_tiles, ocm_size, progress, fallback, quantize, calibration, calibration_method,
                   fp16_layers, snr_budget_db, quantize_options) -> ConvertResult:
    held: set = set()   # the loads whose weights file_weights holds (no reference to the model here)
    try:
        result = _convert_read(model, held, target=target, partition=partition,
                               exclude=exclude, cut_after=cut_after, force=force, input_shapes=input_shapes,
                               reference=reference, embed=embed, num_tiles=num_tiles, ocm_size=ocm_size,
                               progress=progress, fallback=fallback, quantize=quantize, calibration=calibration,
                               calibration_method=calibration_method, fp16_layers=fp16_layers,
                               snr_budget_db=snr_budget_db, quantize_options=quantize_options)
        file_weights.restore(result.model)   # the CPU's initializers as the file has them
        return result
    finally:
        file_weights.release(held)


def _convert_read(model, held: set, *, target, partition, exclude, cut_after, force, input_shapes, reference, embed,
                  num_tiles, ocm_size, progress, fallback, quantize, calibration, calibration_method, fp16_layers,
                  snr_budget_db, quantize_options) -> ConvertResult:
    t0 = CLOCK()
    # the default flow of a model file reads its large weights without protobuf's copies (file_weights.py)
    hold = (quantize == "float16" and calibration is None and not fallback and not reference
            and not isinstance(model, (onnx.ModelProto, bytes, bytearray)))
    original, raw_sizes = read_model(model, hold=hold)
    held.update(file_weights.keys(original))
    validate_model(original, raw_sizes)
    input_shapes = check_input_shapes(original, input_shapes)
    shape_fit.check_symbols(original, input_shapes)
    t_load = CLOCK() - t0
    if progress and (quantize != "float16" or calibration is not None):
        progress(f"quantize ({quantize})" if quantize != "float16" else "calibrate (dynamic int8)")
    t = CLOCK()
    quantized = quantize_or_calibrate(original, quantize=quantize, calibration=calibration,
                                      calibration_method=calibration_method, fp16_layers=fp16_layers,
                                      snr_budget_db=snr_budget_db, input_shapes=input_shapes,
                                      quantize_options=quantize_options)
    t_quantize, original = CLOCK() - t, quantized.model
    # The source model is read again (stage_snapshots.py) rather than its stage snapshots kept; the
    # pipeline's private copy of it is given up after legalize unless fallback=True may still need it.
    reread = (lambda m=quantized.model: m) if quantized.info else source_reader(model)
    source = Source(original, reread, release=not fallback and not quantized.info)   # a private copy: ours
    if source.release:
        original = quantized.model = None
    try:
        result = _convert(source, target=target, partition=partition, exclude=exclude, cut_after=cut_after,
                        force=force, input_shapes=input_shapes, reference=reference, embed=embed,
                        num_tiles=num_tiles, ocm_size=ocm_size, progress=progress, fallback=fallback, held=held)
        result.timings = {"load+validate": t_load, "quantize": t_quantize, **result.timings}
        result.timings["total"] += t_load + t_quantize
        return _with_quantization(result, quantized)
    except MrvlError as exc:
        if not isinstance(exc, UsageError):   # e.g. a CompileError: the pinned input shapes' fault?
            shape_fit.check_fit(_given(source), input_shapes, cause=exc)
        raise
    except Exception as exc:  # noqa: BLE001 - with fallback=True, a bug of ours must not cost the user their model
        shape_fit.check_fit(_given(source), input_shapes, cause=exc)   # the pinned shapes' fault?
        if not fallback:
            raise
        why = (f"conversion failed internally ({type(exc).__name__}: {exc}); the model runs unchanged on the "
               f"CPU (fallback=True)")
        log.warning("%s", why, exc_info=log.isEnabledFor(logging.DEBUG))
        result = _cpu_only(original, why, partition)
        result.timings = {"load+validate": t_load, "quantize": t_quantize, "total": CLOCK() - t0}
        return _with_quantization(result, quantized)


def _with_quantization(result: ConvertResult, quantized) -> ConvertResult:
    """``report.quantization`` and, when quantized, the QDQ model the flow converted as the
    ``quantize`` stage (``save(stages=True)``: stage-quantize.onnx)."""
    result.report.quantization = quantized.info
    if quantized.info.get("mode") == "dynamic-calibrated":
        annotate_dynamic(result.report.decisions, quantized.info)
    elif quantized.info:   # the precision each layer was emitted with, not the policy's choice
        reconcile_quantization(result.report.decisions, quantized.info)
    if quantized.info:
        stages = result.stages if isinstance(result.stages, StageSnapshots) else StageSnapshots(result.stages)
        result.stages = stages.with_first("quantize", quantized.model)
    return result


def _cpu_only(original: onnx.ModelProto, why: str, partition: str) -> ConvertResult:
    decisions = Decisions()
    for name, op_type in original_names(original):
        decisions.record(name, op_type, placement="cpu", reason=why)
    report = Report(decisions, partition=partition, warnings=[why])
    return ConvertResult(original, [], report)


def _given(source: Source) -> Optional[onnx.ModelProto]:
    """The model convert was given, with its weights (shape_fit.py; a structure-only copy, once
    handed over without a way to read it again, judges nothing)."""
    return source.reread() if source.reread is not None else source.model


def _convert(original: Union[onnx.ModelProto, Source], *, target, partition, exclude, cut_after, force, input_shapes,
             reference, embed, num_tiles, ocm_size, progress, fallback=False, held=frozenset(),
             fit=None) -> ConvertResult:
    """``fit``: (read the model as given, its pinned input shapes) that legalize's trouble is checked
    against (shape_fit.py); an If / Loop / Scan body's conversion takes its outer model's."""
    check_positive(num_tiles=num_tiles, ocm_size=ocm_size)
    target = get_target(target)
    if num_tiles or ocm_size:
        target = target.with_arch(**{k: v for k, v in (("num_tiles", num_tiles), ("ocm_size", ocm_size)) if v})
    say = progress or (lambda msg: None)
    timings: Dict[str, float] = {}
    t0 = CLOCK()
    say("legalize")
    source = original if isinstance(original, Source) else Source(original)
    original = source.model
    if source.release and weight_bytes(original) >= RELEASE_BYTES:
        # the private copy is given up: legalized in place (its weights not copied; freed when most
        # are replaced, legalize/fresh_arena.py, so no reference to it stays here); node names and
        # outputs are read below from its structure, taken first
        original = None
        legal_result = legalize(source.hand_over(), target, input_shapes=input_shapes, consume=True)
        original = source.model
    else:
        legal_result = legalize(original, target, input_shapes=input_shapes)
    legal, legal_report = legal_result.model, legal_result.report
    del legal_result
    fit = fit or (lambda: _given(source), input_shapes)
    shape_fit.check_legalized(*fit, legal_report)
    file_weights.prune(held, legal, source.model)   # the held weights legalize replaced are freed
    # legal's weights are given up after fuse when they can be read again (legalize runs again on a retry)
    release_legal = source.reread is not None and not has_bodies(legal) and weight_bytes(legal) >= RELEASE_BYTES
    timings["legalize"] = CLOCK() - t0
    exclude, cut_after = as_names(exclude), as_names(cut_after)
    # Fuse and split until nothing more drops out: Mrvl nodes a strategy leaves outside every region
    # are fused again as CPU nodes (cleaner layouts than reverting them in place).
    cpu: Dict[str, str] = {e: "excluded by the user (exclude=...)" for e in (exclude or ())}
    history: List[dict] = []          # dropped-region entries of earlier passes, with their details
    legal_by_name = {n.name: n for n in legal.graph.node}
    fell_back: List[str] = []         # regions kept on the CPU by fallback=True: report.warnings
    # a batch above max_batch runs in hardware batches (split/batch_chunks.py): fuse takes it
    hw_batch = target.max_batch
    model_batch = batch_chunks.largest_batch(legal)
    fuse_target = target.replace(max_batch=max(hw_batch, model_batch))
    legal_weights_dropped = False
    for attempt in range(16):
        say("fuse" if attempt == 0 else f"fuse (pass {attempt + 1})")
        t = CLOCK()
        if legal_weights_dropped:   # a retry: the same legalized model again (legalize is deterministic)
            legal, legal_weights_dropped = legalize(source.reread(), target, input_shapes=input_shapes).model, False
        if release_legal:   # split and emit read no legalized weight: fuse takes the model (fuse/in_place.py)
            given, legal = legal, structure_only(legal)
            legal_by_name = {n.name: n for n in legal.graph.node}
            fused = fuse(given, fuse_target, exclude=cpu, keep_weights=False, consume=True)
            fused.groups, given, legal_weights_dropped = [], None, True   # (groups hold given's nodes)
        else:
            fused = fuse(legal, fuse_target, exclude=cpu, keep_weights=False)
        file_weights.prune(held, legal, fused.model, source.model)
        if attempt == 0:
            check_node_names(exclude, cut_after, original, legal, fused=fused.model)
        timings["fuse"] = timings.get("fuse", 0.0) + CLOCK() - t
        decisions = with_removed(fused.decisions, original, legal)
        legal_cpu = {k: d.reason for k, d in fused.decisions.items() if d.placement == "cpu" and d.reason}
        say("split")
        t = CLOCK()
        fused_nodes = {n.name: n for n in fused.model.graph.node}   # split takes fused.model unless a snapshot
        result = split(fused.model, target, partition=partition, cut_after=cut_after, force=force,
                       reference=reference, decisions=decisions, consume=source.reread is not None,
                       restore=legal_report.restore)
        decisions = result.decisions
        timings["split"] = timings.get("split", 0.0) + CLOCK() - t
        more = newly_cpu(result.dropped, fused_nodes, fused.decisions, cpu, legal)
        del fused_nodes
        lend_arrays(result.regions, fused.arrays)   # what emit reads instead of decoding the weights again
        fused.arrays = None
        if more:
            names = set(more) | {o for k in more if k in legal_by_name for o in get_origin(legal_by_name[k])}
            history.extend(d for d in result.dropped if set(d.get("origin", ())) & names)
            cpu.update(more)
            continue
        if source.reread is not None:   # emit reads no fused weight; the snapshot is rebuilt on read
            fused = None
        t = CLOCK()
        try:
            subgraphs = emit_and_compile(result, target, embed, say, timings, fallback, reference, model_batch, clock=CLOCK)
        except RegionFailed as failed:
            if not fallback:
                raise failed.error from None
            why = (f"region {failed.region} failed to compile ({failed.error}); its nodes run on the CPU "
                   f"(fallback=True)")
            log.warning("%s", why)
            fell_back.append(why)
            cpu.update({n: f"compile: {failed.error.message} (fallback=True)" for n in failed.origin})
            continue
        except RegionNotWorth as slow:
            history.append({"nodes": [], "origin": slow.origin, "reason": slow.reason, "estimate": slow.estimate})
            cpu.update({n: slow.reason for n in slow.origin})
            continue
        timings["emit+compile"] = CLOCK() - t
        break
    else:
        raise MrvlError("partitioning did not settle", hint="report this model")
    known = {h["reason"] for h in history}
    dropped = [d for d in dropped_log(cpu, exclude, legal) if d["reason"] not in known] + history + result.dropped
    deployable = result.model
    if input_shapes is None:  # declared outputs stay as the user had them (e.g. data-dependent dims)
        want = {o.name: o for o in original.graph.output}
        for o in deployable.graph.output:
            src = want.get(o.name)
            if src is not None and src.type.tensor_type.elem_type == o.type.tensor_type.elem_type:
                o.type.CopyFrom(src.type)
    deployable.ir_version = max(min(deployable.ir_version, 13), MAX_IR_VERSION)
    layers = assign_layers(decisions, subgraphs)
    region_of = {n: r.name for r in result.regions for n in r.nodes}
    row_of = {r["layer"]: r for r in layers}
    layer_of = {n["attrs"].get("onnx_node_name", [None])[0]: row_of.get(n["name"]) for sg in subgraphs
                for n in sg.nodes_json["nodes"] if n.get("op") == "tvm_op"}
    for d in decisions.values():   # e.g. a Transpose folded into the layout of a region's node
        if d.placement == "accelerator" and not d.subgraph and d.mrvl_node in region_of:
            d.subgraph = region_of[d.mrvl_node]
            set_layer(d, layer_of.get(d.mrvl_node))
    regions = [r.summary() for r in result.regions]
    if not reference:   # If/Loop/Scan bodies through the same stages (bodies.py)
        def body_convert(m):
            here = {x for n in m.graph.node for x in (n.name, n.op_type)}
            return _convert(m, target=target, partition=partition, exclude=[e for e in exclude if e in here],
                            cut_after=(), force=force,
                            input_shapes=None, reference=False, embed=embed, num_tiles=None, ocm_size=None,
                            progress=None, fallback=fallback, fit=fit)
        body_subs, body_regions, notes, body_macs, body_records = bodies.convert_bodies(
            deployable, legal, body_convert, embed)
        subgraphs, regions = subgraphs + body_subs, regions + body_regions
        for name, parts in notes.items():
            if name in decisions:
                decisions[name].reason = f"{decisions[name].reason}; bodies: {'; '.join(parts)}"
    else:
        body_macs, body_records = [0, 0], []
        for d in decisions.values():
            if d.reason and d.reason.startswith("control flow ("):
                d.reason += "; bodies on the CPU (not converted with reference=True)"
    decisions.annotate(*legalize_notes(legal_report))
    transforms = account_cpu_nodes(deployable, decisions, set(legal_by_name), {**cpu, **legal_cpu})
    report = Report(decisions, regions, dropped, result.macs_total + body_macs[0],
                    result.macs_offloaded + body_macs[1], partition, warnings=fell_back,
                    cuts=find_cuts(deployable, decisions, cut_after=cut_after or (), partition=partition),
                    options={"exclude": list(exclude or ()), "cut_after": list(cut_after or ())},
                    layers=layers, transforms=transforms, bodies=body_records, restored=result.restored)
    timings["total"] = CLOCK() - t0
    say("done")
    if source.reread is None:
        stages = StageSnapshots({"legalize": legal, "fuse": fused.model})
    else:
        final_cpu, reread = dict(cpu), source.reread   # (not ``source``: it may still hold the model)

        def rebuild() -> Dict[str, onnx.ModelProto]:
            again = legalize(reread(), target, input_shapes=input_shapes).model
            return {"legalize": again, "fuse": fuse(again, fuse_target, exclude=final_cpu).model}
        stages = StageSnapshots(rebuild=rebuild, lazy=("legalize", "fuse"))
    return ConvertResult(deployable, subgraphs, report, stages, timings)
