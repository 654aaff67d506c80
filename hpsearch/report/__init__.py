"""`hpsearch report`: one self-contained HTML file (the PNGs embedded as base64, no script,
no network) plus the same figures as PNG files beside it.

data.py reads the store (and sacct), figures.py draws, html.py writes. Only reads the store.
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
