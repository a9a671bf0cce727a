"""Emit and compile the regions of a split model (``convert``'s last stage): one Subgraph each,
or the reason a region stays on the CPU (``RegionNotWorth``: a decision; ``RegionFailed``: a
compile failure, raised or kept on the CPU with ``fallback=True``)."""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from . import emit as emit_stage
from .errors import CompileError, MrvlError
from .split import batch_chunks
from .split.deploy import attach_artifact, is_subgraph
from .stage_snapshots import structure_only
from .target import Target


@dataclass
class Subgraph:
    """One accelerator region: its JSON pair (the contract) and its compiled binary."""
    name: str
    nodes_json: dict
    consts_json: dict
    binary: bytes
    inputs: List[str] = field(default_factory=list)
    outputs: List[str] = field(default_factory=list)
    origin: List[str] = field(default_factory=list)
    macs: int = 0
    binary_digest: Optional[Tuple[bytes, str]] = field(default=None, repr=False, compare=False)

    @property
    def artifact(self) -> str:
        return f"{self.name}.bin"

    def binary_sha256(self) -> Optional[str]:
        """The sha256 hex digest pack computed for ``binary``; None once ``binary`` was replaced."""
        known = self.binary_digest
        return known[1] if known is not None and known[0] is self.binary else None



class RegionNotWorth(Exception):
    """A region kept on the CPU by a decision, not a failure: partition="cost" found it slower by
    the simulator's own cycle model, or its batch cannot run in hardware batches."""

    def __init__(self, region, reason: str):
        super().__init__(reason)
        self.region, self.reason, self.origin, self.estimate = region.name, reason, list(region.origin), region.estimate


class RegionFailed(Exception):
    """A region that failed to compile (or hit a bug of ours): raised, or kept on the CPU with fallback=True."""

    def __init__(self, region, error: MrvlError):
        super().__init__(str(error))
        self.region, self.error = region.name, error
        self.nodes, self.origin = list(region.nodes), list(region.origin)


def lend_arrays(regions, arrays) -> None:
    """Give each region the arrays of its initializers that ``arrays`` (``FuseResult.arrays``: the
    values written into the fused model) holds: emit reads them instead of decoding the bytes again.
    A region whose every initializer is lent keeps a copy of its model without their bytes
    (``weightless``): its model, often the fused model itself (split's consume), is freed."""
    if not arrays:
        return
    for region in regions:
        if region.model is None:
            continue
        inits = region.model.graph.initializer
        region.arrays = {t.name: arrays[t.name] for t in inits if t.name in arrays}
        if len(region.arrays) == len(inits):
            region.model = weightless(region.model)


def weightless(model):
    """A copy of ``model`` whose initializers carry their name, type and dims only (what emit reads
    beside the values it is lent)."""
    out = structure_only(model)
    for t in model.graph.initializer:
        stub = out.graph.initializer.add()
        stub.name, stub.data_type = t.name, t.data_type
        stub.dims.extend(t.dims)
    return out


def emit_and_compile(result, target: Target, embed: bool, say, timings: Dict[str, float],
                     fallback: bool = False, reference: bool = False, model_batch: int = 1,
                     clock: Callable[[], float] = time.perf_counter) -> List[Subgraph]:
    """Emit and compile every region of a split result (``result.regions``), attaching each binary
    to its Subgraph node; ``timings["emit"]`` / ``["compile"]`` in ``clock`` seconds. Each region's
    ``model`` is dropped once emitted (its weights are in the Constants-JSON then)."""
    options = emit_stage.CompileOptions(num_tiles=target.arch.num_tiles, ocm_size=target.arch.ocm_size,
                                        arch=target.arch)
    nodes = {n.name: n for n in result.model.graph.node if is_subgraph(n)}
    out = []
    t_emit = t_compile = 0.0
    for region in result.regions:
        say(f"compile {region.name}")
        batch = batch_chunks.region_batch(region.model)
        # only the model's own batch is chunked (an LSTM's [T, 1, N, H] leads with time steps)
        chunks = batch_chunks.plan(batch, target.max_batch) if batch > target.max_batch and batch == model_batch \
            else None
        if chunks and reference:   # a decision, not a failure: the region stays on the CPU
            raise RegionNotWorth(region, f"batch {batch} exceeds max_batch {target.max_batch}: hardware "
                                          f"batches are not combined with reference bodies")
        why = batch_chunks.check(region.model, batch) if chunks else None
        if why:
            raise RegionNotWorth(region, why)
        try:
            t = clock()
            emitted = emit_stage.emit(region.model, region.name, arrays=region.arrays)
            nodes_json, consts_json = emitted.nodes_json, emitted.consts_json
            del emitted
            region_model = region.model if chunks else None   # chunk_node reads it after compiling
            region.model = region.arrays = None   # emitted: its weights are in consts_json now (memory)
            t_emit += clock() - t
            t = clock()
            binary, meta, digest = emit_stage.compile_program_sha256(nodes_json, consts_json, dataclasses.replace(
                options, batch=chunks[1]) if chunks else options)
            emit_stage.detach_arrays(consts_json)  # the arrays emit lent compile: free them now
            emit_stage.annotate_boundaries(nodes_json, meta)   # the binary's quantize / dequantize
            t_compile += clock() - t
        except CompileError as exc:
            if not exc.hint:
                exc = CompileError(exc.message, node=exc.node, origin=exc.origin,
                                   hint="report this model; convert(..., fallback=True) or --fallback keeps "
                                        "the region on the CPU")
            raise RegionFailed(region, exc) from None
        except Exception as exc:  # noqa: BLE001 - a bug of ours in one region: only with fallback=True
            if not fallback:
                raise
            raise RegionFailed(region, CompileError(f"internal error: {type(exc).__name__}: {exc}",
                                                     node=region.name, origin=region.origin)) from None
        if region.estimate:   # partition="cost": re-check with the simulator's cycle model
            from .split.cost import compiled_estimate, describe
            region.estimate = compiled_estimate(region.estimate, binary, calls=chunks[0] if chunks else 1)
            if not region.estimate["offload"]:
                raise RegionNotWorth(region, describe(region.estimate) + " (simulator cycle model)")
        attach_artifact(nodes[region.name], binary, artifact=f"{region.name}.bin", embed=embed, sha256=digest)
        if chunks:
            batch_chunks.chunk_node(result.model, nodes[region.name], region_model, batch, *chunks, region.origin)
            region.batches = chunks
        out.append(Subgraph(region.name, nodes_json, consts_json, binary, region.inputs, region.outputs,
                            region.origin, region.macs, binary_digest=(binary, digest)))
    timings["emit"], timings["compile"] = t_emit, t_compile  # the last (successful) attempt
    return out
