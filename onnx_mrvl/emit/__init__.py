"""Emit and compile: a region model -> Nodes-JSON + Constants-JSON -> model binary.

``emit(region_model, name)`` returns an ``EmitResult`` (the stage contract, onnx_mrvl/stage.py):
``nodes_json`` and ``consts_json`` (TVM's Marvell field layout, docs/json-format.md), ``model`` the
region it read, ``log`` one ``(layer op, origin nodes, layer name)`` per layer.
``compile_json(nodes_json, consts_json, options)`` reads only that pair and returns the binary.
``convert()`` goes through exactly these two functions.
"""
from .boundary_quant import annotate as annotate_boundaries  # noqa: F401
from .compile import CompileOptions, build_program, compile_json, compile_program, compile_program_sha256  # noqa: F401
from .const_json import detach_arrays  # noqa: F401
from .stage import EmitResult, emit  # noqa: F401
