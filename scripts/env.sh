# Sourced by the Makefile: points CMake at dependencies unpacked into .deps/root.
XENT_CMAKE_PREFIX=""
if [ -d .deps/root/usr ]; then
  XENT_CMAKE_PREFIX="-DCMAKE_PREFIX_PATH=$PWD/.deps/root/usr"
fi
export XENT_CMAKE_PREFIX
