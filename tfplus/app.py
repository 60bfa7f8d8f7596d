"""tf.app: run a TF1 script's main after parsing its flags.

    import tfplus as tf
    def main(argv):
        ...
    if __name__ == "__main__":
        tf.app.run()
"""
from __future__ import annotations

import sys

from tfplus import flags

__all__ = ["run", "flags"]


def run(main=None, argv=None):
    """Parses `argv` (default sys.argv) into tf.app.flags.FLAGS, calls main([program] + the arguments no flag
    took) (default: `__main__.main`) and exits with its return value, as TF1's tf.app.run does."""
    argv = sys.argv if argv is None else argv
    rest = flags.FLAGS(argv, known_only=True)
    if main is None:
        main = sys.modules["__main__"].main
    sys.exit(main(rest))
