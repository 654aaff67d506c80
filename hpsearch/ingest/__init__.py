"""Reading what trials write, and what an attempt's end means.

trial_files (metric reports from metrics.jsonl and `@hpsearch` stdout lines, result.json,
exit codes, logs), lines (appended lines read in bounded pieces), metric_lines (one report
line checked before it reaches the store), checkpoints (what a trial saved, and which to
keep), outcome (an end told to a person), output_watch (which trials just wrote a report,
from inotify). Nothing here writes the store: the driver does.
"""
