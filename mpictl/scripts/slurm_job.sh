#!/bin/bash
# Slurm jobs of `mpictl run --launcher slurm`, on the head node as the MPI user:
#   bash -c "$(cat slurm_job.sh)" mpictl-slurm ACTION ARGS...
#
#   check                        exit 3 (one line) when this node has no Slurm client
#   submit DIR                   the batch script on stdin -> DIR/job.sbatch, sbatch it;
#                                prints "submitted SLURM_ID"
#   state ID:DIR:HOST...         one "ID STATE EXIT HOST NODES" line per job (EXIT and HOST
#                                "-" while unknown, NODES the allocation or "-"); HOST is the
#                                recorded batch host, or the candidates a,b,c when none was seen
#   logs ID DIR HOST OFFSET [follow]
#                                the job's output from byte OFFSET (following it until the job
#                                ends); last, on stderr: "mpictl-state ID STATE EXIT HOST NODES"
#   cancel ID:DIR:HOST           scancel and wait until it ended; prints its state line
#
# The batch script (written by mpictl/slurm.py) runs on the allocation's batch host, writes its
# output to ~/DIR/output.log there, its pid to ~/DIR/pid and, when the ranks are done, srun's
# exit code to ~/DIR/exit_code. Without slurmdbd (no sacct) the state comes from `scontrol show
# job` while slurmctld remembers the job (MinJobAge) and from DIR/exit_code on the batch host
# after that. STATE is pending, running, completed, failed, cancelled, timeout or lost.
set -u
action=${1:-}
shift || true
me=$(hostname -s 2>/dev/null || hostname)

on_host() { # HOST COMMAND: run COMMAND (a shell line) on HOST, over the cluster's SSH mesh
  local host=$1
  shift
  if [ "$host" = "$me" ] || [ "$host" = localhost ]; then
    bash -c "$1"
  else
    # a Slurm node name is the inventory name; Slurm reaches it at NodeAddr (mpi_address)
    local addr
    addr=$(field NodeAddr "$(scontrol show node -o "$host" 2>/dev/null)") || addr=$host
    ssh -o BatchMode=yes -o ConnectTimeout=10 "${addr:-$host}" "$1"
  fi
}

field() { # NAME TEXT: the value of NAME= in `scontrol show job -o` output
  local word
  for word in $2; do
    case $word in "$1"=*) printf '%s\n' "${word#*=}"; return 0 ;; esac
  done
  return 1
}

# ID DIR HOST -> "ID STATE EXIT HOST NODES"
job_state() {
  local id=$1 dir=$2 host=$3 info state code sig nodes rc
  info=$(scontrol show job -o "$id" 2>/dev/null) || info=""
  if [ -n "$info" ]; then
    state=$(field JobState "$info") || state=UNKNOWN
    host=$(field BatchHost "$info") || true
    [ -n "$host" ] && [ "$host" != "(null)" ] || host=-
    nodes=$(field NodeList "$info") || nodes=-
    [ -n "$nodes" ] && [ "$nodes" != "(null)" ] || nodes=-
    # node[1-3] -> node1,node2,node3 (the names, as the record keeps them)
    [ "$nodes" = - ] || nodes=$(scontrol show hostnames "$nodes" 2>/dev/null | paste -sd, -)
    [ -n "$nodes" ] || nodes=-
    code=$(field ExitCode "$info") || code=0:0
    sig=${code#*:}
    code=${code%%:*}
    [ "$sig" != 0 ] && code=$((128 + sig))
    case $state in
      PENDING|CONFIGURING|REQUEUED|RESIZING|SUSPENDED) echo "$id pending - $host $nodes"; return ;;
      RUNNING|COMPLETING|STAGE_OUT|SIGNALING) echo "$id running - $host $nodes"; return ;;
      COMPLETED) state=completed ;;
      CANCELLED) state=cancelled ;;
      TIMEOUT|DEADLINE) state=timeout ;;
      *) state=failed ;;
    esac
    # srun's own exit code (the ranks'), written by the batch script, wins over the batch's
    if [ "$host" != - ] && rc=$(on_host "$host" "cat $dir/exit_code 2>/dev/null") \
        && [ -n "$rc" ] && [ "$state" != cancelled ] && [ "$state" != timeout ]; then
      code=$rc
    fi
    echo "$id $state $code $host $nodes"
    return
  fi
  # slurmctld forgot the job (MinJobAge): what the batch script left on its host (HOST may
  # list the candidates, a,b,c, when the batch host was never seen)
  local candidate
  for candidate in $(echo "$host" | tr ',' ' '); do
    [ "$candidate" != - ] || continue
    if rc=$(on_host "$candidate" "cat $dir/exit_code 2>/dev/null") && [ -n "$rc" ]; then
      if [ "$rc" = 0 ]; then state=completed; else state=failed; fi
      echo "$id $state $rc $candidate -"
      return
    fi
  done
  echo "$id lost - ${host%%,*} -"
}

split_spec() { # ID:DIR:HOST -> sets id dir host
  id=${1%%:*}
  local rest=${1#*:}
  dir=${rest%%:*}
  host=${rest#*:}
}

case $action in
  check)
    if ! command -v sbatch >/dev/null 2>&1 || ! command -v scontrol >/dev/null 2>&1; then
      echo "Slurm is not installed on $me (no sbatch); set slurm_enabled: true and run mpictl provision" >&2
      exit 3
    fi
    ;;
  submit)
    dir=$1
    mkdir -p "$dir" || exit 1
    cat >"$dir/job.sbatch" || exit 1
    # the job id is sbatch's stdout; its warnings go to stderr and do not mean a refusal
    out=$(sbatch --parsable "$dir/job.sbatch") || exit 1
    out=$(printf '%s\n' "$out" | tail -n 1)
    echo "submitted ${out%%;*}"
    ;;
  state)
    for spec in "$@"; do
      split_spec "$spec"
      job_state "$id" "$dir" "$host"
    done
    ;;
  logs)
    id=$1 dir=$2 host=$3 offset=$4 follow=${5:-}
    line=$(job_state "$id" "$dir" "$host")
    while [ -n "$follow" ] && [ "$(echo "$line" | cut -d' ' -f2)" = pending ]; do
      sleep 1 # following a pending job: wait for its batch host
      line=$(job_state "$id" "$dir" "$host")
    done
    host=$(echo "$line" | cut -d' ' -f4)
    state=$(echo "$line" | cut -d' ' -f2)
    start=$((offset + 1))
    if [ "$host" = - ]; then
      :
    elif [ -n "$follow" ] && [ "$state" = running ]; then
      # once the batch script wrote its pid (its first act), follow the output to its end:
      # tail --pid prints what is left after the script exits, then exits itself
      on_host "$host" "for i in \$(seq 150); do [ -s $dir/pid ] && break; sleep 0.2; done
        [ -s $dir/pid ] || exit 0
        exec tail -c +$start -f --pid=\$(cat $dir/pid) $dir/output.log 2>/dev/null"
      for _ in $(seq 60); do # the job leaves COMPLETING within seconds of its script
        line=$(job_state "$id" "$dir" "$host")
        [ "$(echo "$line" | cut -d' ' -f2)" = running ] || break
        sleep 0.5
      done
    else
      on_host "$host" "tail -c +$start $dir/output.log 2>/dev/null"
    fi
    echo "mpictl-state $line" >&2
    ;;
  cancel)
    split_spec "$1"
    scancel "$id" 2>/dev/null
    line=$(job_state "$id" "$dir" "$host")
    for _ in $(seq 120); do
      case $(echo "$line" | cut -d' ' -f2) in pending|running) ;; *) break ;; esac
      sleep 0.5
      line=$(job_state "$id" "$dir" "$host")
    done
    echo "$line"
    ;;
  *)
    echo "usage: mpictl-slurm check|submit|state|logs|cancel ..." >&2
    exit 2
    ;;
esac
