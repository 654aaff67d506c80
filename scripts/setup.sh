#!/usr/bin/env bash
# Create ./.venv and install hpsearch into it (editable) with the given extras.
#   scripts/setup.sh            # hpsearch only
#   scripts/setup.sh test,gp    # plus pytest and torch (CPU) for the GP sampler
set -euo pipefail
cd "$(dirname "$0")/.."
extras=${1:-}
[ -x .venv/bin/python ] || python3 -m venv .venv
spec="."
[ -n "$extras" ] && spec=".[$extras]"
# (grep drops this machine's pip notices about absent local mirrors; pip's status is kept)
.venv/bin/python -m pip install -q -e "$spec" 2> >(grep -v "is ignored" >&2)
