"""SignatureDefs: the named tensors a SavedModel's user feeds and fetches (tf.saved_model.signature_def_utils and
tf.saved_model.utils).

    sig = tf.saved_model.predict_signature_def(inputs={"x": x}, outputs={"y": y})
    # later, after tf.saved_model.loader.load: sess.run(sig.outputs["y"].name, {sig.inputs["x"].name: batch})
"""
from __future__ import annotations

from tfplus import dtypes
from tfplus.framework import Tensor, get_default_graph
from tfplus.proto.meta_graph_pb2 import SignatureDef, TensorInfo
from tfplus.saved_model import constants
from tfplus.tensor_util import shape_to_proto


def build_tensor_info(tensor: Tensor) -> TensorInfo:
    """The TensorInfo of `tensor`: its name, dtype and static shape (unknown dimensions as -1)."""
    if not isinstance(tensor, Tensor):
        raise TypeError(f"build_tensor_info: {tensor!r} is not a tf.Tensor (a SavedModel signature names graph "
                        "tensors; make the value a tensor of the graph first)")
    return TensorInfo(name=tensor.name, dtype=tensor.dtype.base_dtype.as_datatype_enum,
                      tensor_shape=shape_to_proto(tensor.shape))


def get_tensor_from_tensor_info(tensor_info: TensorInfo, graph=None, import_scope: str | None = None) -> Tensor:
    """The tensor of `graph` (the default graph) that `tensor_info` names, under `import_scope` where the
    SavedModel was loaded into one."""
    if not tensor_info.name:
        raise ValueError("get_tensor_from_tensor_info: the TensorInfo names no tensor (tfplus reads dense "
                         "tensors only, not sparse or composite ones)")
    name = f"{import_scope}/{tensor_info.name}" if import_scope else tensor_info.name
    return (graph or get_default_graph()).get_tensor_by_name(name)


def build_signature_def(inputs: dict | None = None, outputs: dict | None = None,
                        method_name: str | None = None) -> SignatureDef:
    """A SignatureDef of {key: TensorInfo} inputs and outputs and a method name."""
    sig = SignatureDef(method_name=method_name or "")
    for key, info in (inputs or {}).items():
        sig.inputs[key].CopyFrom(info)
    for key, info in (outputs or {}).items():
        sig.outputs[key].CopyFrom(info)
    return sig


def _infos(tensors: dict | None, what: str) -> dict:
    if not tensors:
        raise ValueError(f"{what} cannot be None or empty.")
    return {key: build_tensor_info(t) for key, t in tensors.items()}


def predict_signature_def(inputs: dict, outputs: dict) -> SignatureDef:
    """The predict signature of {key: tensor} inputs and outputs."""
    return build_signature_def(_infos(inputs, "Prediction inputs"), _infos(outputs, "Prediction outputs"),
                               constants.PREDICT_METHOD_NAME)


def regression_signature_def(examples: Tensor, predictions: Tensor) -> SignatureDef:
    """The regress signature: a batch of serialized examples in, one float prediction per example out."""
    if examples is None or predictions is None:
        raise ValueError("Regression examples and predictions cannot be None.")
    return build_signature_def({constants.REGRESS_INPUTS: build_tensor_info(examples)},
                               {constants.REGRESS_OUTPUTS: build_tensor_info(predictions)},
                               constants.REGRESS_METHOD_NAME)


def classification_signature_def(examples: Tensor, classes: Tensor | None, scores: Tensor | None) -> SignatureDef:
    """The classify signature: serialized examples in; class names and/or their scores out."""
    if examples is None:
        raise ValueError("Classification examples cannot be None.")
    if classes is None and scores is None:
        raise ValueError("Classification classes and scores cannot both be None.")
    outputs = {key: build_tensor_info(t) for key, t in ((constants.CLASSIFY_OUTPUT_CLASSES, classes),
                                                        (constants.CLASSIFY_OUTPUT_SCORES, scores)) if t is not None}
    return build_signature_def({constants.CLASSIFY_INPUTS: build_tensor_info(examples)}, outputs,
                               constants.CLASSIFY_METHOD_NAME)


def is_valid_signature(signature_def) -> bool:
    """TensorFlow's check: a predict signature has inputs and outputs; a regress one string examples in and a
    float output; a classify one string examples in, string classes and/or float scores out."""
    if not isinstance(signature_def, SignatureDef) or not signature_def.method_name:
        return False
    inputs, outputs, method = signature_def.inputs, signature_def.outputs, signature_def.method_name
    string, float_ = dtypes.string.as_datatype_enum, dtypes.float32.as_datatype_enum
    if method == constants.PREDICT_METHOD_NAME:
        return bool(inputs) and bool(outputs)
    if method == constants.REGRESS_METHOD_NAME:
        return (set(inputs) == {constants.REGRESS_INPUTS} and set(outputs) == {constants.REGRESS_OUTPUTS}
                and inputs[constants.REGRESS_INPUTS].dtype == string
                and outputs[constants.REGRESS_OUTPUTS].dtype == float_)
    if method == constants.CLASSIFY_METHOD_NAME:
        wanted = {constants.CLASSIFY_OUTPUT_CLASSES: string, constants.CLASSIFY_OUTPUT_SCORES: float_}
        return (set(inputs) == {constants.CLASSIFY_INPUTS} and inputs[constants.CLASSIFY_INPUTS].dtype == string
                and bool(outputs) and all(key in wanted and info.dtype == wanted[key]
                                          for key, info in outputs.items()))
    return True


__all__ = ["build_tensor_info", "get_tensor_from_tensor_info", "build_signature_def", "predict_signature_def",
           "regression_signature_def", "classification_signature_def", "is_valid_signature"]
