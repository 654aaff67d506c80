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
# Through uv where it can be had: 27 s here against pip's 3 min 48 s for every extra (pip
# spends its time resolving and byte-compiling; the modules used are compiled on first
# import instead). The versions are pip's own (scripts/constraints.txt), with pip's settings
# of this machine (its constraint file and find-links) handed on. If uv cannot be installed
# or fails, pip installs as before.
# (grep drops this machine's pip notices about absent local mirrors; pip's status is kept)
quiet_pip() { .venv/bin/python -m pip "$@" 2> >(grep -v "is ignored" >&2); }
with_uv() {
  .venv/bin/python -m uv --version >/dev/null 2>&1 || quiet_pip install -q uv || return 1
  local args=(--constraint scripts/constraints.txt) setting
  setting=$(.venv/bin/python -m pip config get global.constraint 2>/dev/null) \
    && [ -f "$setting" ] && args+=(--constraint "$setting")
  setting=${PIP_FIND_LINKS:-$(.venv/bin/python -m pip config get global.find-links 2>/dev/null)} \
    && [ -d "$setting" ] && args+=(--find-links "$setting")
  .venv/bin/python -m uv pip install -q --python .venv/bin/python "${args[@]}" -e "$spec"
}
with_uv || { echo "setup.sh: uv did not install; pip does" >&2; quiet_pip install -q -e "$spec"; }
# Every extra installed so far (pip keeps the packages of earlier extras).
if [ -f "$stamp" ] && [ "$(head -n1 "$stamp")" = "$hash" ]; then
  extras=$(printf '%s\n' "$(sed -n 2p "$stamp")" "$extras" | tr ',' '\n' | sed '/^$/d' | sort -u | paste -sd,)
fi
printf '%s\n%s\n' "$hash" "$extras" > "$stamp"
