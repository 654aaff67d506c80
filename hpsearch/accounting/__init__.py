"""Accounting: what each attempt used and what a trial cost (usage: node-hours, GPU-hours,
wall time, from sacct or the store's times), and how well a trial's ranks scaled (efficiency:
per-rank step timing, parallel efficiency against the smallest size). Pure: the callers read
the store and sacct and hand the rows in; the cost objectives (hpsearch.driver.cost), the
report, the mirrors and `hpsearch status` share these definitions."""
