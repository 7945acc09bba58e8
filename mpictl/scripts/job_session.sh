#!/usr/bin/env bash
# The session of one attached job, run on the head as the MPI user by `mpictl run`:
#   bash -c "$(cat job_session.sh)" mpictl-job N MPIRUN_OPTION... COMMAND...
# N is the number of mpirun options that follow it; the rest is the command every rank runs.
# Job control (set -m) puts mpirun in a process group of its own, with stdin from /dev/null. A
# watcher waits for EOF on the session's stdin (the SSH channel: Ctrl-C, --timeout or a lost
# connection on the controller close it) and then ends that process group: SIGTERM, then SIGKILL
# after 10 s. The session's exit code is mpirun's.
# With MPICTL_WATCH="JOB_ID RANKS GRACE HOST..." and MPICTL_WATCHDOG (job_ranks.py's text) in its
# environment, the session starts job_ranks.py's watchdog beside mpirun: when every rank has
# ended and mpirun has not, it ends mpirun and the session's exit code is the ranks' own.
set -m
watch=${MPICTL_WATCH:-}
watchdog_src=${MPICTL_WATCHDOG:-}
unset MPICTL_WATCH MPICTL_WATCHDOG
n=$1
shift
opts=("${@:1:n}")
shift "$n"
command -v mpirun >/dev/null 2>&1 || {
  echo "mpictl: mpirun not found on $(hostname) in PATH=$PATH (run mpictl provision)" >&2
  exit 127
}
exec 3>&2 2>/dev/null # the shell's own job notices go nowhere; mpirun's stderr stays
mpirun "${opts[@]}" "$@" </dev/null 2>&3 3>&- &
job=$!
wd=
if [ -n "$watch" ] && [ -n "$watchdog_src" ] && command -v python3 >/dev/null 2>&1 && wd=$(mktemp -d); then
  printf '%s\n' "$watchdog_src" >"$wd/job_ranks.py"
  read -r -a w <<<"$watch"
  python3 "$wd/job_ranks.py" watch "${w[0]}" "$job" "${w[1]}" "${w[2]}" "$wd/rc" "${w[@]:3}" \
    </dev/null >/dev/null 2>&3 3>&- &
  watchdog=$!
fi
(
  cat >/dev/null 2>&1
  kill -TERM -- "-$job" 2>/dev/null || exit 0
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    sleep 1
    kill -0 -- "-$job" 2>/dev/null || exit 0
  done
  kill -KILL -- "-$job" 2>/dev/null
) 3>&- &
watcher=$!
wait "$job"
rc=$?
kill -- "-$watcher" 2>/dev/null
if [ -n "$wd" ]; then
  [ -s "$wd/rc" ] && rc=$(cat "$wd/rc")
  [ -n "${watchdog:-}" ] && kill -- "-$watchdog" 2>/dev/null
  rm -rf "$wd"
fi
exit "$rc"
