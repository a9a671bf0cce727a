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
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
