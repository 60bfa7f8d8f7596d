// Random ops on the device: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"),
// a counter-based generator: element i of run r of a node draws from counter (i, attempt, r_lo, r_hi) under
// key (seed, seed2), so results depend only on the seeds, the run and the position - not on scheduling.

inline uint4 philox(uint4 c, uint2 k) {
    for (int round = 0; round < 10; round++) {
        uint lo0 = c.x * 0xD2511F53u, hi0 = mul_hi(c.x, 0xD2511F53u);
        uint lo1 = c.z * 0xCD9E8D57u, hi1 = mul_hi(c.z, 0xCD9E8D57u);
        c = (uint4)(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
        k += (uint2)(0x9E3779B9u, 0xBB67AE85u);
    }
    return c;
}

// Uniform in [0, 1) from random bits: 24 bits for float, 53 for double.
#if IS_DOUBLE
inline T to_unit(uint a, uint b) { return (T)((((ulong)a << 21) ^ (ulong)b) & ((1UL << 53) - 1)) * 0x1p-53; }
#else
inline T to_unit(uint a, uint b) { return (T)(a >> 8) * 0x1p-24f; }
#endif

// One standard normal by Box-Muller from the four words of a Philox block.
inline T to_normal(uint4 r) {
    T u1 = (T)1 - to_unit(r.x, r.y);  // (0, 1]: log is finite
    T u2 = to_unit(r.z, r.w);
    return sqrt((T)-2 * log(u1)) * cos((T)6.283185307179586 * u2);
}

#if WANT_random_uniform
__kernel void K(random_uniform)(__global T* out, int n, uint2 key, uint run_lo, uint run_hi) {
    int i = get_global_id(0);
    if (i < n) {
        uint4 r = philox((uint4)(i, 0, run_lo, run_hi), key);
        out[i] = to_unit(r.x, r.y);
    }
}
#endif

#if WANT_random_normal
__kernel void K(random_normal)(__global T* out, int n, uint2 key, uint run_lo, uint run_hi) {
    int i = get_global_id(0);
    if (i < n) out[i] = to_normal(philox((uint4)(i, 0, run_lo, run_hi), key));
}
#endif

// Normal values beyond two standard deviations are drawn again (with the next attempt's counter), as TF does.
#if WANT_truncated_normal
__kernel void K(truncated_normal)(__global T* out, int n, uint2 key, uint run_lo, uint run_hi) {
    int i = get_global_id(0);
    if (i >= n) return;
    T z;
    uint attempt = 0;
    do {
        z = to_normal(philox((uint4)(i, attempt++, run_lo, run_hi), key));
    } while (fabs(z) > (T)2);
    out[i] = z;
}
#endif
