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

// Split sums finished in the kernel (which declares `__local int last_`). A GEMM that splits its sum over work-group
// layers (get_group_id(2)) writes layer z of its M x N output (row stride ld) at part + z * M * ld. With `finish`,
// the group that writes the last layer of a tile (counted in done[tile], a zeroed table) adds the tile's layers up,
// in layer order, and stores each sum v of row m, column n by GEMM_STORE(m, n, v) (the kernel defines it: where its
// output goes, with its epilogue) and sets done[tile] back to 0 for the next launch: no second launch. The order is
// fixed, so the sums do not depend on which group came last; it is the order of the pass it replaces (reduce.cl's
// sum_rows). The group's writes reach the device before its count does: the barrier orders them before item 0's
// device-wide fence (DEVICE_FENCE; fences are cumulative), which orders them before the atomic count; the last group
// reads the layers past the caches (volatile), FINISH_BATCH layers at a time, all their loads in flight together
// (one layer at a time, a long sum's tail waited out a round trip per layer), and adds them in layer order. At most
// 32 loads at once: more registers there would be the whole kernel's, the GEMM loop's occupancy with them.
#define FINISH_BATCH (WM * WN >= 32 ? 1 : 32 / (WM * WN))
#define GEMM_SPLIT_FINISH(part, done, M, N, ld) \
    if (finish) { \
        barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE); \
        const int tile_ = get_group_id(1) * get_num_groups(0) + get_group_id(0), layers_ = get_num_groups(2); \
        if (tid == 0) { \
            DEVICE_FENCE(); \
            last_ = atomic_inc(done + tile_) == layers_ - 1; \
            DEVICE_FENCE(); \
        } \
        barrier(CLK_LOCAL_MEM_FENCE); \
        if (last_) { \
            volatile __global const T* p_ = part; \
            for (int i = 0; i < WM; i++) for (int j = 0; j < WN; j++) acc[i][j] = 0; \
            for (int z = 0; z < layers_; z += FINISH_BATCH, p_ += FINISH_BATCH * M * ld) { \
                T v_[FINISH_BATCH][WM][WN]; \
                for (int u = 0; u < FINISH_BATCH; u++) \
                    for (int i = 0; i < WM; i++) { \
                        int m = min(m0 + ty + i * TY, M - 1); \
                        for (int j = 0; j < WN; j++) \
                            v_[u][i][j] = z + u < layers_ ? p_[u * M * ld + m * ld + min(n0 + tx + j * TX, N - 1)] \
                                                          : (T)0; \
                    } \
                for (int u = 0; u < FINISH_BATCH; u++) \
                    for (int i = 0; i < WM; i++) for (int j = 0; j < WN; j++) \
                        if (z + u < layers_) acc[i][j] += v_[u][i][j]; \
            } \
            for (int i = 0; i < WM; i++) { \
                int m = m0 + ty + i * TY; \
                for (int j = 0; j < WN; j++) { \
                    int n = n0 + tx + j * TX; \
                    if (m < M && n < N) GEMM_STORE(m, n, acc[i][j]); \
                } \
            } \
            if (tid == 0) done[tile_] = 0; \
        } \
    }

// Register tiles read from local memory as vectors (VTILE=1; conv.cl's conv3 and conv3_wgrad only): each thread
// owns WM / 4 runs of 4 consecutive rows, TY * 4 rows apart (rows 4 ty .. 4 ty + 3, then 4 (TY + ty) ...), and
// likewise WN / 4 runs of columns (GEMM_ROW, GEMM_COL), so GEMM_TILE_V reads them as WM / 4 + WN / 4 four-wide
// loads a K step instead of WM + WN scalar ones (NVIDIA: LDS.128 for LDS.32; with 4 x 4 accumulators that is a
// quarter of the local reads per multiply-add), neighbouring threads reading neighbouring vectors (no bank
// conflicts; stores of neighbouring columns stay coalesced). Needs WM and WN multiples of 4.
// The rows are padded by 4, not 1, so that each stays aligned for the vector loads; K-fast stores then conflict
// 2-way (stride TM + 4: 4 * kk banks) instead of not at all. Without VTILE the same names give the classic
// layout (thread rows ty, ty + TY, ...), so a kernel written with them builds either way.
#define T4 PASTE(T, 4)
#if VTILE
#define GEMM_PAD 4
#define GEMM_ROW(i) (((i) & ~3) * TY + ty * 4 + ((i) & 3))
#define GEMM_COL(j) (((j) & ~3) * TX + tx * 4 + ((j) & 3))
#define GEMM_TILE_V \
    for (int kk = 0; kk < TK; kk++) { \
        T a[WM], b[WN]; \
        for (int i = 0; i < WM; i += 4) { \
            T4 v = *(__local const T4*)&As[kk][i * TY + ty * 4]; \
            a[i] = v.s0; a[i + 1] = v.s1; a[i + 2] = v.s2; a[i + 3] = v.s3; \
        } \
        for (int j = 0; j < WN; j += 4) { \
            T4 v = *(__local const T4*)&Bs[kk][j * TX + tx * 4]; \
            b[j] = v.s0; b[j + 1] = v.s1; b[j + 2] = v.s2; b[j + 3] = v.s3; \
        } \
        for (int i = 0; i < WM; i++) for (int j = 0; j < WN; j++) acc[i][j] += a[i] * b[j]; \
    }
#else
#define GEMM_PAD 1
#define GEMM_ROW(i) (ty + (i) * TY)
#define GEMM_COL(j) (tx + (j) * TX)
#define GEMM_TILE_V GEMM_TILE
#endif
#define GEMM_BEGIN_V \
    __local T As[TK][TM + GEMM_PAD] __attribute__((aligned(32))); \
    __local T Bs[TK][TN + GEMM_PAD] __attribute__((aligned(32))); \
    T acc[WM][WN]; \
    for (int i = 0; i < WM; i++) for (int j = 0; j < WN; j++) acc[i][j] = 0; \
    const int tx = get_local_id(0), ty = get_local_id(1), tid = ty * TX + tx; \
    const int m0 = get_group_id(1) * TM, n0 = get_group_id(0) * TN;
