"""Integrations with training frameworks, used inside a trial (they sit on `hpsearch.trial`).

Each is a module of its own that imports its framework, so `import hpsearch` never does:

- `hpsearch.integrations.lightning`: PyTorch Lightning (`pip install 'hpsearch[lightning]'`):
  a Callback that reports, stops, honours the promotion budget and checkpoints, and the
  cluster environment to give the Trainer under hpsearch (docs/lightning.md).
- `hpsearch.integrations.ddp`: per-rank step timing of a PyTorch DistributedDataParallel
  model (DdpTiming), for the scaling and efficiency tables (docs/scaling.md).
"""
