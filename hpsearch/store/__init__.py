"""The SQLite results store (one per experiment; one writer: the driver).

Each name has one home: the handles in hpsearch.store.store (Store, the driver's) and
hpsearch.store.reader (Reader, everyone's; both load sqlite-utils, 0.3 s to import, paid only
by commands that open a store), the store's file name and the runs dir in
hpsearch.store.runs, the row types in hpsearch.store.rows (light). Beside them:
schema (migrations), results (top-k, Pareto), read_only and lock_free (how readers open a
store), lib (sqlite-utils without pandas and numpy), lockfile (the driver lock), filesystem
(what is safe on the runs dir's filesystem), and what keeps other users out: private (the
experiment's folders), trusted (reading files others may have planted), atomic (writing by
rename).
"""
