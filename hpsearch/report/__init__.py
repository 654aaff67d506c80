"""`hpsearch report`: one self-contained HTML file (the PNGs embedded as base64, no script,
no network) plus the same figures as PNG files beside it. Only reads the store.

data.py reads the store (and sacct) into ReportData; the figures sub-package draws (one
module a figure); html.py writes the file, with its sections: pareto, gpu_table,
efficiency_table, and the resources of budget.py. Beside them, what other readers share:
export (`hpsearch export`), gpu_use (GPU busy fractions for status, export and the report),
pilot_usage (pilots' node-hours), space (each parameter's axis), scaling_curve (`hpsearch
scale`'s table), mirror_values (what the TensorBoard and MLflow mirrors log beside the
metrics).
"""

from __future__ import annotations

from pathlib import Path


def write_report(exp_dir: Path, out_dir: Path, use_sacct: bool = True, slurm=None) -> Path:
    """Write out_dir/report.html and out_dir/<figure>.png; returns the HTML's path."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        from hpsearch.errors import BadInput
        raise BadInput("hpsearch report draws with matplotlib, which is not installed: "
                       "pip install 'hpsearch[report]' (or pip install matplotlib)") from None
    from hpsearch.report import data, html
    return html.write(data.collect(exp_dir, use_sacct, slurm), Path(out_dir))
