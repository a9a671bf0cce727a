"""The AVX2 builds of the native kernels, run on an AVX-512 host.

An AVX2 host (AVX2 + FMA + F16C, no AVX-512) gets other code from the same sources
(``_native_avx2.h``: the kernels on pairs of 256-bit registers, its own tile shapes). On an AVX-512
host nothing else builds or runs it, so a change could break it unseen (session 23: a macro the
AVX-512 tiles gained was undefined in the AVX2 build, which then failed to load and left an AVX2
host on the numpy kernels). ``ONNX_MRVL_NATIVE_EMULATE=avx2`` (native_loader.py) hides this host's
AVX-512 and VNNI flags and builds with ``-mno-avx512f``; this runs the bit-exact native tests
against those builds in a subprocess. Skipped where the host has no AVX-512 (its own tests run
the AVX2 builds) or no C compiler.
"""
import pytest

from onnx_mrvl.sim import native
from onnx_mrvl.sim.native_loader import cpu_has
from test_sim_native_emulated import run_native_tests

pytestmark = pytest.mark.skipif(not (native.variant() == "avx512" and cpu_has("avx2", "fma", "f16c")
                                     and native.compiler()),
                                reason="no AVX-512 here (the other tests run the AVX2 builds) or no C compiler")

# run_native_tests leaves out the two onnxruntime U8S8 comparisons: the AVX2 build sums pairs
# saturated to int16 as MLAS's AVX2 kernel does, while this host's onnxruntime sums in int32 (VNNI)


def test_native_tests_pass_on_the_avx2_build(tmp_path):
    run_native_tests(tmp_path, "avx2", "avx2",
                     ["tests/test_sim_native.py", "tests/test_sim_kernel_paths.py", "tests/test_sim_kernel_paths_half.py",
                      "tests/test_sim_grouped_lanes.py", "tests/test_sim_kernel_paths_one_channel.py",
                      "tests/test_sim_kernel_paths_dw_edges.py",
                      "tests/test_sim_dwpw.py", "tests/test_activations_native.py", "tests/test_sim_softmax_native.py",
                      "tests/test_sim_maxpool_chain.py", "tests/test_int8_native.py", "tests/test_int8_float_native.py",
                      "tests/test_int8_table_native.py"],
                     probe="from onnx_mrvl.sim import activations_native as a;"
                           "assert all(a.lib().same_bits.values()), a.lib().same_bits", timeout=3600)
