// Prepended to every tfplus OpenCL program. Programs are built per dtype with -DT=<C type> -DSFX=<suffix>
// (float/f32, double/f64, int/i32, long/i64, uchar/b8 ...) and -DIS_FLOAT=0|1; kernel names carry the suffix:
// K(relu) is relu_f32 in the float build. OpenCL 1.2, no extension required (fp64 only where the device has it).
#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

#define PASTE_(a, b) a##b
#define PASTE(a, b) PASTE_(a, b)
#define K(name) PASTE(name##_, SFX)

// Selective builds: a program is built with -DWANT_<name>=1 for the kernel (family member) it is for, and each
// kernel sits under `#if WANT_<name>` (an undefined name is 0 there), so a CPU compiler (PoCL: ~0.1-1 s per
// kernel) compiles that one, not the whole family. NOTE: OpenCL C 1.2 has no variadic macros, so no cleverer
// preprocessor selection; and kernel-making macros paste NAME into a prefix (exp -> exp_) before any other use:
// some compilers define builtins such as exp or max as macros, which would otherwise rename the kernel.

typedef uchar bool_t;  // NumPy's bool is one byte, 0 or 1

// Buffer arguments: a tensor is (buffer, byte offset), since one buffer holds many tensors (a memory plan's arena,
// rows of a batch). Every __global pointer parameter p of every kernel is declared GLOBAL(type, p), which makes it
// two parameters, p and ulong p_off, and the body starts with SHIFT(p) for each of them, which moves p to the
// tensor's first element; the rest of the body indexes from 0 as if p were the whole buffer:
//     __kernel void K(relu)(GLOBAL(T, out), GLOBAL(const T, in), int n) {
//         SHIFT(out); SHIFT(in);
//         ...
// OpenCLRuntime.run passes (buffer, offset) for each DeviceArray argument, so launchers pass tensors as before.
// Offsets are in bytes, so a pointer may have any type (conv's int4 tap tables). Alignment: a tensor's offset is a
// multiple of its element size, and a planned arena slot's a multiple of the device's base address alignment
// (CL_DEVICE_MEM_BASE_ADDR_ALIGN, 128 bytes or more: the planner's arena_alignment); row views (micro-batches,
// convolution chunks) are aligned to a row's bytes only. vloadn/vstoren need no more than element alignment; a
// kernel that casts p to a vector pointer (float4*) needs an offset multiple of the vector's size: it must check.
#define GLOBAL(type, p) __global type* p, ulong p##_off
#define SHIFT(p) p = (__global void*)((__global char*)(p) + p##_off)

// Offset of element i (row-major over `shape`) in an operand with strides `st` (elements; 0 = broadcast).
// Dims are innermost first: shape.s0 is the last axis. rank <= 8 after merging.
inline int strided_offset(int i, int rank, int8 shape, int8 st) {
    int sh[8] = {shape.s0, shape.s1, shape.s2, shape.s3, shape.s4, shape.s5, shape.s6, shape.s7};
    int s[8] = {st.s0, st.s1, st.s2, st.s3, st.s4, st.s5, st.s6, st.s7};
    int off = 0;
    for (int d = 0; d < rank; d++) {
        int q = i / sh[d];
        off += (i - q * sh[d]) * s[d];
        i = q;
    }
    return off;
}

// A fence after which this work-item's global writes are visible to the whole device, not only to its work-group
// (kernels that finish split sums in their last work-group: gemm.cl's GEMM_SPLIT_FINISH, fused.cl's
// CHANNEL_FINISH). OpenCL 1.2's mem_fence promises the work-group only, and NVIDIA's compiler makes it membar.cta;
// membar.gl is the device-wide one. A CPU device's work-groups share coherent memory. The launchers finish split
// sums in the kernel on those two kinds of device only (reduce.finishes_splits).
#ifdef __NV_CL_C_VERSION
#define DEVICE_FENCE() asm volatile("membar.gl;" ::: "memory")
#else
#define DEVICE_FENCE() mem_fence(CLK_GLOBAL_MEM_FENCE)
#endif

