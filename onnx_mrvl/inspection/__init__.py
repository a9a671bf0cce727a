"""Inspection tools: graph diff, per-tensor compare (with an fp16 baseline), offload reports, HTML pictures."""
from .baseline_report import BaselineReport  # noqa: F401
from .compare import compare_models  # noqa: F401
from .compare_result import CompareResult  # noqa: F401
from .diff import GraphDiff, diff_models  # noqa: F401
from .fp16_baseline import fp16_baseline_model, run_fp16_baseline  # noqa: F401
from .graphview import render_diff_html, render_graph_html, write_html  # noqa: F401
from .offload import OffloadReport, offload_report  # noqa: F401
from .report_html import render_report_html  # noqa: F401
