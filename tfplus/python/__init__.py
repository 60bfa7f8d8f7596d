"""The few modules of TensorFlow's private `tensorflow.python` tree that TF1 scripts import by that path
(`from tensorflow.python.client import timeline`): here as tfplus.python.<same path>."""
from tfplus.python import client  # noqa: F401
