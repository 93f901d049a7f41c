"""Local state: a cache per cluster (spec used, outputs, event log) and the run lock.

AWS tags are the truth; losing this folder loses nothing (`status` and `down` work from tags).
"""
