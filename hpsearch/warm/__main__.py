"""python -m hpsearch.warm serve --preload torch,sklearn --socket PATH
python -m hpsearch.warm run --preload torch,sklearn -- script.py args   (or -- -m module args)
python -m hpsearch.warm ranks --nproc-per-node 2 --nnodes 1 --node-rank 0 \
    --master-addr 127.0.0.1 --master-port 29500 -- sh -c 'rank command'   (hpsearch.warm.ranks)"""

from __future__ import annotations

import argparse
import sys

from hpsearch.warm import socket_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hpsearch.warm")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("serve", "run"):
        p = sub.add_parser(name)
        p.add_argument("--preload", default="", help="modules to import first, comma-separated")
        p.add_argument("--socket", default=None, help="default: one per user and preloads")
        p.add_argument("--idle-timeout", type=float, default=600.0)
        if name == "run":
            p.add_argument("argv", nargs=argparse.REMAINDER)
    ranks = sub.add_parser("ranks", help="torchrun's static rendezvous, without torchrun")
    ranks.add_argument("--nproc-per-node", type=int, required=True)
    ranks.add_argument("--nnodes", type=int, default=1)
    ranks.add_argument("--node-rank", type=int, default=0)
    ranks.add_argument("--master-addr", required=True)
    ranks.add_argument("--master-port", type=int, required=True)
    ranks.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.command == "ranks":
        from hpsearch.warm.ranks import run as run_ranks
        command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
        if not command:
            parser.error("ranks needs a command after --")
        return run_ranks(command, nproc=args.nproc_per_node, nnodes=args.nnodes,
                         node_rank=args.node_rank, addr=args.master_addr,
                         port=args.master_port)
    preload = [m for m in args.preload.split(",") if m]
    path = args.socket or str(socket_path(preload))
    if args.command == "serve":
        from hpsearch.warm.server import serve
        return serve(path, preload, args.idle_timeout)
    from hpsearch.warm.client import run
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        parser.error("run needs a script (or -m module) after --")
    return run(path, preload, argv, args.idle_timeout)


if __name__ == "__main__":
    sys.exit(main())
