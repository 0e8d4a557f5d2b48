#!/usr/bin/env bash
# scaling.sh — times data-parallel training steps at N = 1, 2, ... ranks on this machine with
# ranks × threads = cores, with and without overlapping the gradient reduction with the backward,
# and with ZeRO-1; prints one table row and one JSON line per run.
#
# usage: bench/scaling.sh [DIFFTRANS] [-- extra train options]
#   env: RANKS="1 2" (rank counts), PRESET=small, BATCH=16, SEQ=128, STEPS=30, REPS=2,
#        DATA=/usr/share/common-licenses/GPL-3
#
# Each run is `mpirun -np N difftrans train` (N = 1 too, so every run pays the same launcher) and
# its closing `summary:` line gives, averaged over the steps after the first: the step time, the
# compute time (forwards and backwards) and its spread between ranks, the communication time per
# step (the waits on other ranks: the gradient reduction after the backward, the loss exchange,
# the ZeRO all-gather) and its fraction of the step, the part of it spent waiting for the
# gradient reduction after the backward, and that wait less the time spent waiting for the
# slowest rank's backward ("exposed": with --no-overlap the whole reduction, with overlap what the
# backward did not hide), bytes sent per rank per step (ring
# algorithms: 2·(N−1)/N·4P) and the optimizer state per rank. The configurations are run in turn,
# REPS times, so that a busy machine slows them alike; the table gives each one's best repetition.
set -u
DT=${1:-build/difftrans}
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift
EXTRA=("$@")
RANKS=${RANKS:-"1 2"}
PRESET=${PRESET:-small} BATCH=${BATCH:-16} SEQ=${SEQ:-128} STEPS=${STEPS:-30} REPS=${REPS:-2}
DATA=${DATA:-/usr/share/common-licenses/GPL-3}
CORES=$(nproc)
OUT=$(mktemp -d /tmp/dt_scaling.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
MPIRUN=(mpirun --oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
export OMP_WAIT_POLICY=PASSIVE OMPI_MCA_btl_vader_single_copy_mechanism=none

configs=()
for n in $RANKS; do
    configs+=("$n plain")
    [ "$n" -gt 1 ] && configs+=("$n no-overlap" "$n zero")
done

declare -A best
for rep in $(seq 1 "$REPS"); do
    for cfg in "${configs[@]}"; do
        set -- $cfg
        n=$1 kind=$2
        threads=$((CORES / n))
        [ $threads -lt 1 ] && threads=1
        flags=()
        [ "$kind" = no-overlap ] && flags+=(--no-overlap)
        [ "$kind" = zero ] && flags+=(--zero 1)
        log=$OUT/$n-$kind-$rep.log
        # train refuses an --out that holds a checkpoint: the previous run's goes first
        rm -rf "$OUT/run"
        if ! timeout 600 "${MPIRUN[@]}" -np "$n" "$DT" train --data "$DATA" --out "$OUT/run" --preset "$PRESET" \
            --batch "$BATCH" --seq "$SEQ" --steps "$STEPS" --eval-interval 0 --eval-batches 1 --save-interval 0 \
            --threads "$threads" "${flags[@]}" "${EXTRA[@]}" >"$log" 2>&1; then
            echo "scaling.sh: N=$n $kind failed:" >&2
            tail -5 "$log" >&2
            exit 1
        fi
        line=$(grep '^summary:' "$log")
        step=$(sed -n 's/.*| step \([0-9.]*\) ms.*/\1/p' <<<"$line")
        key="$n $kind"
        if [ -z "${best[$key]:-}" ] || awk -v a="$step" -v b="${best[$key]%% *}" 'BEGIN{exit !(a<b)}'; then
            best[$key]="$step $line"
        fi
    done
done

printf '%-6s %-11s %-8s %10s %10s %8s %10s %10s %10s %8s %10s %10s %10s\n' ranks mode threads "step ms" "compute" spread \
    "comm ms" "wait ms" "exposed" "comm %" "MB/step" "optim MB" "tok/s"
for cfg in "${configs[@]}"; do
    set -- $cfg
    n=$1 kind=$2
    line=${best[$cfg]#* }
    field() { sed -n "s#.*$1.*#\\1#p" <<<"$line"; }
    step=$(field '| step \([0-9.]*\) ms')
    compute=$(field '| compute \([0-9.]*\) ms')
    spread=$(field 'spread between ranks \([0-9.]*\)%')
    comm=$(field 'communication \([0-9.]*\) ms/step')
    wait=$(field '(\([0-9.]*\) ms waiting after the backward')
    exposed=$(field 'backward, \([0-9.]*\) ms of it not for a slower rank')
    frac=$(field '= \([0-9.]*\)% of the step')
    mb=$(field ', \([0-9.]*\) MB sent')
    optim=$(field 'optimizer state \([0-9.]*\) MB')
    tps=$(field '| \([0-9]*\) tok/s')
    threads=$((CORES / n))
    [ $threads -lt 1 ] && threads=1
    printf '%-6s %-11s %-8s %10s %10s %7s%% %10s %10s %10s %7s%% %10s %10s %10s\n' "$n" "$kind" "$threads" "$step" \
        "$compute" "$spread" "$comm" "$wait" "$exposed" "$frac" "$mb" "$optim" "$tps"
    echo "{\"ranks\":$n,\"mode\":\"$kind\",\"threads\":$threads,\"preset\":\"$PRESET\",\"batch\":$BATCH,\"seq\":$SEQ,\"step_ms\":$step,\"compute_ms\":$compute,\"compute_spread_pct\":$spread,\"comm_ms\":$comm,\"wait_after_backward_ms\":$wait,\"exposed_reduction_ms\":$exposed,\"comm_pct\":$frac,\"mb_per_rank_step\":$mb,\"optimizer_mb_per_rank\":$optim,\"tokens_per_s\":$tps}" >>"$OUT/json"
done
cat "$OUT/json"
