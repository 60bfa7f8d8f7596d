"""tfplus.ops: installed only as a subpackage of tfplus (a PyPI package named `ops` exists)."""
if __name__ == "ops":
    raise ImportError("import this package as tfplus.ops, not as top-level 'ops' (pip install . maps it there)")
