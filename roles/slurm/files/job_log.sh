#!/bin/sh
# Slurm's prolog and epilog (roles/slurm: 00-mpictl-log in /etc/slurm/prolog.d and epilog.d,
# whose programs Slurm runs in name order as root on every node of a job): one line in the
# node's journal when a job starts there and one when it ends, with its user and exit code.
# It is also what keeps the two directories from being empty (Slurm fails a job whose Prolog
# pattern matches no file).
case ${SLURM_SCRIPT_CONTEXT:-} in
  prolog_slurmd) what=start ;;
  epilog_slurmd) what="end exit=${SLURM_JOB_EXIT_CODE2:-?}" ;;
  *) what=${SLURM_SCRIPT_CONTEXT:-?} ;;
esac
/usr/bin/logger -t slurm-job "job=${SLURM_JOB_ID:-?} user=${SLURM_JOB_USER:-?} $what" 2>/dev/null
exit 0
