#!/usr/bin/env bash
# sge-up.sh: a throwaway single-host Grid Engine (Debian gridengine 8.1.9) for hpcbench's tests.
# Needs root; no systemd. Installs gridengine-master/-exec/-client when missing (debconf preseeded,
# msmtp-mta so that no mail daemon is pulled in), starts sge_qmaster and sge_execd directly, and
# configures: this host as admin/submit/exec host, root may run jobs (min_uid/min_gid 0), scheduling
# every second, a parallel environment "smp" (slots = cores, all on one host) and queue all.q with
# it. Daemons it starts are recorded by PID in $HPCB_RUN/sge; sge-down.sh stops exactly those.
# Exit status: 0 ready, 1 failed, 3 not root. Use: . /var/lib/gridengine/default/common/settings.sh
set -euo pipefail
RUN=${HPCB_RUN:-/run/hpcbench-slurm}/sge
export SGE_ROOT=/var/lib/gridengine SGE_CELL=default
COMMON=$SGE_ROOT/$SGE_CELL/common
SLOTS=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # the cores usable here (nproc alone honours OMP_NUM_THREADS)
say() { echo "sge-up: $*" >&2; }
fail() { echo "sge-up: error: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "sge-up: needs root" >&2; exit 3; }
alive() { # PIDFILE COMM
  local pid state
  pid=$(cat "$1" 2>/dev/null | tr -dc 0-9) && [ -n "$pid" ] || return 1
  state=$(awk '/^State:/ {print $2}' "/proc/$pid/status" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ]
}
retry() { local n=$(( $1 * 5 )); shift; until "$@" >/dev/null 2>&1; do n=$((n-1)); [ $n -gt 0 ] || return 1; sleep 0.2; done; }
host=$(hostname)
mkdir -p "$RUN"

# 1. packages
if [ ! -x /usr/sbin/sge_qmaster ] || [ ! -x /usr/sbin/sge_execd ] || [ ! -x /usr/bin/qsub ] || [ ! -f "$COMMON/bootstrap" ]; then
  say "installing gridengine"
  printf '%s\n' "gridengine-common shared/gridengineconfig boolean true" \
    "gridengine-common shared/gridenginecell string default" \
    "gridengine-common shared/gridenginemaster string $host" | debconf-set-selections
  export DEBIAN_FRONTEND=noninteractive
  pkgs=(gridengine-master gridengine-exec gridengine-client msmtp-mta)
  apt-get install -y -q --no-install-recommends "${pkgs[@]}" >"$RUN/apt.log" 2>&1 || {
    apt-get update -q >>"$RUN/apt.log" 2>&1 || true
    apt-get install -y -q --no-install-recommends "${pkgs[@]}" >>"$RUN/apt.log" 2>&1 \
      || { tail -n 15 "$RUN/apt.log" >&2; fail "apt-get install failed ($RUN/apt.log)"; }
  }
  [ -f "$COMMON/bootstrap" ] || fail "the gridengine-master package did not initialise $COMMON"
fi

# 2. one host under all its names (SGE refuses a client whose reverse name differs)
names=$( { echo "$host"; echo localhost; getent hosts 127.0.0.1 | cut -d' ' -f2-; } | tr ' ' '\n' | awk 'NF && !seen[$0]++' | tr '\n' ' ')
echo "${names% }" >"$COMMON/host_aliases"
echo "$host" >"$COMMON/act_qmaster"

# 3. qmaster
qpid=/var/spool/gridengine/qmaster/qmaster.pid
started=0
if ! alive "$qpid" sge_qmaster; then
  started=1
  install -d -o sgeadmin -g sgeadmin /run/gridengine /var/spool/gridengine/execd
  rm -f "$qpid"   # a stale one (a crashed qmaster) would be taken for the new one
  sge_qmaster </dev/null >"$RUN/qmaster.out" 2>&1 || fail "sge_qmaster: $(cat "$RUN/qmaster.out")"
  retry 20 alive "$qpid" sge_qmaster || fail "sge_qmaster is not running (/var/spool/gridengine/qmaster/messages)"
  cp "$qpid" "$RUN/qmaster.pid"
fi
retry 30 qconf -sh || fail "qmaster does not answer: $(qconf -sh 2>&1 | head -2)"

# 4. configuration, each step only if missing (qconf edits go through an EDITOR script)
edit() { printf '#!/bin/sh\nsed -i %s "$1"\n' "$1" >"$RUN/editor.sh"; chmod +x "$RUN/editor.sh"; }
qconf -sh | grep -qx "$host" || qconf -ah "$host" >/dev/null 2>&1
qconf -ss 2>/dev/null | grep -qx "$host" || qconf -as "$host" >/dev/null 2>&1
if ! qconf -sconf | grep -qE '^min_uid +0$'; then
  edit "-e 's/^min_uid .*/min_uid 0/' -e 's/^min_gid .*/min_gid 0/'"; EDITOR=$RUN/editor.sh qconf -mconf global >/dev/null 2>&1
fi
if ! qconf -sconf | grep -q 'accounting_flush_time=00:00:01'; then
  # finished jobs reach the accounting file (what qacct reads) within a second, not 15 s
  edit "-e 's/flush_time=00:00:15/flush_time=00:00:01 accounting_flush_time=00:00:01/'"
  EDITOR=$RUN/editor.sh qconf -mconf global >/dev/null 2>&1
fi
if ! qconf -ssconf | grep -qE '^schedule_interval +0:0:1$'; then
  edit "-e 's/^schedule_interval .*/schedule_interval 0:0:1/' -e 's/^flush_submit_sec .*/flush_submit_sec 1/' -e 's/^flush_finish_sec .*/flush_finish_sec 1/'"
  EDITOR=$RUN/editor.sh qconf -msconf >/dev/null 2>&1
fi
if ! qconf -spl 2>/dev/null | grep -qx smp; then
  printf '%s\n' "pe_name smp" "slots $SLOTS" "user_lists NONE" "xuser_lists NONE" "start_proc_args NONE" \
    "stop_proc_args NONE" 'allocation_rule $pe_slots' "control_slaves FALSE" "job_is_first_task TRUE" \
    "urgency_slots min" "accounting_summary FALSE" "qsort_args NONE" >"$RUN/smp.pe"
  qconf -Ap "$RUN/smp.pe" >/dev/null 2>&1 || fail "qconf -Ap smp failed"
fi
if ! qconf -shgrpl 2>/dev/null | grep -qx '@allhosts'; then
  printf 'group_name @allhosts\nhostlist %s\n' "$host" >"$RUN/allhosts"
  qconf -Ahgrp "$RUN/allhosts" >/dev/null 2>&1
fi
if ! qconf -sql 2>/dev/null | grep -qx all.q; then
  edit "-e 's/^qname .*/qname all.q/' -e 's/^hostlist .*/hostlist @allhosts/' -e 's/^slots .*/slots $SLOTS/' -e 's/^pe_list .*/pe_list smp/'"
  EDITOR=$RUN/editor.sh qconf -aq >/dev/null 2>&1 || fail "qconf -aq all.q failed"
fi

qconf -sq all.q | grep -qE '^pe_list .*\bsmp\b' || qconf -mattr queue pe_list smp all.q >/dev/null 2>&1 \
  || fail "cannot attach the smp parallel environment to all.q"
# No load threshold: the default (np_load_avg 1.75) puts the queue in alarm, and holds every job,
# whenever this machine is busy, as it is while other tests run beside these.
qconf -sq all.q | grep -qE '^load_thresholds +NONE$' || qconf -rattr queue load_thresholds NONE all.q \
  >/dev/null 2>&1 || fail "cannot clear all.q's load threshold"

# 5. execd
epid() { ls /var/spool/gridengine/execd/*/execd.pid 2>/dev/null | head -n 1; }
if ! { [ -n "$(epid)" ] && alive "$(epid)" sge_execd; }; then
  started=1
  rm -f /var/spool/gridengine/execd/*/execd.pid   # stale ones: we must record the new daemon
  sge_execd </dev/null >"$RUN/execd.out" 2>&1 || fail "sge_execd: $(cat "$RUN/execd.out")"
  retry 20 sh -c '[ -n "$(ls /var/spool/gridengine/execd/*/execd.pid 2>/dev/null)" ]' || fail "sge_execd wrote no pid file"
  cp "$(epid)" "$RUN/execd.pid"
fi

# 6. the queue instance usable (clear a stale error state once)
ready() { [ "$(qstat -f -q all.q 2>/dev/null | awk '/^all.q@/ {print ($6 == "" ? "ok" : $6)}' | head -n 1)" = ok ]; }
if ! retry 5 ready; then
  qmod -c all.q >/dev/null 2>&1 || true
  retry 30 ready || { qstat -f >&2; fail "queue all.q not ready"; }
fi
[ "$started" = 1 ] || { echo "sge-up: already running (queue all.q@$host)"; exit 0; }
echo "sge-up: Grid Engine up: queue all.q@$host, $SLOTS slots, parallel environment smp"
