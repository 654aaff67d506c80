"""Print the warm client's socket path for the preloads given, as `python -m hpsearch.warm
run --preload ...` started the same way (same interpreter, environment and working folder,
hence the same sys.path) computes it: `python -m tests.warm_socket json`."""

import sys

from hpsearch.warm import socket_path

if __name__ == "__main__":
    print(socket_path(sys.argv[1:]))
