#!/usr/bin/env bash
# The wasm door beside the native baseline: the same rules compiled into the
# host (cargo feature `native-door`, `serve --native-door`), on the same
# server and imports, with no wasm. The wasm door runs twice: as it serves
# (instances kept between a caller's requests) and with a fresh instance per
# request (`--idle-instances 0`). Each row runs the three in turn, `rounds`
# times, and prints req/s and p50/p99 for each and each wasm door's share of
# the native throughput.
# Usage: bench/native.sh [seconds] [connections] [rounds]
# Builds both binaries (the feature build is kept apart, under
# target/release/native); installs wrk from Debian's packages when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
seconds=${1:-5}
connections=${2:-16}
rounds=${3:-2}

need_wrk
state=$(mktemp -d)
trap 'kill ${door_pid:-} 2>/dev/null || true; rm -rf "$state"' EXIT
cargo build --release --bin murmur-door --features native-door >/dev/null 2>&1
mkdir -p target/release/native
cp target/release/murmur-door target/release/native/murmur-door
cargo build --release --bin murmur-door >/dev/null 2>&1
wasm=./target/release/murmur-door
native=./target/release/native/murmur-door

printf 'name: bench\nversion: 0.1.0\nlifecycle: {task_acceptance: queue}\n' >"$state/queue.yaml"
rpc_lua "$state/refused.lua" '{"jsonrpc":"2.0","id":1,"method":"GetExtendedAgentCard"}'
rpc_lua "$state/send.lua" '{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"reply hi"}]}}}'
# A conditional GET whose tag never matches: the door derives the card
# every time (a plain GET is answered from the host's cache).
cat >"$state/card.lua" <<'LUA'
wrk.headers["If-None-Match"] = '"never"'
LUA

# row NAME PATH LUA: both doors, in turn, on a fresh state each.
row() {
  local name=$1 path=$2 lua=$3
  local -A sum=([wasm]=0 [fresh]=0 [native]=0)
  for round in $(seq "$rounds"); do
    for kind in wasm fresh native; do
      local binary=$wasm flags=()
      [ "$kind" = fresh ] && flags=(--idle-instances 0)
      [ "$kind" = native ] && binary=$native flags=(--native-door)
      start_door "$binary" "$state/$kind.log" "$state/queue.yaml" --listen 127.0.0.1:0 \
        --state "$state/$kind-$name-$round" "${flags[@]}"
      local script=$lua
      if [ "$lua" = get ]; then
        rpc_lua "$state/get.lua" "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"GetTask\",\"params\":{\"id\":\"$(send_task "$door_url")\"}}"
        script=$state/get.lua
      fi
      local out
      out=$(wrk -t1 -c"$connections" -d"${seconds}s" --latency ${script:+-s "$script"} "$door_url$path")
      kill "$door_pid"
      wait "$door_pid" 2>/dev/null || true
      local rps p50 p99
      rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
      p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
      p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
      if grep -q 'Non-2xx' <<<"$out"; then
        echo "$name: $kind answered non-2xx" >&2
        exit 1
      fi
      printf '%-34s %-6s %10s req/s  p50 %-8s p99 %s\n' "$name" "$kind" "$rps" "$p50" "$p99"
      sum[$kind]=$(awk -v s="${sum[$kind]}" -v r="$rps" 'BEGIN { print s + r }')
    done
  done
  printf '%-34s wasm ÷ native: %s, fresh instances ÷ native: %s\n' "$name" \
    "$(awk -v w="${sum[wasm]}" -v n="${sum[native]}" 'BEGIN { printf "%.2f", w / n }')" \
    "$(awk -v w="${sum[fresh]}" -v n="${sum[native]}" 'BEGIN { printf "%.2f", w / n }')"
}

echo "# the wasm door and the native baseline: wrk -t1 -c$connections -d${seconds}s, $rounds rounds, $(nproc) cores, $(date -u +%F)"
row "GET card (cached by the host)" /.well-known/agent-card.json ""
row "GET card, derived (If-None-Match)" /.well-known/agent-card.json "$state/card.lua"
row "refusal (GetExtendedAgentCard)" / "$state/refused.lua"
row "GetTask" / get
row "SendMessage held (reply hi, queue)" / "$state/send.lua"
