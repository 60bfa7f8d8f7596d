// The tile engine shared by matmul.cl and conv.cl: C[m, n] = sum_k A[m, k] B[k, n] computed by work-groups of
// (TN/WN) x (TM/WM) threads, each owning a TM x TN tile of C and WM x WN accumulators in registers, stepping
// through K in TK-deep slices staged in local memory. Tile sizes come from -D options (the autotuner's choice).
// Each kernel loads its own tiles (that is where matmul and the convolutions differ) between the barriers.
#define TY (TM / WM)   // threads along M
#define TX (TN / WN)   // threads along N
#define NT (TX * TY)   // threads per work-group
// Loads per thread per K slice, and the fixed part of each load's position: with "K fast" consecutive threads
// take consecutive k (the thread's k offset is tid % TK), else consecutive m (or n).
#define A_LOADS (TM * TK / NT)
#define B_LOADS (TN * TK / NT)

#define GEMM_BEGIN \
    __local T As[TK][TM + 1]; /* +1: K-fast stores hit distinct banks */ \
    __local T Bs[TK][TN + 1]; \
    T acc[WM][WN]; \
    for (int i = 0; i < WM; i++) for (int j = 0; j < WN; j++) acc[i][j] = 0; \
    const int tx = get_local_id(0), ty = get_local_id(1), tid = ty * TX + tx; \
    const int m0 = get_group_id(1) * TM, n0 = get_group_id(0) * TN;

// Row (mm) and depth (kk) within the tile of this thread's r-th A load; likewise B.
#if A_K_FAST
#define A_POS(r, mm, kk) const int kk = tid % TK, mm = tid / TK + (r) * (NT / TK)
#else
#define A_POS(r, mm, kk) const int mm = tid % TM, kk = tid / TM + (r) * (NT / TM)
#endif
#if B_K_FAST
#define B_POS(r, nn, kk) const int kk = tid % TK, nn = tid / TK + (r) * (NT / TK)
#else
#define B_POS(r, nn, kk) const int nn = tid % TN, kk = tid / TN + (r) * (NT / TN)
#endif

// Multiplies the staged tiles into the accumulators; the caller puts barriers around it.
#define GEMM_TILE \
    for (int kk = 0; kk < TK; kk++) { \
        T a[WM], b[WN]; \
        for (int i = 0; i < WM; i++) a[i] = As[kk][ty + i * TY]; \
        for (int j = 0; j < WN; j++) b[j] = Bs[kk][tx + j * TX]; \
        for (int i = 0; i < WM; i++) for (int j = 0; j < WN; j++) acc[i][j] += a[i] * b[j]; \
    }

#define GEMM_ATTR __attribute__((reqd_work_group_size(TX, TY, 1)))
