#!/usr/bin/env bash
# netns_check.sh — a measured check of bench/comm_model.py: two ranks of `difftrans train`, each in
# a network namespace of its own, joined by one veth pair whose two ends are rate-limited with tc
# (tbf); the communication time per step is measured at several link rates and one-way delays
# and set against the α–β model's prediction.
#
# usage: bench/netns_check.sh [DIFFTRANS]          (as root; Linux network namespaces, veth, tc)
#   env: RATES="50 200 1000" link rates, Mbit/s      PRESETS="tiny small"
#        ALGORITHMS="default ring"  Open MPI's choice (binomial, for difftrans's in-place all-reduce)
#                                   and the ring (--mca coll_libnbc_iallreduce_algorithm 1)
#        DELAYS="0 5" one-way delays, ms: netem's delay on the veth where the kernel has netem;
#                     otherwise bench/delay_line.py, a user-space delay line between two TAP devices
#                     in the same namespaces (tbf on them for the rate), for the rows with a delay
#        STEPS=6 (the first is not timed)  REPS=2 (best kept)  RUN_TIMEOUT=120 s per run
#        TOTAL_TIMEOUT=900 s for the whole script  DATA=/usr/share/common-licenses/GPL-3
#        OVERLAP=1   also measure what overlapping the reduction with the backward saves: each
#                    rate × preset on the veth (no added delay, Open MPI's default algorithm) with
#                    and without --no-overlap, the step time of both (best of REPS) in a second table
#
# Everything it creates — two namespaces (dtnc<pid>a, dtnc<pid>b), the veth pair inside them,
# their qdiscs, the delay line's process and TAP devices, a temporary directory — is removed on
# every exit path (trap; the delay line also exits when this script's end of its stdin closes);
# processes still running in the two namespaces are killed first. Nothing is changed outside
# those namespaces.
#
# How two ranks run in two namespaces: Open MPI's launcher is told that the job has two hosts,
# the two veth addresses. mpirun runs in namespace a, so it starts the rank of 10.213.0.1 itself;
# for 10.213.0.2 it calls its "remote shell" (plm_rsh_agent), here a script that runs Open MPI's
# daemon (orted) inside namespace b instead of over ssh. Each rank then reaches a PMIx server in
# its own namespace, and all traffic between the ranks (TCP only: btl tcp,self) crosses the veth.
#
# What is measured, per run (the `summary:` line, averaged over the steps after the first), with
# --no-overlap so that the reduction is not hidden behind the backward: the communication per step
# (the wait for the gradient reduction + the exchange of losses that follows it) less the time
# rank 0 only waited for the slower rank's backward. The exchange is needed: rank 0's own wait
# ends when its last message is in the kernel's socket buffer, not when the peer has it.
# α (per-message latency) is the link's own, measured, plus the added delay: the link's own α comes
# from runs of a one-bucket model of about 2,600 parameters (10 KB of gradients) on the link
# without limits, whose 2 all-reduce messages + 1 loss exchange take ≈ 3α per step (the median of
# 3 runs). The prediction is comm_model.py's t(2) for the preset with that α and β = the tc rate,
# plus α for the exchange of losses. Every other number is the best of REPS runs.
set -u
DT=${1:-build/difftrans}
RATES=${RATES:-"50 200 1000"} PRESETS=${PRESETS:-"tiny small"} ALGORITHMS=${ALGORITHMS:-"default ring"}
OVERLAP=${OVERLAP:-0} DELAYS=${DELAYS:-"0 5"} STEPS=${STEPS:-6} REPS=${REPS:-2} RUN_TIMEOUT=${RUN_TIMEOUT:-120}
TOTAL_TIMEOUT=${TOTAL_TIMEOUT:-900} MICRO_STEPS=21 DATA=${DATA:-/usr/share/common-licenses/GPL-3}
HERE=$(cd "$(dirname "$0")" && pwd)
MODEL="$HERE/comm_model.py" DELAY_LINE="$HERE/delay_line.py"

die() { echo "netns_check.sh: $*" >&2; exit 2; }

[ "$(id -u)" = 0 ] || die "needs root (it creates network namespaces, a veth pair and qdiscs); run it with sudo"
for tool in ip tc mpirun timeout python3 awk; do
    command -v "$tool" >/dev/null || die "needs '$tool' (iproute2, Open MPI, coreutils, python3, awk)"
done
[ -x "$DT" ] || die "$DT: no such executable (build it with make, or pass its path)"
[ -r "$DATA" ] || die "$DATA: cannot read the training text (set DATA=FILE)"
[ -r "$MODEL" ] || die "$MODEL: missing"
for v in STEPS REPS RUN_TIMEOUT TOTAL_TIMEOUT; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v=${!v}: expected a positive integer"
done
[ "$STEPS" -ge 2 ] || die "STEPS=$STEPS: needs at least 2 (the first step is not timed)"
for r in $RATES; do [[ $r =~ ^[1-9][0-9]*$ ]] || die "RATES: '$r' is not a rate in Mbit/s (a positive integer)"; done
for d in $DELAYS; do [[ $d =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "DELAYS: '$d' is not a delay in ms"; done
for p in $PRESETS; do
    case $p in tiny | small | medium | base) ;; *) die "PRESETS: '$p' is not a preset (tiny small medium base)" ;; esac
done
for a in $ALGORITHMS; do
    case $a in default | ring | binomial) ;; *) die "ALGORITHMS: '$a' is not default, ring or binomial" ;; esac
done

NS_A=dtnc$$a NS_B=dtnc$$b
IP_A=10.213.0.1 IP_B=10.213.0.2 NET=10.213.0.0/24 TAP_NET=10.213.1.0/24
DATA_NET=$NET # the subnet the ranks' traffic takes: the veth's, or the TAP devices' of the delay line
DL_PID="" DL_IN=""
TMP=$(mktemp -d /tmp/dt_netns.XXXXXX) || die "cannot create a temporary directory"
stop_delay_line() {
    if [ -n "$DL_PID" ]; then
        exec {DL_IN}>&- # its stdin closes: it exits, and its TAP devices go with it
        kill "$DL_PID" 2>/dev/null
        wait "$DL_PID" 2>/dev/null
        DL_PID=""
    fi
}
cleanup() {
    local ns pid
    stop_delay_line
    for ns in "$NS_A" "$NS_B"; do
        if ip netns list 2>/dev/null | grep -qw "$ns"; then
            for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
            ip netns del "$ns" 2>/dev/null # takes its end of the veth pair, hence the pair, along
        fi
    done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'echo "netns_check.sh: interrupted" >&2; exit 130' INT TERM

ip netns add "$NS_A" && ip netns add "$NS_B" || die "cannot create network namespaces (ip netns add)"
ip link add veth_a netns "$NS_A" type veth peer name veth_b netns "$NS_B" || die "cannot create a veth pair"
ip -n "$NS_A" addr add "$IP_A/24" dev veth_a && ip -n "$NS_B" addr add "$IP_B/24" dev veth_b || die "cannot address the veth pair"
for ns in "$NS_A" "$NS_B"; do
    ip -n "$ns" link set lo up && ip -n "$ns" link set "veth_${ns: -1}" up || die "cannot bring up the links in $ns"
done

# The qdiscs must exist before anything is measured: refuse clearly, not half-way.
tc -n "$NS_A" qdisc add dev veth_a root tbf rate 100mbit burst 32kb latency 100ms 2>"$TMP/tc.err" ||
    die "the tbf qdisc is unavailable ($(head -1 "$TMP/tc.err")): rates cannot be limited"
tc -n "$NS_A" qdisc del dev veth_a root
HAVE_NETEM=0
tc -n "$NS_A" qdisc add dev veth_a root netem delay 1ms 2>"$TMP/netem.err" && HAVE_NETEM=1 &&
    tc -n "$NS_A" qdisc del dev veth_a root
for d in $DELAYS; do
    if awk -v d="$d" 'BEGIN{exit !(d > 0)}' && [ $HAVE_NETEM = 0 ]; then
        [ -r "$DELAY_LINE" ] && [ -c /dev/net/tun ] ||
            die "DELAYS=$DELAYS: this kernel has no netem qdisc ($(head -1 "$TMP/netem.err")) and the user-space delay line needs $DELAY_LINE and /dev/net/tun; run with DELAYS=0 (rate limits only)"
    fi
done

# start_delay_line MS: TAP devices tap_a, tap_b in the two namespaces, MS apart, addressed in TAP_NET.
start_delay_line() {
    stop_delay_line
    : >"$TMP/delay_line.out"
    # Its stdin is a pipe from this script: even a killed script cannot leave it running.
    exec {DL_IN}> >(exec python3 "$DELAY_LINE" "$NS_A" tap_a "$NS_B" tap_b "$1" >"$TMP/delay_line.out" 2>&1)
    DL_PID=$!
    local _
    for _ in $(seq 1 100); do
        grep -q '^ready' "$TMP/delay_line.out" && break
        kill -0 "$DL_PID" 2>/dev/null || break
        sleep 0.1
    done
    grep -q '^ready' "$TMP/delay_line.out" || die "the delay line did not start: $(tail -1 "$TMP/delay_line.out")"
    ip -n "$NS_A" addr add 10.213.1.1/24 dev tap_a && ip -n "$NS_B" addr add 10.213.1.2/24 dev tap_b &&
        ip -n "$NS_A" link set tap_a mtu 9000 up && ip -n "$NS_B" link set tap_b mtu 9000 up ||
        die "cannot set up the delay line's TAP devices"
}

# shape RATE DELAY: rate in Mbit/s (0: none), one-way delay in ms, the same on both ends (each end
# shapes what it sends), on the veth (netem, or tbf without delay) or on the delay line's TAPs.
shape() {
    local rate=$1 delay=$2 ns dev burst use_tap=0
    awk -v d="$delay" 'BEGIN{exit !(d > 0)}' && [ $HAVE_NETEM = 0 ] && use_tap=1
    for ns in "$NS_A" "$NS_B"; do
        dev=veth_${ns: -1}
        [ $use_tap = 1 ] && dev=tap_${ns: -1}
        tc -n "$ns" qdisc del dev "$dev" root 2>/dev/null
        # tbf's burst must cover what the link sends between two timer wake-ups (HZ may be 250):
        # at least 1 ms of the rate, never under 32 KB.
        burst=$((rate * 1000 / 8))
        [ $burst -lt 32768 ] && burst=32768
        if awk -v d="$delay" 'BEGIN{exit !(d > 0)}' && [ $use_tap = 0 ]; then
            if [ "$rate" -gt 0 ]; then
                tc -n "$ns" qdisc add dev "$dev" root netem delay "${delay}ms" rate "${rate}mbit" limit 100000
            else
                tc -n "$ns" qdisc add dev "$dev" root netem delay "${delay}ms" limit 100000
            fi
        elif [ "$rate" -gt 0 ]; then
            tc -n "$ns" qdisc add dev "$dev" root tbf rate "${rate}mbit" burst "$burst" latency 200ms
        fi || die "cannot set rate ${rate} Mbit/s, delay ${delay} ms on $dev in $ns"
    done
}

cat >"$TMP/agent.sh" <<EOF
#!/bin/sh
# Open MPI's "remote shell" for this check: host \$1's daemon runs in that host's namespace.
host=\$1; shift
case \$host in
$IP_A) ns=$NS_A ;;
$IP_B) ns=$NS_B ;;
*) echo "netns_check agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" /bin/sh -c "\$*"
EOF
chmod +x "$TMP/agent.sh"
printf '%s slots=1\n%s slots=1\n' "$IP_A" "$IP_B" >"$TMP/hosts"
# A one-bucket model for α: 256-token vocabulary, width 4, one layer.
cat >"$TMP/micro.json" <<'EOF'
{"model_type": "diffllama", "vocab_size": 256, "hidden_size": 4, "intermediate_size": 8,
 "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 2,
 "max_position_embeddings": 64, "rms_norm_eps": 1e-05, "rope_theta": 10000, "tie_word_embeddings": false}
EOF

export OMP_WAIT_POLICY=PASSIVE
# run_once ALGORITHM STEPS MODEL_ARGS... → RESULT = the communication ms per step, STEP_MS = the step time
# ($TMP/last.log: the run's output). OVERLAP_FLAG is --no-overlap except in the overlap table.
OVERLAP_FLAG=--no-overlap
# The run goes to the background and is waited for, so that a signal reaches the traps at once
# (bash runs a trap only after a foreground command ends); no $(...) subshell runs it, so die and
# exit leave through the cleanup.
run_once() {
    local alg=$1 steps=$2
    shift 2
    local mca=()
    case $alg in ring) mca=(--mca coll_libnbc_iallreduce_algorithm 1) ;; binomial) mca=(--mca coll_libnbc_iallreduce_algorithm 2) ;; esac
    [ "$SECONDS" -lt "$TOTAL_TIMEOUT" ] || die "TOTAL_TIMEOUT=$TOTAL_TIMEOUT s reached; stopping"
    rm -rf "$TMP/run"
    ip netns exec "$NS_A" timeout -k 5 "$RUN_TIMEOUT" mpirun --allow-run-as-root --hostfile "$TMP/hosts" -np 2 \
        --bind-to none --mca plm_rsh_agent "$TMP/agent.sh" --mca btl tcp,self --mca btl_tcp_if_include "$DATA_NET" \
        --mca oob_tcp_if_include "$NET" "${mca[@]}" -x OMP_WAIT_POLICY \
        "$DT" train --data "$DATA" --out "$TMP/run" "$@" --batch 4 --seq 64 --steps "$steps" --threads 1 \
        $OVERLAP_FLAG --eval-interval 0 --eval-batches 1 --save-interval 0 --comm-timeout 60 >"$TMP/last.log" 2>&1 &
    if ! wait $!; then
        tail -5 "$TMP/last.log" >&2
        die "a run failed or passed RUN_TIMEOUT=$RUN_TIMEOUT s ($alg $*)"
    fi
    local line
    line=$(grep '^summary:' "$TMP/last.log") || { tail -5 "$TMP/last.log" >&2; die "no summary line in the run's output"; }
    # communication − (wait after the backward − its part not for a slower rank)
    RESULT=$(sed -n 's/.*communication \([0-9.]*\) ms\/step.*(\([0-9.]*\) ms waiting after the backward, \([0-9.]*\) ms of it.*/\1 \2 \3/p' <<<"$line" |
        awk '{printf "%.2f\n", $1 - ($2 - $3)}')
    [ -n "$RESULT" ] || die "cannot read the communication times in: $line"
    STEP_MS=$(sed -n 's/.*| step \([0-9.]*\) ms |.*/\1/p' <<<"$line")
    [ -n "$STEP_MS" ] || die "cannot read the step time in: $line"
}
# run_reps HOW REPS ALGORITHM STEPS MODEL_ARGS... → RESULT = the best (HOW=min) or the median (HOW=median) of REPS runs
run_reps() {
    local how=$1 reps=$2 all=() _
    shift 2
    for _ in $(seq 1 "$reps"); do
        run_once "$@"
        all+=("$RESULT")
    done
    if [ "$how" = min ]; then
        RESULT=$(printf '%s\n' "${all[@]}" | sort -g | head -1)
    else
        RESULT=$(printf '%s\n' "${all[@]}" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}')
    fi
}

echo "netns_check.sh: ranks in $NS_A ($IP_A) and $NS_B ($IP_B), one veth pair; $REPS repetitions, best kept" >&2
[ $HAVE_NETEM = 0 ] && echo "netns_check.sh: no netem qdisc in this kernel: delays through bench/delay_line.py (TAP devices)" >&2
printf '| link | algorithm | delay ms | α µs | preset | Mbit/s | measured ms | predicted ms | measured / predicted |\n'
printf '| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |\n'
# measure_alpha0: ALPHA0 = the link's own α in µs, without added delay or rate limit (the median of
# 3 runs of the one-bucket model: 2 all-reduce messages + 1 loss exchange ≈ 3α per step).
measure_alpha0() {
    shape 0 0
    run_reps median 3 default "$MICRO_STEPS" --config "$TMP/micro.json"
    ALPHA0=$(awk -v t="$RESULT" 'BEGIN{printf "%.0f", 1000 * t / 3}')
    echo "netns_check.sh: $link: 3α = $RESULT ms per step without limits (median of 3 runs) → α = $ALPHA0 µs" >&2
}
for delay in $DELAYS; do
    link=veth DATA_NET=$NET
    stop_delay_line
    if awk -v d="$delay" 'BEGIN{exit !(d > 0)}' && [ $HAVE_NETEM = 0 ]; then
        link="TAP, delay_line.py" DATA_NET=$TAP_NET
        start_delay_line 0
        measure_alpha0
        start_delay_line "$delay"
    else
        [ -n "${ALPHA0_VETH:-}" ] || { measure_alpha0; ALPHA0_VETH=$ALPHA0; }
        ALPHA0=$ALPHA0_VETH
        awk -v d="$delay" 'BEGIN{exit !(d > 0)}' && link="veth, netem"
    fi
    # The added delay is known: α = the link's own α + the delay (a measured α would depend on how
    # the two ranks' steps happen to interleave, which a delay of several ms makes visible).
    alpha_us=$(awk -v a="$ALPHA0" -v d="$delay" 'BEGIN{printf "%.0f", a + 1000 * d}')
    for alg in $ALGORITHMS; do
        model_alg=$alg
        [ "$alg" = default ] && model_alg=binomial # libnbc's choice for an in-place all-reduce
        for rate in $RATES; do
            shape "$rate" "$delay"
            for preset in $PRESETS; do
                run_reps min "$REPS" "$alg" "$STEPS" --preset "$preset"
                meas=$RESULT
                pred=$(python3 "$MODEL" --predict "$preset" 2 "$rate" --alpha-us "$alpha_us" --algorithm "$model_alg") ||
                    die "comm_model.py failed"
                pred=$(awk -v p="$pred" -v a="$alpha_us" 'BEGIN{printf "%.2f", p + a / 1000}')
                ratio=$(awk -v m="$meas" -v p="$pred" 'BEGIN{printf "%.2f", m / p}')
                printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$link" "$alg" "$delay" "$alpha_us" "$preset" "$rate" \
                    "$meas" "$pred" "$ratio"
            done
        done
    done
done
if [ "$OVERLAP" = 1 ]; then
    stop_delay_line
    link=veth DATA_NET=$NET
    printf '\n| preset | Mbit/s | step ms, reduction after the backward | step ms, overlapped | saved |\n'
    printf '| --- | ---: | ---: | ---: | ---: |\n'
    for rate in $RATES; do
        shape "$rate" 0
        for preset in $PRESETS; do
            best_after= best_over=
            for _ in $(seq 1 "$REPS"); do # alternating the two, best of each
                OVERLAP_FLAG=--no-overlap run_once default "$STEPS" --preset "$preset"
                best_after=$(printf '%s\n%s\n' "${best_after:-$STEP_MS}" "$STEP_MS" | sort -g | head -1)
                OVERLAP_FLAG= run_once default "$STEPS" --preset "$preset"
                best_over=$(printf '%s\n%s\n' "${best_over:-$STEP_MS}" "$STEP_MS" | sort -g | head -1)
            done
            saved=$(awk -v a="$best_after" -v o="$best_over" 'BEGIN{printf "%.1f%%", 100 * (a - o) / a}')
            printf '| %s | %s | %s | %s | %s |\n' "$preset" "$rate" "$best_after" "$best_over" "$saved"
        done
    done
fi
