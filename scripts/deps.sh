#!/usr/bin/env bash
# Installs what building and testing xent needs, skipping what is already there.
#  - system: a C compiler, make, cmake, pkg-config, cmocka (C tests), OpenBLAS (the CPU
#    fused linear loss loads it at run time), python3 with venv, via apt-get on
#    Debian/Ubuntu when something is missing and we may install;
#  - offline machines: Debian packages placed in .deps/*.deb (apt-get download
#    libcmocka0 libcmocka-dev libopenblas0-pthread libgfortran5), unpacked into
#    .deps/root (scripts/env.sh points the build and XENT_BLAS there).
set -euo pipefail
cd "$(dirname "$0")/.."

have_openblas() {
  ldconfig -p 2>/dev/null | grep -q 'libopenblas\.so\.0' && return 0
  ls .deps/root/usr/lib/*/openblas-pthread/libopenblas.so.0 >/dev/null 2>&1 && return 0
  return 1
}

have_cmocka() {
  pkg-config --exists cmocka 2>/dev/null && return 0
  [ -f /usr/include/cmocka.h ] && return 0
  [ -f .deps/root/usr/include/cmocka.h ] && return 0
  return 1
}

# Carried packages first: a machine without network has them, and apt-get
# there would only wait for timeouts.
if { ! have_cmocka || ! have_openblas; } && ls .deps/*.deb >/dev/null 2>&1; then
  echo "deps: unpacking .deps/*.deb into .deps/root"
  for f in .deps/*.deb; do dpkg -x "$f" .deps/root; done
fi

missing=()
command -v cc >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1 || missing+=(gcc)
command -v make >/dev/null 2>&1 || missing+=(make)
command -v cmake >/dev/null 2>&1 || missing+=(cmake)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
# clang: the C suite also runs under its sanitizers (scripts/sanitize.sh)
command -v clang >/dev/null 2>&1 || missing+=(clang)
have_cmocka || missing+=(libcmocka-dev)
have_openblas || missing+=(libopenblas0)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
# A virtual environment is only made when numpy or pytest is missing.
if ! python3 -c 'import numpy, pytest' >/dev/null 2>&1; then
  python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
fi

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

SUDO=""
[ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && SUDO="sudo"
if command -v apt-get >/dev/null 2>&1 && { [ "$(id -u)" -eq 0 ] || [ -n "$SUDO" ]; }; then
  echo "deps: installing ${missing[*]}"
  log=$(mktemp)
  if timeout 300 $SUDO apt-get install -y -q "${missing[@]}" >"$log" 2>&1 ||
     { timeout 300 $SUDO apt-get update -q >>"$log" 2>&1 &&
       timeout 300 $SUDO apt-get install -y -q "${missing[@]}" >>"$log" 2>&1; }; then
    exit 0
  fi
  echo "deps: apt-get could not install ${missing[*]}:"
  tail -5 "$log"
fi

if ! have_cmocka; then
  echo "deps: cmocka is missing; the C tests will not be built" >&2
fi
if ! have_openblas; then
  echo "deps: OpenBLAS is missing; the CPU fused linear tests will skip" >&2
fi
exit 0
