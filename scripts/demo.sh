#!/usr/bin/env bash
# The stoker demo on a fresh Debian 12 machine: installs what it needs,
# builds, makes a sample dataset, starts stokerd, feeds the Python loader for
# two epochs, prints images/s, and stops the daemon cleanly (no socket or
# shared memory left behind).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
stoker_ensure_packages
echo "==> building into build/"
stoker_build build

work=$(mktemp -d /tmp/stoker-demo.XXXXXX)
daemon_pid=""
cleanup() {
  [[ -n $daemon_pid ]] && kill -KILL "$daemon_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "==> making a sample dataset (400 JPEGs in 4 classes)"
/usr/bin/python3 scripts/make_dataset.py "$work/data/demo" --classes 4 --per-class 100

workers=$(nproc)
echo "==> starting stokerd with $workers workers"
build/bin/stokerd --socket "$work/stoker.sock" --data-root "$work/data" \
  --workers "$workers" 2>"$work/stokerd.log" &
daemon_pid=$!
for _ in $(seq 1 200); do
  build/bin/stokerctl health --socket "$work/stoker.sock" >/dev/null 2>&1 && break
  kill -0 "$daemon_pid" 2>/dev/null || { cat "$work/stokerd.log"; exit 1; }
  sleep 0.05
done
build/bin/stokerctl health --socket "$work/stoker.sock"

echo "==> feeding the Python loader for 2 epochs"
PYTHONPATH=build/python /usr/bin/python3 examples/consume.py \
  --socket "$work/stoker.sock" --dataset demo --epochs 2

echo "==> stopping stokerd"
pid=$daemon_pid
kill -TERM "$pid"
status=0
wait "$pid" || status=$?
daemon_pid=""
# Its rings are memfds, named in no file system: they went with the
# processes that held them. Its two sockets must be gone.
if [[ $status -ne 0 || -e $work/stoker.sock || -e $work/stoker.sock.ring ]]; then
  echo "demo: unclean stop (exit $status, or a socket left in $work)" >&2
  cat "$work/stokerd.log" >&2
  exit 1
fi
echo "==> stokerd stopped cleanly: no socket left, rings freed"
