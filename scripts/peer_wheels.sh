#!/usr/bin/env bash
# The peers' wheels for the GPU machine (its Python 3.12, x86-64), into .whl/ for
# scripts/device.sh to install: the peer's Hopper fused linear cross-entropy (liger-kernel
# with nvidia-cutlass-dsl) and QuACK's (quack-kernels), for bench/linear.py's liger_sm90
# and quack. A wheel over 40 MiB is cut into pieces under .whl/parts/ (NAME.part-aa, ...,
# and NAME.count): a call carries at most 64 MiB, so those pieces go one call each while
# the machine stays warm (device.sh puts them together once all have arrived).
#
#   scripts/peer_wheels.sh        (needs network; .whl/ is ignored by git)
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl/parts
py=(--python-version 3.12 --implementation cp --abi cp312 --platform manylinux_2_28_x86_64
    --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --only-binary=:all:)
python3 -m pip download -q --no-deps "${py[@]}" -d .whl \
  liger-kernel==0.8.5 nvidia-cutlass-dsl==4.8.1 nvidia-cutlass-dsl-libs-base==4.8.1 \
  nvidia-cutlass-dsl-libs-core==4.8.1 nvidia-cutlass-dsl-libs-cu13==4.8.1 apache-tvm-ffi \
  quack-kernels
for w in .whl/*.whl; do
  size=$(stat -c %s "$w")
  if [ "$size" -gt $((40 << 20)) ]; then
    name=$(basename "$w")
    split -b 40M "$w" ".whl/parts/$name.part-"
    ls ".whl/parts/$name".part-* | wc -l >".whl/parts/$name.count"
    rm "$w"
  fi
done
ls -la .whl .whl/parts
