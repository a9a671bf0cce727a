"""The benchmarks' warm-up (onnx_mrvl/testing/timing.py): at least N runs and at least WARMUP_S seconds,
for both runtimes alike."""
import time

from onnx_mrvl.testing import timing


def _counter(cost_s):
    calls = []

    def run():
        calls.append(time.perf_counter())
        t_end = time.perf_counter() + cost_s
        while time.perf_counter() < t_end:
            pass
    return run, calls


def test_a_fast_run_warms_up_for_the_whole_time():
    run, calls = _counter(0.001)
    t0 = time.perf_counter()
    timing.warm_up(run, 5, seconds=0.03)
    assert time.perf_counter() - t0 >= 0.03
    assert len(calls) > 5


def test_a_slow_run_warms_up_at_least_the_count():
    run, calls = _counter(0.012)
    timing.warm_up(run, 5, seconds=0.03)
    assert len(calls) == 5


class _Sess:
    def __init__(self):
        self.runs = 0

    def run(self, outputs, feed):
        self.runs += 1

    def mrvl_stats(self):
        return [{"last_wall_s": 0.0}]


def test_alternate_warms_both_sides_alike(monkeypatch):
    monkeypatch.setattr(timing, "SETTLE_S", 0.0)
    monkeypatch.setattr(timing, "WARMUP_S", 0.0)
    sess, ref = _Sess(), _Sess()
    out = timing.alternate(sess, ref, {}, repeat=4, block=2, warmup=3)
    assert len(out["shim"]) == len(out["ort"]) == 4
    assert sess.runs == ref.runs == 2 * (3 + 2)


def test_paired_medians_alternate_warmed_blocks(monkeypatch):
    monkeypatch.setattr(timing, "SETTLE_S", 0.0)
    monkeypatch.setattr(timing, "WARMUP_S", 0.0)
    order = []
    fast, slow = (lambda: order.append("a")), (lambda: (order.append("b"), time.sleep(0.002)))
    a, b = timing.paired_medians(fast, slow, repeat=3, rounds=2)
    assert order == (["a"] * (timing.WARMUP + 3) + ["b"] * (timing.WARMUP + 3)) * 2
    assert a < 0.001 <= 0.002 <= b
