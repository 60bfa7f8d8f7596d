"""tensorflow.python.client's timeline (tfplus.python.client.timeline)."""
from tfplus.python.client import timeline  # noqa: F401
