"""tfplus.kernels: installed only as a subpackage of tfplus (a PyPI package named `kernels` exists)."""
if __name__ == "kernels":
    raise ImportError("import this package as tfplus.kernels, not as top-level 'kernels' (pip install . maps it there)")
