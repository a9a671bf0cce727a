"""Validation of a program's ``meta`` dict (docs/program.md) as stored in a model binary.

Used by both :func:`~onnx_mrvl.artifact.pack` (before writing) and
:func:`~onnx_mrvl.artifact.load` (before trusting anything). Every problem is reported through a
``fail(message)`` callback that must raise; messages give the JSON path, the value found and what
was expected, e.g. ``meta.layers[2].inputs[0]: tensor id 17 does not exist``.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, NoReturn, Tuple

from .io_quant import IO_QUANT_SINCE, check_io_quant

PROGRAM_FORMAT = "onnx_mrvl.program"
PROGRAM_VERSION = 7                     # newest program_version this reader understands


def program_features(layers: list) -> Dict[str, int]:
    """The features of a program's layers that a reader of an older ``program_version`` would skip
    without noticing (and so compute something else), each with the version that defined it:
    asymmetric int8 weights (a ``weight_zero_point`` weight) and a recurrent layer's per-row lengths
    (``sequence_lens`` among its ``state_inputs``) or final-state rows (``final_state_rows``), all 2;
    a layer norm's mean summed in onnxruntime's strided order (``mean_sum``) and an int8-in layer's
    epilogue (scalar ``post_ops``, the output's quantize-dequantize ``outq_*``), 3; an int8 mean's
    constant factor (``out_mul``) or row-sum order (``mean_sum`` on a pool), per-channel epilogue values
    (``post_sizes``), a layer norm in onnxruntime's InstanceNorm order (``ort_kernel``), an int8 Sum2D's
    broadcast operand (``broadcast``) and an int8 Softmax's additive ``mask`` weight, 4; a layer norm's
    eight interior quantization points (``inner_scales`` of 8: also after the mean, the difference, the
    square and the square root) and an int8-in layer's sums clamped as onnxruntime's U8S8 kernel does
    (``int8_sums`` ``"u8s8"``), 5; an fp32 chain's layer (``precision`` ``"fp32"``: Mul2D / Sum2D /
    Softmax in fp32, a Lookup of float32 values, float32 tensors; fuse/qdq_f32chain.py), 6; a layer
    norm's means times constant factors (``mean_muls``: Quark's mean correction) and an fp32 Mul2D's
    quotient (``divide``: an fp32 chain's Div of two tensors), 7.
    A program using one says that version (emit/compile.py), so an older reader refuses it."""
    found: Dict[str, int] = {}
    for layer in layers:
        if not isinstance(layer, dict):
            continue
        weights, params = layer.get("weights"), layer.get("params")
        if isinstance(weights, dict) and "weight_zero_point" in weights:
            found["weight_zero_point"] = 2
        if isinstance(params, dict):
            if isinstance(params.get("state_inputs"), list) and "sequence_lens" in params["state_inputs"]:
                found["sequence_lens"] = 2
            if params.get("final_state_rows"):
                found["final_state_rows"] = 2
            for key in ("mean_sum", "post_ops", "outq_dtype"):
                if params.get(key):
                    found[key] = 3
            if params.get("mean_sum") == "rows":   # an int8 mean's Eigen row sums (a layer norm's "strided": 3)
                found["mean_sum"] = 4
            for key in ("post_sizes", "out_mul", "ort_kernel", "broadcast"):
                if params.get(key):
                    found[key] = 4
            if isinstance(params.get("inner_scales"), list) and len(params["inner_scales"]) == 8:
                found["inner_scales"] = 5
            if params.get("int8_sums") == "u8s8":   # ("exact" is what an older reader computes anyway)
                found["int8_sums"] = 5
            if params.get("precision") == "fp32":
                found["precision"] = 6
            for key in ("mean_muls", "divide"):
                if params.get(key):
                    found[key] = 7
        if isinstance(weights, dict) and "mask" in weights and layer.get("layer_name") == "Softmax":
            found["mask"] = 4
    return found


def program_version(layers: list) -> int:
    """The lowest ``program_version`` that describes ``layers`` (1 unless a newer feature is used)."""
    return max([1] + list(program_features(layers).values()))
WEIGHT_ALIGN = 64                       # every weight blob starts on a 64-byte boundary
DTYPE_ITEMSIZE = {"float16": 2, "float32": 4, "int8": 1, "int32": 4}   # int8 layers: int8 kernels, int32 biases
TENSOR_DTYPES = {"float16": 2, "int8": 1, "uint8": 1,    # activations: fp16, or int8 codes of an int8 layer,
                 "float32": 4}                          # or an fp32 chain's values (fuse/qdq_f32chain.py)
ACT_ITEMSIZE = 2                        # activations inside a region are fp16
MAX_RANK = 16
MAX_ELEMENTS = 1 << 60                  # product of the non-zero dims (numpy's int64 limit / 8)
PLACEMENTS = ("ocm", "dram")

Fail = Callable[[str], NoReturn]
# (name, dtype, shape, offset, nbytes) of every weight, in meta order
WeightSlot = Tuple[str, str, Tuple[int, ...], int, int]


def align_up(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _short(v: Any, limit: int = 60) -> str:
    text = repr(v)
    return text if len(text) <= limit else text[:limit] + "..."


def _type_name(v: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer",
            float: "number", type(None): "null"}.get(type(v), type(v).__name__)


def _expect(fail: Fail, path: str, value: Any, kind: type, what: str) -> None:
    ok = _is_int(value) if kind is int else isinstance(value, kind)
    if not ok:
        fail(f"{path}: expected {what}, got {_type_name(value)} {_short(value)}")


def _nonneg_int(fail: Fail, path: str, value: Any) -> int:
    if not _is_int(value) or value < 0:
        fail(f"{path}: expected a non-negative integer, got {_short(value)}")
    return value


def _shape(fail: Fail, path: str, value: Any) -> Tuple[int, ...]:
    _expect(fail, path, value, list, "a list of non-negative integers")
    if len(value) > MAX_RANK:
        fail(f"{path}: rank {len(value)} exceeds the maximum of {MAX_RANK}")
    nonzero = 1
    for i, d in enumerate(value):
        if not _is_int(d) or d < 0:
            fail(f"{path}[{i}]: expected a non-negative integer dimension, got {_short(d)}")
        nonzero *= max(d, 1)
    if nonzero > MAX_ELEMENTS:  # numpy refuses such shapes even when another dimension is 0
        fail(f"{path}: shape {_short(value)} is too large (more than 2**60 elements)")
    return tuple(value)


def _product(shape: Tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _optional(fail: Fail, path: str, obj: dict, key: str, kind: type, what: str) -> None:
    if key in obj:
        _expect(fail, f"{path}.{key}", obj[key], kind, what)


def _required(fail: Fail, path: str, obj: dict, key: str, kind: type, what: str) -> Any:
    if key not in obj:
        fail(f"{path}: missing required key '{key}' ({what})")
    _expect(fail, f"{path}.{key}", obj[key], kind, what)
    return obj[key]


def _check_tensors(fail: Fail, tensors: list) -> Dict[int, Tuple[int, ...]]:
    ids: Dict[int, Tuple[int, ...]] = {}
    for i, t in enumerate(tensors):
        path = f"meta.tensors[{i}]"
        _expect(fail, path, t, dict, "an object")
        tid = _required(fail, path, t, "id", int, "a non-negative integer tensor id")
        if tid < 0:
            fail(f"{path}.id: expected a non-negative integer tensor id, got {tid}")
        if tid in ids:
            fail(f"{path}.id: duplicate tensor id {tid}")
        if "shape" not in t:
            fail(f"{path}: missing required key 'shape'")
        shape = _shape(fail, f"{path}.shape", t["shape"])
        if "nbytes" not in t:
            fail(f"{path}: missing required key 'nbytes'")
        nbytes = _nonneg_int(fail, f"{path}.nbytes", t["nbytes"])
        dtype = t.get("dtype", "float16")
        if not isinstance(dtype, str) or dtype not in TENSOR_DTYPES:
            fail(f"{path}.dtype: expected one of {sorted(TENSOR_DTYPES)}, got {_short(dtype)}")
        expected = _product(shape) * TENSOR_DTYPES[dtype]
        if nbytes != expected:
            fail(f"{path}.nbytes: {nbytes} does not match shape {list(shape)} "
                 f"(expected {expected} = product of the shape x {TENSOR_DTYPES[dtype]} bytes of {dtype})")
        if dtype in ("int8", "uint8"):   # int8 codes: the scale and zero point they were quantized with
            scale = t.get("scale")
            if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale < float("inf"):
                fail(f"{path}.scale: an {dtype} tensor needs a positive finite scale, got {_short(scale)}")
            zp = t.get("zero_point")
            lo, hi = (-128, 127) if dtype == "int8" else (0, 255)
            if not _is_int(zp) or not lo <= zp <= hi:
                fail(f"{path}.zero_point: expected an integer in [{lo}, {hi}], got {_short(zp)}")
        _optional(fail, path, t, "name", str, "a string")
        _optional(fail, path, t, "layout", str, "a string")
        if "placement" in t and t["placement"] not in PLACEMENTS:
            fail(f"{path}.placement: expected one of {list(PLACEMENTS)}, "
                 f"got {_short(t['placement'])}")
        ids[tid] = shape
    return ids


def _tensor_ref(fail: Fail, path: str, value: Any, ids: Dict[int, Tuple[int, ...]]) -> None:
    if not _is_int(value):
        fail(f"{path}: expected a tensor id (integer), got {_type_name(value)} {_short(value)}")
    if value not in ids:
        fail(f"{path}: tensor id {value} does not exist in meta.tensors")


def _check_boundary(fail: Fail, key: str, items: list, ids: Dict[int, Tuple[int, ...]]) -> None:
    for i, b in enumerate(items):
        path = f"meta.{key}[{i}]"
        _expect(fail, path, b, dict, "an object")
        _required(fail, path, b, "name", str, "the boundary tensor name")
        if "tensor" not in b:
            fail(f"{path}: missing required key 'tensor'")
        _tensor_ref(fail, f"{path}.tensor", b["tensor"], ids)
        if "shape" in b:
            _shape(fail, f"{path}.shape", b["shape"])
        _optional(fail, path, b, "layout", str, "a string")


def _check_weights(fail: Fail, weights: list, section_size: int) -> List[WeightSlot]:
    slots: List[WeightSlot] = []
    seen = set()
    expected_offset = 0
    for i, w in enumerate(weights):
        path = f"meta.weights[{i}]"
        _expect(fail, path, w, dict, "an object")
        name = _required(fail, path, w, "name", str, "the weight name")
        if not name:
            fail(f"{path}.name: empty weight name")
        if name in seen:
            fail(f"{path}.name: duplicate weight name {name!r}")
        seen.add(name)
        path = f"meta.weights[{i}] ({name!r})"
        if "shape" not in w:
            fail(f"{path}: missing required key 'shape'")
        shape = _shape(fail, f"{path}.shape", w["shape"])
        dtype = w.get("dtype")
        if not isinstance(dtype, str) or dtype not in DTYPE_ITEMSIZE:
            fail(f"{path}.dtype: expected one of {sorted(DTYPE_ITEMSIZE)}, got {_short(dtype)}")
        _optional(fail, path, w, "layout", str, "a string")
        for key in ("offset", "nbytes"):
            if key not in w:
                fail(f"{path}: missing required key '{key}'")
        offset = _nonneg_int(fail, f"{path}.offset", w["offset"])
        nbytes = _nonneg_int(fail, f"{path}.nbytes", w["nbytes"])
        if offset > section_size or nbytes > section_size - offset:
            fail(f"{path}: claims {nbytes} bytes at offset {offset} but the weight section "
                 f"has {section_size} bytes")
        if offset % WEIGHT_ALIGN:
            fail(f"{path}.offset: {offset} is not {WEIGHT_ALIGN}-byte aligned")
        want = _product(shape) * DTYPE_ITEMSIZE[dtype]
        if nbytes != want:
            fail(f"{path}.nbytes: {nbytes} does not match shape {list(shape)} and dtype {dtype!r} "
                 f"(expected {want})")
        if offset != expected_offset:
            fail(f"{path}.offset: {offset}, expected {expected_offset} (weights are stored in the "
                 f"order of meta.weights, each at the next {WEIGHT_ALIGN}-byte boundary)")
        slots.append((name, dtype, shape, offset, nbytes))
        expected_offset = align_up(offset + nbytes, WEIGHT_ALIGN)
    end = slots[-1][3] + slots[-1][4] if slots else 0
    if section_size != end:
        fail(f"weight section has {section_size} bytes but the weights listed in meta.weights "
             f"end at byte {end}")
    return slots


def _check_layers(fail: Fail, layers: list, ids: Dict[int, Tuple[int, ...]],
                  weight_names: set) -> None:
    for i, layer in enumerate(layers):
        path = f"meta.layers[{i}]"
        _expect(fail, path, layer, dict, "an object")
        _required(fail, path, layer, "layer_name", str, "the layer type, e.g. 'Conv2D'")
        _optional(fail, path, layer, "name", str, "a string")
        if "name" in layer:
            path = f"meta.layers[{i}] ({layer['name']!r})"
        _optional(fail, path, layer, "index", int, "an integer")
        _optional(fail, path, layer, "params", dict, "an object")
        for key in ("macs", "dram_bytes"):
            if key in layer:
                _nonneg_int(fail, f"{path}.{key}", layer[key])
        if "passes" in layer:   # an int8 Conv2D run as passes into one accumulator (int8_conv_passes.py)
            _nonneg_int(fail, f"{path}.passes", layer["passes"])
        if "zero_point_macs" in layer:   # the row-sum MACs of an int8 layer with weight zero points
            _nonneg_int(fail, f"{path}.zero_point_macs", layer["zero_point_macs"])
        if "origin" in layer:
            _expect(fail, f"{path}.origin", layer["origin"], list, "a list of node names")
            for j, o in enumerate(layer["origin"]):
                _expect(fail, f"{path}.origin[{j}]", o, str, "a node name")
        for key in ("inputs", "outputs"):
            refs = _required(fail, path, layer, key, list, "a list of tensor ids")
            for j, ref in enumerate(refs):
                _tensor_ref(fail, f"{path}.{key}[{j}]", ref, ids)
        wmap = layer.get("weights", {})
        _expect(fail, f"{path}.weights", wmap, dict, "an object mapping role -> weight name")
        for role, wname in wmap.items():
            if not isinstance(wname, str):
                fail(f"{path}.weights.{role}: expected a weight name, got {_short(wname)}")
            if wname not in weight_names:
                fail(f"{path}.weights.{role}: weight {wname!r} does not exist in meta.weights")


_TOP_LEVEL = (("format", str, "the string 'onnx_mrvl.program'"),
              ("program_version", int, "a positive integer"),
              ("name", str, "the region name"),
              ("inputs", list, "a list of boundary inputs"),
              ("outputs", list, "a list of boundary outputs"),
              ("tensors", list, "a list of tensors"),
              ("layers", list, "a list of layers"),
              ("weights", list, "a list of weight entries"))


def validate_meta(meta: Any, weight_section_size: int, fail: Fail, format_minor: int = IO_QUANT_SINCE
                  ) -> List[WeightSlot]:
    """Check ``meta`` against docs/program.md and the weight section size; return the weight slots.

    Checks, in order: top-level keys and types, format/program_version, tensors (ids unique,
    shapes, nbytes = product(shape) * 2), weights (names unique, dtype, offset/nbytes inside the
    section, 64-byte aligned, packed in meta order), inputs/outputs (and their boundary
    quantization, format 1.2: io_quant.py) and layers (every tensor id and weight name they
    reference exists). Calls ``fail`` (which raises) on the first problem.
    """
    if not isinstance(meta, dict):
        fail(f"meta: expected a JSON object, got {_type_name(meta)}")
    for key, kind, what in _TOP_LEVEL:
        _required(fail, "meta", meta, key, kind, what)
    if meta["format"] != PROGRAM_FORMAT:
        fail(f"meta.format: expected {PROGRAM_FORMAT!r}, got {_short(meta['format'])}")
    version = meta["program_version"]
    if version < 1:
        fail(f"meta.program_version: expected a positive integer, got {version}")
    if version > PROGRAM_VERSION:
        fail(f"meta.program_version {version} was written by a newer onnx_mrvl (this reader "
             f"understands up to {PROGRAM_VERSION}): upgrade onnx_mrvl")
    for feature, since in sorted(program_features(meta["layers"] if isinstance(meta["layers"], list) else []).items()):
        if version < since:
            fail(f"meta.program_version {version}: its layers use {feature}, defined by program_version {since}")
    if not meta["name"]:
        fail("meta.name: empty region name")
    if "batch_size" in meta and (not _is_int(meta["batch_size"]) or meta["batch_size"] < 1):
        fail(f"meta.batch_size: expected a positive integer, got {_short(meta['batch_size'])}")
    _optional(fail, "meta", meta, "quantize", str, "a string")
    _optional(fail, "meta", meta, "arch", dict, "an object")
    _optional(fail, "meta", meta, "memory_plan", dict, "an object")
    ids = _check_tensors(fail, meta["tensors"])
    slots = _check_weights(fail, meta["weights"], weight_section_size)
    _check_boundary(fail, "inputs", meta["inputs"], ids)
    _check_boundary(fail, "outputs", meta["outputs"], ids)
    for key in ("inputs", "outputs"):
        check_io_quant(fail, key, meta[key], meta["tensors"], format_minor)
    _check_layers(fail, meta["layers"], ids, {s[0] for s in slots})
    return slots
