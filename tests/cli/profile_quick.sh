#!/usr/bin/env bash
# `cofuse profile --quick` end to end: writes a profile into a temporary directory, then checks
# it independently of cofuse's own parser (check_profile.py).
# Usage: profile_quick.sh MPIRUN COFUSE
set -u
mpirun=$1 cofuse=$2
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$mpirun" -np 2 "$cofuse" profile --quick --out "$dir/p.json" --name quick-test --link "the test's link" \
  || { echo "FAIL: cofuse profile exited $?"; exit 1; }
[ ! -e "$dir/p.json.partial" ] || { echo "FAIL: a partial file was left behind"; exit 1; }
/usr/bin/python3 "$here/check_profile.py" "$dir/p.json" --name quick-test --link "the test's link" || exit 1
echo "profile OK"
