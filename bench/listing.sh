#!/usr/bin/env bash
# ListTasks over loopback as the session grows: a queue door is fed held
# SendMessages in contextId ctx-a (script agent 'reply hi') by wrk until it
# holds each size in turn, then wrk asks it for ListTasks, pageSize 50,
# without a filter and with status + contextId.
# Usage: bench/listing.sh [seconds] [size...]   (default 5 s; 1000 10000 100000)
# MURMUR_DOOR_BIN=path runs that binary instead of building this tree's.
# Installs wrk from Debian's packages when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
seconds=${1:-5}
shift || true
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(1000 10000 100000)

need_wrk
binary=$(door_binary)

state=$(mktemp -d)
trap 'kill ${door_pid:-} 2>/dev/null || true; rm -rf "$state"' EXIT
printf 'name: bench\nversion: 0.1.0\nlifecycle: {task_acceptance: queue}\n' >"$state/queue.yaml"
start_door "$binary" "$state/log" "$state/queue.yaml" --listen 127.0.0.1:0 --state "$state/tasks"
url=$door_url

script() { # name, params, method
  rpc_lua "$state/$1.lua" "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"$3\",\"params\":$2}"
}
script send '{"message":{"messageId":"m","contextId":"ctx-a","role":"ROLE_USER","parts":[{"text":"reply hi"}]}}' SendMessage
script all '{"pageSize":50}' ListTasks
script filtered '{"pageSize":50,"status":"TASK_STATE_COMPLETED","contextId":"ctx-a"}' ListTasks

total() {
  curl -s -X POST "$url/" -H 'Content-Type: application/json' -H 'A2A-Version: 1.0' \
    -d '{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{"pageSize":1}}' \
    | grep -o '"totalSize":[0-9]*' | cut -d: -f2
}
measure() { # label, script
  wrk -t1 -c16 -d"${seconds}s" --latency -s "$state/$2.lua" "$url/" \
    | awk -v label="$1" '/Requests\/sec/ {rps=$2} /^ +50%/ {p50=$2} /^ +99%/ {p99=$2} /Non-2xx/ {bad=$NF}
        END {printf "%-34s %10s req/s  p50 %8s  p99 %8s%s\n", label, rps, p50, p99, bad ? "  non-2xx " bad : ""}'
}

echo "# ListTasks over loopback: wrk -t1 -c16 -d${seconds}s, $(nproc) cores, $binary"
for size in "${sizes[@]}"; do
  have=$(total)
  if [ "$have" -lt "$size" ]; then
    # The rest of the tasks: wrk leaves as the last one is answered.
    cp "$state/send.lua" "$state/fill.lua"
    cat >>"$state/fill.lua" <<LUA
local sent = 0
response = function()
  sent = sent + 1
  if sent >= $((size - have)) then os.exit(0) end
end
LUA
    start=$(date +%s.%N)
    wrk -t1 -c16 -d1h -s "$state/fill.lua" "$url/" >/dev/null || true
    was=$have
    have=$(total)
    echo "SendMessage held, $was to $have tasks: $(echo "($have - $was) / ($(date +%s.%N) - $start)" | bc) req/s"
  fi
  echo "## $have tasks"
  measure "ListTasks, no filter" all
  measure "ListTasks, status + contextId" filtered
done
