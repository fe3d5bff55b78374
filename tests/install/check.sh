#!/bin/bash
# weft as an outside program sees it: installs the build into a fresh prefix, then builds
# tests/install/outside.c against that prefix alone, with pkg-config and with find_package(weft),
# and runs both. Usage: check.sh CMAKE BUILD_DIR LIBDIR CC GENERATOR [SANITIZER]
# LIBDIR is CMAKE_INSTALL_LIBDIR; SANITIZER, the build's WEFT_SANITIZE, goes to the outside builds too
# (a sanitized libweft needs the sanitizer's runtime loaded first). Bounded: every step is a short
# build or a one-rank job with a 20 s timeout.
set -u
cmake=$1 build=$2 libdir=$3 cc=$4 generator=$5 san=${6:-}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "install_check: FAIL: $*" >&2
  exit 1
}
# Nothing but the prefix may supply a header, a library or a package.
unset CPATH C_INCLUDE_PATH LIBRARY_PATH LD_LIBRARY_PATH CMAKE_PREFIX_PATH PKG_CONFIG_PATH
export WEFT_BOOTSTRAP_ADDR=127.0.0.1
sanflags=()
[ -z "$san" ] || sanflags=("-fsanitize=$san")
prefix=$tmp/prefix
lib=$prefix/$libdir

"$cmake" --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 || {
  cat "$tmp/install.log"
  fail "cmake --install $build failed"
}
for f in include/weft/weft.h include/weft/version.h "$libdir/libweft.so" "$libdir/pkgconfig/weft.pc" \
  "$libdir/cmake/weft/weftConfig.cmake" "$libdir/cmake/weft/weftConfigVersion.cmake" bin/weftctl bin/weftd \
  bin/weftrun share/weft/weftd.toml share/weft/path_table.tsv; do
  [ -e "$prefix/$f" ] || fail "$f is not installed"
done
[ -z "$(find "$prefix" -name '*.a')" ] || fail "static libraries installed: $(find "$prefix" -name '*.a')"
soname=$(readelf -d "$lib/libweft.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
if [ -z "$soname" ] || [ ! -e "$lib/$soname" ]; then fail "libweft.so's soname '$soname' is not installed"; fi
readelf -d "$lib/libweft.so" | grep -E 'R(UN)?PATH' | grep -q "$build" && fail "libweft.so keeps the build tree's RUNPATH"

# Which libweft a program loads: the installed one, or it fails.
loads_installed() {
  local got
  got=$(ldd "$1" | sed -n 's/.*libweft\.so[^ ]* => \([^ ]*\).*/\1/p')
  [ "$(realpath "$got" 2>/dev/null)" = "$(realpath "$lib/$soname")" ] || fail "$1 loads libweft from '$got'"
}
runs() {
  local out
  out=$("$1" 2>&1) || fail "$1 failed: $out"
  echo "$out"
  grep -q "^outside: weft .* allreduce of 1000 floats ok$" <<<"$out" || fail "$1 said: $out"
}

# (a) pkg-config, searching the prefix only.
export PKG_CONFIG_LIBDIR=$lib/pkgconfig
pc_libdir=$(pkg-config --variable=libdir weft) || fail "pkg-config does not find weft"
[ "$(realpath "$pc_libdir")" = "$(realpath "$lib")" ] || fail "weft.pc's libdir is $pc_libdir, not $lib"
read -ra pc_flags <<<"$(pkg-config --cflags --libs weft)"
"$cc" "${sanflags[@]}" -o "$tmp/outside_pc" "$here/outside.c" "${pc_flags[@]}" -Wl,-rpath,"$pc_libdir" ||
  fail "outside.c does not build with pkg-config"
loads_installed "$tmp/outside_pc"
runs "$tmp/outside_pc"

# (b) find_package(weft) and weft::weft, from the prefix only.
"$cmake" -S "$here" -B "$tmp/cmake" -G "$generator" -DCMAKE_C_COMPILER="$cc" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF \
  -DCMAKE_C_FLAGS="${sanflags[*]}" -DCMAKE_EXE_LINKER_FLAGS="${sanflags[*]}" >"$tmp/cmake.log" 2>&1 || {
  cat "$tmp/cmake.log"
  fail "find_package(weft) failed"
}
found=$(sed -n 's/.*weft_outside: weft .* from //p' "$tmp/cmake.log")
[ "$(realpath "$found")" = "$(realpath "$lib/cmake/weft")" ] || fail "find_package found weft in '$found'"
"$cmake" --build "$tmp/cmake" >"$tmp/build.log" 2>&1 || {
  cat "$tmp/build.log"
  fail "outside.c does not build with find_package(weft)"
}
loads_installed "$tmp/cmake/outside"
runs "$tmp/cmake/outside"

# Without the installed headers it must not compile: no other weft.h is within reach.
mv "$prefix/include" "$tmp/include.away"
if "$cc" "${sanflags[@]}" -o "$tmp/outside_none" "$here/outside.c" "${pc_flags[@]}" 2>/dev/null; then
  fail "outside.c compiled without the installed headers"
fi
echo "install_check: ok"
