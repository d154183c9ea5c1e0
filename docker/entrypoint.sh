#!/bin/sh
# stoker-entrypoint: the image's ENTRYPOINT (under tini). Starts stokerd with
# the image's defaults, which the environment and the container's arguments
# (CMD) override:
#
#   STOKER_SOCKET       --socket       (default /run/stoker/stoker.sock)
#   STOKER_DATA_ROOT    --data-root    (default /data)
#   STOKER_WORKERS      --workers      (default "auto": stokerd sizes its pool to the
#                                       trainers, within this container's CPU quota)
#   STOKER_RESERVE_CPUS --reserve-cpus (default 0: the trainers run in containers of
#                                       their own, on CPUs that are not this one's)
#   STOKER_SOCKET_MODE  --socket-mode  (e.g. 0660, for a trainer with another UID in our group)
#   STOKER_LOG_LEVEL    --log-level
#   STOKER_LOG_JSON=1   --log-json
#   STOKER_INDEX_CACHE  --index-cache  (the image: /var/cache/stoker; "" for none)
#   STOKER_TRANSCODE_CACHE --transcode-cache (the image: /var/cache/stoker/transcode; off for none)
#
# A flag given as an argument wins over the variable (stokerd refuses a flag
# given twice, so the default is then left out). Arguments that do not start
# with "-" are a command run instead of stokerd, e.g. `stokerctl status`.
set -eu

case "${1:-}" in
  "" | -*) ;;
  *) exec "$@" ;;
esac

# given FLAG ARGS...: whether ARGS hold FLAG (as "FLAG VALUE" or "FLAG=VALUE").
given() {
  flag=$1
  shift
  for a in "$@"; do
    case $a in "$flag" | "$flag"=*) return 0 ;; esac
  done
  return 1
}

# Prepended in reverse, so the command line reads in the order of the table.
if [ -n "${STOKER_TRANSCODE_CACHE+set}" ] && ! given --transcode-cache "$@"; then
  set -- --transcode-cache "$STOKER_TRANSCODE_CACHE" "$@"
fi
if [ -n "${STOKER_INDEX_CACHE+set}" ] && ! given --index-cache "$@"; then
  set -- --index-cache "$STOKER_INDEX_CACHE" "$@"
fi
if [ "${STOKER_LOG_JSON:-0}" = 1 ] && ! given --log-json "$@"; then
  set -- --log-json "$@"
fi
if [ -n "${STOKER_LOG_LEVEL:-}" ] && ! given --log-level "$@"; then
  set -- --log-level "$STOKER_LOG_LEVEL" "$@"
fi
if [ -n "${STOKER_SOCKET_MODE:-}" ] && ! given --socket-mode "$@"; then
  set -- --socket-mode "$STOKER_SOCKET_MODE" "$@"
fi
if ! given --reserve-cpus "$@"; then
  set -- --reserve-cpus "${STOKER_RESERVE_CPUS:-0}" "$@"
fi
if ! given --workers "$@"; then
  set -- --workers "${STOKER_WORKERS:-auto}" "$@"
fi
if ! given --data-root "$@"; then
  set -- --data-root "${STOKER_DATA_ROOT:-/data}" "$@"
fi
if ! given --socket "$@"; then
  set -- --socket "${STOKER_SOCKET:-/run/stoker/stoker.sock}" "$@"
fi
exec /usr/local/bin/stokerd "$@"
