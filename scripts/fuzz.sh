#!/usr/bin/env bash
# Fuzzes the parsers of everything cofuse reads from users, with libFuzzer (clang from Debian),
# AddressSanitizer and UndefinedBehaviorSanitizer:
#   schedule strings, machine profiles, tuning databases, bench sweep files.
#   scripts/fuzz.sh [SECONDS_PER_TARGET]     (default 10: the CI smoke run; 600+ for a long one)
# Each target starts from a corpus of valid inputs (fuzz/corpus/<target>/, shipped profiles
# and sweeps included) and keeps what it finds in out/fuzz/corpus/<target>. Prints per target the
# executions run, the corpus size and whether it crashed, then a total line; exit 1 on a crash
# (the crashing input is saved as out/fuzz/crash-*).
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
out=out/fuzz
mkdir -p "$out/bin" "$out/gen/cofuse"
command -v clang++ >/dev/null || { echo "fuzz: clang++ is missing (scripts/setup-deps.sh installs it)"; exit 2; }
# The one generated header the sources need.
sed -e 's/@PROJECT_VERSION@/0.0.0/; s/@PROJECT_VERSION_[A-Z]*@/0/g; s/@COFUSE_GIT_REVISION@/fuzz/' cmake/version.hpp.in >"$out/gen/cofuse/version.hpp"
flags=(-std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Iinclude -Isrc
       -I"$out/gen" -DCOFUSE_SOURCE_PROFILES_DIR=\""$PWD/profiles"\" -DCOFUSE_INSTALL_PROFILES_DIR=\"/nonexistent\")
# libcofuse_core (MPI-free) is compiled once and linked into every target, with the one file
# of another library each parser lives in.
mkdir -p "$out/obj"
# Compiled side by side, as many at a time as there are cores (one at a time, this stage took
# minutes of CI's 2 cores).
jobs=$(nproc 2>/dev/null || echo 2)
core=() pids=() failed=0
for src in src/core/*/*.cpp; do
  obj="$out/obj/$(echo "${src#src/}" | tr / _).o"
  core+=("$obj")
  (clang++ "${flags[@]/-fsanitize=fuzzer,address,undefined/-fsanitize=fuzzer-no-link,address,undefined}" -c "$src" \
     -o "$obj" 2>"$obj.log" || { echo "fuzz: building $src failed (see $obj.log)"; exit 1; }) &
  pids+=($!)
  if [ ${#pids[@]} -ge "$jobs" ]; then wait "${pids[0]}" || failed=1; pids=("${pids[@]:1}"); fi
done
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
[ $failed -eq 0 ] || exit 2
declare -A sources=(
  [schedule]=""
  [profile]="src/model/sim/profile.cpp"
  [tuning]="src/model/planner/tuning.cpp"
  [sweep]="src/measure/bench_sweep.cpp"
)
pids=()
for target in schedule profile tuning sweep; do
  (clang++ "${flags[@]}" "fuzz/fuzz_$target.cpp" ${sources[$target]} "${core[@]}" -o "$out/bin/fuzz_$target" \
     2>"$out/build-$target.log" || { echo "fuzz: building fuzz_$target failed (see $out/build-$target.log)"; exit 1; }) &
  pids+=($!)
  if [ ${#pids[@]} -ge "$jobs" ]; then wait "${pids[0]}" || failed=1; pids=("${pids[@]:1}"); fi
done
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
[ $failed -eq 0 ] || exit 2
# Run side by side too, as many at a time as there are cores; each writes its exit status to a
# file, read in order below.
pids=()
for target in schedule profile tuning sweep; do
  corpus="$out/corpus/$target"
  mkdir -p "$corpus"
  rm -f "$out/run-$target.status"
  cp -n fuzz/corpus/$target/* "$corpus/" 2>/dev/null
  [ "$target" = profile ] && cp -n profiles/*.json "$corpus/" 2>/dev/null
  [ "$target" = sweep ] && cp -n bench/sweeps/*.json tests/cli/bad_sweep.json "$corpus/" 2>/dev/null
  ("$out/bin/fuzz_$target" -max_total_time="$seconds" -max_len=65536 -artifact_prefix="$out/crash-$target-" \
     "$corpus" >"$out/run-$target.log" 2>&1; echo $? >"$out/run-$target.status") &
  pids+=($!)
  if [ ${#pids[@]} -ge "$jobs" ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
wait
total_runs=0 crashed=0
for target in schedule profile tuning sweep; do
  status=$(cat "$out/run-$target.status" 2>/dev/null || echo 1)
  runs=$(grep -Eo "^#[0-9]+" "$out/run-$target.log" | tail -1 | tr -d '#')
  runs=${runs:-0}
  total_runs=$((total_runs + runs))
  size=$(ls "$out/corpus/$target" | wc -l)
  if [ "$status" != 0 ]; then  # anything but a written 0 (an empty file too) is a failure
    crashed=$((crashed + 1))
    echo "fuzz_$target: CRASH after $runs executions (see $out/run-$target.log and $out/crash-$target-*)"
  else
    echo "fuzz_$target: $runs executions in ${seconds}s, corpus $size inputs, no crash"
  fi
done
echo "fuzz: $total_runs executions over 4 targets, $crashed crashed"
[ $crashed -eq 0 ]
