"""TF1's top-level functions that TensorFlow itself builds from other ops (tf.norm, tf.tensordot, tf.einsum,
tf.reverse, tf.boolean_mask, tf.scatter_nd, tf.eye, tf.linspace, tf.matrix_band_part, ...): composites of
registered ops, so their gradients, kernels on every device and GraphDef export come from those ops.

    import tfplus as tf
    scores = tf.einsum("bqd,bkd->bqk", q, k)
    causal = tf.matrix_band_part(tf.ones([t, t]), -1, 0)
"""
from __future__ import annotations

import builtins
import string

import numpy as np

from tfplus import dtypes as _dt
from tfplus.framework import Tensor, convert_to_tensor, name_scope
from tfplus.ops import array_ops, math_ops

__all__ = ["norm", "tensordot", "einsum", "reverse", "reverse_v2", "boolean_mask", "scatter_nd", "eye", "linspace",
           "lin_space", "matrix_band_part", "matrix_diag", "diag", "meshgrid", "sort", "argsort", "segment_sum",
           "segment_mean", "arg_max", "arg_min", "reverse_sequence", "depth_to_space", "space_to_depth", "batch_gather",
           "dynamic_partition"]


def _static(t: Tensor, axis: int, what: str) -> int:
    n = t.shape.as_list()[axis] if t.shape.ndims is not None else None
    if n is None:
        raise ValueError(f"{what}: dimension {axis} of '{t.name}' must be known, got shape {t.shape}")
    return n


def norm(tensor, ord="euclidean", axis=None, keepdims=None, name=None, keep_dims=None) -> Tensor:
    """The vector norm of `tensor` over `axis` (all elements when None; a pair of axes for a matrix's Frobenius
    norm): ord 'euclidean' / 'fro' / 2 (over one axis), 1, np.inf or any p > 0."""
    keepdims = bool(keepdims if keepdims is not None else keep_dims)
    axes = list(axis) if isinstance(axis, (list, tuple)) else axis
    matrix = isinstance(axes, list) and len(axes) == 2
    if matrix and ord not in ("euclidean", "fro", 1, np.inf):
        raise ValueError(f"tf.norm: matrix norm ord={ord!r} is not supported; tfplus has 'euclidean', 'fro', 1 "
                         "and np.inf")
    with name_scope(name, "norm"):
        x = convert_to_tensor(tensor)
        if matrix and ord in (1, np.inf):
            # The largest column sum (ord 1) or row sum (inf) of |x| over the matrix axes (rows, columns).
            rows, cols = axes if ord == 1 else axes[::-1]
            sums = math_ops.reduce_sum(math_ops.abs(x), rows, keepdims=True)
            out = math_ops.reduce_max(sums, cols, keepdims=True)
            return out if keepdims else array_ops.squeeze(out, axes)
        if ord in ("euclidean", "fro", 2, 2.0):
            return math_ops.sqrt(math_ops.reduce_sum(math_ops.square(x), axes, keepdims=keepdims))
        if ord == 1:
            return math_ops.reduce_sum(math_ops.abs(x), axes, keepdims=keepdims)
        if ord == np.inf:
            return math_ops.reduce_max(math_ops.abs(x), axes, keepdims=keepdims)
        if isinstance(ord, (int, float)) and ord > 0:
            return math_ops.pow(math_ops.reduce_sum(math_ops.pow(math_ops.abs(x), float(ord)), axes,
                                                    keepdims=keepdims), 1.0 / ord)
        raise ValueError(f"tf.norm: ord must be 'euclidean', 'fro', 1, 2, np.inf or a p > 0, got {ord!r}")


def _axes_pair(axes, a_rank: int):
    if isinstance(axes, int):
        return list(builtins.range(a_rank - axes, a_rank)), list(builtins.range(axes))
    a_axes, b_axes = axes
    a_axes = [a_axes] if isinstance(a_axes, int) else list(a_axes)
    b_axes = [b_axes] if isinstance(b_axes, int) else list(b_axes)
    if len(a_axes) != len(b_axes):
        raise ValueError(f"tf.tensordot: axes {axes} must pair as many axes of a as of b")
    return a_axes, b_axes


def tensordot(a, b, axes, name=None) -> Tensor:
    """Sums a * b over `axes` (an int N: a's last N with b's first N; or ([a axes], [b axes])), as TF does it:
    transpose and reshape both to matrices, one matmul, reshape back. The contracted dimensions must be known."""
    with name_scope(name, "Tensordot"):
        a, b = convert_to_tensor(a), convert_to_tensor(b)
        if a.shape.ndims is None or b.shape.ndims is None:
            raise ValueError(f"tf.tensordot: the ranks of '{a.name}' and '{b.name}' must be known")
        ra, rb = a.shape.ndims, b.shape.ndims
        a_axes, b_axes = _axes_pair(axes, ra)
        a_axes, b_axes = [x % ra for x in a_axes], [x % rb for x in b_axes]
        free_a = [i for i in builtins.range(ra) if i not in a_axes]
        free_b = [i for i in builtins.range(rb) if i not in b_axes]
        sizes_a = [_static(a, i, "tf.tensordot") for i in a_axes]
        sizes_b = [b.shape.as_list()[i] for i in b_axes]
        if any(sb is not None and sa != sb for sa, sb in zip(sizes_a, sizes_b)):
            raise ValueError(f"tf.tensordot: axes {a_axes} of '{a.name}' {a.shape} and {b_axes} of '{b.name}' "
                             f"{b.shape} have different sizes {sizes_a} and {sizes_b}")
        inner = int(np.prod(sizes_a))
        a2 = array_ops.reshape(array_ops.transpose(a, free_a + a_axes), [-1, inner])
        b2 = array_ops.reshape(array_ops.transpose(b, b_axes + free_b), [inner, -1])
        out = math_ops.matmul(a2, b2)
        dims_a, dims_b = array_ops.shape(a), array_ops.shape(b)
        shape = array_ops.concat([array_ops.gather(dims_a, free_a), array_ops.gather(dims_b, free_b)], 0) \
            if free_a or free_b else []
        out = array_ops.reshape(out, shape)
        out.set_shape([a.shape.as_list()[i] for i in free_a] + [b.shape.as_list()[i] for i in free_b])
        return out


def _einsum_terms(equation: str, xs: list) -> tuple[list[str], str]:
    """The operands' subscripts and the output's, with each ellipsis spelled out as letters the equation does not
    use (right-aligned, so broadcast ellipsis dims share letters) and an implicit output made explicit (the
    ellipsis, then the letters used once, sorted), as NumPy and TF read an equation."""
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(xs):
        raise ValueError(f"tf.einsum: '{equation}' names {len(terms)} operands, got {len(xs)}")
    bad = set(eq.replace("...", "")) - set(string.ascii_letters + ",->")
    if bad or any(t.replace("...", "").count(".") for t in terms + [out]):
        raise ValueError(f"tf.einsum: '{equation}' may hold letters, ',', '->' and '...' only")
    if not arrow:
        once = sorted(c for c in set(lhs.replace("...", "")) if c in string.ascii_letters and lhs.count(c) == 1)
        out = ("..." if "..." in lhs else "") + "".join(once)
    spare = [c for c in string.ascii_letters if c not in eq]
    widths = []
    for term, x in zip(terms, xs):
        rank = x.shape.ndims
        letters = len(term.replace("...", ""))
        if rank is None:
            raise ValueError(f"tf.einsum: '{equation}': the rank of '{x.name}' must be known")
        if ("..." in term and rank < letters) or ("..." not in term and rank != letters):
            raise ValueError(f"tf.einsum: '{equation}': subscripts '{term}' do not fit '{x.name}' of rank {rank}")
        widths.append(rank - letters if "..." in term else 0)
    width = builtins.max(widths, default=0)
    ellipsis = "".join(spare[:width])
    terms = [t.replace("...", ellipsis[width - w:]) for t, w in zip(terms, widths)]
    out = out.replace("...", ellipsis)
    for c in out:
        if out.count(c) > 1 or not any(c in t for t in terms):
            raise ValueError(f"tf.einsum: '{equation}': output subscript '{c}' is repeated or in no operand")
    return terms, out


def _einsum_diagonal(x: Tensor, term: str) -> tuple[Tensor, str]:
    """x with each letter repeated in `term` reduced to its diagonal (a trace-to-be: 'ii' -> 'i')."""
    from tfplus.ops import linalg_ops  # NOTE: here: linalg_ops builds on this module
    while any(term.count(c) > 1 for c in term):
        c = next(c for c in term if term.count(c) > 1)
        p, q = term.index(c), term.index(c, term.index(c) + 1)
        rest = [i for i in builtins.range(len(term)) if i not in (p, q)]
        x = linalg_ops.matrix_diag_part(array_ops.transpose(x, rest + [p, q]))
        term = "".join(term[i] for i in rest) + c
    return x, term


def _dims(x: Tensor, start: int, stop: int) -> list:
    """The sizes of `x`'s axes start .. stop - 1: ints where known, else scalar tensors."""
    static = x.shape.as_list()
    dynamic = None
    sizes = []
    for a in builtins.range(start, stop):
        if static[a] is None:
            dynamic = array_ops.shape(x) if dynamic is None else dynamic
            sizes.append(dynamic[a])
        else:
            sizes.append(static[a])
    return sizes


def _product(sizes: list):
    if all(isinstance(s, int) for s in sizes):
        return int(np.prod(sizes, dtype=np.int64))
    total = 1
    for s in sizes:
        total = math_ops.multiply(total, s) if not isinstance(total, int) or total != 1 else s
    return total


def _einsum_pair(a: Tensor, ta: str, b: Tensor, tb: str, keep: set) -> tuple[Tensor, str]:
    """a (subscripts ta) times b (tb), summed over their shared letters not in `keep`, as one batched matmul:
    a to [batch..., free_a, summed], b to [batch..., summed, free_b] (batch dims broadcast, as BatchMatMulV2)."""
    batch = [c for c in ta if c in tb and c in keep]
    summed = [c for c in ta if c in tb and c not in keep]
    free_a = [c for c in ta if c not in tb]
    free_b = [c for c in tb if c not in ta]
    a = array_ops.transpose(a, [ta.index(c) for c in batch + free_a + summed])
    b = array_ops.transpose(b, [tb.index(c) for c in batch + summed + free_b])
    nb = len(batch)
    na = nb + len(free_a)
    a_batch, a_free, a_sum = _dims(a, 0, nb), _dims(a, nb, na), _dims(a, na, na + len(summed))
    b_batch, b_free = _dims(b, 0, nb), _dims(b, nb + len(summed), b.shape.ndims)
    a = array_ops.reshape(a, a_batch + [_product(a_free), _product(a_sum)])
    b = array_ops.reshape(b, b_batch + [_product(a_sum), _product(b_free)])
    product = math_ops.matmul(a, b)
    out_batch = _dims(product, 0, nb)
    product = array_ops.reshape(product, out_batch + a_free + b_free)
    return product, "".join(batch + free_a + free_b)


def einsum(equation: str, *inputs, name=None, **kwargs) -> Tensor:
    """Einstein summation, any equation TF1 takes: 'ij,jk->ik', 'bqd,bkd->bqk', '...ij,...jk->...ik' (broadcast
    batch dims), 'ii->' (trace), 'ii->i' (diagonal), 'i,j->ij' (outer product), implicit outputs ('ij,jk').
    Built as TF does: diagonals and sums within an operand first, then one batched matmul per pair of operands,
    so its gradients, kernels and memory are matmul's.

        scores = tf.einsum("bhqd,bhkd->bhqk", q, k)
    """
    if kwargs.keys() - {"optimize"}:
        raise TypeError(f"tf.einsum: unexpected arguments {sorted(kwargs.keys() - {'optimize'})}")
    with name_scope(name, "einsum"):
        xs = [convert_to_tensor(x) for x in inputs]
        terms, out = _einsum_terms(equation, xs)
        operands = []
        for k, (x, term) in enumerate(zip(xs, terms)):
            x, term = _einsum_diagonal(x, term)
            elsewhere = set(out).union(*(t for j, t in enumerate(terms) if j != k))
            lone = [i for i, c in enumerate(term) if c not in elsewhere]
            if lone:  # summed within this operand alone
                x = math_ops.reduce_sum(x, lone)
                term = "".join(c for c in term if c in elsewhere)
            operands.append((x, term))
        x, term = operands[0]
        for k, (y, term_y) in enumerate(operands[1:], start=1):
            keep = set(out).union(*(t for _, t in operands[k + 1:]))
            x, term = _einsum_pair(x, term, y, term_y, keep)
        # The result is the node 'einsum/Einsum', as TF's (an Identity is a view: no copy).
        if term != out:
            return array_ops.transpose(x, [term.index(c) for c in out], name="Einsum")
        return array_ops.identity(x, name="Einsum")


def reverse(tensor, axis, name=None) -> Tensor:
    """`tensor` with the order of its entries along each of `axis` reversed (a gather of the indices n-1 ... 0)."""
    with name_scope(name, "ReverseV2"):
        x = convert_to_tensor(tensor)
        y = x
        for a in [axis] if isinstance(axis, int) else list(axis):
            n = array_ops.shape(y)[a]
            y = array_ops.gather(y, math_ops.range(n - 1, -1, -1), axis=a % x.shape.ndims)
        y.set_shape(x.shape)
        return y


reverse_v2 = reverse


def boolean_mask(tensor, mask, name="boolean_mask", axis=None) -> Tensor:
    """The entries of `tensor` where `mask` (a bool tensor over its first mask.ndim axes) is True, in row-major
    order: [number of Trues, remaining dims...]."""
    with name_scope(name, "boolean_mask"):
        if axis in (None, 0):
            return array_ops.gather_nd(tensor, math_ops.where(convert_to_tensor(mask)))
        # From axis a on: the masked dims flattened into one, and the Trues' positions gathered along it.
        x, mask = convert_to_tensor(tensor), convert_to_tensor(mask)
        k, rank = mask.shape.ndims, x.shape.ndims
        if k is None or rank is None:
            raise ValueError(f"tf.boolean_mask: axis={axis} needs the ranks of '{x.name}' and '{mask.name}'")
        a = axis % rank
        dims = array_ops.shape(x)
        flat = array_ops.reshape(x, array_ops.concat([dims[:a], [-1], dims[a + k:]], 0))
        picked = array_ops.reshape(math_ops.where(array_ops.reshape(mask, [-1])), [-1])
        out = array_ops.gather(flat, picked, axis=a)
        dims = x.shape.as_list()
        out.set_shape(dims[:a] + [None] + dims[a + k:])
        return out


def batch_gather(params, indices, name=None) -> Tensor:
    """TF1's tf.batch_gather: each example of indices' leading axes takes its own entries of params,
    tf.gather(params, indices, batch_dims=rank(indices) - 1)."""
    indices = convert_to_tensor(indices)
    if indices.shape.ndims is None:
        raise ValueError(f"tf.batch_gather: indices '{indices.name}' need a known rank")
    return array_ops.gather(params, indices, name=name, batch_dims=max(indices.shape.ndims - 1, 0))


def dynamic_partition(data, partitions, num_partitions, name=None) -> list:
    """`num_partitions` tensors, the i-th the entries of `data` whose partition (over data's first
    partitions.ndim axes) is i, in row-major order: a boolean_mask each, so a gather's gradient each."""
    with name_scope(name, "DynamicPartition"):
        partitions = convert_to_tensor(partitions)
        return [boolean_mask(data, math_ops.equal(partitions, i)) for i in builtins.range(int(num_partitions))]


def scatter_nd(indices, updates, shape, name=None) -> Tensor:
    """A zero tensor of `shape` with `updates` added at `indices` ([..., k] indexing the first k axes; repeated
    indices add), via unsorted_segment_sum over the row-major position of each index."""
    with name_scope(name, "ScatterNd"):
        indices = convert_to_tensor(indices)
        updates = convert_to_tensor(updates)
        k = _static(indices, -1, "tf.scatter_nd")
        shape = math_ops.cast(convert_to_tensor(shape), indices.dtype)
        strides = array_ops.stack([math_ops.reduce_prod(shape[j + 1:k]) for j in builtins.range(k)])
        rows = array_ops.reshape(math_ops.reduce_sum(math_ops.multiply(indices, strides), -1), [-1])
        flat = array_ops.reshape(updates, array_ops.concat([[-1], math_ops.cast(shape[k:], _dt.int32)], 0))
        out = math_ops.unsorted_segment_sum(flat, rows, math_ops.reduce_prod(shape[:k]))
        return array_ops.reshape(out, shape)


def eye(num_rows, num_columns=None, batch_shape=None, dtype=_dt.float32, name=None) -> Tensor:
    """The identity matrix [num_rows, num_columns] (square by default), repeated over `batch_shape`."""
    cols = num_rows if num_columns is None else num_columns
    if any(isinstance(d, Tensor) for d in (num_rows, cols, batch_shape)):
        # A size known only when the graph runs (tf.eye(tf.shape(x)[0])): row index == column index.
        with name_scope(name, "eye"):
            rows = array_ops.expand_dims(math_ops.range(num_rows), 1)
            value = math_ops.cast(math_ops.equal(rows, math_ops.range(cols)), dtype)
            if batch_shape is None:
                return value
            return array_ops.broadcast_to(value, array_ops.concat(
                [math_ops.cast(batch_shape, _dt.int32), array_ops.shape(value)], 0))
    value = np.eye(int(num_rows), int(cols), dtype=_dt.as_dtype(dtype).np)
    if batch_shape is not None:
        value = np.broadcast_to(value, tuple(int(d) for d in batch_shape) + value.shape)
    return array_ops.constant(value, dtype=dtype, name=name or "eye")


def linspace(start, stop, num, name=None, axis=0) -> Tensor:
    """`num` evenly spaced values from `start` to `stop` inclusive."""
    if axis != 0:
        raise ValueError(f"tf.linspace: axis={axis} is not supported; tfplus spaces scalars along axis 0")
    with name_scope(name, "LinSpace"):
        start = convert_to_tensor(start)
        stop = convert_to_tensor(stop, dtype=start.dtype)
        n = math_ops.cast(convert_to_tensor(num), start.dtype)
        step = (stop - start) / math_ops.maximum(n - 1, 1)
        return start + math_ops.cast(math_ops.range(convert_to_tensor(num)), start.dtype) * step


lin_space = linspace


def matrix_band_part(input, num_lower, num_upper, name=None) -> Tensor:
    """`input`'s innermost matrices with the entries below the num_lower-th subdiagonal and above the
    num_upper-th superdiagonal set to 0 (a negative count keeps that whole triangle)."""
    with name_scope(name, "band_part"):
        x = convert_to_tensor(input)
        dims = array_ops.shape(x)
        i = array_ops.expand_dims(math_ops.range(dims[-2]), 1)
        j = array_ops.expand_dims(math_ops.range(dims[-1]), 0)
        lower, upper = (math_ops.cast(convert_to_tensor(n), _dt.int32) for n in (num_lower, num_upper))
        keep = math_ops.logical_and(math_ops.logical_or(lower < 0, i - j <= lower),
                                    math_ops.logical_or(upper < 0, j - i <= upper))
        return math_ops.where_v2(keep, x, array_ops.zeros_like(x))


def matrix_diag(diagonal, name="diag", k=0, num_rows=-1, num_cols=-1, padding_value=0, align="RIGHT_LEFT"):
    """[..., n, n] matrices with `diagonal` [..., n] on their diagonals (n known)."""
    if k != 0 or num_rows != -1 or num_cols != -1 or padding_value != 0:
        raise ValueError("tf.matrix_diag: only the main diagonal (k=0, no num_rows/num_cols/padding) is supported")
    with name_scope(name, "diag"):
        d = convert_to_tensor(diagonal)
        n = _static(d, -1, "tf.matrix_diag")
        return math_ops.multiply(array_ops.expand_dims(d, -1), eye(n, dtype=d.dtype))


def diag(diagonal, name=None) -> Tensor:
    """The square matrix with the vector `diagonal` on its diagonal (tf.diag of a 1-D tensor)."""
    d = convert_to_tensor(diagonal)
    if d.shape.ndims not in (None, 1):
        raise ValueError(f"tf.diag: tfplus takes a vector, got '{d.name}' of shape {d.shape}")
    return matrix_diag(d, name=name or "diag")


def meshgrid(*args, **kwargs) -> list:
    """Coordinate grids of the 1-D `args`: with indexing='xy' (default) the first two axes are swapped,
    as in NumPy."""
    indexing = kwargs.pop("indexing", "xy")
    name = kwargs.pop("name", None)
    if kwargs or indexing not in ("xy", "ij"):
        raise ValueError(f"tf.meshgrid: unexpected arguments {kwargs} or indexing {indexing!r} ('xy' or 'ij')")
    with name_scope(name, "meshgrid"):
        xs = [array_ops.reshape(convert_to_tensor(a), [-1]) for a in args]
        n = len(xs)
        order = list(builtins.range(n))
        if indexing == "xy" and n > 1:
            order[0], order[1] = 1, 0
        sizes = [array_ops.shape(x)[0] for x in xs]
        shape = array_ops.stack([sizes[order[i]] for i in builtins.range(n)])
        static = [xs[order[i]].shape.as_list()[0] for i in builtins.range(n)]
        out = []
        for k, x in enumerate(xs):
            at = order.index(k)
            grid = array_ops.broadcast_to(array_ops.reshape(x, [-1 if i == at else 1 for i in builtins.range(n)]),
                                          shape)
            grid.set_shape(static)
            out.append(grid)
        return out


def _sorted(values, axis, direction, what):
    x = convert_to_tensor(values)
    if axis not in (-1, (x.shape.ndims or 0) - 1):
        raise ValueError(f"{what}: axis={axis} is not supported; tfplus sorts along the last axis")
    if direction not in ("ASCENDING", "DESCENDING"):
        raise ValueError(f"{what}: direction must be 'ASCENDING' or 'DESCENDING', got {direction!r}")
    n = _static(x, -1, what)
    if direction == "DESCENDING":
        return math_ops.top_k(x, n)
    top, idx = math_ops.top_k(math_ops.negative(x), n)
    return math_ops.negative(top), idx


def sort(values, axis=-1, direction="ASCENDING", name=None) -> Tensor:
    """`values` sorted along the last axis (top_k of all of it)."""
    with name_scope(name, "sort"):
        return _sorted(values, axis, direction, "tf.sort")[0]


def argsort(values, axis=-1, direction="ASCENDING", stable=False, name=None) -> Tensor:
    """The indices that sort `values` along the last axis."""
    with name_scope(name, "argsort"):
        return _sorted(values, axis, direction, "tf.argsort")[1]


def segment_sum(data, segment_ids, name=None) -> Tensor:
    """out[s] = sum of data[i] over the i with segment_ids[i] == s (ids sorted, as TF requires)."""
    with name_scope(name, "SegmentSum"):
        ids = convert_to_tensor(segment_ids)
        return math_ops.unsorted_segment_sum(data, ids, math_ops.reduce_max(ids) + 1)


def segment_mean(data, segment_ids, name=None) -> Tensor:
    """out[s] = the mean of data[i] over the i with segment_ids[i] == s (0 for an empty segment)."""
    with name_scope(name, "SegmentMean"):
        data, ids = convert_to_tensor(data), convert_to_tensor(segment_ids)
        total = segment_sum(data, ids)
        count = segment_sum(array_ops.ones_like(ids, dtype=data.dtype), ids)
        count = array_ops.reshape(math_ops.maximum(count, 1.0), array_ops.concat(
            [array_ops.shape(count), array_ops.ones([(data.shape.ndims or 1) - 1], _dt.int32)], 0))
        return total / count


def arg_max(input, dimension, name=None, output_type=_dt.int64) -> Tensor:
    """TF1's tf.arg_max: tf.argmax along `dimension`."""
    return math_ops.argmax(input, dimension, name=name, output_type=output_type)


def arg_min(input, dimension, name=None, output_type=_dt.int64) -> Tensor:
    """TF1's tf.arg_min: tf.argmin along `dimension`."""
    return math_ops.argmin(input, dimension, name=name, output_type=output_type)


def reverse_sequence(input, seq_lengths, seq_axis=None, batch_axis=None, name=None, seq_dim=None,
                     batch_dim=None) -> Tensor:
    """For each example b (along `batch_axis`), its first seq_lengths[b] entries along `seq_axis` reversed, the
    rest kept: a gather_nd of the indices (b, t) -> (b, len_b - 1 - t if t < len_b else t)."""
    seq_axis = seq_dim if seq_axis is None else seq_axis
    batch_axis = (batch_dim if batch_dim is not None else 0) if batch_axis is None else batch_axis
    if seq_axis is None:
        raise ValueError("tf.reverse_sequence: seq_axis is required")
    with name_scope(name, "ReverseSequence"):
        x = convert_to_tensor(input)
        rank = x.shape.ndims
        if rank is None:
            raise ValueError(f"tf.reverse_sequence: input '{x.name}' needs a known rank")
        b_ax, t_ax = batch_axis % rank, seq_axis % rank
        perm = [b_ax, t_ax] + [i for i in builtins.range(rank) if i not in (b_ax, t_ax)]
        xt = array_ops.transpose(x, perm)
        dims = array_ops.shape(xt)
        lengths = array_ops.expand_dims(math_ops.cast(convert_to_tensor(seq_lengths), _dt.int32), 1)
        t = array_ops.expand_dims(math_ops.range(dims[1]), 0)
        src = math_ops.where_v2(t < lengths, lengths - 1 - t, t)
        b = array_ops.broadcast_to(array_ops.expand_dims(math_ops.range(dims[0]), 1), array_ops.shape(src))
        y = array_ops.gather_nd(xt, array_ops.stack([b, src], -1))
        y = array_ops.transpose(y, [perm.index(i) for i in builtins.range(rank)])
        y.set_shape(x.shape)
        return y


def _blocks(x: Tensor, block_size, data_format: str, what: str) -> tuple:
    if data_format != "NHWC":
        raise ValueError(f"tf.{what}: tfplus supports data_format='NHWC' only, got {data_format!r}")
    if x.shape.ndims != 4:
        raise ValueError(f"tf.{what}: input '{x.name}' must be [batch, height, width, depth], got {x.shape}")
    bs = int(block_size)
    if bs < 2:
        raise ValueError(f"tf.{what}: block_size must be at least 2, got {block_size}")
    return (bs,) + tuple(_static(x, a, f"tf.{what}") for a in (1, 2, 3))


def depth_to_space(input, block_size, name=None, data_format="NHWC") -> Tensor:
    """Moves depth into bs x bs spatial blocks (ESPCN's sub-pixel upsampling): [n, h, w, bs*bs*c] ->
    [n, h*bs, w*bs, c], depth read as (block row, block column, channel) as TF does; a reshape, a transpose and
    a reshape.

        hr = tf.depth_to_space(conv_out, 2)
    """
    with name_scope(name, "DepthToSpace"):
        x = convert_to_tensor(input)
        bs, h, w, c = _blocks(x, block_size, data_format, "depth_to_space")
        if c % (bs * bs):
            raise ValueError(f"tf.depth_to_space: depth {c} of '{x.name}' is not divisible by block_size^2 = "
                             f"{bs * bs}")
        blocks = array_ops.reshape(x, [-1, h, w, bs, bs, c // (bs * bs)])
        return array_ops.reshape(array_ops.transpose(blocks, [0, 1, 3, 2, 4, 5]), [-1, h * bs, w * bs, c // (bs * bs)])


def space_to_depth(input, block_size, name=None, data_format="NHWC") -> Tensor:
    """depth_to_space's inverse: [n, h, w, c] -> [n, h/bs, w/bs, bs*bs*c].

        packed = tf.space_to_depth(images, 2)
    """
    with name_scope(name, "SpaceToDepth"):
        x = convert_to_tensor(input)
        bs, h, w, c = _blocks(x, block_size, data_format, "space_to_depth")
        if h % bs or w % bs:
            raise ValueError(f"tf.space_to_depth: height {h} and width {w} of '{x.name}' must be divisible by "
                             f"block_size {bs}")
        blocks = array_ops.reshape(x, [-1, h // bs, bs, w // bs, bs, c])
        return array_ops.reshape(array_ops.transpose(blocks, [0, 1, 3, 2, 4, 5]), [-1, h // bs, w // bs, bs * bs * c])
