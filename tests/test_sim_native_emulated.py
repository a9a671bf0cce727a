"""The AVX-512 builds of the native kernels, run on an AVX2 host under SIMDe emulation.

``ONNX_MRVL_NATIVE_EMULATE=avx512`` (native_loader.py) builds ``_native_conv.c``, ``_native_int8.c``
and ``_native_i8float.c`` with their AVX-512 (F/DQ/VL/BW/VNNI) paths on SIMDe (``_native_simde.h``)
and loads them as the "avx512" variant; this runs the bit-exact native tests against them in a
subprocess. Skipped unless SIMDe >= 0.8 headers are found (``ONNX_MRVL_SIMDE_DIR``, else
/usr/include; Debian 12's libsimde-dev 0.7.4 lacks intrinsics the kernels use). Slow: the
emulated conv kernels take ~5 min of one core to build (docs/simulator.md).
"""
import os
import subprocess
import sys

import pytest

from onnx_mrvl.sim import native

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIMDE = os.environ.get("ONNX_MRVL_SIMDE_DIR", "/usr/include")


def _simde_ok() -> bool:
    path = os.path.join(SIMDE, "simde", "x86", "avx512", "cvt.h")   # 0.8 has vcvtph2ps; 0.7.4 not
    try:
        with open(path) as f:
            return "simde_mm512_cvtph_ps" in f.read()
    except OSError:
        return False


pytestmark = pytest.mark.skipif(not (_simde_ok() and native.variant() and native.compiler()),
                                reason="no SIMDe >= 0.8 headers (ONNX_MRVL_SIMDE_DIR), C compiler or AVX2 here")


# the tests comparing with onnxruntime's U8S8 convs: the build follows the emulated CPU's flags (VNNI:
# exact sums; AVX2: pairs saturated to int16, vpmaddubsw) and this host's onnxruntime its real CPU's,
# so under emulation the two differ by design: not a kernel question
ORT_U8S8 = "not test_conv_native_equals_onnxruntime_qlinearconv and not test_static_plan_batches_int8_steps"


def run_native_tests(tmp_path, emulate: str, variant: str, files, probe: str = "", timeout: int = 7200, **env):
    """Build the native libraries as ``ONNX_MRVL_NATIVE_EMULATE=emulate`` makes them (their own
    cache in tmp_path), check that they load as ``variant`` (and ``probe``, more Python asserts), then
    run ``files`` (pytest paths, without the onnxruntime U8S8 comparisons) against them."""
    env = dict(os.environ, ONNX_MRVL_NATIVE_EMULATE=emulate, ONNX_MRVL_CACHE_DIR=str(tmp_path),
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **env)
    check = ("from onnx_mrvl.sim import native, int8_native, int8_float_native as f;"
             f"assert native.variant() == {variant!r} and native.on(), native.why_disabled();"
             "assert int8_native.lib() and f.lib(), (int8_native.why_disabled(), f.why_disabled());" + probe)
    r = subprocess.run([sys.executable, "-c", check], env=env, cwd=ROOT, capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, r.stderr[-2000:]
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", ORT_U8S8, *files],
                       env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    last = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else r.stderr[-2000:]
    assert r.returncode == 0 and "skipped" not in last and "passed" in last, r.stdout[-3000:]


def test_native_tests_pass_on_emulated_avx512(tmp_path):
    run_native_tests(tmp_path, "avx512", "avx512",
                     ["tests/test_sim_native.py", "tests/test_sim_kernel_paths.py", "tests/test_sim_kernel_paths_half.py",
                      "tests/test_sim_grouped_lanes.py", "tests/test_int8_native.py", "tests/test_int8_float_native.py",
                      "tests/test_int8_table_native.py", "tests/test_sim_kernel_paths_one_channel.py",
                      "tests/test_sim_kernel_paths_dw_edges.py"],
                     ONNX_MRVL_SIMDE_DIR=SIMDE)
