#!/usr/bin/env bash
# Installs the built cofuse into a temporary prefix, builds tests/package/consumer against it
# with find_package(cofuse), and runs its two programs (the ops, the layers) on 2 ranks.
# Usage: run.sh BUILD_DIR MPIRUN
set -eu
build=$1 mpirun=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$here/consumer" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" >"$work/configure.log" || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/build" >"$work/build.log" || { cat "$work/build.log"; exit 1; }
LD_LIBRARY_PATH="$work/prefix/lib:${LD_LIBRARY_PATH:-}" "$mpirun" -np 2 "$work/build/consumer"
# The layers tune online and record the winners: in a database of this run, not the user's cache.
COFUSE_TUNING_DB="$work/tuning.json" LD_LIBRARY_PATH="$work/prefix/lib:${LD_LIBRARY_PATH:-}" \
  "$mpirun" -np 2 -x COFUSE_TUNING_DB "$work/build/layers_consumer"
