"""Inspection tools: graph diff, per-tensor compare, offload reports, HTML pictures."""
from .compare import CompareResult, compare_models  # noqa: F401
from .diff import GraphDiff, diff_models  # noqa: F401
from .graphview import render_diff_html, render_graph_html, write_html  # noqa: F401
from .offload import OffloadReport, offload_report  # noqa: F401
from .report_html import render_report_html  # noqa: F401
