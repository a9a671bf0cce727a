"""Inspection tools: graph diff, per-tensor compare, offload reports, HTML pictures."""
from .diff import GraphDiff, diff_models  # noqa: F401
from .graphview import render_diff_html, render_graph_html, write_html  # noqa: F401
