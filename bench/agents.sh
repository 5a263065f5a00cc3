#!/usr/bin/env bash
# Held SendMessage (no returnImmediately) over loopback with each kind of
# agent, measured with wrk: the script agent ('reply hi'), one long-lived
# JSON-lines agent per session (--agent-stdio, examples/agents/echo.py) and
# one process per task (--agent-cmd, echo.py --once), each 'hi'. Each door
# serves examples/my-agent.yaml with task_acceptance: queue instead of
# single, so that wrk's concurrent messages wait their turn instead of being
# rejected as busy; a task that did not complete is counted apart.
# Prints tasks completed a second for each agent, then stdio/script and
# stdio/agent-cmd.
# Usage: bench/agents.sh [seconds] [connections]   (default $SECS or 10; 8)
# MURMUR_DOOR_BIN=path runs that binary instead of building this tree's.
# Installs wrk from Debian's packages when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
seconds=${1:-${SECS:-10}}
connections=${2:-8}

need_wrk
binary=$(door_binary)

tmp=$(mktemp -d)
cleanup() {
  if [ -n "${door_pid:-}" ]; then
    kill "$door_pid" 2>/dev/null || true
    wait "$door_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# examples/my-agent.yaml, taking tasks in a queue.
sed 's/^\( *task_acceptance:\) *single *$/\1 queue/' examples/my-agent.yaml >"$tmp/my-agent.yaml"
if ! grep -q '^ *task_acceptance: queue$' "$tmp/my-agent.yaml"; then
  echo "agents.sh: examples/my-agent.yaml no longer says task_acceptance: single" >&2
  exit 1
fi

echo_py=$(printf '%q' "$PWD/examples/agents/echo.py")

send_body() { # text
  printf '{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"%s"}]}}}' "$1"
}

# send.lua: the held SendMessage, counting the answers that carry a
# completed task; done() prints "completed N other N seconds S p50 X p99 Y".
send_lua() { # file, text
  rpc_lua "$1" "$(send_body "$2")"
  cat >>"$1" <<'LUA'
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) completed = 0; other = 0 end
function response(status, headers, body)
  if status == 200 and body:find("TASK_STATE_COMPLETED", 1, true) then
    completed = completed + 1
  else
    other = other + 1
  end
end
function done(summary, latency, requests)
  local c, o = 0, 0
  for _, t in ipairs(threads) do
    c = c + t:get("completed")
    o = o + t:get("other")
  end
  local e = summary.errors
  o = o + e.connect + e.read + e.write + e.timeout
  io.write(string.format("completed %d other %d seconds %.3f p50 %.2fms p99 %.2fms\n",
    c, o, summary.duration / 1e6, latency:percentile(50) / 1e3, latency:percentile(99) / 1e3))
end
LUA
}

declare -A rate
# run NAME TEXT AGENT_ARGS...: a door with AGENT_ARGS, one held message to
# start its agent, then wrk; prints the agent's row and keeps its rate.
run() {
  local name=$1 text=$2
  shift 2
  local dir=$tmp/$name
  mkdir -p "$dir"
  start_door "$binary" "$dir/log" "$tmp/my-agent.yaml" --listen 127.0.0.1:0 --state "$dir/state" "$@"
  local url=$door_url
  if ! curl -s -m 30 -X POST "$url/" -H 'Content-Type: application/json' -H 'A2A-Version: 1.0' \
    -d "$(send_body "$text")" | grep -q TASK_STATE_COMPLETED; then
    echo "agents.sh: $name: the first task did not complete; the door's log:" >&2
    cat "$dir/log" >&2
    exit 1
  fi
  send_lua "$dir/send.lua" "$text"
  local out
  # A queued message waits for the ones before it: wrk's timeout is long.
  out=$(wrk -t1 -c"$connections" -d"${seconds}s" --timeout 60s -s "$dir/send.lua" "$url/" | grep '^completed ')
  kill "$door_pid"
  wait "$door_pid" 2>/dev/null || true
  door_pid=
  # completed N other N seconds S p50 X p99 Y
  read -r _ completed _ other _ duration _ p50 _ p99 <<<"$out"
  rate[$name]=$(awk -v n="$completed" -v s="$duration" 'BEGIN {printf "%.1f", n / s}')
  printf '%-10s %12s %8s %10s %10s\n' "$name" "${rate[$name]}" "$other" "$p50" "$p99"
}

ratio() { # a b: a / b to two places
  awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "-"}'
}

echo "# held SendMessage over loopback, one door an agent: wrk -t1 -c$connections -d${seconds}s, $(nproc) cores, $binary"
echo "# requests/s: completed tasks a second; other: answers without a completed task, and socket errors"
printf '%-10s %12s %8s %10s %10s\n' agent requests/s other p50 p99
run script 'reply hi' --agent script
# The script agent through the path every running agent takes (the task
# recorded working, then ended: two writes), where 'reply hi' ends at once.
run script-run 'progress hi' --agent script
run stdio hi --agent-stdio "python3 $echo_py"
run agent-cmd hi --agent-cmd "python3 $echo_py --once"
echo "stdio/script     $(ratio "${rate[stdio]}" "${rate[script]}")"
echo "stdio/agent-cmd  $(ratio "${rate[stdio]}" "${rate[agent-cmd]}")"
