#!/usr/bin/env bash
# Smoke-tests the image deploy/build.sh built, as the Kubernetes example runs
# it: the ConfigMap's files mounted read-only at /etc/murmur, a volume at
# /state, the Secret's token in the environment, a read-only root, the
# image's own user. Checks /healthz, places a capsule through POST /capsules,
# reads its card by host name on the shared port and a 404 for an unknown
# name, then stops the container with SIGTERM and checks it exited 0.
#
# Usage: deploy/smoke.sh [image tag]      (default murmur-door:dev)
#   PODMAN_FLAGS adds podman's own flags and RUN_FLAGS flags of its run
#   (this project's machine needs PODMAN_FLAGS="--runtime runc" and
#   RUN_FLAGS="--ulimit nofile=1024:1024 --ulimit nproc=1000:1000", within
#   its sandbox's limits). The container uses the host's network, so ports
#   8080 and 41900 must be free.
set -euo pipefail
cd "$(dirname "$0")/.."
tag=${1:-murmur-door:dev}
dir=$(mktemp -d)
trap 'podman ${PODMAN_FLAGS:-} rm -f smoke-murmur-door >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
mkdir -p "$dir/etc" "$dir/state"
python3 - "$dir" <<'PY'
import sys, yaml
dir = sys.argv[1]
docs = list(yaml.safe_load_all(open("deploy/kubernetes/murmur-door.yaml")))
for doc in docs:
    if doc["kind"] == "ConfigMap":
        for name, text in doc["data"].items():
            open(f"{dir}/etc/{name}", "w").write(text)
    if doc["kind"] == "Secret":
        open(f"{dir}/token", "w").write(doc["stringData"]["token"])
PY
chown -R 65532:65532 "$dir/state"
token=$(cat "$dir/token")
# shellcheck disable=SC2086
podman ${PODMAN_FLAGS:-} run -d --name smoke-murmur-door --network host --read-only ${RUN_FLAGS:-} \
  -e RUST_LOG=info -e XDG_CACHE_HOME=/state/cache -e MURMUR_DOOR_HOST_CONTROL_TOKEN="$token" \
  -v "$dir/etc:/etc/murmur:ro" -v "$dir/state:/state" "$tag" >/dev/null
for _ in $(seq 100); do
  curl -sf localhost:41900/healthz >/dev/null && break
  sleep 0.1
done
check() { # what, expected, got
  if [ "$2" != "$3" ]; then echo "FAIL: $1: expected $2, got $3" >&2; exit 1; fi
  echo "ok: $1"
}
check healthz '{"status":"ok"}' "$(curl -s localhost:41900/healthz)"
name=alpha.murmur-door-0.capsules.example.com
added=$(curl -s -o /dev/null -w '%{http_code}' -X POST localhost:41900/capsules \
  -H "Authorization: Bearer $token" \
  -d "{\"name\":\"alpha\",\"manifest\":\"agent.yaml\",\"hostnames\":[\"$name\"],\"state\":\"/state/capsules/alpha\"}")
check "POST /capsules" 201 "$added"
url=$(curl -s -H "Host: $name" localhost:8080/.well-known/agent-card.json |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["supportedInterfaces"][0]["url"])')
check "the card by host name" "http://$name:8080" "$url"
check "an unknown host name" 404 "$(curl -s -o /dev/null -w '%{http_code}' -H 'Host: nobody.example' localhost:8080/)"
# shellcheck disable=SC2086
podman ${PODMAN_FLAGS:-} stop -t 30 smoke-murmur-door >/dev/null
# shellcheck disable=SC2086
check "exit status on SIGTERM" 0 "$(podman ${PODMAN_FLAGS:-} inspect -f '{{.State.ExitCode}}' smoke-murmur-door)"
