"""Smaller convolution scratch, two ways.

Batch chunking: the executor calls a convolution kernel on slices of the batch, so the scratch it asks for
(im2col columns, col2im buffers) is that of a slice. Exact: each sample's result does not depend on the
others; the filter gradient is the sum of the slices' filter gradients.

Scratch division: the cpu conv kernels already work through the batch in chunks sized by a byte budget; the
executor passes those whose ChunkSpec says scratch_divisor the attr SCRATCH_ATTR = d (and the planner the same
to their workspace declarations), which divides that budget by d. Cheaper than batch chunking for the same
scratch: one kernel call, so the per-call set-up (padding, filter transform) is not repeated.
Exact: the same arithmetic per image, the filter gradient summed over more chunks."""
from __future__ import annotations

import math

import numpy as np

from tfplus.framework import Operation
from tfplus.registry import FACTS, SCRATCH_ATTR, FactsView, TensorSpec, declared_scratch

SCRATCH_DIVISORS = (1, 4, 8, 16)

# op type -> (inputs with the batch on axis 0, input whose *value* starts with the batch size or None,
#             whether output 0 is a sum over the batch rather than batch-major): the ChunkSpec the op's
# kernels declare (register_kernel(..., chunk=ChunkSpec(...)), tfplus.registry), of any device.
CHUNKABLE = FactsView(lambda: {op: tuple(f.chunk[:3]) for (op, _dev), f in FACTS.items() if f.chunk})
_DIVISIBLE = FactsView(lambda: {op: True for (op, _dev), f in FACTS.items() if f.chunk and f.chunk.scratch_divisor})


def attrs(op: Operation, scratch: int) -> dict:
    """The attrs a convolution's kernel and workspace declaration see under scratch divisor `scratch` (a conv
    whose graph already divides its scratch more, finetune.shrink_forward_scratch, keeps its own)."""
    if scratch <= op.attrs.get(SCRATCH_ATTR, 1) or op.type not in _DIVISIBLE:
        return op.attrs
    return {**op.attrs, SCRATCH_ATTR: scratch}


def scratch_bytes(op: Operation, specs, device: str, images: int, scratch: int, threads: int | None = None
                  ) -> int | None:
    """The bytes of scratch `op`'s kernel on `device` declares on `threads` threads for one call on `images` images
    of the batch in `specs` under scratch divisor `scratch`, None if it declares none."""
    ins = [specs[t] for t in op.inputs]
    batch = ins[CHUNKABLE[op.type][0][0]].shape[0]
    decl = declared_scratch(op.type, device, chunk_specs(op, ins, batch / images) if images != batch else ins,
                            attrs(op, scratch), threads=threads)
    if decl is None:
        return None
    return sum(math.prod(sh) * dt.size for sh, dt in decl)


def kernel_chunks(images: int, scratch: int, declared) -> int:
    """About how many pieces a conv kernel cuts a call on `images` images into under scratch divisor
    `scratch`, from its workspace declarations alone (`declared(m, d)`: scratch_bytes for m images under
    divisor d): scratch grows by the same bytes per image of a piece."""
    if images < 2 or declared(1, 1) is None:
        return 1
    one, two = declared(1, 1), declared(2, 1)
    per = max(1, two - one)
    fixed = one - per
    per_piece = max(1, int(round((declared(images, scratch) - fixed) / per)))
    return -(-images // per_piece)


def can_chunk(op: Operation, specs, chunks: int) -> bool:
    if op.type not in CHUNKABLE or chunks <= 1:
        return False
    batch = specs[op.inputs[CHUNKABLE[op.type][0][0]]].shape[0]
    return batch % chunks == 0 and batch >= chunks


def chunk_specs(op: Operation, ins: list[TensorSpec], chunks) -> list[TensorSpec]:
    """The input specs one chunk's kernel call sees."""
    batch_ins, size_in, _ = CHUNKABLE[op.type]
    out = list(ins)
    for i in batch_ins:
        shape = ins[i].shape
        out[i] = ins[i]._replace(shape=(int(shape[0] // chunks),) + tuple(shape[1:]))
    if size_in is not None:
        out[size_in] = ins[size_in]._replace(value=chunk_sizes(ins[size_in].value, chunks))
    return out


def chunk_sizes(sizes, chunks: int) -> np.ndarray:
    v = np.array(sizes)
    v[0] = int(v[0] // chunks)
    return v


def summed(op: Operation) -> bool:
    return CHUNKABLE[op.type][2]


def chunked_kernel(kernel, op: Operation, chunks: int, sizes, tmp, start_call):
    """A kernel that runs `kernel` once per batch slice (row views: NumPy slices, opencl offsets). `sizes` is
    the chunk's value of the size input (or None), `tmp` a filter-shaped scratch buffer for summed outputs,
    `start_call()` is called before each slice so the kernel's workspace requests restart at the first
    preplanned buffer."""
    batch_ins, size_in, is_sum = CHUNKABLE[op.type]

    def run(ctx, ins, outs, attrs):
        m = ins[batch_ins[0]].shape[0] // chunks
        for c in range(chunks):
            part = slice(c * m, (c + 1) * m)
            cins = list(ins)
            for i in batch_ins:
                cins[i] = ins[i][part]
            if size_in is not None:
                cins[size_in] = sizes
            if is_sum:
                couts = outs if c == 0 else [tmp]
            else:
                couts = [o[part] for o in outs]
            start_call()
            kernel(ctx, cins, couts, attrs)
            if is_sum and c:
                ctx.runtime.add_into(outs[0], tmp)
    return run
