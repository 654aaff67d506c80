"""GPU use measured while a trial runs (docs/gpu.md).

`sampler` runs beside a trial's ranks, one per node (python -m hpsearch.gpu.sampler): it
samples the trial's own GPUs through NVML (nvidia-ml-py, the `gpu` extra) and appends JSON
lines to the trial dir. It imports only the standard library (and pynvml, if there is one),
so importing hpsearch never needs pynvml. The driver reads those lines
(hpsearch.ingest.gpu_samples) and the readers show what they add up to
(hpsearch.report.gpu_use).
"""
