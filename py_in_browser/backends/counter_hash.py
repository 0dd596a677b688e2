"""The counter-based generator behind primitive `random_uniform`: its bits, written once in numpy.

Element i of a draw is a pure function of (seed, stream, counter, i), so any backend computes any
element independently (one GPU invocation or fragment each) and a recorded training step draws new
numbers by advancing `counter` on the device, with no generator state to carry.

The hash is Chris Wellons' "lowbias32" (https://nullprogram.com/blog/2018/07/31/): two
xor-shift-multiply rounds over 32 bits, found by search for the lowest avalanche bias (0.17, below
the 0.26 of murmur3's fmix32 finalizer, whose shape it shares) and a bijection on uint32. It needs
only 32-bit wrapping multiplies, shifts and xors, which numpy uint32, WGSL u32 and GLSL ES 3.00
highp uint all define the same way; Philox needs 32x32->64 products that WGSL and GLSL lack, and
Squares needs 64-bit integers. Keyed as:

    key      = lowbias32(lowbias32(seed ^ GOLDEN) ^ stream)       once per (seed, stream)
    k        = lowbias32(key ^ counter)                           once per draw
    bits(i)  = lowbias32(lowbias32(i ^ k) + k)                    per element
    value(i) = (bits(i) >> (32 - b)) * 2^-b                       b = `bits` attribute, <= 24

Each line is a bijection in its newest input, so distinct streams or counters give distinct keys.
The second round per element matters: with one round, the draw of key k' would be the draw of k
with indices permuted by i -> i ^ (k ^ k'), so two steps' masks could be shifted copies. A value
is a multiple of 2^-b below 1 and exact in float32 (b <= 24): every backend returns the same
float32 bits, and thresholds such as `value >= rate` pick the same elements everywhere.
"""

from __future__ import annotations

import numpy as np

GOLDEN = 0x9E3779B9  # 2^32 / golden ratio: keeps seed 0 off lowbias32's fixed point at 0
MAX_BITS = 24  # float32's significand: every value (m * 2^-bits, m < 2^bits) is exact
COUNTER_LIMIT = 2**24  # counters are stored as float32 (or int32) scalars: exact below this
_MASK = 0xFFFFFFFF


def lowbias32(x: np.ndarray | np.integer) -> np.ndarray:
    """The hash, elementwise on uint32 (wrapping multiplies)."""
    x = np.asarray(x, dtype=np.uint32)
    x = x ^ (x >> np.uint32(16))
    x = x * np.uint32(0x7FEB352D)
    x = x ^ (x >> np.uint32(15))
    x = x * np.uint32(0x846CA68B)
    return x ^ (x >> np.uint32(16))


def stream_key(seed: int, stream: int) -> int:
    """The per-(seed, stream) word kernels receive as a parameter (seed, stream in [0, 2^32))."""
    with np.errstate(over="ignore"):
        first = lowbias32(np.uint32((seed ^ GOLDEN) & _MASK))
        return int(lowbias32(first ^ np.uint32(stream & _MASK)))


def uniform(seed: int, stream: int, counter: int, count: int, bits: int) -> np.ndarray:
    """The first `count` values of draw (seed, stream, counter) as float32, flat."""
    with np.errstate(over="ignore"):
        k = lowbias32(np.uint32(stream_key(seed, stream)) ^ np.uint32(counter & _MASK))
        index = np.arange(count, dtype=np.uint32)
        hashed = lowbias32(lowbias32(index ^ k) + k)
    top = (hashed >> np.uint32(32 - bits)).astype(np.float32)
    return top * np.float32(2.0**-bits)
