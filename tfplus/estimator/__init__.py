"""tf.estimator (TF1): Estimator with a model_fn, its RunConfig, EstimatorSpec and ModeKeys; numpy_input_fn;
train_and_evaluate; export to a SavedModel. See tfplus.estimator.estimator.

Canned estimators: DNNClassifier, DNNRegressor, LinearClassifier, LinearRegressor over numeric feature columns
(tfplus.estimator.canned); the others (DNNLinearCombined*, BoostedTrees*, Baseline*) raise UnsupportedError
naming the route that works, an Estimator with a model_fn of tf.layers.
"""
from tfplus.estimator import export, inputs
from tfplus.estimator.canned import DNNClassifier, DNNRegressor, LinearClassifier, LinearRegressor
from tfplus.estimator.estimator import Estimator, EstimatorSpec, ModeKeys, RunConfig
from tfplus.estimator.export import Exporter, FinalExporter, LatestExporter
from tfplus.estimator.training import EvalSpec, TrainSpec, train_and_evaluate
from tfplus.train.monitored_session import CheckpointSaverListener
from tfplus.unsupported import module_getattr as _module_getattr

__all__ = ["Estimator", "EstimatorSpec", "ModeKeys", "RunConfig", "TrainSpec", "EvalSpec", "train_and_evaluate",
           "export", "inputs", "DNNClassifier", "DNNRegressor", "LinearClassifier", "LinearRegressor",
           "CheckpointSaverListener", "Exporter", "FinalExporter", "LatestExporter"]
__getattr__ = _module_getattr(__name__, "tf.estimator")
