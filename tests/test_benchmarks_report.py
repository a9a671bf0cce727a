"""benchmarks/run_all.py's report machinery: the summary table, the README block between its markers,
the machine description; one ``--quick`` run on a tiny subset (no timing is asserted)."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import bench_summary  # noqa: E402

README = """# x

intro

<!-- benchmarks:begin -->
old table | 1.0 s
<!-- benchmarks:end -->

after
"""


def test_replace_block_keeps_the_rest():
    out = bench_summary.replace_block(README, "| a | b |")
    assert out.startswith("# x\n\nintro\n\n<!-- benchmarks:begin -->\n| a | b |\n<!-- benchmarks:end -->")
    assert out.endswith("\n\nafter\n") and "old table" not in out
    assert bench_summary.replace_block(out, "| a | b |") == out


@pytest.mark.parametrize("text", ["no markers", README + README])
def test_replace_block_needs_exactly_one_block(text):
    with pytest.raises(ValueError, match="exactly one"):
        bench_summary.replace_block(text, "x")


def test_summary_rows_from_facts():
    row = {"timings": {"total": 2.0}, "convert": 2.0, "save": 0.5, "convert_rss_mb": 1000.0, "file_mb": 500.0}
    facts = {"scaling": {"chain": ([1000, 4000], [1.0, 4.4], 1.07)},
             "targets": {("vgg19", True): row, ("vgg19", False): dict(row, save=0.2),
                         ("resnet50", True): dict(row, timings={"total": 1.5}), ("resnet50", False): row},
             "binary": {"zoo/a": (1010, 1000)}, "tools": (2000, 0.5, 0.25)}
    rows = {what: (measured, target) for what, measured, target in bench_summary.summary_rows(facts, ROOT)}
    chain = rows["convert scaling, synthetic chain 1k / 4k nodes (CPU s)"]
    assert chain == ("1.00 / 4.40 s: log-log slope **1.07** (**met**)", "<= 1.1")
    vgg = next(v for k, v in rows.items() if k.startswith("convert + save, zoo VGG-19"))
    assert vgg[0].startswith("2.50 s with the Constants-JSON (**met**), 2.20 s with `consts_json=False` (**met**)")
    resnet = next(v for k, v in rows.items() if k.startswith("convert, zoo ResNet-50"))
    assert resnet[0].startswith("1.50 s (**NOT met**)")
    mem = next(v for k, v in rows.items() if k.startswith("peak memory of convert + save, VGG-19"))
    assert mem[0].startswith("2.0x") and "(**met**)" in mem[0]
    assert rows["binary size / fp16 weight bytes, zoo models"][0] == "1.0100 - 1.0100 (**met**)"


def test_quick_run_writes_doc_and_readme(tmp_path):
    import run_all
    readme = tmp_path / "README.md"
    readme.write_text(README)
    doc = tmp_path / "benchmarks.md"
    assert run_all.main(["--quick", "--sizes", "60", "120", "--out", str(doc), "--readme", str(readme)]) == 0
    text = doc.read_text()
    for part in ("- date: ", "- machine: ", "logical CPUs", "onnxruntime ", "## Summary", "## Convert time per model",
                 "| graph | nodes | convert s | us / node | regions | ort session s | ratio |",
                 "## End to end", "## Diff and report"):
        assert part in text, part
    summary = text.split("## Summary\n\n", 1)[1].split("\n\n", 1)[0]
    assert summary.startswith("| what | measured | target |") and "convert scaling, synthetic chain" in summary
    new = readme.read_text()
    assert summary in new and "old table" not in new and new.endswith("\n\nafter\n")
    assert "from the summary of `benchmarks.md`" in new


def test_section_notes_are_copied_under_their_table():
    """The hand-written analyses (benchmarks/notes/) survive a regeneration of docs/benchmarks.md:
    every file NOTES names exists, and run_all puts it under its section's table."""
    import run_all
    for title, name in run_all.NOTES.items():
        assert os.path.exists(os.path.join(ROOT, "benchmarks", "notes", name)), name
        lines = run_all.notes(title)
        assert lines and lines[-1] == "" and lines[0].strip(), title
    assert run_all.notes("Diff and report") == []
    with open(os.path.join(ROOT, "docs", "benchmarks.md")) as f:
        doc = f.read()
    for title in run_all.NOTES:   # the committed document carries them as run_all writes them
        section = doc.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
        assert "\n".join(run_all.notes(title)).strip() in section, title
