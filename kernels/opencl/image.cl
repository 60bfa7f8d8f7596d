// Image input ops. CifarAugment: crop (zero padding), mirror and normalize uint8 images in one pass, one
// work-item per output element. Built with T = float.
// NOTE: contraction off: p * scale - shift must round twice, like NumPy's, or the cpu and opencl batches differ.
#pragma OPENCL FP_CONTRACT OFF

// out[n, c, y, x] (NCHW, or out[n, y, x, c] with NHWC) = in[n, c, y', x'] * scale[c] - shift[c], where
// y' = top + y - pad and x' = left + (flip ? w - 1 - x : x) - pad, and a pixel outside the image is 0.
#if WANT_cifar_augment
__kernel void K(cifar_augment)(GLOBAL(T, out), GLOBAL(const uchar, in), GLOBAL(const int, crops),
                               GLOBAL(const T, scale), GLOBAL(const T, shift), int n, int c, int h, int w,
                               int pad, int nhwc) {
    SHIFT(out); SHIFT(in); SHIFT(crops); SHIFT(scale); SHIFT(shift);
    int i = get_global_id(0);
    if (i >= n * c * h * w) return;
    int x, y, ch, img;
    if (nhwc) {
        ch = i % c; x = i / c % w; y = i / (c * w) % h; img = i / (c * w * h);
    } else {
        x = i % w; y = i / w % h; ch = i / (w * h) % c; img = i / (w * h * c);
    }
    __global const int* crop = crops + 3 * img;
    int sy = crop[0] + y - pad, sx = crop[1] + (crop[2] ? w - 1 - x : x) - pad;
    uchar p = (sy >= 0 && sy < h && sx >= 0 && sx < w) ? in[((img * c + ch) * h + sy) * w + sx] : 0;
    out[i] = (T)p * scale[ch] - shift[ch];
}
#endif
