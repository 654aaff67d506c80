"""Pilots, PanDA-like late binding: trials run inside pilot jobs that take them from a queue on
shared storage. Both halves of the feature, and the protocol between them:

- driver side: executor (the PilotExecutor: binds attempts to free slots, turns the pilots'
  files into Started and Ended), fleet (submitting and watching the pilot jobs), supply (how
  many pilots to keep), start_failures (the back-off for pilots that fail at start);
- node side: program (runs inside the allocation: claims, runs, heartbeats), slots (its
  claim on cores and GPUs), warm_servers, submitted (the job's command on its node);
- between them: protocol (the files in the runs dir: assignments written atomically and
  claimed by rename, heartbeats both ways).

The pilot builds on the executors (a pilot runs its trials as the local executor does); the
executors know nothing of pilots.
"""
