#!/usr/bin/env bash
# The sidecar image end to end: builds the top-level Dockerfile, starts stokerd
# in a container over a small generated dataset, consumes one epoch from a
# second container of the same image that shares only the socket folder, and
# checks health, the HEALTHCHECK, the non-root user, a clean SIGTERM shutdown
# (exit 0, nothing in /dev/shm, no socket left), that a 1 MB /dev/shm does not
# limit the rings and that --ring-budget-mb does, and a decode node serving a
# second sidecar.
#
#   scripts/container-test.sh        (from anywhere; needs podman or a Docker engine)
#
# Engine: podman made usable by ../shared/tools/podman-env where that exists
# (these machines and CI: no Docker engine, no registry), else a running
# Docker engine, else podman as installed. Without any it prints
# "container test: skipped (no container engine)" and exits 0.
#
# Environment: STOKER_IMAGE=name  test an image already built (no build, not removed);
#              STOKER_KEEP=1      leave the image and the temp dir behind.
set -euo pipefail
cd "$(dirname "$0")/.."
t_start=$(date +%s)

skip() {
  echo "container test: skipped (no container engine${1:+: $1})"
  exit 0
}

# --- the engine ---
engine=""
build_flags=()
if [[ -x ../shared/tools/podman-env ]] && env_out=$(../shared/tools/podman-env 2>/dev/null) &&
  eval "$env_out" && command -v podman >/dev/null && podman info >/dev/null 2>&1; then
  engine=podman
elif command -v docker >/dev/null && docker info >/dev/null 2>&1; then
  engine=docker
elif command -v podman >/dev/null && podman info >/dev/null 2>&1; then
  engine=podman
fi
[[ -n $engine ]] || skip
if [[ $engine == podman ]]; then
  # No registry here: the base image is local. Docker format keeps HEALTHCHECK.
  build_flags=(--pull=never --format docker)
fi
echo "==> container test with $engine"

id=stoker-ctest-$$
image=${STOKER_IMAGE:-localhost/stoker-ctest:$$}
sidecar=$id-sidecar
work=""
built=0

cleanup() {
  local rc=$?
  # One at a time: podman 4.3 removes none of several names when one is missing.
  local c rm_flags=(-f)
  [[ $engine == podman ]] && rm_flags+=(-t 0)
  for c in "$sidecar" "$sidecar-small" "$sidecar-budget" "$sidecar-remote" "$id-client" \
    "$id-node"; do
    "$engine" rm "${rm_flags[@]}" "$c" >/dev/null 2>&1 || true
  done
  if [[ $built == 1 && ${STOKER_KEEP:-0} != 1 ]]; then
    "$engine" rmi -f "$image" >/dev/null 2>&1 || true
  fi
  if [[ -n $work && ${STOKER_KEEP:-0} != 1 ]]; then
    # Files the container's user made may be owned by a subordinate UID
    # (rootless podman): remove those from inside the user namespace.
    rm -rf "$work" 2>/dev/null || { [[ $engine == podman ]] && podman unshare rm -rf "$work"; } || true
  fi
  echo "container test: $([[ $rc == 0 ]] && echo passed || echo FAILED) in $(($(date +%s) - t_start)) s"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
  echo "container test: $*" >&2
  if [[ -n ${logs_from:-} ]]; then
    echo "--- logs of $logs_from ---" >&2
    "$engine" logs "$logs_from" 2>&1 | tail -40 >&2 || true
  fi
  exit 1
}

# --- the image ---
if [[ -z ${STOKER_IMAGE:-} ]]; then
  echo "==> building $image (the first build compiles stoker: minutes)"
  t0=$(date +%s)
  log=$(mktemp)
  if ! "$engine" build "${build_flags[@]}" -t "$image" -f Dockerfile . >"$log" 2>&1; then
    tail -40 "$log" >&2
    rm -f "$log"
    fail "image build failed"
  fi
  rm -f "$log"
  built=1
  echo "    built in $(($(date +%s) - t0)) s"
fi
size=$("$engine" image inspect --format '{{.Size}}' "$image")
echo "    image size: $((size / 1000000)) MB"

# The HEALTHCHECK must be in the image (podman keeps it only with --format docker).
"$engine" image inspect "$image" | grep -A8 -i '"healthcheck"' | grep -q 'stokerctl health' ||
  fail "the image has no HEALTHCHECK running stokerctl health"
echo "    HEALTHCHECK recorded"

# --- a dataset and a socket folder ---
# The containers share only the socket folder: rings are memfds whose fds
# the trainer receives over the ring socket, so no /dev/shm is shared.
work=$(mktemp -d "${TMPDIR:-/tmp}/ctest-stoker.XXXXXX")
chmod 0755 "$work"
mkdir -p "$work/data" "$work/sock"
# The containers run as uid 10001: the folder they write is world-writable
# and sticky, like /tmp (a test; see docker/README.md for real deployments).
chmod 1777 "$work/sock"
classes=3
per_class=20
n=$((classes * per_class))
/usr/bin/python3 scripts/make_dataset.py "$work/data/ds" --classes $classes --per-class $per_class \
  --min-size 64 --max-size 160 >/dev/null
chmod -R a+rX "$work/data"

mounts=(-v "$work/sock:/run/stoker")
# Run the sidecar as Kubernetes would (docker/k8s-pod.yaml): read-only root,
# no capabilities, no privilege escalation.
hardening=(--read-only --cap-drop ALL --security-opt no-new-privileges)

# --- the sidecar ---
echo "==> starting the sidecar"
# (podman without systemd says on stderr that it cannot schedule the periodic
# health checks; `podman healthcheck run` below runs the check itself.)
"$engine" run -d --name "$sidecar" "${hardening[@]}" "${mounts[@]}" \
  -v "$work/data:/data:ro" -e STOKER_WORKERS=2 -e STOKER_MAX_SESSIONS=5 "$image" --log-level info \
  >/dev/null 2>"$work/run.err" || { cat "$work/run.err" >&2; fail "cannot start the sidecar"; }
logs_from=$sidecar

# Wait (with a deadline) for SERVING, asked inside the sidecar.
deadline=$(($(date +%s) + 60))
until "$engine" exec "$sidecar" stokerctl health >/dev/null 2>&1; do
  [[ $("$engine" inspect --format '{{.State.Running}}' "$sidecar") == true ]] ||
    fail "the sidecar exited before serving"
  (($(date +%s) < deadline)) || fail "the sidecar is not SERVING after 60 s"
  sleep 0.5
done
echo "    stokerctl health in the sidecar: SERVING"
[[ -S $work/sock/stoker.sock ]] || fail "no socket at /run/stoker/stoker.sock"

# The image's own HEALTHCHECK command, run once by the engine.
if [[ $engine == podman ]]; then
  podman healthcheck run "$sidecar" >/dev/null || fail "podman healthcheck run failed"
  echo "    podman healthcheck run: healthy"
fi

# Every process of the container (tini, stokerd, its workers) runs as 10001.
uids=$("$engine" exec "$sidecar" sh -c \
  'for s in /proc/[0-9]*/status; do sed -n "s/^Uid:[[:space:]]*\([0-9]*\).*/\1/p" "$s" 2>/dev/null; done' |
  sort -u | tr '\n' ' ')
[[ $uids == "10001 " ]] || fail "processes in the sidecar run as uids: $uids (want only 10001)"
procs=$("$engine" exec "$sidecar" sh -c 'cat /proc/[0-9]*/comm 2>/dev/null' | sort | uniq -c | tr -s ' \n' ' ')
echo "    every process runs as uid 10001:$procs"

# --- a client in a second container of the same image ---
# With a /dev/shm of its own, as every container has by default.
echo "==> consuming one epoch from a client container (its own /dev/shm)"
out=$("$engine" run --rm --name "$id-client" --no-healthcheck --read-only --cap-drop ALL "${mounts[@]}" \
  "$image" stokerctl consume --dataset ds --pipeline train --size 64 --batch-size 16 \
  --epochs 1 --json) || fail "stokerctl consume failed: $out"
echo "    $out"
samples=$(sed -n 's/.*"samples":\([0-9]*\).*/\1/p' <<<"$out")
batches=$(sed -n 's/.*"batches":\([0-9]*\).*/\1/p' <<<"$out")
failed=$(sed -n 's/.*"failed":\([0-9]*\).*/\1/p' <<<"$out")
[[ $samples == "$n" ]] || fail "consumed $samples samples, want $n"
[[ $batches == $(((n + 15) / 16)) ]] || fail "consumed $batches batches, want $(((n + 15) / 16))"
[[ $failed == 0 ]] || fail "$failed samples failed"

status=$("$engine" exec "$sidecar" stokerctl status --json) || fail "stokerctl status failed"
grep -q 'data_root[^,]*"/data' <<<"$status" || fail "status does not show data_root /data: $status"
# Any flag through the environment (stokerd --from-env): STOKER_MAX_SESSIONS.
grep -Eq '"max_sessions"[: ]*5[,}]' <<<"$status" || fail "STOKER_MAX_SESSIONS=5 did not reach stokerd: $status"

# --- SIGTERM, with a session attached ---
# A client that would consume forever; its ring is a memfd that stokerd
# holds, named in no /dev/shm, and both sockets are owner-only (10001).
echo "==> stopping the sidecar (SIGTERM) under an attached client"
"$engine" run -d --name "$id-client" --no-healthcheck --read-only --cap-drop ALL "${mounts[@]}" \
  "$image" stokerctl consume --dataset ds --pipeline train --size 64 --batch-size 16 \
  --epochs 0 --json >/dev/null || fail "cannot start the endless client"
deadline=$(($(date +%s) + 30))
until ring=$("$engine" exec "$sidecar" sh -c \
  'for f in /proc/[0-9]*/fd/*; do readlink "$f"; done 2>/dev/null | grep -m1 "^/memfd:stoker-"') &&
  [[ -n $ring ]]; do
  (($(date +%s) < deadline)) || fail "no ring (memfd) appeared in stokerd"
  sleep 0.2
done
named=$("$engine" exec "$sidecar" sh -c 'ls /dev/shm' | tr '\n' ' ')
[[ -z $named ]] || fail "the sidecar's /dev/shm holds: $named"
perm=$(stat -c '%a %u' "$work/sock/stoker.sock.ring")
[[ $perm == "600 10001" ]] || fail "the ring socket has mode/owner $perm, want 600 10001"
echo "    ring ${ring%% *} held by stokerd, nothing in /dev/shm; ring socket mode 0600, uid 10001"
"$engine" stop -t 30 "$sidecar" >/dev/null 2>"$work/stop.err" || { cat "$work/stop.err" >&2; fail "stop failed"; }
code=$("$engine" inspect --format '{{.State.ExitCode}}' "$sidecar")
[[ $code == 0 ]] || fail "the sidecar exited with $code, want 0"
"$engine" logs "$sidecar" 2>&1 | grep -q 'stokerd stopped' || fail "no 'stokerd stopped' in the logs"
[[ ! -e $work/sock/stoker.sock ]] || fail "the socket was left behind"
[[ ! -e $work/sock/stoker.sock.ring ]] || fail "the ring socket was left behind"
echo "    exit code 0, both sockets removed"
# The attached client learns that the daemon has gone, and ends.
deadline=$(($(date +%s) + 30))
while [[ $("$engine" inspect --format '{{.State.Running}}' "$id-client") == true ]]; do
  (($(date +%s) < deadline)) || fail "the attached client still runs 30 s after the daemon stopped"
  sleep 0.2
done
echo "    the attached client ended (exit $("$engine" inspect --format '{{.State.ExitCode}}' "$id-client")):" \
  "$("$engine" logs "$id-client" 2>&1 | tail -1)"
logs_from=""

# --- Docker's small /dev/shm no longer limits the rings ---
# A sidecar with a 1 MB /dev/shm serves a 19.3 MB ring (4 x 32 x 224x224x3):
# rings are memory, not /dev/shm files. Its --ring-budget-mb still holds them:
# at 16 MiB the same ring is refused, naming the flag.
echo "==> a 1 MB /dev/shm (--shm-size 1m) and the ring budget"
# start_serving NAME [ENGINE ARGS...] -- [STOKERD ARGS...]: a sidecar on a
# fresh socket folder, SERVING.
start_serving() {
  local name=$1 engine_args=() daemon_args=()
  shift
  while (($#)) && [[ $1 != -- ]]; do engine_args+=("$1"); shift; done
  (($#)) && shift
  daemon_args=("$@")
  rm -rf "$work/sock" && mkdir "$work/sock" && chmod 1777 "$work/sock"
  "$engine" run -d --name "$name" "${hardening[@]}" "${engine_args[@]}" \
    -v "$work/sock:/run/stoker" -v "$work/data:/data:ro" -e STOKER_WORKERS=2 "$image" \
    "${daemon_args[@]}" >/dev/null 2>"$work/run.err" ||
    { cat "$work/run.err" >&2; fail "cannot start the sidecar"; }
  logs_from=$name
  local deadline=$(($(date +%s) + 60))
  until "$engine" exec "$name" stokerctl health >/dev/null 2>&1; do
    (($(date +%s) < deadline)) || fail "the sidecar is not SERVING after 60 s"
    sleep 0.5
  done
}
start_serving "$sidecar-small" --shm-size 1m
client=("$engine" run --rm --no-healthcheck --read-only --cap-drop ALL
  -v "$work/sock:/run/stoker" "$image" stokerctl consume --dataset ds --epochs 1 --json)
out=$("${client[@]}" --size 224 --batch-size 32) || fail "a 19.3 MB ring with a 1 MB /dev/shm: $out"
samples=$(sed -n 's/.*"samples":\([0-9]*\).*/\1/p' <<<"$out")
[[ $samples == "$n" ]] || fail "consumed $samples samples, want $n"
echo "    a 19.3 MB ring beside a 1 MB /dev/shm: $out"
"$engine" stop -t 30 "$sidecar-small" >/dev/null 2>"$work/stop.err" || { cat "$work/stop.err" >&2; fail "stop failed"; }
code=$("$engine" inspect --format '{{.State.ExitCode}}' "$sidecar-small")
[[ $code == 0 ]] || fail "the sidecar exited with $code, want 0"
start_serving "$sidecar-budget" -- --ring-budget-mb 16
if big=$("${client[@]}" --size 224 --batch-size 32 2>&1); then
  fail "a 19.3 MB ring fitted a 16 MiB --ring-budget-mb: $big"
fi
grep -q 'ring-budget-mb' <<<"$big" || fail "the refusal does not say what to do: $big"
echo "    too big for the budget: ${big#stokerctl: }"
"$engine" stop -t 30 "$sidecar-budget" >/dev/null 2>"$work/stop.err" || { cat "$work/stop.err" >&2; fail "stop failed"; }
echo "    exit code $("$engine" inspect --format '{{.State.ExitCode}}' "$sidecar-budget")"
logs_from=""

# A decode node from the same image, and a sidecar that sends it work
# (docker/k8s/decode-nodes.yaml's pair, with the development token instead of
# TLS): the sidecar shares the node's network namespace and dials it on
# 127.0.0.1; every sample of an epoch is delivered and the node decoded some.
echo "==> a decode node and a sidecar that uses it"
node=$id-node
printf '%s\n' "$(od -An -tx1 -N24 /dev/urandom | tr -d ' \n')" > "$work/token"
chmod 0644 "$work/token"  # the containers' uid 10001 reads it (a test; a Secret in production)
# Its health on --status-addr, where the image's HEALTHCHECK asks when
# STOKER_SOCKET names that address (a decode node has no Unix socket).
"$engine" run -d --name "$node" "${hardening[@]}" -v "$work/token:/etc/stoker/token:ro" \
  -e STOKER_SOCKET=127.0.0.1:9090 "$image" --decode-node --listen 127.0.0.1:7070 \
  --status-addr 127.0.0.1:9090 --decode-token-file /etc/stoker/token --workers 1 \
  >/dev/null 2>"$work/run.err" || { cat "$work/run.err" >&2; fail "cannot start the decode node"; }
logs_from=$node
deadline=$(($(date +%s) + 60))
until "$engine" logs "$node" 2>&1 | grep -q 'decode node: .* listening on'; do
  [[ $("$engine" inspect --format '{{.State.Running}}' "$node") == true ]] ||
    fail "the decode node exited before listening"
  (($(date +%s) < deadline)) || fail "the decode node is not listening after 60 s"
  sleep 0.5
done
if [[ $engine == podman ]]; then
  podman healthcheck run "$node" >/dev/null || fail "podman healthcheck run failed on the decode node"
  echo "    the decode node's HEALTHCHECK (stokerctl health on --status-addr): healthy"
fi
start_serving "$sidecar-remote" --network "container:$node" -v "$work/token:/etc/stoker/token:ro" \
  -- --decode-nodes 127.0.0.1:7070 --decode-token-file /etc/stoker/token --decode-when always \
  --workers 1
out=$("${client[@]}" --size 64 --batch-size 4) || fail "an epoch through a decode node: $out"
samples=$(sed -n 's/.*"samples":\([0-9]*\).*/\1/p' <<<"$out")
[[ $samples == "$n" ]] || fail "consumed $samples samples through the decode node, want $n"
remote=$("$engine" exec "$sidecar-remote" stokerctl status --json |
  /usr/bin/python3 -c 'import json,sys; print(sum(int(d.get("samples_done", 0)) for d in json.load(sys.stdin).get("decode_nodes", [])))')
((remote > 0)) || fail "the decode node decoded no sample"
echo "    $samples samples, $remote of them decoded by the decode node"
"$engine" stop -t 30 "$sidecar-remote" >/dev/null 2>"$work/stop.err" || { cat "$work/stop.err" >&2; fail "stop failed"; }
code=$("$engine" inspect --format '{{.State.ExitCode}}' "$sidecar-remote")
[[ $code == 0 ]] || fail "the sidecar exited with $code, want 0"
"$engine" stop -t 30 "$node" >/dev/null 2>"$work/stop.err" || { cat "$work/stop.err" >&2; fail "stop failed"; }
code=$("$engine" inspect --format '{{.State.ExitCode}}' "$node")
[[ $code == 0 ]] || fail "the decode node exited with $code, want 0"
echo "    both stopped cleanly"
logs_from=""
