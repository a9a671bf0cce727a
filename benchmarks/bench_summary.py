"""The parts of ``run_all.py``'s report that are not measurements: the machine it ran on, the summary
table (what | measured | target) built from the figures of the run, and the README block between
``<!-- benchmarks:begin -->`` and ``<!-- benchmarks:end -->`` that is copied from it.
"""
from __future__ import annotations

import datetime
import os
import platform
import re
from typing import Dict, List, Optional, Sequence

BEGIN, END = "<!-- benchmarks:begin -->", "<!-- benchmarks:end -->"
SUMMARY_TITLE = "Summary"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gb() -> Optional[float]:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 2 ** 20
    except OSError:
        pass
    return None


def load_average() -> Optional[float]:
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def machine(started: datetime.datetime, load_start: Optional[float]) -> Dict[str, str]:
    """What the figures were measured on: CPU, cores, memory, OS, versions, date and load."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    mem = _memory_gb()
    return {"date": started.strftime("%Y-%m-%d %H:%M UTC"), "cpu": _cpu_model(),
            "cores": str(os.cpu_count()), "memory": f"{mem:.1f} GiB" if mem else "unknown",
            "os": f"{platform.system()} {platform.release()}", "python": platform.python_version(),
            "onnxruntime": ort.__version__, "onnx": onnx.__version__, "numpy": np.__version__,
            "load": "unknown" if load_start is None else f"{load_start:.1f}"}


def loaded(info: Dict[str, str]) -> bool:
    """A machine whose 1-minute load average at the start exceeded half its cores."""
    try:
        return float(info["load"]) > 0.5 * int(info["cores"])
    except (KeyError, ValueError):
        return False


def cpu_seconds() -> float:
    """CPU time of this process and its finished children (the bench_convert.py / bench_sim_kernels.py runs)."""
    import resource
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def machine_lines(info: Dict[str, str], total_s: float, cpu_s: Optional[float] = None) -> List[str]:
    cpu = f" ({cpu_s:.0f} CPU s)" if cpu_s is not None else ""
    lines = [f"- date: {info['date']}; total run time {total_s:.0f} s wall{cpu}",
             f"- machine: {info['cpu']}, {info['cores']} logical CPUs, {info['memory']} memory, {info['os']}",
             f"- software: Python {info['python']}, onnxruntime {info['onnxruntime']}, onnx {info['onnx']}, "
             f"numpy {info['numpy']}",
             f"- load average at the start: {info['load']}"]
    if loaded(info):
        lines.append("- **measured on a loaded machine** (load average above half the CPUs): absolute times are "
                     "pessimistic; ratios measured in the same run are the figures to compare")
    return lines


def verdict(ok: Optional[bool]) -> str:
    return "" if ok is None else (" (**met**)" if ok else " (**NOT met**)")


def summary_table(rows: Sequence[Sequence[str]]) -> List[str]:
    """Markdown table of (what, measured, target) rows."""
    out = ["| what | measured | target |", "| --- | --- | --- |"]
    for what, measured, target in rows:
        out.append(f"| {what} | {measured} | {target} |")
    return out


def readme_block(info: Dict[str, str], table: List[str], doc: str = "docs/benchmarks.md") -> str:
    """The README text between the markers: where the figures come from, and the summary table."""
    load = (f", load average {info['load']} at the start" + (" (**loaded**: absolute times pessimistic)"
                                                              if loaded(info) else ""))
    head = (f"Copied by `python benchmarks/run_all.py` from the summary of `{doc}` (do not edit by hand). "
            f"Measured {info['date']} on {info['cpu']} ({info['cores']} logical CPUs, {info['memory']}){load}; "
            f"ratios are measured within one run.")
    return "\n".join([head, ""] + table)


def replace_block(text: str, block: str) -> str:
    """``text`` with everything between the BEGIN and END markers replaced by ``block``."""
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    if len(pattern.findall(text)) != 1:
        raise ValueError(f"expected exactly one {BEGIN} ... {END} block")
    return pattern.sub(lambda _: f"{BEGIN}\n{block}\n{END}", text)


def write_readme(path: str, block: str) -> None:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    new = replace_block(text, block)
    if new != text:
        with open(path, "w", encoding="utf-8") as f:
            f.write(new)


def conformance_line(root: str) -> Optional[str]:
    """The pass count of docs/conformance.md (generated by onnx_mrvl/testing/conformance.py), or None."""
    try:
        with open(os.path.join(root, "docs", "conformance.md"), encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return None
    passed = re.search(r"\*\*(\d+) passed, (\d+) failed\*\*", text)
    runs = re.search(r"(\d+) applicable runs, (\d+) offloaded", text)
    if not passed or not runs:
        return None
    return (f"{passed.group(1)} / {runs.group(1)} applicable runs pass, {runs.group(2)} offloaded "
            f"(copied from docs/conformance.md, `python -m onnx_mrvl.testing.conformance`)")


def _fmt_s(values) -> str:
    return " / ".join(f"{v:.2f}" if v < 10 else f"{v:.1f}" for v in values)


def summary_rows(facts: dict, root: str) -> List[tuple]:
    """(what, measured, target) rows from the figures ``run_all`` collected; absent ones say so."""
    rows: List[tuple] = []
    for kind in ("chain", "branchy"):
        xs, ys, slope = facts.get("scaling", {}).get(kind, ([], [], float("nan")))
        if xs:
            sizes = " / ".join(f"{x // 1000}k" if x >= 1000 else str(x) for x in xs)
            rows.append((f"convert scaling, synthetic {kind} {sizes} nodes (CPU s)",
                         f"{_fmt_s(ys)} s: log-log slope **{slope:.2f}**{verdict(slope <= 1.1)}", "<= 1.1"))
    targets = facts.get("targets", {})
    for model, limit, label in (("vgg19", 3.0, "VGG-19"), ("resnet50", None, "ResNet-50")):
        both = [targets.get((model, c)) for c in (True, False)]
        if not all(both):
            continue
        conv = [r["timings"].get("total", r["convert"]) for r in both]
        save = [r["save"] for r in both]
        if limit is not None:
            measured = (f"{conv[0] + save[0]:.2f} s with the Constants-JSON{verdict(conv[0] + save[0] <= limit)}, "
                        f"{conv[1] + save[1]:.2f} s with `consts_json=False`{verdict(conv[1] + save[1] <= limit)} "
                        f"(convert {conv[0]:.2f} s, save {save[0]:.2f} / {save[1]:.2f} s)")
            rows.append((f"convert + save, zoo {label} (CPU s, `bench_convert.py --save`)", measured, f"<= {limit:g} s"))
        else:
            rows.append((f"convert, zoo {label} (CPU s, `bench_convert.py`)",
                         f"{conv[0]:.2f} s{verdict(conv[0] <= 1.0)} (+ save {save[0]:.2f} s)", "<= 1 s"))
        mem = both[0]["convert_rss_mb"] / both[0]["file_mb"]
        rows.append((f"peak memory of convert + save, {label} (resident memory added / model file size)",
                     f"{mem:.1f}x ({both[0]['convert_rss_mb']:.0f} MB for {both[0]['file_mb']:.0f} MB)"
                     f"{verdict(mem < 3)}", "< 3x"))
    conv = facts.get("convert", {})
    if conv:
        ratios = sorted((dt + ds) / o for dt, ds, o in conv.values() if o > 0)
        rows.append(("convert + save / onnxruntime session creation, per model (CPU s over CPU s)",
                     f"{ratios[0]:.1f}x - {ratios[-1]:.1f}x over {len(ratios)} models "
                     f"(median {ratios[len(ratios) // 2]:.1f}x)", ""))
    sim = facts.get("sim_speed", {})
    for name, r in sim.items():
        lo, hi = r["shim_over_ort_range"]
        rows.append((f"simulator (shim) / onnxruntime wall time, {name}, batch 1",
                     f"{r['shim_ms']:.1f} / {r['ort_ms']:.1f} ms = **{r['shim_over_ort']:.2f}x** (rounds {lo:.2f}-{hi:.2f}x)"
                     f"{verdict(r['shim_over_ort'] <= 1.0)}; {r['shim_over_ort_cpu']:.2f}x of onnxruntime's CPU time",
                     "<= 1.0x (issue #20)"))
    if sim:
        worst = max(sim.values(), key=lambda r: r["bridge_pct"])
        rows.append(("shim bridge overhead per Subgraph call (worst model)",
                     f"{worst['bridge_ms']:.2f} ms = {worst['bridge_pct']:.1f}% of simulator time ({worst['model']})"
                     f"{verdict(worst['bridge_pct'] < 10)}", "< 10%"))
    e2e = facts.get("end_to_end", {})
    if e2e:
        lo, hi = min(e2e, key=e2e.get), max(e2e, key=e2e.get)
        rows.append(("converted model / onnxruntime wall time, project models (simulator)",
                     f"{e2e[lo]:.2f}x ({lo}) - {e2e[hi]:.2f}x ({hi})", ""))
    binary = facts.get("binary", {})
    zoo = {k: v for k, v in binary.items() if k.startswith("zoo/")} or binary
    if zoo:
        ratios = {k: size / fp16 for k, (size, fp16) in zoo.items()}
        ok = all(size <= fp16 + fp16 // 100 + 64 * 1024 for size, fp16 in zoo.values())
        rows.append((f"binary size / fp16 weight bytes, {'zoo' if zoo is not binary else 'project'} models",
                     f"{min(ratios.values()):.4f} - {max(ratios.values()):.4f}{verdict(ok)}", "<= 1% + 64 KiB"))
    if "tools" in facts:
        size, t_diff, t_report = facts["tools"]
        rows.append((f"diff / report of a {size:,}-node model (wall s)",
                     f"{t_diff:.2f} s / {t_report:.2f} s{verdict(max(t_diff, t_report) < 5)}", "< 5 s"))
    conformance = conformance_line(root)
    if conformance:
        rows.append(("ONNX node conformance (onnx backend suite)", conformance, "100%"))
    return rows
