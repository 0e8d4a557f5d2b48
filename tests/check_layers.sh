#!/usr/bin/env bash
# check_layers.sh SRC_DIR OBJECT... — the library's folders form layers, each using only those
# below it: no upward and no circular dependency, by #include or by call.
#
#   base       src/*.c, src/base/: errors, paths, atomic files, small shared utilities
#   cpu        CPU features and the kernel-path choice
#   layers     each layer's forward / backward and its per-CPU kernels
#   quant      quantised formats, their kernels, the quantised linear layer (no dt_model)
#   tokenizer  tokenizer.json: normalizers, pre-tokenizers, BPE, decoders, training a tokenizer
#   io         safetensors, shards, token datasets, small JSON files
#   model      config, layout, forward, decoding, generation, vocabulary, quantising a model
#   dist       the data-parallel communicator (MPI)
#   train      the training step and loop
#   bench      benchmarks of the model and the training step
#   analysis   the claims toolkit: analyses, tasks, compare, needle, reports
#   serve      the serving engine: continuous batching of requests over a pool of KV-cache slots
#
# Includes are read from the sources ("folder/file.h" names its folder; a bare name is the
# including file's own folder, or the top-level internal.h / difftrans.h); calls from the object
# files' symbol tables (nm: a symbol one folder's objects use and another's define). A folder may
# use its own symbols and anything below it; the public header difftrans.h is everyone's.
set -u
SRC=$1
shift # the library's object files (CMake's $<TARGET_OBJECTS:difftrans>), .../src/FOLDER/FILE.c.o
LAYERS=(base cpu layers quant tokenizer io model dist train bench analysis serve)
declare -A RANK
for i in "${!LAYERS[@]}"; do RANK[${LAYERS[$i]}]=$i; done
fail=0

layer_of() { # a path under src/ → its layer
    local rel=${1#"$SRC"/}
    case "$rel" in
    */*) local top=${rel%%/*}; [ "$top" = base ] && echo base || echo "$top" ;;
    *) echo base ;;
    esac
}

# ---------------------------------------------------------------- includes
while IFS= read -r f; do
    from=$(layer_of "$f")
    if [ -z "${RANK[$from]+x}" ]; then
        echo "check_layers: $f is in a folder that is not a layer ($from): add it to LAYERS in $0"
        fail=1
        continue
    fi
    while IFS= read -r inc; do
        case "$inc" in
        */*) to=${inc%%/*} ;;
        difftrans.h | internal.h) continue ;;
        *) continue ;; # the file's own folder
        esac
        [ "$to" = "$from" ] && continue
        if [ -z "${RANK[$to]+x}" ]; then
            echo "check_layers: $f includes \"$inc\" from $to, which is not a layer"
            fail=1
        elif [ "${RANK[$to]}" -gt "${RANK[$from]}" ]; then
            echo "check_layers: $f ($from) includes \"$inc\" from $to, a layer above it"
            fail=1
        fi
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
done < <(find "$SRC" -name '*.[ch]' | sort)

# ---------------------------------------------------------------- calls
# every object's defined and undefined symbols, with its layer
defs=$(mktemp)
uses=$(mktemp)
trap 'rm -f "$defs" "$uses"' EXIT
n_obj=0
for o in "$@"; do
    n_obj=$((n_obj + 1))
    rel=${o##*/src/}
    case "$rel" in */*) top=${rel%%/*} ;; *) top=base ;; esac
    nm --defined-only "$o" | awk -v l="$top" '$2 ~ /^[TDRB]$/ {print $3, l}' >>"$defs"
    nm --undefined-only "$o" | awk -v l="$top" -v o="$rel" '{print $2, l, o}' >>"$uses"
done
if [ "$n_obj" -eq 0 ]; then
    echo "check_layers: no object files given"
    exit 1
fi
while read -r sym user obj def; do
    [ "$user" = "$def" ] && continue
    if [ -z "${RANK[$user]+x}" ] || [ -z "${RANK[$def]+x}" ]; then
        echo "check_layers: $obj ($user) uses $sym from $def: a folder that is not a layer"
        fail=1
    elif [ "${RANK[$def]}" -gt "${RANK[$user]}" ]; then
        echo "check_layers: $obj ($user) calls $sym, defined in $def, a layer above it"
        fail=1
    fi
done < <(join -1 1 -2 1 <(sort -k1,1 "$uses") <(sort -k1,1 -u "$defs"))

if [ $fail -ne 0 ]; then
    echo "check_layers: the layers are, from the bottom: ${LAYERS[*]}"
    exit 1
fi
echo "check_layers: $n_obj objects and every source of $SRC keep to the layers: ${LAYERS[*]}"
