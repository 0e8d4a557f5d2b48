#!/usr/bin/env bash
# run.sh FUZZER SEEDS WORK SECONDS — run one libFuzzer harness for SECONDS on a working copy of its
# committed seed corpus (WORK/corpus grows; the committed SEEDS stay as they are). A crash, a
# memory error, a leak, an allocation over 512 MB or an input that takes over 60 s (wall time: generous, for loaded machines) is a failure:
# its input is left in WORK/ (crash-*, oom-*, timeout-*, leak-*) and the status is non-zero.
# Prints the fuzzer's final statistics (executions, coverage) and one summary line.
set -u
fuzzer=$1 seeds=$2 work=$3 seconds=$4
mkdir -p "$work/corpus"
[ -d "$seeds" ] && cp -n "$seeds"/* "$work/corpus/" 2>/dev/null
log=$work/fuzz.log
"$fuzzer" -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=512 -timeout=60 -print_final_stats=1 \
    -artifact_prefix="$work/" "$work/corpus" >"$log" 2>&1
rc=$?
execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
units=$(ls "$work/corpus" | wc -l)
echo "$(basename "$fuzzer"): ${execs:-?} executions in ${seconds}s, ${cov:-cov: ?}, corpus $units inputs, status $rc"
if [ $rc -ne 0 ]; then
    tail -60 "$log"
    ls "$work"/crash-* "$work"/oom-* "$work"/timeout-* "$work"/leak-* 2>/dev/null
fi
exit $rc
