#!/usr/bin/env bash
# Request latency over loopback, measured with wrk: GET the card, a JSON-RPC
# request the door refuses (GetExtendedAgentCard on a public door, -32004),
# SendMessage held until the script agent completes the task (queue
# acceptance, so concurrent messages wait their turn), GetTask, and GetTask
# with one worker thread and with one per core.
# Usage: bench/loopback.sh [seconds] [connections]
# MURMUR_DOOR_BIN=path runs that binary instead of building this tree's, to
# compare two builds run by run on a machine whose speed drifts.
# Installs wrk from Debian's packages when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
seconds=${1:-10}
connections=${2:-32}

need_wrk
binary=$(door_binary)

state=$(mktemp -d)
trap 'kill ${door:-} ${tasks:-} ${door_pid:-} 2>/dev/null || true; rm -rf "$state"' EXIT
start_door "$binary" "$state/log" examples/my-agent.yaml --listen 127.0.0.1:0 --state "$state"
door=$door_pid url=$door_url

rpc_lua "$state/refused.lua" '{"jsonrpc":"2.0","id":1,"method":"GetExtendedAgentCard"}'

echo "# murmur-door over loopback: wrk -t2 -c$connections -d${seconds}s, $(nproc) cores"
echo "## GET /.well-known/agent-card.json"
wrk -t2 -c"$connections" -d"${seconds}s" --latency "$url/.well-known/agent-card.json" | grep -E 'Latency|^ +50%|^ +99%|Requests/sec|Non-2xx'
echo "## POST / GetExtendedAgentCard on a public door (-32004)"
wrk -t2 -c"$connections" -d"${seconds}s" --latency -s "$state/refused.lua" "$url/" | grep -E 'Latency|^ +50%|^ +99%|Requests/sec|Non-2xx'
echo "## one connection (latency without queueing)"
wrk -t1 -c1 -d"${seconds}s" --latency "$url/.well-known/agent-card.json" | grep -E 'Latency|^ +50%|^ +99%|Requests/sec'
wrk -t1 -c1 -d"${seconds}s" --latency -s "$state/refused.lua" "$url/" | grep -E 'Latency|^ +50%|^ +99%|Requests/sec'

# A second door that takes tasks in a queue.
printf 'name: bench\nversion: 0.1.0\nlifecycle: {task_acceptance: queue}\n' >"$state/queue.yaml"
start_door "$binary" "$state/tasks.log" "$state/queue.yaml" --listen 127.0.0.1:0 --state "$state/tasks"
tasks=$door_pid turl=$door_url
rpc_lua "$state/send.lua" '{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"reply hi"}]}}}'
task=$(send_task "$turl")
rpc_lua "$state/get.lua" "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"GetTask\",\"params\":{\"id\":\"$task\"}}"
echo "## SendMessage held, script agent 'reply hi' (queue)"
wrk -t2 -c"$connections" -d"${seconds}s" --latency -s "$state/send.lua" "$turl/" | grep -E 'Latency|^ +50%|^ +99%|Requests/sec|Non-2xx'
echo "## GetTask"
wrk -t2 -c"$connections" -d"${seconds}s" --latency -s "$state/get.lua" "$turl/" | grep -E 'Latency|^ +50%|^ +99%|Requests/sec|Non-2xx'

# The same GetTask on doors with one worker thread and with one per core
# (--workers): what the second core adds. wrk runs on the same cores.
for workers in 1 "$(nproc)"; do
  start_door "$binary" "$state/w$workers.log" "$state/queue.yaml" --listen 127.0.0.1:0 \
    --state "$state/w$workers" --workers "$workers"
  worker_door=$door_pid wurl=$door_url
  wtask=$(send_task "$wurl")
  sed "s/$task/$wtask/" "$state/get.lua" >"$state/wget.lua"
  echo "## GetTask, --workers $workers"
  wrk -t1 -c"$connections" -d"${seconds}s" --latency -s "$state/wget.lua" "$wurl/" | grep -E '^ +50%|^ +99%|Requests/sec|Non-2xx'
  kill "$worker_door"
  wait "$worker_door" 2>/dev/null || true
done
