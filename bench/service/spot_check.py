#!/usr/bin/env python3
"""spot_check.py - make a request body, or compare one answer of the service benchmark.

  spot_check.py body DTYPE ELEMS FILE          write ELEMS random small finite values of DTYPE
  spot_check.py compare DTYPE GOT REF          GOT within tolerance of REF (both raw y)
  spot_check.py same GOT REF                   byte-identical (the null backend echoes x)

Tolerance for compare: |got - ref| <= 2 ulp of the dtype at |ref| + 1e-5 (the cpu and cuda
backends each round once from float32, so they may land on neighbouring values). Prints "ok" or
"FAIL ..." and exits 0 or 1. Plain Python, no numpy: it also runs where only python3 is.
"""
import random
import struct
import sys

ULP = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 2.0 ** -23}


def decode(dtype, raw):
    if dtype == "float16":
        return list(struct.unpack("<%de" % (len(raw) // 2), raw))
    if dtype == "bfloat16":
        hs = struct.unpack("<%dH" % (len(raw) // 2), raw)
        return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in hs]
    return list(struct.unpack("<%df" % (len(raw) // 4), raw))


def make_body(dtype, elems, path):
    rnd = random.Random(2024)
    vals = [rnd.choice((-1, 1)) * rnd.uniform(0.125, 4.0) for _ in range(elems)]
    if dtype == "float16":
        raw = struct.pack("<%de" % elems, *vals)
    elif dtype == "bfloat16":
        raw = b"".join(struct.pack("<I", struct.unpack("<I", struct.pack("<f", v))[0])[2:]
                       for v in vals)
    else:
        raw = struct.pack("<%df" % elems, *vals)
    with open(path, "wb") as f:
        f.write(raw)


def compare(dtype, got_path, ref_path):
    got = decode(dtype, open(got_path, "rb").read())
    ref = decode(dtype, open(ref_path, "rb").read())
    if len(got) != len(ref) or not ref:
        return "FAIL length %d vs %d" % (len(got), len(ref))
    worst, where = 0.0, -1
    for i, (g, r) in enumerate(zip(got, ref)):
        tol = 2 * ULP[dtype] * max(abs(r), 2.0 ** -14) + 1e-5
        excess = abs(g - r) / tol if g == g else float("inf")
        if excess > worst:
            worst, where = excess, i
    if worst > 1.0:
        return "FAIL [%d] %r vs %r" % (where, got[where], ref[where])
    return "ok"


def main():
    cmd = sys.argv[1]
    if cmd == "body":
        make_body(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return 0
    if cmd == "compare":
        res = compare(sys.argv[2], sys.argv[3], sys.argv[4])
    elif cmd == "same":
        res = "ok" if open(sys.argv[2], "rb").read() == open(sys.argv[3], "rb").read() \
            else "FAIL differs from the input"
    else:
        print(__doc__)
        return 2
    print(res)
    return 0 if res == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
