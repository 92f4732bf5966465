#!/usr/bin/env bash
# On a GPU machine: runs longer than one call allows. `start` runs a device
# script in the background from a copy of the tree (a later call replaces the
# tree and its .carry under a running job), its output and a directory for
# its $OUT in /tmp/bg/NAME; `wait` waits until the job ends or LIMIT seconds
# pass (each call keeps the machine warm), prints its output and copies what
# it left into this call's $OUT.
#   bash scripts/device/background.sh start NAME SCRIPT [ARGS...]
#   bash scripts/device/background.sh wait NAME [LIMIT]        (default 540 s)
# Exits 0 from `wait` when the job has ended (its status in /tmp/bg/NAME/rc),
# 3 when it is still running.
set -u
cmd=${1:?start or wait} name=${2:?a name}
dir=/tmp/bg/$name
case $cmd in
start)
  shift 2
  [ $# -ge 1 ] || { echo "background.sh start: no script" >&2; exit 2; }
  rm -rf "$dir" && mkdir -p "$dir/out" "$dir/tree"
  cp -r . "$dir/tree/"
  (cd "$dir/tree" && OUT=$dir/out setsid nohup bash -c 'bash "$@"; echo $? > '"$dir/rc" bash "$@" \
    > "$dir/log" 2>&1 &)
  echo "started $name: $*"
  ;;
wait)
  limit=${3:-540} t0=$(date +%s)
  [ -d "$dir" ] || { echo "background.sh: no job $name" >&2; exit 2; }
  while [ ! -f "$dir/rc" ] && [ $(($(date +%s) - t0)) -lt "$limit" ]; do sleep 2; done
  cat "$dir/log"
  if [ -n "${OUT:-}" ]; then cp -r "$dir/out/." "$OUT/" 2>/dev/null; cp "$dir/log" "$OUT/$name.log"; fi
  if [ -f "$dir/rc" ]; then echo "$name ended: rc $(cat "$dir/rc")"; exit 0; fi
  echo "$name still running after ${limit} s"
  exit 3
  ;;
*) echo "background.sh: start or wait, not $cmd" >&2; exit 2 ;;
esac
