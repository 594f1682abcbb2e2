"""The bash supervisor of each local job: it waits for the jobs it runs after; runs the script;
ends what the script left running in the job's session; then records the exit status, which the
local scheduler reads. An array's task is started by its array's dispatcher
(:mod:`hpcbench.jobs.schedulers.local.array`) once a slot is free; it marks its start, or never runs when it
was cancelled meanwhile."""

# $1 script, $2 exit-status file, $3 seconds between SIGTERM and SIGKILL, $4 "task" for an
# array's task ("-" otherwise), then the jobs it runs after (STATE-FILE-STEM:PID:START); stdout
# and stderr are the job's logs, opened by hpcbench. When
# the script ends, what it left running in the job's session (a background server, a stray
# worker) is ended as a cluster ends a job's leftover processes: SIGTERM, SIGKILL after
# CANCEL_GRACE seconds. Only then is the exit status written, so a finished job has no processes.
SUPERVISOR = r"""
alive() {  # PID START: that process (started at START clock ticks) still runs
  local line rest f
  { read -r line <"/proc/$1/stat"; } 2>/dev/null || return 1
  rest=${line##*) }
  read -r -a f <<<"$rest"
  [ "${f[19]}" = "$2" ] && [ "${f[0]}" != Z ]
}
for dep in "${@:5}"; do  # the jobs this one runs after (scheduler.after): STATE-FILE-STEM:PID:START
  stem=${dep%:*:*} pid_start=${dep#"$stem":}
  name=${stem##*/}
  why=""
  while [ ! -e "$stem.exit" ]; do
    if [ -e "$stem.cancelled" ]; then why="was cancelled"; break; fi
    if [ "$pid_start" != -:- ] && ! alive "${pid_start%:*}" "${pid_start#*:}" && [ ! -e "$stem.exit" ]; then
      why="ended without an exit status"; break
    fi
    sleep 1
  done
  if [ -z "$why" ]; then
    if [ -e "$stem.cancelled" ]; then why="was cancelled"
    else read -r code <"$stem.exit" || code=unreadable
      [ "$code" = 0 ] || why="ended with status $code"
    fi
  fi
  if [ -n "$why" ]; then
    echo "hpcbench: not started: job $name, which it runs after, $why" >&2
    echo 1 >"$2.tmp" && mv -f "$2.tmp" "$2"
    exit 0
  fi
done
if [ "$4" = task ]; then  # a task of an array, started by its dispatcher as a slot freed up
  if [ -e "${2%.exit}.cancelled" ]; then  # cancelled as it was being started: it never runs
    echo 1 >"$2.tmp" && mv -f "$2.tmp" "$2"
    exit 0
  fi
  : >"${2%.exit}.started"
fi
bash "$1" </dev/null; rc=$?
trap '' TERM
others() {  # the processes of this session other than this shell and the subshell running this
  local s line rest st pp pg sid pid
  for s in /proc/[0-9]*/stat; do
    { read -r line <"$s"; } 2>/dev/null || continue  # a process may end between glob and read
    rest=${line##*) }
    read -r st pp pg sid _ <<<"$rest"
    pid=${s//[^0-9]/}
    [ "$sid" = "$$" ] && [ "$st" != Z ] && [ "$pid" != "$$" ] && [ "$pid" != "$BASHPID" ] && echo "$pid"
  done
}
signal() {  # SIGNAL PID...: each PID that is still a live process of this session
  local sig=$1 pid line rest st sid
  shift
  for pid in "$@"; do
    { read -r line <"/proc/$pid/stat"; } 2>/dev/null || continue
    rest=${line##*) }
    read -r st _ _ sid _ <<<"$rest"
    [ "$sid" = "$$" ] && [ "$st" != Z ] && kill "-$sig" "$pid" 2>/dev/null
  done
}
left=$(others)
if [ -n "$left" ]; then
  signal TERM $left
  for _ in $(seq $(( $3 * 10 ))); do
    sleep 0.1; left=$(others); [ -z "$left" ] && break
  done
  [ -n "$left" ] && signal KILL $left
fi
echo "$rc" >"$2.tmp" && mv -f "$2.tmp" "$2"
"""
