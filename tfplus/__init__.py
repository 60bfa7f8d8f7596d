"""tfplus: a TensorFlow-1-style dataflow-graph runtime that trains CNNs on memory-constrained devices.

    import tfplus as tf
    x = tf.placeholder(tf.float32, [None, 3])
    w = tf.Variable(tf.zeros([3, 1]))
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - 1.0))
    train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(train, {x: [[1.0, 2.0, 3.0]]})
"""
from __future__ import annotations

# NOTE: _layout first (names import left to right), before any import of tfplus.ops, .kernels or .graphs: a
# source checkout keeps them beside tfplus/ (tfplus._layout).
from tfplus import _layout, errors, nn, train
from tfplus import init_ops as _init

# TF1's session configuration (tfplus.config).
from tfplus.config import ConfigProto, GPUOptions, GraphOptions, OptimizerOptions
from tfplus.dtypes import DType, as_dtype, double, float16, float32, float64, half, int8, int16, int32, int64, uint8
from tfplus.dtypes import bool_ as bool
from tfplus.engine.session import Session
from tfplus.framework import (
    Graph,
    GraphKeys,
    IndexedSlices,
    IndexedSlicesValue,
    Operation,
    Tensor,
    add_to_collection,
    control_dependencies,
    convert_to_tensor,
    device,
    get_collection,
    get_collection_ref,
    get_default_graph,
    get_default_session,
    name_scope,
    register_tensor_conversion_function,
    reset_default_graph,
)
from tfplus.gradients import gradients, hessians
from tfplus.graph_io import import_graph_def
from tfplus.init_ops import (
    constant_initializer,
    glorot_normal_initializer,
    glorot_uniform_initializer,
    ones_initializer,
    orthogonal_initializer,
    random_normal_initializer,
    random_uniform_initializer,
    truncated_normal_initializer,
    variance_scaling_initializer,
    zeros_initializer,
)
from tfplus.nn import sigmoid, tanh  # TF1 has both at the top level too
from tfplus.ops import array_ops, composite_ops, math_ops, random_ops, special_math_ops, state_ops
from tfplus.ops.control_flow_ops import group, no_op
from tfplus.ops.control_flow_ops import tuple_ as tuple
from tfplus.ops.random_ops import random_normal, random_shuffle, random_uniform, set_random_seed, truncated_normal
from tfplus.ops.sparse_training_ops import (
    scatter_add,
    scatter_div,
    scatter_max,
    scatter_min,
    scatter_mul,
    scatter_nd_add,
    scatter_nd_sub,
    scatter_nd_update,
    scatter_sub,
    scatter_update,
)
from tfplus.ops.state_ops import assign, assign_add, assign_sub
from tfplus.profiler import RunMetadata, RunOptions
from tfplus.tensor_shape import Dimension, TensorShape
from tfplus.variables import (
    AUTO_REUSE,
    Variable,
    VariableScope,
    get_variable,
    get_variable_scope,
    global_variables,
    global_variables_initializer,
    local_variables,
    local_variables_initializer,
    trainable_variables,
    variable_scope,
    variables_initializer,
)

__version__ = "0.1.0"

# Ops: every public wrapper that an ops module lists in __all__ becomes tf.<name>.
for _m in (array_ops, math_ops, random_ops, state_ops, composite_ops, special_math_ops):
    for _n in getattr(_m, "__all__", ()):
        globals()[_n] = getattr(_m, _n)

from tfplus.unsupported import namespace as _namespace  # noqa: E402

initializers = _namespace(
    "tf.initializers", zeros=_init.Zeros, ones=_init.Ones, constant=_init.Constant, random_normal=_init.RandomNormal,
    truncated_normal=_init.TruncatedNormal, random_uniform=_init.RandomUniform,
    variance_scaling=_init.VarianceScaling, glorot_uniform=_init.glorot_uniform_initializer,
    glorot_normal=_init.glorot_normal_initializer, orthogonal=_init.Orthogonal, he_normal=_init.he_normal,
    he_uniform=_init.he_uniform,
    global_variables=global_variables_initializer, variables=variables_initializer,
    local_variables=local_variables_initializer)

# tf.math and tf.random: the same functions under TF's newer names (math_ops's wrappers less the ones TF keeps
# only at the top level).
from tfplus import nn_impl as _nn_impl  # noqa: E402
from tfplus.ops.random_ops import categorical as _categorical  # noqa: E402
from tfplus.ops.random_ops import multinomial  # noqa: E402

_TOP_LEVEL_ONLY = {"cast", "clip_by_value", "div", "div_no_nan", "floor_div", "matmul", "range", "realdiv",
                   "saturate_cast", "to_double", "to_float", "to_int32", "to_int64", "where", "where_v2"}
math = _namespace("tf.math", **{n: getattr(math_ops, n) for n in math_ops.__all__ if n not in _TOP_LEVEL_ONLY},
                  **{n: getattr(nn, n) for n in ("in_top_k", "log_softmax", "sigmoid", "softmax", "softplus", "tanh",
                                                 "zero_fraction", "l2_normalize", "softsign")},
                  **{n: getattr(_nn_impl, n) for n in ("log_sigmoid", "reduce_logsumexp", "reduce_std",
                                                       "reduce_variance", "is_nan", "is_inf", "is_finite",
                                                       "scalar_mul")},
                  **{n: getattr(special_math_ops, n) for n in special_math_ops.__all__},
                  invert_permutation=array_ops.invert_permutation, divide_no_nan=math_ops.div_no_nan,
                  segment_sum=composite_ops.segment_sum, segment_mean=composite_ops.segment_mean,
                  top_k=nn.top_k)
from tfplus import quantization as _quantization  # noqa: E402

quantization = _namespace("tf.quantization", **{n: getattr(_quantization, n) for n in (
    "fake_quant_with_min_max_args", "fake_quant_with_min_max_vars", "fake_quant_with_min_max_vars_per_channel")})
fake_quant_with_min_max_args = _quantization.fake_quant_with_min_max_args
fake_quant_with_min_max_vars = _quantization.fake_quant_with_min_max_vars
fake_quant_with_min_max_vars_per_channel = _quantization.fake_quant_with_min_max_vars_per_channel
random = _namespace("tf.random", normal=random_normal, uniform=random_uniform, truncated_normal=truncated_normal,
                    set_random_seed=set_random_seed, categorical=_categorical, multinomial=multinomial,
                    shuffle=random_shuffle, gamma=random_ops.random_gamma, poisson=random_ops.random_poisson,
                    get_seed=random_ops.get_seed_pair, stateless_normal=random_ops.stateless_random_normal,
                    stateless_uniform=random_ops.stateless_random_uniform,
                    stateless_truncated_normal=random_ops.stateless_truncated_normal,
                    stateless_categorical=random_ops.stateless_categorical,
                    stateless_multinomial=random_ops.stateless_categorical)
random_gamma, random_poisson, get_seed = random_ops.random_gamma, random_ops.random_poisson, random_ops.get_seed_pair
from tfplus.nn_impl import is_finite, is_inf, is_nan, log_sigmoid, reduce_logsumexp, scalar_mul, sequence_mask  # noqa: E402,I001,F401
from tfplus import graph_util, image  # noqa: E402
from tfplus.image import extract_image_patches, random_crop  # noqa: E402

# -- TF1's module layout for scripts (tf.app, tf.flags, tf.logging, tf.gfile, tf.layers, tf.losses, tf.contrib,
# tf.summary) and top-level names they use; a name tfplus lacks raises UnsupportedError (tfplus.unsupported).
from tfplus import app, compat, data, flags, gfile, layers, logging, losses, metrics  # noqa: E402
from tfplus import saved_model, summary  # noqa: E402
from tfplus import distributions  # noqa: E402
from tfplus.ctc import edit_distance  # noqa: E402
from tfplus import signal  # noqa: E402
from tfplus.saved_model import tables_initializer  # noqa: E402
from tfplus.engine.session import InteractiveSession  # noqa: E402
from tfplus.nn_impl import clip_by_global_norm, clip_by_norm, global_norm  # noqa: E402
from tfplus.summary import Event, SessionLog, Summary  # noqa: E402 (TF1 has the protos at the top level too)
from tfplus.unsupported import module_getattr as _module_getattr  # noqa: E402
from tfplus.variables import global_variables_initializer as initialize_all_variables  # noqa: E402
from tfplus.variables import local_variables_initializer as initialize_local_variables  # noqa: E402

from importlib import import_module as _import_module  # noqa: E402

_unsupported = _module_getattr(__name__, "tf")

# Submodules imported on first use, not by `import tfplus`: few programs use them, and every process (the CLI, a
# Flower client each round, an OpenCL build process) would pay their imports (tf.test: unittest.mock and asyncio).
# dir(tf) lists them; `tf.keras` and `from tfplus import keras` import them.
_LAZY = {"keras": ("tfplus.keras", None), "estimator": ("tfplus.estimator", None),
         "feature_column": ("tfplus.estimator", "feature_column"), "contrib": ("tfplus.contrib", None),
         "test": ("tfplus.test", None), "lookup": ("tfplus.lookup", None), "sets": ("tfplus.sets", None)}


def __getattr__(name: str):
    if name not in _LAZY:
        return _unsupported(name)
    module, attribute = _LAZY[name]
    value = _import_module(module)
    value = getattr(value, attribute) if attribute else value
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


# Control flow (functional If/While ops; see tfplus.ops.control_flow_ops).
from tfplus.ops.control_flow_ops import Assert, TensorArray, case, cond, foldl, foldr, map_fn, scan, while_loop  # noqa: E402, I001

# Checkpoint ops of TensorFlow-built graphs (SaveV2, RestoreV2, MergeV2Checkpoints) and the string dtype their
# file and tensor names have.
from tfplus.dtypes import string  # noqa: E402
from tfplus.ops import io_ops as _io_ops  # noqa: E402,F401

# Fused ops that only the graph rewrite (tfplus.engine.rewrite) creates; registered so their kernels and the planner
# find them.
from tfplus.ops import fused_ops as _fused_ops  # noqa: E402,F401
from tfplus.config import RewriterConfig  # noqa: E402,F401

# The on-device input op of the trainer (CifarAugment; see tfplus.ops.image_ops).
from tfplus.ops import image_ops as _image_ops  # noqa: E402,F401

# Host callbacks (PyFunc; see tfplus.ops.script_ops).
from tfplus.ops.script_ops import numpy_function, py_func  # noqa: E402

# Checks and prints (tfplus.ops.check_ops), also as tf.debugging.
from tfplus.ops import check_ops as _check_ops  # noqa: E402
from tfplus.ops.check_ops import (  # noqa: E402
    Print,
    assert_equal,
    assert_greater,
    assert_greater_equal,
    assert_less,
    assert_less_equal,
    assert_negative,
    assert_non_negative,
    assert_non_positive,
    assert_none_equal,
    assert_positive,
    check_numerics,
    verify_tensor_all_finite,
)
from tfplus.ops.check_ops import print_ as print  # noqa: E402,A001

debugging = _namespace("tf.debugging", Assert=Assert, check_numerics=check_numerics,
                       **{n: getattr(_check_ops, n) for n in _check_ops.__all__ if n.startswith("assert_")})

# GraphDef protos (tf.GraphDef().ParseFromString(...), for tf.import_graph_def).
# Input pipelines (tfplus.io, tfplus.sparse): TFRecord files, tf.train.Example parsing, string ops, sparse tensors.
from tfplus import io, sparse  # noqa: E402
from tfplus.io import string_ops as _string_ops  # noqa: E402
from tfplus.io import tfrecord as _tfrecord  # noqa: E402
from tfplus.io.parsing import (  # noqa: E402
    FixedLenFeature,
    FixedLenSequenceFeature,
    VarLenFeature,
    parse_example,
    parse_single_example,
    parse_single_sequence_example,
)
from tfplus.io.string_ops import (  # noqa: E402
    as_string,
    decode_base64,
    decode_csv,
    decode_raw,
    encode_base64,
    matching_files,
    parse_tensor,
    read_file,
    reduce_join,
    regex_replace,
    serialize_tensor,
    string_split,
    string_to_number,
    substr,
    write_file,
)
from tfplus.io.string_ops import join as string_join  # noqa: E402
from tfplus.io.string_ops import strip as string_strip  # noqa: E402
from tfplus.proto import example_pb2 as _example_pb2  # noqa: E402
from tfplus.proto import feature_pb2 as _feature_pb2  # noqa: E402
from tfplus.proto.graph_pb2 import GraphDef, NodeDef  # noqa: E402
from tfplus.sparse import (  # noqa: E402
    SparseTensor,
    SparseTensorValue,
    sparse_add,
    sparse_concat,
    sparse_fill_empty_rows,
    sparse_placeholder,
    sparse_reduce_sum,
    sparse_reorder,
    sparse_reshape,
    sparse_retain,
    sparse_slice,
    sparse_tensor_dense_matmul,
    sparse_tensor_to_dense,
    sparse_to_dense,
    sparse_to_indicator,
    sparse_transpose,
)

python_io = _namespace("tf.python_io", TFRecordWriter=_tfrecord.TFRecordWriter,
                       TFRecordOptions=_tfrecord.TFRecordOptions,
                       TFRecordCompressionType=_tfrecord.TFRecordCompressionType,
                       tf_record_iterator=_tfrecord.tf_record_iterator)
strings = _namespace("tf.strings", **{n: getattr(_string_ops, n) for n in (
    "split", "to_number", "join", "reduce_join", "length", "substr", "regex_replace", "regex_full_match", "lower",
    "upper", "strip", "as_string", "encode_base64", "decode_base64", "ngrams")})
# tf.train's Example protos and tf.nn.embedding_lookup_sparse live with the input pipelines; tfplus.train and
# tfplus.nn are given them here, so that those modules stay free of records and sparse tensors.
for _n in ("BytesList", "FloatList", "Int64List", "Feature", "Features", "FeatureList", "FeatureLists"):
    setattr(train, _n, getattr(_feature_pb2, _n))
train.Example, train.SequenceExample = _example_pb2.Example, _example_pb2.SequenceExample
nn.embedding_lookup_sparse = sparse.embedding_lookup_sparse
from tfplus.io import png as _png  # noqa: E402

image.decode_png, image.encode_png, image.decode_image = _png.decode_png, _png.encode_png, _png.decode_image

# TF1's queue-based readers, run without queues (tfplus.data.queues).
from tfplus.data import queues as _queues  # noqa: E402
from tfplus.data.queues import FixedLengthRecordReader, TextLineReader, TFRecordReader, WholeFileReader  # noqa: E402

for _n in ("string_input_producer", "range_input_producer", "input_producer", "slice_input_producer", "batch",
           "shuffle_batch", "Coordinator", "start_queue_runners"):
    setattr(train, _n, getattr(_queues, _n))
# tf.linalg with TF1's top-level linear algebra (tfplus.ops.linalg_ops).
from tfplus.ops import linalg_ops as _linalg  # noqa: E402

for _n in _linalg.__all__:
    globals()[_n] = getattr(_linalg, _n)
linalg = _namespace(
    "tf.linalg", adjoint=_linalg.adjoint, band_part=composite_ops.matrix_band_part, cholesky=_linalg.cholesky,
    cholesky_solve=_linalg.cholesky_solve, cross=_linalg.cross, det=_linalg.matrix_determinant,
    diag=composite_ops.matrix_diag, diag_part=_linalg.matrix_diag_part, eigh=_linalg.self_adjoint_eig,
    eigvalsh=_linalg.self_adjoint_eigvals, einsum=composite_ops.einsum, eye=_linalg.eye, inv=_linalg.matrix_inverse,
    l2_normalize=nn.l2_normalize, logdet=_linalg.logdet, lstsq=_linalg.matrix_solve_ls, matmul=math_ops.matmul,
    matrix_transpose=_linalg.matrix_transpose, matvec=_linalg.matvec, norm=composite_ops.norm, qr=_linalg.qr,
    set_diag=_linalg.matrix_set_diag, slogdet=_linalg.slogdet, solve=_linalg.matrix_solve, svd=_linalg.svd,
    tensordot=composite_ops.tensordot, trace=_linalg.trace, transpose=_linalg.matrix_transpose,
    triangular_solve=_linalg.triangular_solve, global_norm=_nn_impl.global_norm, pinv=_linalg.pinv,
    matrix_rank=_linalg.matrix_rank, normalize=_linalg.normalize, tensor_diag=composite_ops.diag,
    tensor_diag_part=special_math_ops.diag_part)

# TF1 scaffolding (tf1infra): partitioned variables and local variables (tfplus.variables).
from tfplus import python  # noqa: E402,F401
from tfplus.device_spec import DeviceSpec  # noqa: E402,F401
from tfplus.framework import add_to_collections  # noqa: E402,F401
from tfplus.ops.state_ops import is_variable_initialized  # noqa: E402,F401
from tfplus.saved_model import tables_initializer as initialize_all_tables  # noqa: E402,F401
from tfplus.summary import summary_iterator as _summary_iterator  # noqa: E402
from tfplus.variables import (  # noqa: E402
    PartitionedVariable,
    assert_variables_initialized,
    fixed_size_partitioner,
    get_local_variable,
    make_template,
    min_max_variable_partitioner,
    model_variables,
    moving_average_variables,
    report_uninitialized_variables,
    variable_axis_size_partitioner,
)
from tfplus.variables import global_variables as all_variables  # noqa: E402,F401

train.summary_iterator = _summary_iterator
from tfplus.framework import colocate_with, container  # noqa: E402,F401
from tfplus.gradients import AggregationMethod, RegisterGradient, UnconnectedGradients, custom_gradient, no_gradient  # noqa: E402,F401
from tfplus.gradients import no_gradient as NoGradient  # noqa: E402,F401
from tfplus.gradients import no_gradient as NotDifferentiable  # noqa: E402,F401
