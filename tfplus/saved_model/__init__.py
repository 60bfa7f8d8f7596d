"""tf.saved_model in TF1's form: SavedModelBuilder / simple_save write a SavedModel folder (saved_model.pb and a
variables/ checkpoint) that TensorFlow's loader reads; loader.load reads TensorFlow's and tfplus's.

    tf.saved_model.simple_save(sess, "export/1", inputs={"x": x}, outputs={"y": y})
    with tf.Session(graph=tf.Graph()) as sess:
        meta = tf.saved_model.loader.load(sess, [tf.saved_model.tag_constants.SERVING], "export/1")
        sig = meta.signature_def["serving_default"]
        sess.run(sig.outputs["y"].name, {sig.inputs["x"].name: batch})

Not implemented (UnsupportedError): TF2's object-based save/load_v2, assets.
"""
from tfplus.saved_model import builder, constants, loader, signature_def_utils
from tfplus.saved_model import constants as _c
from tfplus.saved_model.builder import SavedModelBuilder, simple_save
from tfplus.saved_model.loader import contains_saved_model, load, maybe_saved_model_directory
from tfplus.saved_model.signature_def_utils import (
    build_signature_def,
    build_tensor_info,
    classification_signature_def,
    get_tensor_from_tensor_info,
    is_valid_signature,
    predict_signature_def,
    regression_signature_def,
)
from tfplus.unsupported import module_getattr as _module_getattr
from tfplus.unsupported import namespace as _namespace

Builder = SavedModelBuilder

tag_constants = _namespace("tf.saved_model.tag_constants", **{n: getattr(_c, n) for n in _c.TAG_NAMES})
signature_constants = _namespace("tf.saved_model.signature_constants",
                                 **{n: getattr(_c, n) for n in _c.SIGNATURE_NAMES})
utils = _namespace("tf.saved_model.utils", build_tensor_info=build_tensor_info,
                   get_tensor_from_tensor_info=get_tensor_from_tensor_info)


def tables_initializer(name: str = "init_all_tables"):
    """tf.tables_initializer: the op running every lookup table's initializer (tfplus.lookup), a no-op without
    tables (SavedModel scripts pass it as main_op / legacy_init_op)."""
    from tfplus.framework import GraphKeys, get_default_graph
    from tfplus.ops.control_flow_ops import group, no_op
    initializers = get_default_graph().get_collection(GraphKeys.TABLE_INITIALIZERS)
    return group(*initializers, name=name) if initializers else no_op(name=name)


def _main_op():
    """tf.saved_model.main_op.main_op: what a loader runs after restoring (the local variables' and tables'
    initializers)."""
    from tfplus.ops.control_flow_ops import group
    from tfplus.variables import local_variables_initializer
    return group(local_variables_initializer(), tables_initializer())


main_op = _namespace("tf.saved_model.main_op", main_op=_main_op)

# TF1 has the constants at tf.saved_model's top level too.
for _name in _c.TAG_NAMES + _c.SIGNATURE_NAMES + _c.FILE_NAMES:
    globals()[_name] = getattr(_c, _name)

__all__ = ["builder", "loader", "constants", "signature_def_utils", "tag_constants", "signature_constants", "utils",
           "main_op", "Builder", "SavedModelBuilder", "simple_save", "load", "contains_saved_model",
           "maybe_saved_model_directory", "build_signature_def", "build_tensor_info", "classification_signature_def",
           "get_tensor_from_tensor_info", "is_valid_signature", "predict_signature_def", "regression_signature_def",
           *_c.TAG_NAMES, *_c.SIGNATURE_NAMES, *_c.FILE_NAMES]
__getattr__ = _module_getattr(__name__, "tf.saved_model")
