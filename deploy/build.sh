#!/usr/bin/env bash
# Builds the host's container image: a static `murmur-door` (glibc linked
# in, `+crt-static`; the door component is embedded) on an empty base
# (`FROM scratch`). Nothing is fetched when the image is built or run: the
# binary is built here, by the machine's own toolchain, and copied in.
#
# Usage: deploy/build.sh [image tag]      (default murmur-door:dev)
#   CONTAINER=podman|docker|buildah picks the builder (default: the first found)
#   The static binary is target/x86_64-unknown-linux-gnu/release/murmur-door.
set -euo pipefail
cd "$(dirname "$0")/.."
tag=${1:-murmur-door:dev}
target=x86_64-unknown-linux-gnu
# --target keeps the flag off build scripts and proc macros, which run here.
CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C target-feature=+crt-static" \
  cargo build --release --locked --bin murmur-door --target "$target"
binary=target/$target/release/murmur-door
# A dynamic executable names its loader (the INTERP header); a static one
# has none.
if readelf -l "$binary" | grep -q INTERP; then
  echo "$binary is not static" >&2
  exit 1
fi
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
cp "$binary" "$context/murmur-door"
cp deploy/Containerfile "$context/Containerfile"
builder=${CONTAINER:-$(command -v podman || command -v docker || command -v buildah || true)}
if [ -z "$builder" ]; then
  echo "no container builder (podman, docker or buildah); the static binary is $binary" >&2
  exit 1
fi
case "$(basename "$builder")" in
  buildah) "$builder" bud -t "$tag" "$context" ;;
  *) "$builder" build -t "$tag" "$context" ;;
esac
echo "built $tag"
