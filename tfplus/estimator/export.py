"""tf.estimator.export: what a SavedModel of an Estimator is fed (ServingInputReceiver) and what its signatures
give (PredictOutput, RegressionOutput, ClassificationOutput).

    def serving_input_receiver_fn():
        x = tf.placeholder(tf.float32, [None, 784], name="x")
        return tf.estimator.export.ServingInputReceiver({"x": x}, {"x": x})
    est.export_saved_model("export", serving_input_receiver_fn)
"""
from __future__ import annotations

from tfplus import logging
from tfplus.framework import Tensor
from tfplus.saved_model import constants
from tfplus.saved_model import signature_def_utils as sdu
from tfplus.unsupported import module_getattr


def _wrap(tensors, default_key: str, what: str) -> dict:
    """{key: tensor}: a lone tensor under `default_key` (TensorFlow's keys: "feature", "input", "output")."""
    if tensors is None:
        raise ValueError(f"{what} must be defined.")
    if isinstance(tensors, Tensor):
        return {default_key: tensors}
    if not isinstance(tensors, dict) or not tensors:
        raise ValueError(f"{what} must be a tensor or a non-empty dict of tensors, got {tensors!r}")
    for key, t in tensors.items():
        if not isinstance(key, str):
            raise ValueError(f"{what} keys must be strings: {key!r}.")
        if not isinstance(t, Tensor):
            raise ValueError(f"{what} {key!r} must be a Tensor, got {t!r}.")
    return dict(tensors)


class ServingInputReceiver:
    """The serving graph's inputs: `receiver_tensors` (what a SavedModel's user feeds, usually placeholders)
    and `features` (what model_fn gets, computed from them; a lone tensor becomes {"feature": tensor})."""

    def __init__(self, features, receiver_tensors, receiver_tensors_alternatives=None):
        if receiver_tensors_alternatives:
            raise NotImplementedError("ServingInputReceiver(receiver_tensors_alternatives=...): tfplus does not "
                                      "implement alternative signatures; export one receiver per SavedModel")
        self.features = _wrap(features, "feature", "features")
        self.receiver_tensors = _wrap(receiver_tensors, "input", "receiver_tensors")
        self.receiver_tensors_alternatives = None


class TensorServingInputReceiver:
    """A ServingInputReceiver whose `features` reach model_fn as the one tensor they are (not in a dict)."""

    def __init__(self, features, receiver_tensors, receiver_tensors_alternatives=None):
        if not isinstance(features, Tensor):
            raise ValueError(f"TensorServingInputReceiver: features must be a single Tensor, got {features!r}")
        inner = ServingInputReceiver({"feature": features}, receiver_tensors, receiver_tensors_alternatives)
        self.features, self.receiver_tensors = features, inner.receiver_tensors
        self.receiver_tensors_alternatives = None


def build_raw_serving_input_receiver_fn(features: dict, default_batch_size: int | None = None):
    """A serving_input_receiver_fn that feeds model_fn placeholders shaped and typed as `features` (tensors of
    another graph, e.g. the training input's), named by their keys, with the batch dimension
    `default_batch_size` (None: any)."""
    from tfplus.ops.array_ops import placeholder

    def serving_input_receiver_fn():
        receivers = {}
        for key, t in features.items():
            dims = t.shape.dims_tuple
            shape = None if dims is None else (default_batch_size, *dims[1:]) if dims else ()
            receivers[key] = placeholder(t.dtype.base_dtype, shape, name=key)
        return ServingInputReceiver(receivers, dict(receivers))
    return serving_input_receiver_fn


def build_parsing_serving_input_receiver_fn(feature_spec, default_batch_size=None):
    raise NotImplementedError("build_parsing_serving_input_receiver_fn: tfplus does not parse tf.Example protos "
                              "(no string tensors); use build_raw_serving_input_receiver_fn with placeholders of the "
                              "features")


class ExportOutput:
    """One signature of an exported model: as_signature_def(receiver_tensors) builds it."""

    def as_signature_def(self, receiver_tensors: dict):
        raise NotImplementedError(f"{type(self).__name__}.as_signature_def")


class PredictOutput(ExportOutput):
    """A predict signature: the receiver tensors in, `outputs` (a tensor, or a dict of them) out."""

    def __init__(self, outputs):
        self.outputs = _wrap(outputs, "output", "Prediction outputs")

    def as_signature_def(self, receiver_tensors: dict):
        return sdu.predict_signature_def(receiver_tensors, self.outputs)


def _one_string_input(receiver_tensors: dict, kind: str) -> Tensor:
    from tfplus import dtypes
    if len(receiver_tensors) != 1 or next(iter(receiver_tensors.values())).dtype.base_dtype != dtypes.string:
        raise ValueError(f"{kind} signatures can only accept a single tensor input of type tf.string. Please check "
                         f"to make sure that you have structured the serving_input_receiver_fn so that it creates "
                         f"a single string placeholder. If your model function expects multiple inputs, then use "
                         f"`tf.io.parse_example()` to parse the string into multiple tensors.\n Received: "
                         f"{receiver_tensors}")
    return next(iter(receiver_tensors.values()))


class RegressionOutput(ExportOutput):
    """A regress signature (serialized examples in, one float per example out)."""

    def __init__(self, value):
        if not isinstance(value, Tensor) or not value.dtype.is_floating:
            raise ValueError(f"Regression output value must be a float32 Tensor; got {value!r}")
        self.value = value

    def as_signature_def(self, receiver_tensors: dict):
        return sdu.regression_signature_def(_one_string_input(receiver_tensors, "Regression"), self.value)


class ClassificationOutput(ExportOutput):
    """A classify signature (serialized examples in; class names and/or scores out)."""

    def __init__(self, scores=None, classes=None):
        if scores is None and classes is None:
            raise ValueError("Classification output must define at least one of scores or classes.")
        self.scores, self.classes = scores, classes

    def as_signature_def(self, receiver_tensors: dict):
        return sdu.classification_signature_def(_one_string_input(receiver_tensors, "Classification"),
                                                self.classes, self.scores)


def build_all_signature_defs(receiver_tensors: dict, export_outputs, predictions) -> dict:
    """{signature key: SignatureDef} of model_fn's export_outputs (default: a PredictOutput of its predictions
    under "serving_default"). A lone export output is the default one too; those whose receiver they cannot take
    (a regress signature on a float placeholder) are left out with a log line, as TensorFlow leaves them out."""
    default = constants.DEFAULT_SERVING_SIGNATURE_DEF_KEY
    outputs = dict(export_outputs or {default: PredictOutput(predictions)})
    for key, out in outputs.items():
        if not isinstance(out, ExportOutput):
            raise TypeError(f"export_outputs[{key!r}] must be an ExportOutput (tf.estimator.export.PredictOutput, "
                            f"...), got {out!r}")
    if default not in outputs:
        if len(outputs) != 1:
            raise ValueError(f"Multiple export_outputs were provided, but none of them is specified as the default. "
                             f"Do this by naming one of them with signature_constants."
                             f"DEFAULT_SERVING_SIGNATURE_DEF_KEY ({default!r}); given: {sorted(outputs)}")
        outputs[default] = next(iter(outputs.values()))
    signatures = {}
    for key, out in outputs.items():
        try:
            signatures[key] = out.as_signature_def(receiver_tensors)
        except ValueError as e:
            logging.warning("Signature %r is not exported: %s", key, e)
    if not signatures:
        raise ValueError("export: no signature could be built from export_outputs for the receiver tensors "
                         f"{sorted(receiver_tensors)}; use tf.estimator.export.PredictOutput")
    return signatures


class Exporter:
    """Exports an Estimator's model after an evaluation of train_and_evaluate (eval_spec.exporters)."""

    def __init__(self, name: str, serving_input_receiver_fn, as_text: bool = False):
        self._name, self._fn, self._as_text = name, serving_input_receiver_fn, as_text

    @property
    def name(self) -> str:
        return self._name

    def export(self, estimator, export_path, checkpoint_path, eval_result, is_the_final_export):
        raise NotImplementedError(f"{type(self).__name__}.export")


class FinalExporter(Exporter):
    """Exports once, after the last evaluation."""

    def __init__(self, name: str, serving_input_receiver_fn, assets_extra=None, as_text: bool = False):
        super().__init__(name, serving_input_receiver_fn, as_text)

    def export(self, estimator, export_path, checkpoint_path, eval_result, is_the_final_export):
        if not is_the_final_export:
            return None
        return estimator.export_saved_model(export_path, self._fn, as_text=self._as_text,
                                            checkpoint_path=checkpoint_path)


class LatestExporter(Exporter):
    """Exports after every evaluation, keeping the newest `exports_to_keep` exports (None: all)."""

    def __init__(self, name: str, serving_input_receiver_fn, assets_extra=None, as_text: bool = False,
                 exports_to_keep: int | None = 5):
        super().__init__(name, serving_input_receiver_fn, as_text)
        self._keep = exports_to_keep

    def export(self, estimator, export_path, checkpoint_path, eval_result, is_the_final_export):
        import os
        import shutil
        path = estimator.export_saved_model(export_path, self._fn, as_text=self._as_text,
                                            checkpoint_path=checkpoint_path)
        if self._keep:
            stamps = sorted(int(d) for d in os.listdir(export_path) if d.isdigit())
            for stamp in stamps[:-self._keep]:
                shutil.rmtree(os.path.join(export_path, str(stamp)))
        return path


__all__ = ["ServingInputReceiver", "TensorServingInputReceiver", "build_raw_serving_input_receiver_fn",
           "build_parsing_serving_input_receiver_fn", "ExportOutput", "PredictOutput", "RegressionOutput",
           "ClassificationOutput", "Exporter", "FinalExporter", "LatestExporter"]
__getattr__ = module_getattr(__name__, "tf.estimator.export")
