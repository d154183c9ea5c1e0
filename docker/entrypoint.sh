#!/bin/sh
# stoker-entrypoint: the image's ENTRYPOINT (under tini). Starts stokerd with
# --from-env: every stokerd flag not given as an argument is read from
# STOKER_<NAME> when set (STOKER_DATA_ROOT, STOKER_WORKERS, ...; `stokerd
# --help` lists the flags). The image's
# defaults are ENV lines of the Dockerfile; the container's environment and
# arguments (CMD) override them, an argument winning over a variable.
# Arguments that do not start with "-" are a command run instead of stokerd,
# e.g. `stokerctl status`.
set -eu

case "${1:-}" in
  "" | -*) ;;
  *) exec "$@" ;;
esac
exec /usr/local/bin/stokerd --from-env "$@"
