#!/usr/bin/env bash
# Create ./.venv and install hpsearch into it (editable) with the given extras.
#   scripts/setup.sh            # hpsearch only
#   scripts/setup.sh test,gp    # plus pytest and torch (CPU) for the GP sampler
# Once it has installed, it remembers pyproject.toml's hash and the extras in
# .venv/.hpsearch-setup; run again with the same pyproject.toml and no new extra, it installs
# nothing (pip's editable build alone takes 10-90 s here). HPSEARCH_SETUP=always installs anyway.
set -euo pipefail
cd "$(dirname "$0")/.."
extras=${1:-}
[ -x .venv/bin/python ] || python3 -m venv .venv
stamp=.venv/.hpsearch-setup
hash=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ "${HPSEARCH_SETUP:-}" != always ] && [ -f "$stamp" ] \
   && [ "$(head -n1 "$stamp")" = "$hash" ] && .venv/bin/python -c "import hpsearch" 2>/dev/null; then
  have=$(sed -n 2p "$stamp")
  missing=
  for extra in ${extras//,/ }; do
    case ",$have," in *",$extra,"*) ;; *) missing=1 ;; esac
  done
  [ -z "$missing" ] && exit 0
fi
spec="."
[ -n "$extras" ] && spec=".[$extras]"
# (grep drops this machine's pip notices about absent local mirrors; pip's status is kept)
.venv/bin/python -m pip install -q -e "$spec" 2> >(grep -v "is ignored" >&2)
# Every extra installed so far (pip keeps the packages of earlier extras).
if [ -f "$stamp" ] && [ "$(head -n1 "$stamp")" = "$hash" ]; then
  extras=$(printf '%s\n' "$(sed -n 2p "$stamp")" "$extras" | tr ',' '\n' | sed '/^$/d' | sort -u | paste -sd,)
fi
printf '%s\n%s\n' "$hash" "$extras" > "$stamp"
