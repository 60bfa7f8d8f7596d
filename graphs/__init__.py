"""tfplus.graphs: installed only as a subpackage of tfplus (a PyPI package named `graphs` exists)."""
if __name__ == "graphs":
    raise ImportError("import this package as tfplus.graphs, not as top-level 'graphs' (pip install . maps it there)")
