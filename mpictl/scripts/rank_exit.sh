#!/usr/bin/env bash
# What every rank of an mpirun job runs its command through (mpictl puts it in front):
#   bash -c "$(cat rank_exit.sh)" mpictl-rank COMMAND...
# It runs COMMAND, then notes its exit code in /tmp/mpictl-ranks-<uid>/<job id>/<rank>, where the
# head's watchdog (job_ranks.py) reads it when mpirun does not exit after every rank has ended.
# Nothing runs before COMMAND. A signal that ended COMMAND is raised again, so mpirun sees what
# it would have seen. Local rank 0 prunes the notes of jobs older than a day, in the background.
exec 3>&2 2>/dev/null # the shell's own notice of a crash goes nowhere; COMMAND's stderr stays
"$@" 2>&3 3>&-
rc=$?
d=/tmp/mpictl-ranks-$UID
{ mkdir -p "$d/$MPICTL_JOB_ID" && echo "$rc" >"$d/$MPICTL_JOB_ID/${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-p$$}}"; } 2>/dev/null
if [ "${OMPI_COMM_WORLD_LOCAL_RANK:-0}" = 0 ]; then
  MPICTL_JOB_ID='' find "$d" -mindepth 1 -maxdepth 1 -mmin +1440 -exec rm -rf {} + </dev/null >/dev/null 2>&1 &
fi
if [ "$rc" -gt 128 ] && [ "$rc" -lt 160 ]; then
  trap - "$((rc - 128))" 2>/dev/null
  kill -s "$((rc - 128))" "$$" 2>/dev/null
fi
exit "$rc"
