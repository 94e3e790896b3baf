"""Random block maps for `mha bench --pattern blocks:FILE` (BENCHMARKS.md, v8).

    python3 random_blocks.py N

writes blocks_N_1ofF.safetensors for F in 64, 16, 4, 2 and 1: a tensor blocks, BOOL [N, N], in
which each query block keeps round(N/F) distinct key blocks drawn from a generator seeded with F.
N = 256 with mha bench's default blocks of 64 fits --seq 16384. Needs only Python's standard
library.
"""
import json
import random
import struct
import sys

n = int(sys.argv[1])
for frac in (64, 16, 4, 2, 1):
    rng = random.Random(frac)
    k = max(1, round(n / frac))
    data = bytearray(n * n)
    for qb in range(n):
        for kb in rng.sample(range(n), k):
            data[qb * n + kb] = 1
    header = json.dumps({"blocks": {"dtype": "BOOL", "shape": [n, n], "data_offsets": [0, n * n]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(f"blocks_{n}_1of{frac}.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + bytes(data))
