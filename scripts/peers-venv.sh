#!/usr/bin/env bash
# Prints the Python interpreter kdp's performance peers run with: a virtual
# environment outside the source tree holding the current PyTorch and
# Lightning from PyPI (perf/peers/requirements.txt), made here when it is
# missing. Where PyPI cannot be reached it falls back, saying so on stderr, to
# Debian's interpreter and its python3-torch.
#
#   KDP_PEERS_VENV=DIR   the environment (default ~/.cache/kdp/peers-venv)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${KDP_PEERS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/kdp/peers-venv}
requirements=$root/perf/peers/requirements.txt
complete() { "$1" -c 'import numpy, torch, pytorch_lightning' 2>/dev/null; }

if [[ -x $venv/bin/python ]] && complete "$venv/bin/python"; then
  echo "$venv/bin/python"
  exit 0
fi
echo "peers-venv.sh: installing $(grep -v '^#' "$requirements" | xargs) from PyPI into $venv" >&2
if { [[ -x $venv/bin/python ]] || /usr/bin/python3 -m venv "$venv"; } >&2 &&
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements" >&2 &&
  complete "$venv/bin/python"; then
  echo "$venv/bin/python"
  exit 0
fi
echo "peers-venv.sh: PyPI's packages could not be installed; the peers run with Debian's" \
  "python3-torch (/usr/bin/python3), without Lightning" >&2
echo /usr/bin/python3
