#!/usr/bin/env bash
# What kept answers give and cost: GetTask polls with the answers the door
# declares reusable kept (the default) and with none kept (--reuse-bytes 0),
# over loopback with wrk. Two loads on one completed task:
#   repeat   the same GetTask again and again (ids aside): kept, each poll
#            after the first is sent again without a door instance;
#   all new  every GetTask a request not seen before (its historyLength
#            counts up): each is looked up, missed, run and kept, the most a
#            poll can cost when its answer is never found, as when the task
#            changes between every two polls.
# A poll that finds nothing must cost no more than one without kept answers.
#
# Usage: bench/reuse.sh [seconds] [connections]   (default 5 s, 16 connections)
#   MURMUR_DOOR_BIN=path runs that murmur-door instead of building this tree's
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh
seconds=${1:-5}
connections=${2:-16}
need_wrk
bin=$(door_binary)
tmp=$(mktemp -d)
door_pid=
trap '[ -n "$door_pid" ] && kill "$door_pid" 2>/dev/null; rm -rf "$tmp"' EXIT
printf 'name: bench\nversion: 0.1.0\nlifecycle: {task_acceptance: queue}\n' >"$tmp/bench.yaml"

# cpu_ticks: the door's user and system CPU so far, in clock ticks.
cpu_ticks() {
  awk '{print $14 + $15}' "/proc/$door_pid/stat"
}

# poll LUA: wrk's req/s, p50 and p99 for the requests LUA makes, and the
# door's CPU a request (wrk shares the cores: the CPU moves less than req/s).
poll() {
  local before after
  before=$(cpu_ticks)
  wrk -t1 -c"$connections" -d"${seconds}s" --latency -s "$1" "$door_url/" >"$tmp/wrk.txt"
  after=$(cpu_ticks)
  awk -v ticks=$((after - before)) -v hz="$(getconf CLK_TCK)" \
    '/Requests\/sec/ {rate = $2} /^ *[0-9]+ requests in/ {n = $1} $1 == "50%" {p50 = $2} $1 == "99%" {p99 = $2}
     END {printf "%\047d req/s, p50 %s, p99 %s, %d µs CPU", rate, p50, p99, ticks / hz * 1e6 / n}' "$tmp/wrk.txt"
}

echo "# GetTask polls with and without kept answers, ${seconds} s, ${connections} connections"
echo
echo "| Kept answers | repeat | all new |"
echo "| --- | --- | --- |"
for setting in kept none; do
  args=()
  [ "$setting" = none ] && args=(--reuse-bytes 0)
  start_door "$bin" "$tmp/door-$setting.log" "$tmp/bench.yaml" --listen 127.0.0.1:0 \
    --state "$tmp/state-$setting" "${args[@]}"
  task=$(send_task "$door_url")
  rpc_lua "$tmp/repeat.lua" '{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"'"$task"'"}}'
  cat >"$tmp/new.lua" <<LUA
local n = 0
request = function()
  n = n + 1
  local body = '{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"$task","historyLength":' .. n .. '}}'
  return wrk.format("POST", "/", {["Content-Type"] = "application/json", ["A2A-Version"] = "1.0"}, body)
end
LUA
  repeat=$(poll "$tmp/repeat.lua")
  new=$(poll "$tmp/new.lua")
  kill "$door_pid"
  wait "$door_pid" 2>/dev/null || true
  door_pid=
  echo "| $setting | $repeat | $new |"
done
