"""The report's figures, drawn with matplotlib (Agg, no display), one module each.

Each figure function takes ReportData and returns Drawn (a Figure and its caption), LeftOut
(the reason it is not drawn, which the report shows) or None (it does not apply to this
search); see common.py. FIGURES lists them in the report's order as (file stem, title,
function).
"""

from __future__ import annotations

from hpsearch.report.figures.common import Drawn, LeftOut, png
from hpsearch.report.figures.curves import learning_curves
from hpsearch.report.figures.history import history
from hpsearch.report.figures.importances import importance_chart, importances
from hpsearch.report.figures.parallel import parallel_coordinates
from hpsearch.report.figures.pareto import pareto
from hpsearch.report.figures.pilots import pilot_hours
from hpsearch.report.figures.population import population
from hpsearch.report.figures.scaling import scaling
from hpsearch.report.figures.sites import sites
from hpsearch.report.figures.slices import slices

FIGURES = [
    ("history", "Optimization history", history),
    ("pareto_front", "Objectives and Pareto front", pareto),
    ("parallel_coordinates", "Parallel coordinates", parallel_coordinates),
    ("slices", "Objective by parameter", slices),
    ("importances", "Parameter importances", importance_chart),
    ("learning_curves", "Learning curves", learning_curves),
    ("population", "Population over time", population),
    ("pilots", "Pilot node-hours", pilot_hours),
    ("sites", "Sites: where attempts waited and ran", sites),
    ("scaling", "Parallel efficiency and scaling", scaling),
]

__all__ = ["Drawn", "FIGURES", "LeftOut", "history", "importance_chart", "importances",
           "learning_curves", "parallel_coordinates", "pareto", "pilot_hours", "png", "population",
           "scaling", "sites", "slices"]
