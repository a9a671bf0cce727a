"""Seeded test models and harnesses for the tests, tools and benchmarks (no downloads).

``models`` (the project's CNNs and the ``GraphBuilder``), ``arch_*`` (detection, OCR/audio,
attention, transformer and speech encoders as exporters write them), ``recurrent_models``,
``control_flow_models``, ``randomize_weights`` (seeded weights for the onnx wheel's zoo
architectures), ``zoo`` (the zoo table) and ``conformance`` (the ONNX node-test harness). Each
builder is a function of a seed; command lines: ``python -m onnx_mrvl.testing.<module> --help``.
No other module of the package imports this one (tests/test_layering.py).
"""
