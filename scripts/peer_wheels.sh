#!/usr/bin/env bash
# The peers' wheels for the GPU machine (its Python 3.12, x86-64), for scripts/device.sh to
# unpack: into .whl/ the peer's Hopper fused linear cross-entropy (liger-kernel with
# nvidia-cutlass-dsl 4.8.1, bench/linear.py's liger_sm90), into .whl/quack/ QuACK's (quack-kernels
# with the DSL of its release, for quack and quack_512, run in processes of their own). A
# wheel over 40 MiB is cut into pieces under its folder's parts/ (NAME.part-aa, ..., and
# NAME.count): a call carries at most 64 MiB, so those pieces go one call each while the
# machine stays warm (device.sh puts them together once all have arrived).
#
# Carried over warm calls, each at most 64 MiB (the tree, about 11, included) and 8 paths;
# device.sh keeps what each call carried in the machine's /tmp, so each call carries only
# what is new, .deps/ in the first: the 4.8.1 pieces aa (with its .count), then ab and ac,
# then .whl's small wheels, then 4.7.1's pieces and .whl/quack's small wheels the same way.
#
#   scripts/peer_wheels.sh        (needs network; .whl/ is ignored by git)
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl/parts .whl/quack/parts
py=(--python-version 3.12 --implementation cp --abi cp312 --platform manylinux_2_28_x86_64
    --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --only-binary=:all:)
python3 -m pip download -q --no-deps "${py[@]}" -d .whl \
  liger-kernel==0.8.5 nvidia-cutlass-dsl==4.8.1 nvidia-cutlass-dsl-libs-base==4.8.1 \
  nvidia-cutlass-dsl-libs-core==4.8.1 nvidia-cutlass-dsl-libs-cu13==4.8.1 apache-tvm-ffi
# QuACK 0.6.5 on the DSL of its release: with 4.8.1 its kernel cache refuses a ContextVar
# that 4.8 added (cutlass/_mlir_helpers/op.py, _LOC_TRANSFORMS); 4.7.1 has none
python3 -m pip download -q --no-deps "${py[@]}" -d .whl/quack \
  quack-kernels==0.6.5 apache-tvm-ffi nvidia-cutlass-dsl==4.7.1 nvidia-cutlass-dsl-libs-base==4.7.1 \
  nvidia-cutlass-dsl-libs-core==4.7.1 nvidia-cutlass-dsl-libs-cu13==4.7.1
for w in .whl/*.whl .whl/quack/*.whl; do
  size=$(stat -c %s "$w")
  if [ "$size" -gt $((40 << 20)) ]; then
    name=$(basename "$w")
    parts="$(dirname "$w")/parts"
    split -b 40M "$w" "$parts/$name.part-"
    ls "$parts/$name".part-* | wc -l >"$parts/$name.count"
    rm "$w"
  fi
done
ls -la .whl .whl/parts .whl/quack .whl/quack/parts
