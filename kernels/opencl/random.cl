// Random ops on the device: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"),
// a counter-based generator: element i of a draw starting at `first` (a micro-batch's rows start past the rows
// before them) in run r of a node draws from counter (first + i, attempt, r_lo, r_hi) under key (seed, seed2), so
// results depend only on the seeds, the run and the position - not on scheduling. The run is the last argument
// pair, which a replayed tape sets anew each run (random.py).
// kernels/numpy/random.py computes the same numbers on the host: change both together.

inline uint4 philox(uint4 c, uint2 k) {
    for (int round = 0; round < 10; round++) {
        uint lo0 = c.x * 0xD2511F53u, hi0 = mul_hi(c.x, 0xD2511F53u);
        uint lo1 = c.z * 0xCD9E8D57u, hi1 = mul_hi(c.z, 0xCD9E8D57u);
        c = (uint4)(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
        k += (uint2)(0x9E3779B9u, 0xBB67AE85u);
    }
    return c;
}

// Uniform in [0, 1) with T's precision (exact, so every device gives the same bits): 24 bits for float, 53
// for double.
#if IS_DOUBLE
inline T to_unit(uint a, uint b) { return (T)((((ulong)a << 21) ^ (ulong)b) & ((1UL << 53) - 1)) * 0x1p-53; }
#else
inline T to_unit(uint a, uint b) { return (T)(a >> 8) * 0x1p-24f; }
#endif

// Normal values are computed in double where the device has it, then rounded to T: two devices' log and cos
// then differ by an ulp of double at most, which rounding to float almost never shows (and by at most one ulp
// of float when it does). Without fp64 they are computed in float (a few ulps from the cpu device's).
#ifdef cl_khr_fp64
typedef double W;
inline W unit_w(uint a, uint b) { return (W)((((ulong)a << 21) ^ (ulong)b) & ((1UL << 53) - 1)) * 0x1p-53; }
#define TWO_PI 6.283185307179586
#else
typedef float W;
inline W unit_w(uint a, uint b) { return (W)(a >> 8) * 0x1p-24f; }
#define TWO_PI 6.2831855f
#endif

// One standard normal by Box-Muller from the four words of a Philox block.
inline W to_normal(uint4 r) {
    W u1 = (W)1 - unit_w(r.x, r.y);  // (0, 1]: log is finite
    W u2 = unit_w(r.z, r.w);
    return sqrt((W)-2 * log(u1)) * cos(TWO_PI * u2);
}

#if WANT_random_uniform
__kernel void K(random_uniform)(GLOBAL(T, out), int n, uint2 key, uint first, uint run_lo, uint run_hi) {
    SHIFT(out);
    int i = get_global_id(0);
    if (i < n) {
        uint4 r = philox((uint4)(first + i, 0, run_lo, run_hi), key);
        out[i] = to_unit(r.x, r.y);
    }
}
#endif

#if WANT_random_normal
__kernel void K(random_normal)(GLOBAL(T, out), int n, uint2 key, uint first, uint run_lo, uint run_hi) {
    SHIFT(out);
    int i = get_global_id(0);
    if (i < n) out[i] = (T)to_normal(philox((uint4)(first + i, 0, run_lo, run_hi), key));
}
#endif

// Normal values beyond two standard deviations are drawn again (with the next attempt's counter), as TF does.
#if WANT_truncated_normal
__kernel void K(truncated_normal)(GLOBAL(T, out), int n, uint2 key, uint first, uint run_lo, uint run_hi) {
    SHIFT(out);
    int i = get_global_id(0);
    if (i >= n) return;
    W z;
    uint attempt = 0;
    do {
        z = to_normal(philox((uint4)(first + i, attempt++, run_lo, run_hi), key));
    } while (fabs(z) > (W)2);
    out[i] = (T)z;
}
#endif
