# cli_lib.sh — what the CLI test scripts share; sourced as `. "$(dirname "$0")/cli_lib.sh" "$@"`.
#
# Takes the script's arguments PATH_TO_difftrans SCRATCH_DIR and sets DT (absolute path of the
# tool), S (a fresh, absolute scratch directory), CORPUS (a plain English text), PY (a python3,
# possibly empty) and TMO (seconds before a command counts as hung; set it before sourcing to
# change the default of 120). Then the checks, each counted in N_PASS / N_FAIL:
#   check DESC CMD...            a helper command (not difftrans) that must succeed
#   expect_ok DESC CMD...        status 0; stdout in $S/last.out, stderr in $S/last.err
#   expect_fail DESC REGEX CMD... a clean refusal: one of the documented failure statuses 1..6
#                                (README.md "Exit status"), not a crash or a hang; stderr matching REGEX
#   expect_status DESC N REGEX CMD... exactly status N, stderr matching REGEX
#   out_has DESC FILE REGEX...   FILE matches every REGEX
#   finish NAME                  prints the summary and exits 1 when any check failed
if [ $# -ne 2 ]; then
    echo "usage: $0 PATH_TO_difftrans SCRATCH_DIR" >&2
    exit 2
fi
DT=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
S=$2
case "$S" in "" | / | "$HOME" | .) echo "$0: refusing to use $S as the scratch directory" >&2; exit 2 ;; esac
rm -rf "$S" && mkdir -p "$S" && S=$(cd "$S" && pwd) || exit 2
if [ ! -x "$DT" ]; then
    echo "$0: $DT is not an executable" >&2
    exit 2
fi
CORPUS=/usr/share/common-licenses/GPL-3
if [ ! -s "$CORPUS" ]; then # not every system has it: any plain text with lines will do
    CORPUS=$S/corpus.txt
    for i in $(seq 1 400); do echo "Line $i of a small corpus. It has sentences, and it has lines."; done >"$CORPUS"
fi
# the interpreter itself, not a version-manager shim (those cost ~0.5 s per start)
PY=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null || true)
# DT_TEST_TIMEOUT_SCALE stretches every hang guard on a loaded machine (the commands are the same).
TMO=$(( ${TMO:-120} * ${DT_TEST_TIMEOUT_SCALE:-1} ))

N_PASS=0
N_FAIL=0
FAILED=()
pass() { N_PASS=$((N_PASS + 1)); }
fail() {
    N_FAIL=$((N_FAIL + 1))
    FAILED+=("$1")
    printf 'FAIL: %s\n' "$1"
    shift
    for line in "$@"; do printf '      %s\n' "$line"; done
}

check() {
    local desc=$1 out
    shift
    if out=$("$@" 2>&1); then pass; else fail "$desc" "$(printf '%s' "$out" | head -c 1500)"; fi
}

expect_ok() {
    local desc=$1
    shift
    timeout -k 5 "$TMO" "$@" >"$S/last.out" 2>"$S/last.err" </dev/null
    local rc=$?
    if [ $rc -eq 0 ]; then pass; else
        local why="status $rc"
        [ $rc -eq 124 ] && why="hung (killed after ${TMO}s)"
        [ $rc -gt 128 ] && why="crashed: status $rc (signal $((rc - 128)))"
        fail "$desc" "$why" "command: $*" "stderr: $(head -c 800 "$S/last.err" | tr '\n' '|')"
    fi
    return $rc
}

expect_fail() {
    local desc=$1 re=$2
    shift 2
    timeout -k 5 "$TMO" "$@" >"$S/last.out" 2>"$S/last.err" </dev/null
    local rc=$?
    if [ $rc -lt 1 ] || [ $rc -gt 6 ]; then
        fail "$desc" "status $rc (expected a refusal, 1..6)" "command: $*" "stderr: $(head -c 800 "$S/last.err" | tr '\n' '|')"
    elif ! grep -qE -- "$re" "$S/last.err"; then
        fail "$desc" "stderr lacks /$re/" "stderr: $(head -c 800 "$S/last.err" | tr '\n' '|')"
    else pass; fi
}

expect_status() {
    local desc=$1 want=$2 re=$3
    shift 3
    timeout -k 5 "$TMO" "$@" >"$S/last.out" 2>"$S/last.err" </dev/null
    local rc=$?
    if [ $rc -ne "$want" ]; then
        fail "$desc" "status $rc (expected $want)" "command: $*" "stderr: $(head -c 800 "$S/last.err" | tr '\n' '|')"
    elif ! grep -qE -- "$re" "$S/last.err"; then
        fail "$desc" "stderr lacks /$re/" "stderr: $(head -c 800 "$S/last.err" | tr '\n' '|')"
    else pass; fi
}

out_has() {
    local desc=$1 file=$2 p missing=()
    shift 2
    for p in "$@"; do grep -qE -- "$p" "$file" || missing+=("/$p/"); done
    if [ ${#missing[@]} -eq 0 ]; then pass; else
        fail "$desc" "missing: ${missing[*]}" "output: $(head -c 1200 "$file" | tr '\n' '|')"
    fi
}

# wait_for PID TEST: polls the shell test TEST (eval'd) every 20 ms until it succeeds (0) or the
# process PID ends or two minutes pass (1)
wait_for() {
    local i
    for i in $(seq 1 6000); do
        kill -0 "$1" 2>/dev/null || return 1
        if eval "$2"; then return 0; fi
        sleep 0.02
    done
    return 1
}

finish() {
    echo "$1: $N_PASS passed, $N_FAIL failed"
    if [ "$N_FAIL" -ne 0 ]; then
        printf '  failed: %s\n' "${FAILED[@]}"
        exit 1
    fi
    exit 0
}
