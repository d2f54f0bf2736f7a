#!/usr/bin/env bash
# How much a TCP stream slows a GEMM on the same cores, with no MPI and no cofuse involved: the
# part of the "communication is free for the GEMM's core" assumption (efficiency = max(G, M) / T)
# that this host cannot honour, whatever the schedule.
#
#   bench/tcp_gemm_interference.sh [--rate 2gbit] [--rounds 3] [--seconds 3]
#
# Two network namespaces joined by a veth pair, each end shaped to --rate (tc tbf), as one rank's
# full-duplex link in bench/netlab's switch topology. Each round times a single-threaded f32 GEMM
# (numpy over OpenBLAS, 1024x512x1536, one process pinned to each core) for --seconds alone, then
# again while one stream runs each way (sender of one and receiver of the other on each core, as
# two MPI ranks' traffic would be). Prints every window's median; alone and with-stream windows
# alternate because this machine's speed drifts. Needs root and /usr/bin/python3 with numpy.
set -euo pipefail
rate=2gbit rounds=3 seconds=3
while [ $# -gt 0 ]; do
  case "$1" in
    --rate) rate=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    *) echo "usage: $0 [--rate 2gbit] [--rounds 3] [--seconds 3]" >&2; exit 2 ;;
  esac
done
a="cofuse-tgi-$$-a" b="cofuse-tgi-$$-b" dir=$(mktemp -d)
cleanup() {
  kill $(jobs -p) 2>/dev/null || true
  ip netns del "$a" 2>/dev/null || true
  ip netns del "$b" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
ip netns add "$a" && ip netns add "$b" || { echo "$0: cannot create network namespaces (root?)" >&2; exit 77; }
ip link add name eth0 netns "$a" type veth peer name eth0 netns "$b"
ip netns exec "$a" ip addr add 10.214.0.1/24 dev eth0
ip netns exec "$b" ip addr add 10.214.0.2/24 dev eth0
for ns in "$a" "$b"; do
  ip netns exec "$ns" ip link set lo up
  ip netns exec "$ns" ip link set eth0 up
  ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 512kb latency 100ms
done

cat > "$dir/sink.py" <<'EOF'
import socket, sys
server = socket.socket()
server.bind((sys.argv[1], int(sys.argv[2])))
server.listen(1)
conn, _ = server.accept()
buf = memoryview(bytearray(1 << 20))
while conn.recv_into(buf):
    pass
EOF
cat > "$dir/source.py" <<'EOF'
import socket, sys, time
conn = socket.create_connection((sys.argv[1], int(sys.argv[2])))
block, start, sent = bytes(4 << 20), time.time(), 0
while time.time() - start < float(sys.argv[3]):
    conn.sendall(block)
    sent += len(block)
print(f"  stream to {sys.argv[1]}: {sent * 8 / (time.time() - start) / 1e9:.2f} Gbit/s")
EOF
cat > "$dir/gemm.py" <<'EOF'
import sys, time
import numpy as np
rng = np.random.default_rng()
a = rng.random((1024, 1536), dtype=np.float32)
b = rng.random((1536, 512), dtype=np.float32)
for _ in range(3):
    a @ b
times, start = [], time.time()
while time.time() - start < float(sys.argv[1]):
    t = time.perf_counter()
    a @ b
    times.append(time.perf_counter() - t)
times.sort()
median = times[len(times) // 2]
print(f"  core {sys.argv[2]}: GEMM 1024x512x1536 median {median * 1e3:.2f} ms ({2 * 1024 * 512 * 1536 / median / 1e9:.0f} GFLOP/s)")
EOF
source "$(dirname "$0")/../scripts/env.sh"  # OPENBLAS_CORETYPE where OpenBLAS does not know this CPU
export OPENBLAS_NUM_THREADS=1
gemms() {
  taskset -c 0 /usr/bin/python3 "$dir/gemm.py" "$seconds" 0 > "$dir/g0" &
  local g0=$!
  taskset -c 1 /usr/bin/python3 "$dir/gemm.py" "$seconds" 1 > "$dir/g1"
  wait "$g0"
  cat "$dir/g0" "$dir/g1"
}
port=5100
for ((round = 1; round <= rounds; ++round)); do
  echo "round $round: alone"
  gemms
  port=$((port + 2))
  ip netns exec "$b" taskset -c 1 /usr/bin/python3 "$dir/sink.py" 10.214.0.2 "$port" & s1=$!
  ip netns exec "$a" taskset -c 0 /usr/bin/python3 "$dir/sink.py" 10.214.0.1 "$((port + 1))" & s2=$!
  sleep 0.3
  ip netns exec "$a" taskset -c 0 /usr/bin/python3 "$dir/source.py" 10.214.0.2 "$port" "$(echo "$seconds + 1.5" | bc)" & c1=$!
  ip netns exec "$b" taskset -c 1 /usr/bin/python3 "$dir/source.py" 10.214.0.1 "$((port + 1))" "$(echo "$seconds + 1.5" | bc)" & c2=$!
  sleep 0.7
  echo "round $round: with a $rate stream each way"
  gemms
  wait "$c1" "$c2" "$s1" "$s2" || true
done
