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
# Four ranks standing for two hosts of two (COFUSE_RANKS_PER_HOST): a two-level profile, the link
# inside a host and the one between both measured and sourced.
COFUSE_RANKS_PER_HOST=2 "$mpirun" -np 4 -x COFUSE_RANKS_PER_HOST "$cofuse" profile --quick --out "$dir/two.json" \
  || { echo "FAIL: cofuse profile (two hosts of two) exited $?"; exit 1; }
/usr/bin/python3 "$here/check_profile.py" "$dir/two.json" --two-level 2 || exit 1
COFUSE_RANKS_PER_HOST=3 "$mpirun" -np 4 -x COFUSE_RANKS_PER_HOST "$cofuse" profile --quick --out "$dir/bad.json" >"$dir/bad.txt" 2>&1
[ $? -ne 0 ] && grep -q "COFUSE_RANKS_PER_HOST=3: must be a positive integer that divides the 4 ranks" "$dir/bad.txt" \
  || { echo "FAIL: COFUSE_RANKS_PER_HOST=3 at 4 ranks must be refused by name"; cat "$dir/bad.txt"; exit 1; }
echo "profile OK"
