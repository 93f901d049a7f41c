"""A generic graph engine: typed references between nodes, waves, the critical path, and a
bounded parallel runner. It knows nothing of AWS (or of anything else in fmctl)."""
