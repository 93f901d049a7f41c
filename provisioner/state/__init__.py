"""A cluster's state (spec applied, outputs, event log, audit log) and its run lock, kept on
this machine or, for a team, in S3 with a leased lock.

AWS tags are the truth; losing the state loses nothing (`status` and `down` work from tags).
"""
