#!/usr/bin/env bash
# Sets up and builds kdp, then runs the main job: a model trained with a
# user-written loss (examples/02_custom_loss.cpp).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh"
build_dir=${KDP_BUILD_DIR:-$root/build}
"$build_dir/examples/02_custom_loss"
