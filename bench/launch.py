#!/usr/bin/env python3
"""Launch to listening: how long `murmur-door serve` takes from exec to its
`door listening` line, compiling the door at every launch
(--no-compile-cache) and with a warm compile cache.

Usage: python3 bench/launch.py [cold runs] [warm runs]
Builds the release binary first."""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.path.join(ROOT, "target", "release", "murmur-door")


def launch(extra):
    """Milliseconds from exec to the door listening."""
    state = tempfile.mkdtemp(prefix="launch-")
    try:
        manifest = os.path.join(state, "murmur.yaml")
        with open(manifest, "w") as f:
            f.write("name: launch\nversion: 0.1.0\n")
        started = time.perf_counter()
        door = subprocess.Popen(
            [BINARY, "serve", manifest, "--listen", "127.0.0.1:0", "--state", state] + extra,
            stderr=subprocess.PIPE,
            text=True,
        )
        took = None
        for line in door.stderr:
            if "door listening" in line:
                took = (time.perf_counter() - started) * 1000
                break
        door.kill()
        door.wait()
        if took is None:
            sys.exit("the door did not start")
        return took
    finally:
        shutil.rmtree(state, ignore_errors=True)


def report(label, runs):
    runs = sorted(runs)
    print(f"{label:<28} median {statistics.median(runs):7.1f} ms   min {runs[0]:7.1f}   max {runs[-1]:7.1f}   ({len(runs)} runs)")


def main():
    cold_runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    warm_runs = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    subprocess.run(["cargo", "build", "--release", "--bin", "murmur-door"], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cache = tempfile.mkdtemp(prefix="compile-cache-")
    try:
        print(f"# murmur-door serve, exec to listening, {os.cpu_count()} cores")
        report("cold (--no-compile-cache)", [launch(["--no-compile-cache"]) for _ in range(cold_runs)])
        launch(["--compile-cache", cache])
        report("warm compile cache", [launch(["--compile-cache", cache]) for _ in range(warm_runs)])
    finally:
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
