#!/usr/bin/env bash
# Detached jobs on the head, as the MPI user (`mpictl run --detach`, `mpictl jobs ...`):
#   bash -c "$(cat job_detached.sh)" mpictl-detached start  JOB_DIR MPIRUN_ARG... COMMAND...
#   bash -c "$(cat job_detached.sh)" mpictl-detached logs   JOB_DIR OFFSET [follow]
#   bash -c "$(cat job_detached.sh)" mpictl-detached state  JOB_DIR...
#   bash -c "$(cat job_detached.sh)" mpictl-detached cancel JOB_DIR
# JOB_DIR (relative to the home directory) holds output.log (everything the job prints), pid (the
# job's session leader, whose process group is the job) and, once mpirun has ended, exit_code.
# The job runs in a session of its own: a transient systemd user unit where the MPI user has a
# lingering systemd manager (loginctl enable-linger), else setsid; stdin, stdout and stderr are away from this SSH session, so
# neither its end nor the controller's reaches the job.
#   start   prints "started PID SUPERVISOR" once mpirun runs ("ended RC" if it already ended)
#   logs    prints output.log from byte OFFSET (following it until the job ends with "follow"),
#           then "mpictl-state ..." on stderr
#   state   one line per JOB_DIR: "JOB_DIR exited RC" ("... watchdog" when the watchdog ended a
#           stuck mpirun), "JOB_DIR cancelled", "JOB_DIR running"
#           or "JOB_DIR lost" (gone without an exit code)
#   cancel  marks the job cancelled, SIGTERM to its process group, SIGKILL after 10 s; then its
#           state line
set -u
cd || exit 1

state() {
  if [ -e "$1/exit_code" ] && [ -s "$1/watchdog_rc" ]; then
    echo "$1 exited $(cat "$1/exit_code") watchdog"
  elif [ -e "$1/exit_code" ]; then
    echo "$1 exited $(cat "$1/exit_code")"
  elif [ -e "$1/cancelled" ]; then
    echo "$1 cancelled"
  elif [ -e "$1/pid" ] && kill -0 "$(cat "$1/pid")" 2>/dev/null; then
    echo "$1 running"
  else
    echo "$1 lost"
  fi
}

start() {
  local dir=$1 job runtime supervisor unit pid
  shift
  command -v mpirun >/dev/null 2>&1 || {
    echo "mpictl: mpirun not found on $(hostname) in PATH=$PATH (run mpictl provision)" >&2
    exit 127
  }
  mkdir -p "$dir" || exit 1
  : >"$dir/output.log"
  rm -f "$dir/exit_code" "$dir/pid" "$dir/cancelled" "$dir/watch" "$dir/watchdog_rc"
  # The watchdog (MPICTL_WATCH, MPICTL_WATCHDOG: see job_session.sh) runs beside mpirun in the
  # job's own session, and its exit code file wins over mpirun's when it had to end mpirun.
  if [ -n "${MPICTL_WATCH:-}" ] && [ -n "${MPICTL_WATCHDOG:-}" ]; then
    printf '%s\n' "$MPICTL_WATCHDOG" >"$dir/job_ranks.py" && printf '%s\n' "$MPICTL_WATCH" >"$dir/watch"
  fi
  unset MPICTL_WATCH MPICTL_WATCHDOG
  # shellcheck disable=SC2016  # expanded by the job's own shell
  job='dir=$1; shift; mpirun "$@" </dev/null >>"$dir/output.log" 2>&1 &
m=$!
if [ -s "$dir/watch" ] && command -v python3 >/dev/null 2>&1; then
  read -r -a w <"$dir/watch"
  python3 "$dir/job_ranks.py" watch "${w[0]}" "$m" "${w[1]}" "${w[2]}" "$dir/watchdog_rc" "${w[@]:3}" </dev/null >>"$dir/output.log" 2>&1 &
fi
wait "$m"; rc=$?
[ -s "$dir/watchdog_rc" ] && rc=$(cat "$dir/watchdog_rc")
echo "$rc" >"$dir/exit_code.tmp" && mv -f "$dir/exit_code.tmp" "$dir/exit_code"'
  runtime=${XDG_RUNTIME_DIR:-/run/user/$(id -u)}
  # A user manager outlives this SSH session only when the user lingers; without linger it
  # stops (with its units) when the last session ends, so setsid is the safer supervisor then.
  if command -v systemd-run >/dev/null 2>&1 && [ -S "$runtime/systemd/private" ] &&
    [ "$(loginctl show-user "$(id -un)" -p Linger --value 2>/dev/null)" = yes ]; then
    supervisor=systemd
    unit="mpictl-job-$(basename "$dir")"
    XDG_RUNTIME_DIR=$runtime systemd-run --user --quiet --collect --unit "$unit" \
      -p KillMode=control-group --working-directory "$HOME" \
      --setenv=PATH="$PATH" --setenv=LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" \
      bash -c "$job" mpictl-job "$dir" "$@" || exit 1
    pid=$(XDG_RUNTIME_DIR=$runtime systemctl --user show -p MainPID --value "$unit")
  else
    supervisor=setsid
    setsid bash -c "$job" mpictl-job "$dir" "$@" </dev/null >/dev/null 2>&1 &
    pid=$!
  fi
  echo "$pid" >"$dir/pid"
  for _ in $(seq 1 200); do
    if [ -e "$dir/exit_code" ]; then
      echo "ended $(cat "$dir/exit_code")"
      return 0
    fi
    if pgrep -s "$pid" -x 'mpirun|prterun' >/dev/null 2>&1; then  # OpenMPI 5: mpirun execs prterun
      echo "started $pid $supervisor"
      return 0
    fi
    sleep 0.05
  done
  echo "mpictl: the job did not start within 10 s (see ~/$dir/output.log on $(hostname))" >&2
  exit 1
}

logs() {
  local dir=$1 offset=$2 mode=${3:-}
  [ -e "$dir/output.log" ] || {
    echo "mpictl: no job in ~/$dir on $(hostname)" >&2
    exit 2
  }
  if [ "$mode" = follow ] && [ ! -e "$dir/exit_code" ] && [ -e "$dir/pid" ]; then
    tail -c "+$((offset + 1))" -f --pid="$(cat "$dir/pid")" "$dir/output.log"
    for _ in $(seq 1 50); do
      [ -e "$dir/exit_code" ] || [ -e "$dir/cancelled" ] && break
      sleep 0.1
    done
  else
    tail -c "+$((offset + 1))" "$dir/output.log"
  fi
  echo "mpictl-state $(state "$dir")" >&2
}

cancel() {
  local dir=$1 pid
  if [ -e "$dir/exit_code" ] || ! pid=$(cat "$dir/pid" 2>/dev/null); then
    state "$dir" # it has ended: nothing to signal (its pid may belong to another process now)
    return 0
  fi
  [ -e "$dir/exit_code" ] || : >"$dir/cancelled"
  kill -TERM -- "-$pid" 2>/dev/null
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    kill -0 -- "-$pid" 2>/dev/null || break
    sleep 1
  done
  kill -KILL -- "-$pid" 2>/dev/null
  for _ in $(seq 1 20); do
    [ -e "$dir/exit_code" ] && break
    sleep 0.1
  done
  state "$dir"
}

action=${1:-}
shift || true
case "$action" in
  start) start "$@" ;;
  logs) logs "$@" ;;
  cancel) cancel "$1" ;;
  state) for d in "$@"; do state "$d"; done ;;
  *)
    echo "usage: job_detached.sh start|logs|state|cancel JOB_DIR ..." >&2
    exit 2
    ;;
esac
