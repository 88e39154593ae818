#!/usr/bin/env python3
"""The portable build's objects hold no instruction past the x86-64 baseline.

    scripts/check_baseline.py BUILD_DIR

BUILD_DIR is a CMake build of libxent with XENT_CPU_DISPATCH (the wheel's,
scripts/wheel.sh). Every object of the library but the dispatched CPU kernels
of the upper levels (xent_cpu_v3, xent_cpu_v4) must disassemble to x86-64
baseline instructions alone (SSE2, no VEX or EVEX encodings, no BMI, LZCNT,
MOVBE, POPCNT, SSE3 or SSE4); and, so that the check is seen to bite, the
v3 and v4 objects must not (they hold AVX2 and FMA). Exit status 1 on a
violation, with the objects and instructions that broke it.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys

# Past x86-64 (SSE2): the VEX and EVEX forms (every mnemonic starting with v
# but verr / verw), AVX-512's mask registers, and the SSE3 to SSE4.2, BMI,
# LZCNT, MOVBE, POPCNT, ADX and F16C instructions.
_BEYOND = re.compile(
    r"^(v(?!err|erw)\w+|k(mov|and|or|xor|not|shift|test|add|unpck)\w*|"
    r"andn|bextr|blsi|blsmsk|blsr|bzhi|mulx|pdep|pext|rorx|sarx|shlx|shrx|lzcnt|tzcnt|movbe|"
    r"popcnt|adcx|adox|lddqu|movddup|movshdup|movsldup|addsubp[sd]|haddp[sd]|hsubp[sd]|"
    r"pabs[bwd]|palignr|phadd\w+|phsub\w+|pmaddubsw|pmulhrsw|pshufb|psign[bwd]|blendp[sd]|"
    r"blendvp[sd]|dpp[sd]|extractps|insertps|movntdqa|mpsadbw|packusdw|pblendvb|pblendw|"
    r"pcmpeqq|pcmpgtq|pextr[bdq]|phminposuw|pinsr[bdq]|pmaxs[bd]|pmaxu[dw]|pmins[bd]|pminu[dw]|"
    r"pmovsx\w+|pmovzx\w+|pmuldq|pmulld|ptest|round[ps][sd]|crc32|pcmp[ei]str[im])$")


def beyond_baseline(obj: str) -> dict:
    """Instructions of `obj` past the baseline: mnemonic -> count."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", obj], capture_output=True,
                         text=True, check=True).stdout
    found: dict = {}
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) < 2 or not re.match(r"^\s*[0-9a-f]+:$", parts[0]):
            continue
        words = parts[1].split()
        if not words:
            continue
        m = words[1] if words[0] in ("rep", "repz", "repnz", "lock", "notrack", "bnd") and \
            len(words) > 1 else words[0]
        if _BEYOND.match(m):
            found[m] = found.get(m, 0) + 1
    return found


def main(argv: list) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = os.path.join(argv[1], "CMakeFiles")
    objs = sorted(glob.glob(os.path.join(root, "**", "*.o"), recursive=True))
    upper = [o for o in objs if re.search(r"/xent_cpu_v[34]\.dir/", o)]
    base = [o for o in objs
            if re.search(r"/(xent|xent_cpu_base)\.dir/", o) and o not in upper]
    if not base or len(upper) < 8:
        print(f"check_baseline: {argv[1]} is not a build with XENT_CPU_DISPATCH "
              f"({len(base)} library objects, {len(upper)} upper-level ones)", file=sys.stderr)
        return 1
    bad = 0
    for o in base:
        f = beyond_baseline(o)
        if f:
            bad += 1
            top = ", ".join(f"{k} x{v}" for k, v in sorted(f.items(), key=lambda kv: -kv[1])[:8])
            print(f"check_baseline: {os.path.relpath(o, root)} goes past x86-64: {top}")
    bit = sum(1 for o in upper if "vfmadd" in " ".join(beyond_baseline(o)))
    if bit == 0:
        print("check_baseline: no v3/v4 object holds an FMA: the check sees nothing",
              file=sys.stderr)
        bad += 1
    print(f"check_baseline: {len(base)} objects at the x86-64 baseline, {bit} of "
          f"{len(upper)} dispatched ones past it; {'FAILED' if bad else 'ok'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
