"""Shared timing loop of the benchmarks: the shim and onnxruntime timed in alternating blocks.

Each block starts with a short pause (the other side's spinning threads go to sleep) and untimed
warm-up runs, so neither side profits from the other's caches or loses cores to its spinning; the
machine is shared and noisy, so callers take medians (or minima) over the samples returned.
"""
from __future__ import annotations

import time
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

WARMUP = 5   # untimed runs that start each block
WARMUP_S = 0.05   # ... and at least this long: after the pause, a core takes ~15 ms to come up to speed
SETTLE_S = 0.1   # pause before each block: the other side's spinning threads go to sleep


def warm_up(run: Callable[[], object], runs: int, seconds: Optional[float] = None) -> None:
    """``run()`` untimed, at least ``runs`` times and for at least ``seconds``. After the block's pause
    a runtime that keeps both cores busy runs slower for ~15 ms (measured on the 2-core VM: the
    simulator on MobileNetV2-style width 0.5, 0.1 s asleep then back-to-back runs, 0.53-0.58 ms for
    its first 25 runs, 0.49 after, 0.49 throughout without the pause; width 1.0 1.51 -> 1.24 ms over
    its first 13; onnxruntime, which runs width 0.5 on one core, level after 3). Five runs of a
    0.5 ms model left the timed runs inside that ramp."""
    t_end = time.perf_counter() + (WARMUP_S if seconds is None else seconds)
    done = 0
    while done < runs or time.perf_counter() < t_end:
        run()
        done += 1


def settle(run: Callable[[], object], runs: int = WARMUP) -> None:
    """The start of every timed block: the pause in which the other side's spinning threads go to
    sleep (``SETTLE_S``), then ``run``'s warm-up (``warm_up``: at least ``runs`` runs, ``WARMUP_S``)."""
    time.sleep(SETTLE_S)
    warm_up(run, runs)


def alternate(sess, ref, feed, repeat: int, block: int = 0, warmup: int = WARMUP) -> Dict[str, List[float]]:
    """Time ``sess`` (an onnx_mrvl InferenceSession) and ``ref`` (onnxruntime) on ``feed``, ``repeat``
    runs each in blocks of ``block`` (default: one block). Returns per-run samples: ``shim`` and
    ``ort`` wall seconds, ``sim`` the simulator's own wall seconds (from ``mrvl_stats``), ``ort_cpu``
    onnxruntime's process CPU seconds."""
    out: Dict[str, List[float]] = {"shim": [], "sim": [], "ort": [], "ort_cpu": []}
    block = block or max(1, repeat)
    for _ in range(-(-repeat // block)):
        # onnxruntime's intra-op threads spin ~35-40 ms of CPU after a run (their schedstat): a
        # shim block right after the reference block shared the cores with them (MobileNetV2
        # width 0.5: ~35 ms of its ~50 ms block on the idle machine)
        settle(lambda: sess.run(None, feed), warmup)
        for _ in range(block):
            t0 = time.perf_counter()
            sess.run(None, feed)
            out["shim"].append(time.perf_counter() - t0)
            out["sim"].append(sum(s["last_wall_s"] for s in sess.mrvl_stats()))
        settle(lambda: ref.run(None, feed), warmup)
        for _ in range(block):
            t0, c0 = time.perf_counter(), time.process_time()
            ref.run(None, feed)
            out["ort"].append(time.perf_counter() - t0)
            out["ort_cpu"].append(time.process_time() - c0)
    return out


def paired_medians(run_a: Callable[[], object], run_b: Callable[[], object], repeat: int,
                   rounds: int = 3) -> Tuple[float, float]:
    """(median seconds of ``run_a``, of ``run_b``): ``rounds`` alternating blocks of ``repeat`` runs each,
    every block after the pause and the warm-up of ``alternate`` (a runtime timed right after the
    other shared the cores with its spinning threads)."""
    times: Dict[str, List[float]] = {"a": [], "b": []}
    for _ in range(max(1, rounds)):
        for key, run in (("a", run_a), ("b", run_b)):
            settle(run)
            times[key] += seconds(run, repeat, warmup=0)
    return float(np.median(times["a"])), float(np.median(times["b"]))


def seconds(run: Callable[[], object], repeat: int, warmup: int = 1) -> List[float]:
    """Wall seconds of each of ``repeat`` calls of ``run()``, after ``warmup`` untimed ones."""
    for _ in range(warmup):
        run()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return times


def median_seconds(run: Callable[[], object], repeat: int, warmup: int = 1) -> float:
    """Median wall seconds of ``run()`` over ``repeat`` calls after ``warmup`` untimed ones."""
    return float(np.median(seconds(run, repeat, warmup)))
