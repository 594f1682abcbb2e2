"""The bash supervisor of each local job: it waits for the jobs it runs after and, for a task of
an array, for one of the array's slots (a lock file each); runs the script; ends what the script
left running in the job's session; then records the exit status, which the local scheduler
reads."""

# $1 script, $2 exit-status file, $3 seconds between SIGTERM and SIGKILL, $4 DIR:COUNT of the
# slots of its array (- for a job that is not an array task), then the jobs it runs after; stdout and stderr are the job's logs, opened by hpcbench. When
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
if [ "$4" != - ]; then  # a task of an array: it waits for one of the array's slots (DIR:COUNT)
  slot_dir=${4%:*} slots=${4##*:} got=""
  exec 8>>"$slot_dir/queue" && flock 8  # one waiter looks for a free slot, the others sleep here
  while [ -z "$got" ]; do
    for s in $(seq 1 "$slots"); do
      exec 9>>"$slot_dir/$s" || exit 1
      if flock -n 9; then got=$s; break; fi
      exec 9>&-
    done
    [ -n "$got" ] || sleep 0.5
  done
  exec 8>&-
  if [ -e "${2%.exit}.cancelled" ]; then  # cancelled while it waited: it never starts
    echo 1 >"$2.tmp" && mv -f "$2.tmp" "$2"
    exit 0
  fi
  : >"${2%.exit}.started"  # this supervisor holds the slot (fd 9) until it has written the exit status
fi
bash "$1" </dev/null 9>&-; rc=$?
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
