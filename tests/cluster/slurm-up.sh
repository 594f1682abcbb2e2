#!/usr/bin/env bash
# slurm-up.sh: a throwaway SLURM cluster on this one Linux machine, for hpcbench's tests and for
# trying hpcbench against SLURM (docs/schedulers.md). Needs root; no systemd, no cgroups.
#
# Accounting is real: a MariaDB server (Debian's mariadb-server, its own data directory in
# $HPCB_RUN/db, 127.0.0.1:6829 only) behind slurmdbd (127.0.0.1:6830), so sacct answers as on a
# production cluster (jobacct_gather/linux samples MaxRSS every few seconds; energy is gathered by
# acct_gather_energy/rapl where /sys/class/powercap has Intel RAPL, else not at all, and sacct's
# ConsumedEnergy stays 0). HPCB_ACCOUNTING=0 leaves them out (sacct then says "Slurm accounting
# storage is disabled", as on clusters without slurmdbd).
#
# Two nodes (node1, node2) are two slurmd daemons on this host (ports 6818, 6819; each in its own UTS
# namespace when allowed, so `srun hostname` says node1/node2), with HPCB_CPUS CPUs and HPCB_GPUS fake
# GPUs each (GRES whose File= entries are symlinks to /dev/null). Installs Debian's slurm-wlm and
# munge when missing, writes /etc/slurm/{slurm,gres}.conf, adds the node names to /etc/hosts (MPICH's
# mpiexec resolves them), starts munged (if none answers), slurmctld and the slurmds with fresh state,
# and waits until sinfo shows every node idle. Everything it starts is recorded by PID in $HPCB_RUN;
# slurm-down.sh stops exactly that. Run again while up with the same configuration: it does nothing.
#
# For tests/cluster/test_pbs_torque.py it also provides Debian's slurm-wlm-torque wrappers (qsub, qstat,
# qdel: Perl scripts that speak PBS/Torque over SLURM) in $HPCB_RUN/torque/bin, and a TaskProlog that gives
# every job the variables a PBS job script reads (PBS_JOBID, PBS_O_WORKDIR, PBS_NODEFILE): a PBS server
# sets them, SLURM does not. slurm-wlm-torque conflicts with gridengine-client (same command names; the
# Grid Engine tests need it), so unless it is installed its package is unpacked there (apt-get download)
# and only its Perl dependencies are installed.
#
# Prints one line on success. Exit status: 0 up, 1 failed (with log tails), 3 not root (tests skip).
# Knobs: HPCB_NODES=2 HPCB_CPUS=$(nproc) HPCB_GPUS=2 HPCB_RUN=/run/hpcbench-slurm HPCB_TIMEOUT=60
#        HPCB_ACCOUNTING=1
set -euo pipefail

NODES=${HPCB_NODES:-2}
CPUS=${HPCB_CPUS:-$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)}  # nproc alone honours OMP_NUM_THREADS
GPUS=${HPCB_GPUS:-2}
RUN=${HPCB_RUN:-/run/hpcbench-slurm}
TIMEOUT=${HPCB_TIMEOUT:-60}
ACCOUNTING=${HPCB_ACCOUNTING:-1}
PACKAGES=(slurm-wlm slurmctld slurmd slurm-client munge)
[ "$ACCOUNTING" = 1 ] && PACKAGES+=(slurmdbd mariadb-server)
TORQUE_DEPS=(libslurm-perl libslurmdb-perl libswitch-perl)
LOGS=/var/log/slurm
SPOOL_CTLD=/var/spool/slurmctld
SPOOL_D=/var/spool/slurmd
CTLD_PORT=6817
D_PORT=6818
DB_PORT=6829
DBD_PORT=6830

say() { echo "slurm-up: $*" >&2; }
fail() {
  echo "slurm-up: error: $*" >&2
  for f in "$LOGS/slurmctld.log" "$LOGS"/slurmd-node*.log "$LOGS/slurmdbd.log" "$RUN/db.err" \
    "$RUN/daemons.log"; do
    [ -f "$f" ] && { echo "--- last lines of $f" >&2; tail -n 12 "$f" >&2; }
  done
  exit 1
}
[ "$(id -u)" = 0 ] || { echo "slurm-up: needs root (it installs packages and starts daemons)" >&2; exit 3; }
[[ $NODES =~ ^[1-8]$ && $CPUS =~ ^[1-9][0-9]*$ && $GPUS =~ ^[0-9]$ && $ACCOUNTING =~ ^[01]$ \
   && $TIMEOUT =~ ^[1-9][0-9]{0,3}$ ]] || fail "bad HPCB_NODES/HPCB_CPUS/HPCB_GPUS/HPCB_ACCOUNTING/HPCB_TIMEOUT"
[[ $RUN =~ ^/[A-Za-z0-9._/-]+$ && $RUN != / ]] || fail "HPCB_RUN must be an absolute path (letters, digits, ._-/)"

# alive PIDFILE COMM: the recorded process runs (not a zombie) and is the expected program
alive() {
  local pid state
  pid=$(cat "$1" 2>/dev/null | tr -dc 0-9) && [ -n "$pid" ] || return 1
  state=$(awk '/^State:/ {print $2}' "/proc/$pid/status" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ]
}
munge_works() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }
wait_for() { # SECONDS COMMAND...: retry every 0.2 s
  local n=$(( $1 * 5 )); shift
  while ! "$@" >/dev/null 2>&1; do n=$((n - 1)); [ "$n" -gt 0 ] || return 1; sleep 0.2; done
}

# 1. packages
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null \
   || ! command -v sbatch >/dev/null \
   || { [ "$ACCOUNTING" = 1 ] && { [ ! -x /usr/sbin/slurmdbd ] || [ ! -x /usr/sbin/mariadbd ]; }; }; then
  command -v apt-get >/dev/null || fail "slurm is not installed and there is no apt-get"
  say "installing ${PACKAGES[*]}"
  mkdir -p "$RUN"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" >"$RUN/apt.log" 2>&1 || {
    apt-get update -q >>"$RUN/apt.log" 2>&1 || true
    apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" >>"$RUN/apt.log" 2>&1 \
      || { tail -n 15 "$RUN/apt.log" >&2; fail "apt-get install failed (log: $RUN/apt.log)"; }
  }
fi
mkdir -p "$RUN" "$RUN/gpu" "$LOGS" /etc/slurm

# 1b. the PBS-style wrappers, in $TORQUE_BIN beside the sbatch/salloc/srun they run from their own directory
TORQUE_BIN=$RUN/torque/bin
if ! perl -MSlurm -MSlurmdb -MSwitch -e 1 >/dev/null 2>&1; then
  command -v apt-get >/dev/null || fail "the Perl modules slurm-wlm-torque needs are missing and there is no apt-get"
  say "installing ${TORQUE_DEPS[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${TORQUE_DEPS[@]}" >>"$RUN/apt.log" 2>&1 || {
    apt-get update -q >>"$RUN/apt.log" 2>&1 || true
    apt-get install -y -q --no-install-recommends "${TORQUE_DEPS[@]}" >>"$RUN/apt.log" 2>&1 \
      || { tail -n 15 "$RUN/apt.log" >&2; fail "apt-get install failed (log: $RUN/apt.log)"; }
  }
fi
if [ ! -x "$TORQUE_BIN/qstat" ]; then
  mkdir -p "$TORQUE_BIN"
  if dpkg -s slurm-wlm-torque >/dev/null 2>&1; then
    for t in qsub qstat qdel; do ln -sf "/usr/bin/$t" "$TORQUE_BIN/$t"; done
  else
    say "unpacking slurm-wlm-torque into $RUN/torque"
    rm -rf "$RUN/torque/deb" "$RUN/torque/root" && mkdir -p "$RUN/torque/deb"
    download() { (cd "$RUN/torque/deb" && apt-get download slurm-wlm-torque) >>"$RUN/apt.log" 2>&1; }
    download || { apt-get update -q >>"$RUN/apt.log" 2>&1 || true; download; } \
      || { tail -n 5 "$RUN/apt.log" >&2; fail "apt-get download slurm-wlm-torque failed (log: $RUN/apt.log)"; }
    dpkg-deb -x "$RUN"/torque/deb/slurm-wlm-torque_*.deb "$RUN/torque/root" || fail "cannot unpack slurm-wlm-torque"
    for t in qsub qstat qdel; do install -m 755 "$RUN/torque/root/usr/bin/$t" "$TORQUE_BIN/$t"; done
  fi
fi
for t in sbatch salloc srun; do ln -sf "$(command -v "$t")" "$TORQUE_BIN/$t"; done
mkdir -p "$RUN/nodefiles" "$RUN/tmp" && chmod 1777 "$RUN/nodefiles" "$RUN/tmp"
cat >"$RUN/task-prolog.sh" <<EOF
#!/bin/sh
# written by hpcbench tests/cluster/slurm-up.sh: the variables a PBS server gives a job (each line
# "export NAME=value" a TaskProlog prints reaches the job's environment)
[ -n "\${SLURM_JOB_ID:-}" ] || exit 0
nodefile=$RUN/nodefiles/\$SLURM_JOB_ID
[ -s "\$nodefile" ] || scontrol show hostnames "\$SLURM_JOB_NODELIST" >"\$nodefile" 2>/dev/null
echo "export PBS_JOBID=\$SLURM_JOB_ID"
echo "export PBS_O_WORKDIR=\$SLURM_SUBMIT_DIR"
echo "export PBS_NODEFILE=\$nodefile"
# a job's node-local scratch directory, as sites give one (MareNostrum, JUWELS: \$TMPDIR)
mkdir -p "$RUN/tmp/\$SLURM_JOB_ID" && echo "export TMPDIR=$RUN/tmp/\$SLURM_JOB_ID"
# MPICH's OFI network module: the UCX one (the mpich wheel's default) publishes address cards in
# PMI-1 lines of up to 1,083 bytes, and Slurm's pmi2 plugin reads a PMI-1 line with one read() of
# at most 1024 (pmi1.c, "TODO: read until newline"): a line cut in two is the step's "mpi/pmi2:
# invalid client request". OFI's card is one short line. (docs/troubleshooting.md)
echo "export MPIR_CVAR_CH4_NETMOD=ofi"
EOF
chmod 755 "$RUN/task-prolog.sh"
sh -n "$RUN/task-prolog.sh" || fail "the TaskProlog written to $RUN/task-prolog.sh is not valid sh"

# 2. the configuration
names=(); for i in $(seq 1 "$NODES"); do names+=("node$i"); done
if [ "$ACCOUNTING" = 1 ]; then
  energy=acct_gather_energy/none
  [ -r /sys/class/powercap/intel-rapl/intel-rapl:0/energy_uj ] && energy=acct_gather_energy/rapl
  accounting_conf="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=2,energy=2
AcctGatherEnergyType=$energy
AcctGatherNodeFreq=2"
else
  accounting_conf="AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none"
fi
nodelist=node1; [ "$NODES" -gt 1 ] && nodelist="node[1-$NODES]"
mem=$(awk '/^MemTotal:/ {printf "%d", $2 / 1024 * 0.8}' /proc/meminfo)
gres=""; [ "$GPUS" -gt 0 ] && gres=" Gres=gpu:$GPUS"
conf="# written by hpcbench tests/cluster/slurm-up.sh: a throwaway test cluster
ClusterName=hpcbench
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=cred_expire=10
CredType=cred/munge
SlurmctldPort=$CTLD_PORT
SlurmdPort=$D_PORT
StateSaveLocation=$SPOOL_CTLD
SlurmdSpoolDir=$SPOOL_D/%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd-%n.log
ProctrackType=proctrack/linuxproc
# task/none: the two nodes are two slurmd on one host, and task/affinity maps each node's first
# CPU to the machine's CPU 0 (measured: a 2-node srun job bound both tasks there), so every
# multi-node job would share one core. Under task/none the job script sees that srun cannot bind
# and hpcbench's rank start binds srun's tasks, each node starting a node's worth of cores on.
TaskPlugin=task/none
TaskProlog=$RUN/task-prolog.sh
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
MpiDefault=pmi2
ReturnToService=2
GresTypes=gpu
$accounting_conf
JobCompType=jobcomp/filetxt
JobCompLoc=$LOGS/jobcomp.log
MinJobAge=600
SlurmdTimeout=300
# the slurmds share two loaded cores: a batch launch answered after the default 10 s made
# slurmctld requeue a job that had started (its ranks were stopped again a minute later)
MessageTimeout=60
InactiveLimit=0
KillWait=30
MailProg=/bin/true"
for i in $(seq 1 "$NODES"); do
  conf+="
NodeName=node$i NodeHostname=node$i NodeAddr=127.0.0.1 Port=$((D_PORT + i - 1)) CPUs=$CPUS RealMemory=$mem$gres State=UNKNOWN"
done
conf+="
PartitionName=debug Nodes=ALL Default=YES MaxTime=1-00:00:00 State=UP OverSubscribe=NO"
gres_conf="# written by hpcbench tests/cluster/slurm-up.sh: fake GPUs (symlinks to /dev/null)"
[ "$GPUS" -gt 0 ] && gres_conf+="
NodeName=$nodelist Name=gpu File=$RUN/gpu/nvidia[0-$((GPUS - 1))]"

# 3. already up with this configuration? then nothing to do
up=1
alive "$RUN/slurmctld.pid" slurmctld || up=0
if [ "$ACCOUNTING" = 1 ]; then
  alive "$RUN/mariadbd.pid" mariadbd || up=0
  alive "$RUN/slurmdbd.pid" slurmdbd || up=0
fi
for n in "${names[@]}"; do alive "$RUN/slurmd-$n.pid" slurmd || up=0; done
if [ "$up" = 1 ] && [ "$(grep -v '^FirstJobId=' /etc/slurm/slurm.conf 2>/dev/null)" = "$conf" ] && munge_works \
   && scontrol ping 2>/dev/null | grep -q 'is UP'; then
  echo "slurm-up: already running ($nodelist)"
  exit 0
fi
# anything of ours half-running goes first
"$(dirname "${BASH_SOURCE[0]}")/slurm-down.sh" --keep-munge >/dev/null 2>&1 || true
extra_ports=""; [ "$ACCOUNTING" = 1 ] && extra_ports="$DB_PORT $DBD_PORT"
for port in $CTLD_PORT $(seq "$D_PORT" $((D_PORT + NODES - 1))) $extra_ports; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    fail "port $port is taken by a SLURM (or something else) that slurm-up.sh did not start"
  fi
done

# 4. munge
if ! munge_works; then
  if [ ! -s /etc/munge/munge.key ]; then
    install -d -o munge -g munge -m 0700 /etc/munge
    runuser -u munge -- mungekey --create --keyfile=/etc/munge/munge.key || fail "mungekey failed"
  fi
  install -d -o munge -g munge -m 0755 /run/munge
  install -d -o munge -g munge -m 0711 /var/lib/munge
  install -d -o munge -g munge -m 0700 /var/log/munge
  runuser -u munge -- munged 2>"$RUN/munged.err" || runuser -u munge -- munged --force 2>"$RUN/munged.err" \
    || fail "munged did not start: $(cat "$RUN/munged.err")"
  wait_for 10 test -s /run/munge/munged.pid || fail "munged wrote no pid file"
  cp /run/munge/munged.pid "$RUN/munged.pid"   # ours: slurm-down.sh stops it
  wait_for 10 munge_works || fail "munged runs but munge -n | unmunge fails"
fi

# 5. files and fresh state. Job ids start where no earlier incarnation of this cluster went: a
# killed MPICH rank leaves its shared-memory segment in /dev/shm, named after the job and step,
# and a new job of the same id then fails in MPI_Init ("Out of memory" in its POSIX bootstrap).
# The ids end in 10000 mod 20000: the rendezvous ports they derive (20000 + id mod 20000) stay
# clear of those of the local scheduler's small job ids when both run at once.
first_job_id=$(( $(date +%s) % 3000 * 20000 + 10000 ))
printf '%s\nFirstJobId=%s\n' "$conf" "$first_job_id" >/etc/slurm/slurm.conf
printf '%s\n' "$gres_conf" >/etc/slurm/gres.conf
rm -f "$RUN"/gpu/nvidia*
for g in $(seq 0 $((GPUS - 1))); do ln -s /dev/null "$RUN/gpu/nvidia$g"; done
rm -rf "${SPOOL_CTLD:?}" "${SPOOL_D:?}"
rm -f "$RUN"/nodefiles/*
mkdir -p "$SPOOL_CTLD"; for n in "${names[@]}"; do mkdir -p "$SPOOL_D/$n"; done
[ -f "$LOGS/jobcomp.log" ] && mv -f "$LOGS/jobcomp.log" "$LOGS/jobcomp.log.old"
hosts_line="127.0.0.1 ${names[*]} # hpcbench-slurm"
if ! grep -qxF "$hosts_line" /etc/hosts; then
  hosts=$(grep -v '# hpcbench-slurm$' /etc/hosts || true)
  printf '%s\n%s\n' "$hosts" "$hosts_line" >/etc/hosts   # in place: /etc/hosts may be a bind mount
fi

# 6. daemons (they detach; their output goes to $RUN/daemons.log)
: >"$RUN/daemons.log"
if [ "$ACCOUNTING" = 1 ]; then
  # 6a. MariaDB: a fresh data directory of its own, reachable on 127.0.0.1 only; the database
  # user slurmdbd logs in with gets a new random password each time (only in slurmdbd.conf, 0600)
  db=$RUN/db
  rm -rf "${db:?}" && mkdir -p "$db/data" && chown -R mysql:mysql "$db" && chmod 700 "$db"
  mariadb-install-db --no-defaults --datadir="$db/data" --user=mysql --skip-test-db \
    --auth-root-authentication-method=socket >"$RUN/db-install.log" 2>&1 \
    || { tail -n 5 "$RUN/db-install.log" >&2; fail "mariadb-install-db failed"; }
  runuser -u mysql -- /usr/sbin/mariadbd --no-defaults --datadir="$db/data" --socket="$db/mysqld.sock" \
    --pid-file="$db/mysqld.pid" --bind-address=127.0.0.1 --port="$DB_PORT" --log-error="$RUN/db.err" \
    --innodb-buffer-pool-size=128M --innodb-lock-wait-timeout=900 </dev/null >/dev/null 2>&1 &
  db_up() { mariadb --no-defaults --socket="$db/mysqld.sock" -u root -e 'select 1'; }
  wait_for "$TIMEOUT" db_up || fail "mariadbd does not answer after ${TIMEOUT}s"
  cp "$db/mysqld.pid" "$RUN/mariadbd.pid"
  password=$(head -c 18 /dev/urandom | base64 | tr -dc A-Za-z0-9)
  # on stdin, not the command line (which every local user can read in /proc)
  mariadb --no-defaults --socket="$db/mysqld.sock" -u root <<SQL || fail "cannot create the database user"
CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$password';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
SQL
  # 6b. slurmdbd (it reads slurmdbd.conf beside slurm.conf)
  (umask 077 && printf '%s\n' "# written by hpcbench tests/cluster/slurm-up.sh: a throwaway test cluster" \
    "AuthType=auth/munge" "DbdAddr=127.0.0.1" "DbdHost=$(hostname -s)" "DbdPort=$DBD_PORT" \
    "SlurmUser=root" "PidFile=$RUN/slurmdbd.pid" "LogFile=$LOGS/slurmdbd.log" \
    "StorageType=accounting_storage/mysql" "StorageHost=127.0.0.1" "StoragePort=$DB_PORT" \
    "StorageUser=slurm" "StoragePass=$password" "StorageLoc=slurm_acct_db" >/etc/slurm/slurmdbd.conf)
  slurmdbd </dev/null >>"$RUN/daemons.log" 2>&1 || fail "slurmdbd did not start"
  dbd_up() { sacctmgr -n list cluster format=cluster; }
  wait_for "$TIMEOUT" dbd_up || fail "slurmdbd does not answer after ${TIMEOUT}s"
  sacctmgr -i add cluster hpcbench >>"$RUN/daemons.log" 2>&1 || fail "sacctmgr add cluster failed"
fi
slurmctld </dev/null >>"$RUN/daemons.log" 2>&1 || fail "slurmctld did not start"
ping_up() { scontrol ping 2>/dev/null | grep -q 'is UP'; }
wait_for "$TIMEOUT" ping_up || fail "slurmctld does not answer after ${TIMEOUT}s"
uts=0; unshare --uts true 2>/dev/null && uts=1
for n in "${names[@]}"; do
  if [ "$uts" = 1 ]; then
    unshare --uts sh -c "hostname $n && exec slurmd -N $n" </dev/null >>"$RUN/daemons.log" 2>&1
  else
    slurmd -N "$n" </dev/null >>"$RUN/daemons.log" 2>&1
  fi || fail "slurmd -N $n did not start"
done

# 7. every node idle (a node left drained by an earlier run is resumed once)
all_idle() {
  local states; states=$(sinfo -h -N -o '%N %t' 2>/dev/null | sort -u)
  [ "$(printf '%s\n' "$states" | awk '$2 == "idle"' | wc -l)" -ge "$NODES" ]
}
if ! wait_for 15 all_idle; then
  for n in "${names[@]}"; do scontrol update nodename="$n" state=resume >/dev/null 2>&1 || true; done
  wait_for "$TIMEOUT" all_idle || { sinfo -N -o '%N %t %E' >&2 || true; fail "nodes not idle after ${TIMEOUT}s"; }
fi
accounting="no accounting"
[ "$ACCOUNTING" = 1 ] && accounting="accounting by slurmdbd and MariaDB ($energy)"
echo "slurm-up: SLURM $(sinfo -V | awk '{print $2}') up: partition debug, $nodelist, $CPUS CPUs and $GPUS fake GPU(s) each; $accounting; PBS wrappers in $TORQUE_BIN"
