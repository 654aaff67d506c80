"""What the read-only views share (`hpsearch status`, the live view in hpsearch.tui, the report
in hpsearch.report): pilots as they are shown (pilots), and the facts of a stored spec that a
view needs (spec_facts). Nothing here writes the store or asks Slurm."""
