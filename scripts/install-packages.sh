#!/usr/bin/env bash
# Installs the Debian packages listed in the FILEs (one per line, '#'
# comments) that are not installed yet. Runs `apt-get update` once, and only
# when something is missing.
set -euo pipefail
(($# > 0)) || { echo "usage: install-packages.sh FILE..." >&2; exit 2; }
missing=()
for list in "$@"; do
  while read -r pkg; do
    pkg=${pkg%%#*}
    pkg=${pkg//[[:space:]]/}
    [[ -z "$pkg" ]] && continue
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$pkg")
    fi
  done <"$list"
done
((${#missing[@]} == 0)) && exit 0

echo "Installing missing packages: ${missing[*]}"
sudo=()
[[ $(id -u) -ne 0 ]] && sudo=(sudo)
"${sudo[@]}" apt-get update
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
