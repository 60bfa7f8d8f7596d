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

// CropAndResize: out[b, y, x, c] samples image[box_ind[b]] at (in_y, in_x), TF's float arithmetic:
// in_y = y1 * (h - 1) + y * ((y2 - y1) * (h - 1) / (crop_h - 1)) (the box's middle row when crop_h is 1);
// bilinear between the four pixels around it, or the nearest (round half away from zero), or `extrapolation`
// outside the image. One work-item per output element; T is the image's type, the crops are float.
#if WANT_crop_and_resize
__kernel void K(crop_and_resize)(GLOBAL(float, out), GLOBAL(const T, image), GLOBAL(const float, boxes),
                                 GLOBAL(const int, box_ind), int n, int crop_h, int crop_w, int h, int w, int d,
                                 int nearest, float extrapolation) {
    SHIFT(out); SHIFT(image); SHIFT(boxes); SHIFT(box_ind);
    int i = get_global_id(0);
    if (i >= n * crop_h * crop_w * d) return;
    int c = i % d, x = i / d % crop_w, y = i / (d * crop_w) % crop_h, b = i / (d * crop_w * crop_h);
    float y1 = boxes[4 * b], x1 = boxes[4 * b + 1], y2 = boxes[4 * b + 2], x2 = boxes[4 * b + 3];
    float span_y = (float)(h - 1), span_x = (float)(w - 1);
    float in_y = crop_h > 1 ? y1 * span_y + (float)y * ((y2 - y1) * span_y / (float)(crop_h - 1))
                            : 0.5f * (y1 + y2) * span_y;
    float in_x = crop_w > 1 ? x1 * span_x + (float)x * ((x2 - x1) * span_x / (float)(crop_w - 1))
                            : 0.5f * (x1 + x2) * span_x;
    if (in_y < 0 || in_y > span_y || in_x < 0 || in_x > span_x) {
        out[i] = extrapolation;
        return;
    }
    __global const T* img = image + (long)box_ind[b] * h * w * d + c;
    if (nearest) {
        out[i] = (float)img[((int)round(in_y) * w + (int)round(in_x)) * d];
        return;
    }
    int top = (int)floor(in_y), bottom = (int)ceil(in_y), left = (int)floor(in_x), right = (int)ceil(in_x);
    float y_lerp = in_y - (float)top, x_lerp = in_x - (float)left;
    float tl = (float)img[(top * w + left) * d], tr = (float)img[(top * w + right) * d];
    float bl = (float)img[(bottom * w + left) * d], br = (float)img[(bottom * w + right) * d];
    float upper = tl + (tr - tl) * x_lerp, lower = bl + (br - bl) * x_lerp;
    out[i] = upper + (lower - upper) * y_lerp;
}
#endif
