"""Reading what trials write, and what an attempt's end means.

trial_files (metric reports from metrics.jsonl and `@hpsearch` stdout lines, result.json,
exit codes, logs), lines (appended lines read in bounded pieces), metric_lines (one report
line checked before it reaches the store), numbered_files (files written one per rank or
node, each read on from where it stopped), timing_lines (the ranks' step timings),
gpu_samples (the GPU samplers' lines), first_call (when an attempt's code first called
hpsearch.trial), checkpoints (what a trial saved, and which to keep), resume_check (a later
attempt that did not resume from its checkpoint), outcome (an end told to a person),
not_found (which program an exit 127 did not find), output_watch (which trials just wrote a
report, from inotify). Nothing here writes the store: the driver does.
"""
