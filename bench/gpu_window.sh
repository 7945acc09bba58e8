#!/usr/bin/env bash
# bench/gpu_window.sh: bench/gpu_node.sh inside a lent GPU machine's short window (issue 37).
#
# A lent machine runs one command at most 10 minutes, stays up 30 s after it, and everything on
# it is gone once it goes back. So the proof runs detached (its own process session: it outlives
# the command that started it) and each command only watches it for a while, then copies what
# there is to $OUT (what comes back: at most 8 files of 16 MiB, 64 MiB together):
#
#   bash bench/gpu_window.sh start CARRY_DIR SECONDS   first command: start the proof, watch it
#   bash bench/gpu_window.sh watch SECONDS             next commands on the same machine
#
# Each watches until the proof ends or SECONDS have passed, printing each step as it ends, then
# collects into $OUT: summary.txt, results.txt, logs.tar.gz (every step's log, results.json, the
# vars, the build times) and phase A's exported artifact cache (`mpictl cache export`, in parts
# of 15 MiB: cache-a.tar.gz.part-aa, -ab, ...; `cat` them back together; its sha256 beside), as
# far as the limits let. The proof itself runs from a copy of the checkout and carry on the machine's disk, so
# nothing a later command copies over the checkout can touch it.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${GPU_WINDOW_DIR:-/var/tmp/mpictl-gpu-window}
PROOF=$WORK/out
DONE=$WORK/done
PART=$((15 * 1024 * 1024))
RETURN_MAX=$((64 * 1024 * 1024))

die() { echo "gpu_window.sh: $*" >&2; exit 2; }

start() {
  local carry=$1
  [ -d "$carry" ] || die "no carry dir $carry"
  [ ! -e "$WORK" ] || die "$WORK exists: a proof was already started on this machine (use watch)"
  mkdir -p "$WORK/repo" "$PROOF" || die "cannot create $WORK"
  cp -a "$ROOT/." "$WORK/repo/" || die "cannot copy the checkout"
  cp -rL "$carry" "$WORK/carry" || die "cannot copy $carry"
  echo "started $(date -u +%FT%TZ)" >"$WORK/started"
  # shellcheck disable=SC2016 # expanded by the detached bash
  setsid nohup bash -c 'bash "$1/repo/bench/gpu_node.sh" "$1/carry" "$2"; echo "rc=$?" >"$3"' _ \
    "$WORK" "$PROOF" "$DONE" >"$WORK/gpu_node.out" 2>&1 </dev/null &
  echo "gpu_node.sh started in its own session (pid $!), writing $PROOF"
}

watch() {
  local seconds=$1 begin seen=0 lines
  begin=$(date +%s)
  while :; do
    if [ -f "$PROOF/summary.txt" ]; then
      lines=$(wc -l <"$PROOF/summary.txt")
      if [ "$lines" -gt "$seen" ]; then
        tail -n "+$((seen + 1))" "$PROOF/summary.txt" | sed "s/^/[$(($(date +%s) - begin))s] /"
        seen=$lines
      fi
    fi
    [ -f "$DONE" ] && { echo "gpu_node.sh ended: $(cat "$DONE")"; break; }
    [ $(($(date +%s) - begin)) -ge "$seconds" ] && { echo "gpu_node.sh still running after ${seconds}s"; break; }
    sleep 5
  done
}

collect() {
  local out=${OUT:-$WORK/collected} stage=$WORK/logs size f
  mkdir -p "$out"
  for f in summary.txt results.txt; do
    [ -f "$PROOF/$f" ] && cp "$PROOF/$f" "$out/"
  done
  # the logs: every step's output and what it ran with (no venv, state, cache or build tree)
  rm -rf "$stage" && mkdir -p "$stage"
  cp "$PROOF"/*.log "$PROOF"/*.yml "$PROOF"/*.json "$PROOF"/*.txt "$WORK/gpu_node.out" \
    "$WORK/started" "$stage/" 2>/dev/null
  [ -f "$DONE" ] && cp "$DONE" "$stage/"
  [ -d "$PROOF/inventory" ] && cp -r "$PROOF/inventory" "$stage/"
  tar -czf "$out/logs.tar.gz" -C "$WORK" logs
  if [ -f "$PROOF/cache-a.tar.gz" ]; then
    size=$(stat -c %s "$PROOF/cache-a.tar.gz")
    (cd "$PROOF" && sha256sum cache-a.tar.gz) >"$out/cache-a.tar.gz.sha256"
    if [ $(($(du -cb "$out" | tail -n 1 | cut -f1) + size)) -le "$RETURN_MAX" ] &&
      [ "$size" -le $((4 * PART)) ]; then
      split -b "$PART" "$PROOF/cache-a.tar.gz" "$out/cache-a.tar.gz.part-"
    else
      echo "cache-a.tar.gz: $size bytes, more than what comes back: left on the machine"
    fi
  fi
  echo "running now: $(tail -n 1 "$PROOF/steps.log" 2>/dev/null)"
  for f in "$out"/*; do echo "$(stat -c %s "$f") $(basename "$f")"; done
}

case ${1:-} in
  start)
    [ $# -eq 3 ] || die "usage: gpu_window.sh start CARRY_DIR SECONDS"
    start "$2" && watch "$3"
    collect
    ;;
  watch)
    [ $# -eq 2 ] || die "usage: gpu_window.sh watch SECONDS"
    [ -d "$PROOF" ] || die "no proof started on this machine ($WORK): a fresh machine starts with start"
    watch "$2"
    collect
    ;;
  *) die "usage: gpu_window.sh start CARRY_DIR SECONDS | watch SECONDS" ;;
esac
