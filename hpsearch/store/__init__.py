"""The SQLite results store (one per experiment; one writer: the driver).

Names are loaded on first use: `hpsearch.store.rows` stays light, and sqlite-utils (0.3 s to
import) is paid only by commands that open a store.
"""

from hpsearch.store.rows import ExperimentRow, TrialRow
from hpsearch.store.runs import STORE_FILE


def __getattr__(name: str):
    if name in ("Reader", "Store"):
        from hpsearch.store import store
        return getattr(store, name)
    raise AttributeError(name)


__all__ = ["STORE_FILE", "ExperimentRow", "Reader", "Store", "TrialRow"]
