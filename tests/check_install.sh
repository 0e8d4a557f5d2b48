#!/usr/bin/env bash
# check_install.sh BUILD_DIR WORK_DIR SOURCE_DIR VERSION PREFIX LIBDIR INCLUDEDIR BINDIR CMAKE CC
#                  PKG_CONFIG [CFLAG...]
# What a library user meets: `cmake --install` staged under a DESTDIR puts exactly the public headers,
# libdifftrans.so (its SONAME, the dt_* symbols alone exported), libdifftrans.a, difftrans.pc and the
# CLI where GNUInstallDirs says, and tests/public_link.c (a program defining functions under the
# library's internal names) compiles against the staged copy through pkg-config and runs twice:
# linked to the shared library, and with --static to the archive. LIBDIR, INCLUDEDIR and BINDIR are
# the full installed paths (CMAKE_INSTALL_FULL_*); CFLAGs go to every compile and link (the
# sanitizers in the sanitizer build, whose library the program must link with their runtime).
set -u
build=$1 work=$2 src=$3 version=$4 prefix=$5 libdir=$6 incdir=$7 bindir=$8 cmake=$9 cc=${10} pkgconfig=${11}
shift 11
cflags=("$@")
soname=libdifftrans.so.${version%%.*}
stage=$work/stage
words() { tr -s ' ' '\n' <<<"$1"; } # pkg-config's output, a flag a line
fail() { echo "check_install: $*" >&2; exit 1; }
for tool in readelf nm ldd; do
    command -v "$tool" >/dev/null || fail "$tool not found"
done
rm -rf "$work" && mkdir -p "$work" || fail "cannot create $work"

DESTDIR=$stage "$cmake" --install "$build" >"$work/install.log" ||
    { cat "$work/install.log"; fail "cmake --install failed"; }

# ------------------------------------------------------------ the files, and nothing else
expected=$(
    for h in "$src"/include/*.h; do echo "$incdir/${h##*/}"; done
    echo "$libdir/libdifftrans.a"
    echo "$libdir/libdifftrans.so"
    echo "$libdir/$soname"
    echo "$libdir/libdifftrans.so.$version"
    echo "$libdir/pkgconfig/difftrans.pc"
    echo "$bindir/difftrans"
)
installed=$(cd "$stage" && find . \( -type f -o -type l \) | sed 's|^\.||')
if [ "$(sort <<<"$expected")" != "$(sort <<<"$installed")" ]; then
    echo "expected:"; sort <<<"$expected"; echo "installed under $stage:"; sort <<<"$installed"
    fail "the installed files differ from the expected ones"
fi
[ "$(readlink "$stage$libdir/$soname")" = "libdifftrans.so.$version" ] || fail "$soname is not a link to the library"

# ------------------------------------------------------------ the shared library's symbols
lib_so=$stage$libdir/libdifftrans.so.$version
got_soname=$(readelf -d "$lib_so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$got_soname" = "$soname" ] || fail "$lib_so: SONAME '$got_soname', expected $soname"
exported=$(nm -D --defined-only "$lib_so" | awk '{ print $NF }')
extra=$(grep -v '^dt_' <<<"$exported")
[ -z "$extra" ] || { echo "$extra" | head -20; fail "$lib_so exports symbols without the dt_ prefix"; }
n_shared=$(grep -c '^dt_' <<<"$exported")
n_static=$(nm -g --defined-only "$stage$libdir/libdifftrans.a" | awk '$3 ~ /^dt_/' | wc -l)
[ "$n_shared" -gt 0 ] && [ "$n_shared" = "$n_static" ] ||
    fail "$n_shared dt_ symbols exported by the shared library, $n_static by the archive"
# the build tree is gone from the installed library's search path
readelf -d "$lib_so" | grep -E 'RPATH|RUNPATH' | grep -qF "$build" &&
    fail "$lib_so: the search path names the build tree"

# ------------------------------------------------------------ pkg-config on the staged copy
# PKG_CONFIG_PATH alone: difftrans.pc's paths are relative to its place, so the staged copy's paths name
# the stage, and the modules it requires stay the system's
pc() { PKG_CONFIG_PATH=$stage$libdir/pkgconfig "$pkgconfig" "$@" difftrans; }
# a flag's directory, resolved (the .pc names them through ${pcfiledir}/../..)
flag_dir() { words "$1" | sed -n "s/^$2//p" | while read -r d; do realpath -m "$d"; done; }
pc --exists || fail "pkg-config does not find difftrans in $stage$libdir/pkgconfig"
[ "$(pc --modversion)" = "$version" ] || fail "pkg-config says version $(pc --modversion), expected $version"
pc_cflags=$(pc --cflags) && pc_libs=$(pc --libs) && pc_static=$(pc --static --libs) || fail "pkg-config failed"
grep -qFx -- "$(realpath -m "$stage$incdir")" <<<"$(flag_dir "$pc_cflags" -I)" ||
    fail "Cflags '$pc_cflags' miss $stage$incdir"
[ "$(words "$pc_libs" | grep '^-l')" = "-ldifftrans" ] ||
    fail "Libs '$pc_libs': a program should need -ldifftrans alone (the library names its dependencies)"
grep -qFx -- "$(realpath -m "$stage$libdir")" <<<"$(flag_dir "$pc_libs" -L)" ||
    fail "Libs '$pc_libs' miss -L$stage$libdir"

# every public header compiles alone from the installed include directory
for h in "$src"/include/*.h; do
    printf '#include "%s"\n' "${h##*/}" >"$work/header.c"
    # shellcheck disable=SC2086 # pkg-config's flags are words
    "$cc" -std=c11 -fsyntax-only "${cflags[@]}" $pc_cflags "$work/header.c" ||
        fail "${h##*/} does not compile from $stage$incdir"
done

# ------------------------------------------------------------ linked to libdifftrans.so
# shellcheck disable=SC2086
"$cc" -std=c11 -O1 "${cflags[@]}" $pc_cflags -o "$work/prog_shared" "$src/tests/public_link.c" $pc_libs ||
    fail "public_link.c does not link with: $pc_libs"
readelf -d "$work/prog_shared" | grep -q "(NEEDED).*\[$soname\]" || fail "prog_shared does not need $soname"
ldd_line=$(LD_LIBRARY_PATH=$stage$libdir ldd "$work/prog_shared" | grep "$soname")
grep -q "=> $stage$libdir/$soname" <<<"$ldd_line" || fail "prog_shared loads '$ldd_line', not the staged library"
out=$(LD_LIBRARY_PATH=$stage$libdir "$work/prog_shared") || fail "prog_shared failed: $out"
echo "shared: $out"

# ------------------------------------------------------------ linked to libdifftrans.a
# --static gives the link line of the archive; -l:libdifftrans.a picks it over the shared library
# beside it (the other libraries stay shared: Debian ships no static Open MPI)
static_libs=${pc_static/-ldifftrans/-l:libdifftrans.a}
[ "$static_libs" != "$pc_static" ] || fail "Libs '$pc_static' miss -ldifftrans"
# shellcheck disable=SC2086
"$cc" -std=c11 -O1 "${cflags[@]}" $pc_cflags -o "$work/prog_static" "$src/tests/public_link.c" $static_libs ||
    fail "public_link.c does not link with: $static_libs"
readelf -d "$work/prog_static" | grep -q 'libdifftrans' && fail "prog_static needs the shared library"
out=$(env -u LD_LIBRARY_PATH "$work/prog_static") || fail "prog_static failed: $out"
echo "static: $out"
echo "installed: $n_shared public symbols, $(wc -l <<<"$installed") files under $stage$prefix"
