#!/usr/bin/env bash
# Set up, then run the main job on the bundled example: convert the RFC's Fashion-MNIST CNN,
# run it through onnxruntime + the simulator, and compare with plain onnxruntime.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
OUT=${OUT:-out/fashion_mnist}
.venv/bin/onnx-mrvl convert examples/fashion_mnist.onnx -o "$OUT" --explain --overwrite   # replaces an earlier run
.venv/bin/onnx-mrvl run "$OUT/model.onnx" --compare examples/fashion_mnist.onnx
