"""The ``onnx-mrvl`` command line."""
