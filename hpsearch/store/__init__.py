"""The SQLite results store (one per experiment; one writer: the driver)."""

from hpsearch.store.rows import ExperimentRow, TrialRow
from hpsearch.store.store import STORE_FILE, Reader, Store

__all__ = ["STORE_FILE", "ExperimentRow", "Reader", "Store", "TrialRow"]
