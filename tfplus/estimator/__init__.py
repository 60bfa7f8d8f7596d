"""tf.estimator (TF1): Estimator with a model_fn, its RunConfig, EstimatorSpec and ModeKeys; numpy_input_fn;
train_and_evaluate; export to a SavedModel. See tfplus.estimator.estimator.

Canned estimators (DNNClassifier, LinearRegressor, ...) need tf.feature_column, which tfplus lacks: they raise
UnsupportedError naming the route that works, an Estimator with a model_fn of tf.layers.
"""
from tfplus.estimator import export, inputs
from tfplus.estimator.estimator import Estimator, EstimatorSpec, ModeKeys, RunConfig
from tfplus.estimator.export import Exporter, FinalExporter, LatestExporter
from tfplus.estimator.training import EvalSpec, TrainSpec, train_and_evaluate
from tfplus.train.monitored_session import CheckpointSaverListener
from tfplus.unsupported import module_getattr as _module_getattr

__all__ = ["Estimator", "EstimatorSpec", "ModeKeys", "RunConfig", "TrainSpec", "EvalSpec", "train_and_evaluate",
           "export", "inputs", "CheckpointSaverListener", "Exporter", "FinalExporter", "LatestExporter"]
__getattr__ = _module_getattr(__name__, "tf.estimator")
