#!/usr/bin/env bash
# bench/files.sh [SECONDS] [CONNECTIONS]: the operator plane (GET
# /resources/files/...) beside nginx (Debian's package, sendfile on) and
# Python's http.server, each serving the same directory on loopback:
#   - 4 KiB files: 1,000 of them, a random one a request (wrk -t1), in req/s
#     and p99;
#   - one 256 MiB file, fetched whole three times with curl, in MB/s (the
#     best of three);
#   - each server's resident memory after each.
# Installs wrk and nginx from Debian's packages when they are missing.
# MURMUR_DOOR_BIN runs another build of the door. Results: bench/RESULTS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

seconds=${1:-10}
connections=${2:-16}
need_wrk
if ! command -v nginx >/dev/null; then
  apt-get install -y nginx-light >/dev/null 2>&1 || sudo apt-get install -y nginx-light >/dev/null
fi
binary=$(door_binary)

dir=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

work=$dir/work
mkdir -p "$work/files" "$dir/state" "$dir/nginx"
for i in $(seq 0 999); do
  head -c 4096 /dev/urandom >"$work/files/$(printf 'f%03d' "$i")"
done
head -c $((256 << 20)) /dev/urandom >"$work/big.bin"
printf 'name: files\nversion: 0.1.0\nexports:\n  files: [files/**, big.bin]\n' >"$work/murmur.yaml"

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# rss PID...: the resident KiB of the processes, summed.
rss() {
  local total=0 kib
  for pid in "$@"; do
    kib=$(ps -o rss= -p "$pid" 2>/dev/null || echo 0)
    total=$((total + kib))
  done
  echo "$total"
}

# The door.
start_door "$binary" "$dir/door.log" "$work/murmur.yaml" --listen 127.0.0.1:0 --state "$dir/state"
pids+=("$door_pid")
door_pids=("$door_pid")

# nginx, as a packager runs it: a worker per core, sendfile, no access log.
nginx_port=$(free_port)
cat >"$dir/nginx/nginx.conf" <<CONF
user $(id -un);
worker_processes auto;
pid $dir/nginx/nginx.pid;
error_log $dir/nginx/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  client_body_temp_path $dir/nginx;
  proxy_temp_path $dir/nginx;
  fastcgi_temp_path $dir/nginx;
  uwsgi_temp_path $dir/nginx;
  scgi_temp_path $dir/nginx;
  types { application/octet-stream bin; }
  server { listen 127.0.0.1:$nginx_port; root $work; }
}
CONF
nginx -c "$dir/nginx/nginx.conf" -g 'daemon off;' &
nginx_master=$!
pids+=("$nginx_master")

# Python's http.server.
python_port=$(free_port)
python3 -m http.server "$python_port" --bind 127.0.0.1 --directory "$work" >/dev/null 2>&1 &
python_pid=$!
pids+=("$python_pid")

for _ in $(seq 100); do
  if curl -sf "$door_url/resources/files/files/f000" >/dev/null \
    && curl -sf "http://127.0.0.1:$nginx_port/files/f000" >/dev/null \
    && curl -sf "http://127.0.0.1:$python_port/files/f000" >/dev/null; then
    break
  fi
  sleep 0.1
done
nginx_pids() { echo "$nginx_master" $(pgrep -P "$nginx_master" || true); }

# small NAME URL_PREFIX PIDS...: 4 KiB files, a random one a request.
small() {
  local name=$1 prefix=$2
  shift 2
  cat >"$dir/random.lua" <<LUA
math.randomseed(42)
request = function()
  return wrk.format("GET", string.format("$prefix/f%03d", math.random(0, 999)))
end
LUA
  local out
  out=$(wrk -t1 -c"$connections" -d"${seconds}s" --latency -s "$dir/random.lua" "$prefix" 2>&1)
  local rps p99
  rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
  p99=$(echo "$out" | awk '$1 == "99%" {print $2}')
  echo "$name small $rps $p99 $(rss "$@")"
}

# big NAME URL PIDS...: the 256 MiB file, best of three, in MB/s.
big() {
  local name=$1 url=$2 best=0 speed
  shift 2
  for _ in 1 2 3; do
    speed=$(curl -s -o /dev/null -w '%{speed_download}' "$url")
    best=$(python3 -c "print(max($best, $speed))")
  done
  echo "$name big $(python3 -c "print(round($best / 1e6))") $(rss "$@")"
}

door=${door_url}/resources/files
results=()
results+=("$(small door "$door/files" "${door_pids[@]}")")
results+=("$(small nginx "http://127.0.0.1:$nginx_port/files" $(nginx_pids))")
results+=("$(small http.server "http://127.0.0.1:$python_port/files" "$python_pid")")
results+=("$(big door "$door/big.bin" "${door_pids[@]}")")
results+=("$(big nginx "http://127.0.0.1:$nginx_port/big.bin" $(nginx_pids))")
results+=("$(big http.server "http://127.0.0.1:$python_port/big.bin" "$python_pid")")

echo "# bench/files.sh $seconds s, -c$connections, $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ)"
echo
echo "| Server | 4 KiB files (req/s) | p99 | RSS after (MiB) | 256 MiB file (MB/s) | RSS after (MiB) |"
echo "| --- | --- | --- | --- | --- | --- |"
for name in door nginx http.server; do
  s=$(printf '%s\n' "${results[@]}" | awk -v n="$name" '$1 == n && $2 == "small"')
  b=$(printf '%s\n' "${results[@]}" | awk -v n="$name" '$1 == n && $2 == "big"')
  read -r _ _ rps p99 small_rss <<<"$s"
  read -r _ _ mbs big_rss <<<"$b"
  echo "| $name | $rps | $p99 | $((small_rss / 1024)) | $mbs | $((big_rss / 1024)) |"
done
door_rps=$(printf '%s\n' "${results[@]}" | awk '$1 == "door" && $2 == "small" {print $3}')
nginx_rps=$(printf '%s\n' "${results[@]}" | awk '$1 == "nginx" && $2 == "small" {print $3}')
door_mbs=$(printf '%s\n' "${results[@]}" | awk '$1 == "door" && $2 == "big" {print $3}')
nginx_mbs=$(printf '%s\n' "${results[@]}" | awk '$1 == "nginx" && $2 == "big" {print $3}')
echo
echo "door ÷ nginx: 4 KiB files $(python3 -c "print(f'{$door_rps / $nginx_rps:.2f}')")×, 256 MiB file $(python3 -c "print(f'{$door_mbs / $nginx_mbs:.2f}')")×"
