#!/usr/bin/env bash
# slurm-down.sh: stop what slurm-up.sh started, by the PIDs it recorded in $HPCB_RUN (jobs are
# cancelled first; slurmdbd and its MariaDB after slurmctld). munged is stopped only if slurm-up.sh
# started it, and not with --keep-munge.
set -uo pipefail
RUN=${HPCB_RUN:-/run/hpcbench-slurm}
keep_munge=0; [ "${1:-}" = --keep-munge ] && keep_munge=1
[ -d "$RUN" ] || exit 0

stop() { # PIDFILE COMM
  local pid
  pid=$(cat "$1" 2>/dev/null | tr -dc 0-9)
  if [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ]; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 50); do
      state=$(awk '/^State:/ {print $2}' "/proc/$pid/status" 2>/dev/null)
      [ -z "$state" ] || [ "$state" = Z ] && break
      sleep 0.2
    done
    state=$(awk '/^State:/ {print $2}' "/proc/$pid/status" 2>/dev/null)
    [ -n "$state" ] && [ "$state" != Z ] && kill -KILL "$pid" 2>/dev/null
  fi
  rm -f "$1"
}

if [ -e "$RUN/slurmctld.pid" ] && command -v scancel >/dev/null; then
  scancel --quiet --full --user=root 2>/dev/null || true
  for _ in $(seq 1 50); do
    [ -z "$(squeue -h -o %i 2>/dev/null -t RUNNING,COMPLETING,PENDING)" ] && break
    sleep 0.2
  done
fi
for f in "$RUN"/slurmd-*.pid; do [ -e "$f" ] && stop "$f" slurmd; done
[ -e "$RUN/slurmctld.pid" ] && stop "$RUN/slurmctld.pid" slurmctld
[ -e "$RUN/slurmdbd.pid" ] && stop "$RUN/slurmdbd.pid" slurmdbd
[ -e "$RUN/mariadbd.pid" ] && stop "$RUN/mariadbd.pid" mariadbd
[ "$keep_munge" = 0 ] && [ -e "$RUN/munged.pid" ] && stop "$RUN/munged.pid" munged
exit 0
