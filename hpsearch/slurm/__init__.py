"""Everything hpsearch says to Slurm and reads back: commands, output parsers, hostlists.

Invariant: no other package runs a Slurm command or parses its output.
"""
