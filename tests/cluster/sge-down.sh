#!/usr/bin/env bash
# sge-down.sh: stop the sge_execd and sge_qmaster that sge-up.sh started (jobs deleted first).
set -uo pipefail
RUN=${HPCB_RUN:-/run/hpcbench-slurm}/sge
export SGE_ROOT=/var/lib/gridengine SGE_CELL=default
[ -d "$RUN" ] || exit 0
stop() { # PIDFILE COMM
  local pid state
  pid=$(cat "$1" 2>/dev/null | tr -dc 0-9)
  if [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ]; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 150); do
      state=$(awk '/^State:/ {print $2}' "/proc/$pid/status" 2>/dev/null)
      { [ -z "$state" ] || [ "$state" = Z ]; } && break
      sleep 0.1
    done
    state=$(awk '/^State:/ {print $2}' "/proc/$pid/status" 2>/dev/null)
    [ -n "$state" ] && [ "$state" != Z ] && kill -KILL "$pid" 2>/dev/null
  fi
  rm -f "$1"
}
[ -e "$RUN/qmaster.pid" ] && command -v qdel >/dev/null && { qdel -u '*' >/dev/null 2>&1; sleep 1; }
[ -e "$RUN/execd.pid" ] && stop "$RUN/execd.pid" sge_execd
[ -e "$RUN/qmaster.pid" ] && stop "$RUN/qmaster.pid" sge_qmaster
exit 0
