"""The on-chip memory (OCM) plan: which activation tensors stay resident, which stream from DRAM.

Greedy over the layer sequence with exact lifetimes: a tensor is resident when, at the layer that
produces it, it fits in the OCM left over by the tensors still alive (``num_tiles`` x ``ocm_size``
bytes in all); otherwise it lives in DRAM and every write and read of it is DRAM traffic. Region
inputs and outputs cross through DRAM. Weights are read from DRAM once per inference, except those
that fit in the OCM left after the activation peak, which the plan keeps resident.
"""
from __future__ import annotations

from typing import Dict, List

import numpy as np


def plan_memory(tensors: List[dict], layers: List[dict], inputs: List[dict], outputs: List[dict],
                weights: Dict[str, np.ndarray], arch: dict) -> dict:
    capacity = int(arch["num_tiles"]) * int(arch["ocm_size"])
    last_use = {t["id"]: -1 for t in tensors}
    for i, layer in enumerate(layers):
        for t in layer["inputs"]:
            last_use[t] = i
    boundary = {x["tensor"] for x in inputs} | {x["tensor"] for x in outputs}
    placement = {t: "dram" for t in boundary}
    live: Dict[int, int] = {}
    expires: Dict[int, List[int]] = {}   # layer index -> on-chip tensors freed after it
    used = peak = 0
    for i, layer in enumerate(layers):
        for t in layer["outputs"]:
            size = tensors[t]["nbytes"]
            if t not in boundary:
                if used + size <= capacity:
                    placement[t] = "ocm"
                    live[t] = size
                    used += size
                    expires.setdefault(max(i, last_use.get(t, -1)), []).append(t)
                else:
                    placement[t] = "dram"
            peak = max(peak, used)
        for t in expires.pop(i, ()):
            used -= live.pop(t)
    free_for_weights = capacity - peak
    resident_w = []
    for name in sorted(weights, key=lambda n: weights[n].nbytes):
        if weights[name].nbytes <= free_for_weights:
            resident_w.append(name)
            free_for_weights -= weights[name].nbytes
    resident_w_set = set(resident_w)
    for t in tensors:
        t["placement"] = placement.get(t["id"], "ocm")
    for layer in layers:
        traffic = sum(weights[w].nbytes for w in layer["weights"].values() if w not in resident_w_set)
        traffic += sum(tensors[t]["nbytes"] for t in layer["inputs"] + layer["outputs"]
                       if tensors[t]["placement"] == "dram")
        layer["dram_bytes"] = int(traffic)
    return {"ocm_bytes_total": capacity, "ocm_bytes_per_tile": int(arch["ocm_size"]),
            "num_tiles": int(arch["num_tiles"]), "activation_peak_bytes": int(peak),
            "resident": sorted(t["id"] for t in tensors if t["placement"] == "ocm"),
            "streamed": sorted(t["id"] for t in tensors if t["placement"] == "dram"),
            "resident_weights": resident_w}
