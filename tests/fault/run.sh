#!/usr/bin/env bash
# tests/fault/run.sh: the fault-injection suite. For each backend (grpc,
# ucx over TCP) and each fault, TRIALS rounds are broken on purpose while
# the trainer (wt-push, synthetic:llama-256m, 252.6 MiB, 2 workers per
# server) is partway through, and each trial records:
#
#   lands ms    the kills: from SIGKILL to the victim's descriptors
#               closing, when its peers can first see it gone (the kernel
#               frees the victim's memory first: 5 ms idle, up to 1.2 s on
#               a loaded host for a 1 GiB wt-server); server, trainer and
#               ready ms of a kill count from there
#   server ms   from the fault to the server's log line "round R aborted"
#               (for the stop and the cut: from when the data deadline,
#               DATA_TIMEOUT s after the fault, passed; the server counts
#               it from the last data it received, a little before the
#               fault, so a few ms below 0 is on time)
#   trainer ms  from the fault (the stop: from SIGCONT) to wt-push's exit
#               with an error (the cut: timed on its own, so that it may
#               come before the server's side)
#   ready ms    from the fault (the stop and the cut: from the deadline) to
#               every worker out of "updating", polled with wt-ctl info
#   intact      the committed version's XXH3 of every tensor on every
#               worker is what it was before the round
#   next        the next round commits and verifies (wt-push --verify)
#
# Faults:
#   trainer-kill  wt-push SIGKILLed mid-round
#   server-kill   one of two servers SIGKILLed mid-round of a fan-out to
#                 both (the survivor's round must fail, not wait)
#   trainer-stop  wt-push SIGSTOPped past the data deadline, then SIGCONT
#   link-cut      the veth between two network namespaces (server in one,
#                 trainer in the other) set down mid-round, then up again
#                 (needs root; skipped, and said so, without it)
#
# Every wait is bounded (WAIT_S); a wait that runs out counts as a hang and
# fails the run. Prints a table, then what each side said in the first
# trial of each row. Exit 0 when every trial of every row passed.
#
#   tests/fault/run.sh                   20 trials each (the full run)
#   TRIALS=3 tests/fault/run.sh          what CI runs
#   FAULTS="trainer-kill" BACKENDS=ucx tests/fault/run.sh
#
# Environment: BUILD (default build), TRIALS (20), BACKENDS ("grpc ucx"),
# FAULTS (all four), DATA_TIMEOUT (seconds, 2), WAIT_S (30).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
build=${BUILD:-build}
trials=${TRIALS:-20}
backends=${BACKENDS:-grpc ucx}
faults=${FAULTS:-trainer-kill server-kill trainer-stop link-cut}
deadline_s=${DATA_TIMEOUT:-2}
wait_s=${WAIT_S:-30}
case "$build" in /*) ;; *) build=$root/$build ;; esac
server_bin=$build/server/wt-server
push_bin=$build/client/wt-push
ctl_bin=$build/client/wt-ctl
for b in "$server_bin" "$push_bin" "$ctl_bin"; do
  [ -x "$b" ] || { echo "fault: $b is not built (cmake --build $build)" >&2; exit 2; }
done
work=$(mktemp -d /tmp/wt-fault.XXXXXX)
NS=wt-fault-ns
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ -n "${ns_up:-}" ]; then
    ip link del wtflt0 >/dev/null 2>&1 || true
    ip netns del "$NS" >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# now_ms: the wall clock in ms, from bash itself (a `date` is a fork and an
# exec, tens of ms on a loaded host, and t0 was taken before it).
now_ms() { local t=$EPOCHREALTIME; echo $((${t%[.,]*} * 1000 + 10#${t#*[.,]} / 1000)); }
# A nap without a fork: a read that times out on a pipe nobody writes.
exec {nap_fd}<> <(:)
nap() { read -r -t "$1" -u "$nap_fd" _ || true; }
# landed PID T0: sets t_land to the ms from T0 (the signal) to PID's
# descriptors closing, by its last thread: the moment its peers can see it gone (its TCP
# connections reset). The kernel closes them only after it has freed the
# process's memory, and on a loaded host that alone took 0.6-1.2 s for a
# SIGKILLed 1 GiB wt-server (the exiting thread runnable, in exit_mmap, 5 ms
# on an idle host): the peers' times below count from here. Sets land_ms.
landed() {
  local end=$(($2 + wait_s * 1000)) t open
  while :; do
    # Each thread lets go of the descriptors as it exits, the last one
    # (the one freeing the memory) closes them: any thread holding them.
    open=
    for t in /proc/"$1"/task/*; do [ -e "$t/fd/2" ] && { open=1; break; }; done
    [ -n "$open" ] || break
    if [ "$(now_ms)" -gt "$end" ]; then hang "$1 kept its descriptors after SIGKILL"; break; fi
    nap 0.001
  done
  land_ms=$(now_ms)
  t_land=$((land_ms - $2))
}
# log_ms LINE: the ms timestamp at the start of a wt log line.
log_ms() { date -d "${1%% *}" +%s%3N; }
hangs=0
hang() { echo "fault: HANG: $*" >&2; hangs=$((hangs + 1)); }

# start_server VAR NAME [PREFIX...]: a wt-server of llama-256m with two
# workers; PREFIX runs it (ip netns exec ...). Sets VAR_pid, VAR_addr,
# VAR_log.
start_server() {
  local var=$1 name=$2 listen=127.0.0.1:0
  shift 2
  [ $# -gt 0 ] && listen=10.231.9.1:0
  "$@" "$server_bin" --listen "$listen" --model synthetic:llama-256m --workers 2 \
    --round-timeout 60 ${ns_insecure:+--insecure --no-auth} \
    >"$work/$name.out" 2>"$work/$name.log" &
  local pid=$! addr="" i
  pids+=("$pid")
  for ((i = 0; i < wait_s * 10; i++)); do
    # The job may not have opened its output yet: no file is no line.
    addr=$(sed -n 's/.* listening on //p' "$work/$name.out" 2>/dev/null | head -n1 || true)
    [ -n "$addr" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$addr" ]; then
    echo "fault: wt-server $name did not serve:" >&2
    cat "$work/$name.log" >&2
    exit 1
  fi
  printf -v "${var}_pid" '%s' "$pid"
  printf -v "${var}_addr" '%s' "$addr"
  printf -v "${var}_log" '%s' "$work/$name.log"
}

# sums ADDR: every worker's XXH3 of every committed tensor, sorted. (SHA-256
# of 2 x 265 MB by the readers' niced, budgeted hashers ran past a 20 s
# deadline once on a CI machine another build kept busy, and the trial read
# as "not intact"; a change of bytes shows in XXH3 all the same.)
sums() { "$ctl_bin" --server "$1" --timeout 60 checksum --algo xxh3 --all-workers | sort; }

# wait_ready ADDR [PREFIX...]: ms until no worker of ADDR is "updating"
# (bounded), asking with wt-ctl run under PREFIX (ip netns exec NS: from
# inside the server's namespace while the link is down).
wait_ready() {
  local addr=$1 start end out
  shift
  start=$(now_ms)
  end=$((start + wait_s * 1000))
  while [ "$(now_ms)" -lt "$end" ]; do
    out=$("$@" "$ctl_bin" --server "$addr" --timeout 5 info 2>/dev/null) || { sleep 0.01; continue; }
    if ! grep -q updating <<<"$out"; then echo $(($(now_ms) - start)); return 0; fi
    sleep 0.005
  done
  echo HANG
}

# wait_log FILE REGEX FROM_LINE: the first line matching REGEX after line
# FROM_LINE of FILE, within WAIT_S; empty when none came.
wait_log() {
  local end line
  end=$(($(now_ms) + wait_s * 1000))
  while [ "$(now_ms)" -lt "$end" ]; do
    line=$(tail -n "+$(($3 + 1))" "$1" | grep -E -m1 "$2" || true)
    [ -n "$line" ] && { echo "$line"; return 0; }
    sleep 0.01
  done
}

# push_bg OUT ARGS...: wt-push in the background; sets push_pid.
push_bg() {
  local out=$1
  shift
  "$@" >"$out" 2>&1 &
  push_pid=$!
  pids+=("$push_pid")
}

# until_midway OUT: waits until wt-push's progress passed 20% (or it
# ended: returns 1, the round was over before the fault could land).
until_midway() {
  local end=$(($(now_ms) + wait_s * 1000))
  while [ "$(now_ms)" -lt "$end" ]; do
    grep -qE 'progress: +([2-9]0|100)%' "$1" && return 0
    kill -0 "$push_pid" 2>/dev/null || return 1
    sleep 0.002
  done
  hang "wt-push made no progress within ${wait_s}s"
  return 1
}

# wait_exit PID: waits (bounded) for PID to end; prints ms waited, HANG on a
# hang (then kills it).
wait_exit() {
  local start end
  start=$(now_ms)
  end=$((start + wait_s * 1000))
  while kill -0 "$1" 2>/dev/null; do
    if [ "$(now_ms)" -gt "$end" ]; then
      kill -9 "$1" 2>/dev/null || true
      wait "$1" 2>/dev/null || true
      echo HANG
      return 0
    fi
    sleep 0.002
  done
  local rc=0
  wait "$1" 2>/dev/null || rc=$?
  echo "$rc" >"$work/push.rc"
  echo $(($(now_ms) - start))
}

# push ADDRS BACKEND [PREFIX...] -- ARGS: the trainer's command line.
push_cmd() {
  local backend=$1
  shift
  local -a cmd=("$push_bin" --backend "$backend" --data-timeout "$deadline_s" --timeout 60)
  [ "$backend" = ucx ] && cmd+=(--option transports=tcp --bucket-size 16M)
  [ "$backend" = grpc ] && cmd+=(--bucket-size 16M)
  printf '%s\n' "${cmd[@]}"
}

declare -a rows=() said=()
# record ROW FIELDS...: one trial's result line.
record() { echo "$*" >>"$work/results"; }

# One trial's bookkeeping (globals): t_srv t_trn t_ready intact next
# srv_said trn_said missed.
reset_trial() { t_srv=-; t_trn=-; t_ready=-; t_land=-; intact=-; next=-; srv_said=""; trn_said=""; }

abort_line() { wait_log "$1" "round [0-9]+ aborted: " "$2"; }

# server_part LOG FROM T0 [OFFSET]: fills t_srv and srv_said from the log.
server_part() {
  local line
  line=$(abort_line "$1" "$2")
  if [ -z "$line" ]; then
    hang "no 'round aborted' in $1 within ${wait_s}s"
    t_srv=HANG
    return
  fi
  t_srv=$(($(log_ms "$line") - $3 - ${4:-0}))
  srv_said=${line#* aborted: }
}

crashes=0
trainer_part() { # OUT MS
  t_trn=$2
  [ "$2" = HANG ] && hang "wt-push did not exit within ${wait_s}s after the fault"
  trn_said=$(grep -E '^wt-push: ' "$1" | tail -n1 | cut -c1-400)
  local rc
  rc=$(cat "$work/push.rc" 2>/dev/null || echo 0)
  # An error is exit status 1; a signal (a crash) is a defect.
  if [ "$2" != HANG ] && [ "$rc" -gt 128 ]; then
    echo "fault: wt-push CRASHED (status $rc) after the fault; its output:" >&2
    tail -n 20 "$1" | sed 's/^/    /' >&2
    crashes=$((crashes + 1))
    trn_said="CRASHED (status $rc)"
  fi
  rm -f "$work/push.rc"
}

check_after() { # ADDR SUMS_BEFORE BACKEND [EXTRA ADDRS...]
  local addr=$1 before=$2 backend=$3
  shift 3
  local -a cmd
  mapfile -t cmd < <(push_cmd "$backend")
  if sums "$addr" | cmp -s - "$before"; then intact=yes; else intact=NO; fi
  local -a servers=(--server "$addr")
  for a in "$@"; do servers+=(--server "$a"); done
  local rc=0
  timeout "$wait_s" "${cmd[@]}" "${servers[@]}" --verify --quiet >"$work/next.out" 2>&1 || rc=$?
  if [ "$rc" -eq 0 ]; then
    next=yes
  else
    next=NO
    echo "    next round: wt-push exit status $rc$([ "$rc" = 124 ] && echo " (timed out after ${wait_s} s)")" >&2
    sed 's/^/    next round: /' "$work/next.out" | tail -n 3 >&2
  fi
}

# trial_begin FAULT BACKEND I ADDR...: notes ADDR's digests and log line,
# starts the trainer's round to every ADDR and waits until it is partway;
# returns 1 (recorded as missed) when the round ended first. Sets from, out.
trial_begin() {
  local fault=$1 backend=$2 i=$3 a
  shift 3
  local -a servers=()
  for a in "$@"; do servers+=(--server "$a"); done
  reset_trial
  sums "$1" >"$work/before"
  from=$(wc -l <"$A_log")
  out=$work/push.out
  push_bg "$out" "${cmd[@]}" "${servers[@]}"
  if ! until_midway "$out"; then
    wait "$push_pid" 2>/dev/null || true
    record "$fault $backend $i missed"
    return 1
  fi
}

run_fault() { # FAULT BACKEND
  local fault=$1 backend=$2 i
  local -a cmd
  mapfile -t cmd < <(push_cmd "$backend")
  case "$fault" in
    trainer-kill | trainer-stop)
      start_server A "$fault-$backend"
      timeout "$wait_s" "${cmd[@]}" --server "$A_addr" --quiet >/dev/null
      for ((i = 1; i <= trials; i++)); do
        local t0
        trial_begin "$fault" "$backend" "$i" "$A_addr" || continue
        t0=$(now_ms)
        if [ "$fault" = trainer-kill ]; then
          kill -9 "$push_pid"
          landed "$push_pid" "$t0"
          wait "$push_pid" 2>/dev/null || true
          t_trn=n/a
          trn_said="(killed)"
          server_part "$A_log" "$from" "$land_ms"
          t_ready=$(wait_ready "$A_addr")
          if [ "$t_ready" != HANG ]; then t_ready=$(($(now_ms) - land_ms)); else hang "workers stayed updating"; fi
        else
          kill -STOP "$push_pid"
          t_ready=$(wait_ready "$A_addr")
          if [ "$t_ready" != HANG ]; then t_ready=$(($(now_ms) - t0 - deadline_s * 1000)); else hang "workers stayed updating"; fi
          sleep 1 # stopped well past the deadline
          server_part "$A_log" "$from" "$t0" "$((deadline_s * 1000))"
          local t1
          t1=$(now_ms)
          kill -CONT "$push_pid"
          trainer_part "$out" "$(wait_exit "$push_pid")"
          [ "$t_trn" != HANG ] && t_trn=$(($(now_ms) - t1))
        fi
        check_after "$A_addr" "$work/before" "$backend"
        record "$fault $backend $i ok $t_srv $t_trn $t_ready $intact $next $t_land" "|$srv_said|$trn_said"
      done
      kill -TERM "$A_pid"; wait "$A_pid" 2>/dev/null || true
      ;;
    server-kill)
      start_server A "$fault-$backend-a"
      for ((i = 1; i <= trials; i++)); do
        start_server B "$fault-$backend-b$i"
        timeout "$wait_s" "${cmd[@]}" --server "$A_addr" --server "$B_addr" --quiet >/dev/null
        local t0
        if ! trial_begin "$fault" "$backend" "$i" "$A_addr" "$B_addr"; then
          kill -9 "$B_pid"; wait "$B_pid" 2>/dev/null || true
          continue
        fi
        t0=$(now_ms)
        kill -9 "$B_pid"
        landed "$B_pid" "$t0"
        trainer_part "$out" "$(wait_exit "$push_pid")"
        [ "$t_trn" != HANG ] && t_trn=$(($(now_ms) - land_ms))
        wait "$B_pid" 2>/dev/null || true
        server_part "$A_log" "$from" "$land_ms"
        t_ready=$(wait_ready "$A_addr")
        if [ "$t_ready" != HANG ]; then t_ready=$(($(now_ms) - land_ms)); else hang "workers stayed updating"; fi
        start_server B "$fault-$backend-c$i"
        check_after "$A_addr" "$work/before" "$backend" "$B_addr"
        kill -TERM "$B_pid"; wait "$B_pid" 2>/dev/null || true
        record "$fault $backend $i ok $t_srv $t_trn $t_ready $intact $next $t_land" "|$srv_said|$trn_said"
      done
      kill -TERM "$A_pid"; wait "$A_pid" 2>/dev/null || true
      ;;
    link-cut)
      if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null ||
        ! { ip netns add "$NS" && ns_up=1 &&
          ip link add wtflt0 type veth peer name wtflt1 &&
          ip link set wtflt1 netns "$NS" &&
          ip addr add 10.231.9.2/24 dev wtflt0 && ip link set wtflt0 up &&
          ip netns exec "$NS" ip addr add 10.231.9.1/24 dev wtflt1 &&
          ip netns exec "$NS" ip link set wtflt1 up &&
          ip netns exec "$NS" ip link set lo up; } >/dev/null 2>&1; then
        record "$fault $backend 0 skipped needs root and ip netns (network namespaces)"
        return
      fi
      ns_insecure=1
      start_server A "$fault-$backend" ip netns exec "$NS"
      ns_insecure=
      timeout "$wait_s" "${cmd[@]}" --server "$A_addr" --quiet >/dev/null
      for ((i = 1; i <= trials; i++)); do
        local t0
        trial_begin "$fault" "$backend" "$i" "$A_addr" || continue
        t0=$(now_ms)
        # The trainer's exit, timed while the server's side is waited for
        # (it may come first).
        rm -f "$work/push.exit"
        (while kill -0 "$push_pid" 2>/dev/null; do sleep 0.002; done
          now_ms >"$work/push.exit") &
        local exit_watch=$!
        ip link set wtflt0 down
        # The server's side, seen from inside its namespace meanwhile.
        t_ready=$(wait_ready "$A_addr" ip netns exec "$NS")
        if [ "$t_ready" != HANG ]; then t_ready=$(($(now_ms) - t0 - deadline_s * 1000)); else hang "workers stayed updating"; fi
        trainer_part "$out" "$(wait_exit "$push_pid")"
        wait "$exit_watch" 2>/dev/null || true
        [ "$t_trn" != HANG ] && t_trn=$(($(cat "$work/push.exit") - t0))
        server_part "$A_log" "$from" "$t0" "$((deadline_s * 1000))"
        ip link set wtflt0 up
        check_after "$A_addr" "$work/before" "$backend"
        record "$fault $backend $i ok $t_srv $t_trn $t_ready $intact $next $t_land" "|$srv_said|$trn_said"
      done
      kill -TERM "$A_pid"; wait "$A_pid" 2>/dev/null || true
      ip link del wtflt0 >/dev/null 2>&1 || true
      ip netns del "$NS" >/dev/null 2>&1 || true
      ns_up=
      ;;
  esac
}

: >"$work/results"
echo "fault: $trials trial(s) per row; data deadline ${deadline_s} s; every wait bounded by ${wait_s} s" >&2
for fault in $faults; do
  for backend in $backends; do
    echo "fault: $fault / $backend ..." >&2
    run_fault "$fault" "$backend"
  done
done

# The table: medians and worsts in ms.
status=0
stat() { # prints "median/max" of the numbers on stdin, or "-"
  sort -g | awk '$1 != "-" && $1 != "n/a" && $1 != "HANG" { v[++n] = $1 } END {
    if (n == 0) { print "-"; exit }
    m = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    printf "%d/%d\n", m, v[n] }'
}
printf '\n| fault | backend | trials | lands ms (median/max) | server ms (median/max) | trainer ms (median/max) | ready ms (median/max) | intact | next round | hangs |\n'
printf '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n'
for fault in $faults; do
  for backend in $backends; do
    rowfile=$work/row
    grep "^$fault $backend " "$work/results" >"$rowfile" || true
    if grep -q " skipped " "$rowfile"; then
      printf '| %s | %s | skipped: %s | | | | | | | |\n' "$fault" "$backend" \
        "$(sed 's/.* skipped //' "$rowfile" | head -n1)"
      continue
    fi
    n=$(grep -c ' ok ' "$rowfile" || true)
    missed=$(grep -c ' missed' "$rowfile" || true)
    land=$(awk '/ ok / {print $10}' "$rowfile" | stat)
    srv=$(awk '/ ok / {print $5}' "$rowfile" | stat)
    trn=$(awk '/ ok / {print $6}' "$rowfile" | stat)
    rdy=$(awk '/ ok / {print $7}' "$rowfile" | stat)
    ok_intact=$(awk '/ ok / && $8 == "yes"' "$rowfile" | wc -l)
    ok_next=$(awk '/ ok / && $9 == "yes"' "$rowfile" | wc -l)
    row_hangs=$(awk '/ ok / && ($5 == "HANG" || $6 == "HANG" || $7 == "HANG")' "$rowfile" | wc -l)
    extra=""
    [ "$missed" -gt 0 ] && extra=" ($missed missed: the round ended before the fault)"
    printf '| %s | %s | %s%s | %s | %s | %s | %s | %s/%s | %s/%s | %s |\n' "$fault" "$backend" \
      "$n" "$extra" "$land" "$srv" "$trn" "$rdy" "$ok_intact" "$n" "$ok_next" "$n" "$row_hangs"
    if [ "$n" -eq 0 ] || [ "$ok_intact" -ne "$n" ] || [ "$ok_next" -ne "$n" ] || [ "$row_hangs" -ne 0 ]; then
      status=1
    fi
    # The server's error within 1 s of its cause (the fault, or the
    # deadline it set off).
    if awk '/ ok / && $5 != "-" && $5 > 1000 { bad = 1 } END { exit !bad }' "$rowfile"; then
      status=1
      echo "fault: $fault/$backend: a server took over 1 s after its cause" >&2
    fi
  done
done
printf '\nWhat each side said (first trial of each row):\n'
for fault in $faults; do
  for backend in $backends; do
    line=$(grep "^$fault $backend .* ok " "$work/results" | head -n1 || true)
    [ -n "$line" ] || continue
    IFS='|' read -r _ srv trn <<<"$line"
    printf -- '- %s / %s\n  - server: %s\n  - trainer: %s\n' "$fault" "$backend" "${srv:0:300}" "${trn:0:300}"
  done
done
[ "$hangs" -eq 0 ] || status=1
[ "$crashes" -eq 0 ] || status=1
echo
if [ "$status" -eq 0 ]; then echo "fault: PASS (0 hangs, 0 crashes)"; else echo "fault: FAIL (hangs: $hangs, crashes: $crashes)"; fi
exit "$status"
