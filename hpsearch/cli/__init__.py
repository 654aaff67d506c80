"""The `hpsearch` command line: main.py builds the parser (each group of commands registers
its own) and maps errors to exit codes; common.py holds what the commands share (the runs
dir, formatting). One module per group of commands: run_cmds (submit, resume, cancel),
spec_cmds (validate, plan), inspect_cmds (status, best, export), view_cmds (watch, report),
manage_cmds (delete, events), grow_cmds (enqueue), finish_cmds (finish), scale_cmds
(scale), checkpoint_cmds (checkpoints), cluster_cmds (topology), optuna_cmds (optuna,
dashboard), mirror_cmds (tensorboard, mlflow). A command reads its arguments and hands
them to the package that does the work.
"""
