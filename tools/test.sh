#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite. CI (.ci/run) calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
# headless Chromium for the HTML rendering test (Debian package), when we can install it
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "warning: could not install chromium; the HTML rendering test will fail in CI" >&2
fi
# one pytest worker per core, at most 4 (pytest-xdist; a test file stays on one worker, so its
# module fixtures run once); ONNX_MRVL_TEST_WORKERS=0 runs everything in this process
workers=${ONNX_MRVL_TEST_WORKERS:-$(n=$(nproc 2>/dev/null || echo 1); echo $(( n < 4 ? n : 4 )))}
exec .venv/bin/python -m pytest -q -p no:cacheprovider -n "$workers" --dist loadfile "$@"
