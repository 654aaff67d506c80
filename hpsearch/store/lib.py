"""sqlite-utils, imported without pandas and numpy.

When pandas and numpy are installed (they are: reports use pandas), `import sqlite_utils`
imports both, only to map their scalar types to SQLite column types. The store declares its
columns with Python types and binds only Python values (params and metrics go through
json and float()), so it never needs that mapping, and the two imports were 0.25-0.3 s of
the 0.6 s that `hpsearch status` took at any size. They are hidden from that one import;
whoever imports pandas or numpy later gets them as usual.
"""

from __future__ import annotations

import sys

_HIDDEN = ("pandas", "numpy")


def _load():
    hidden = [name for name in _HIDDEN if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # `import name` raises ImportError
    try:
        import sqlite_utils
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
    return sqlite_utils


sqlite_utils = _load()
