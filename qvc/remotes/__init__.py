"""Git remotes: push, fetch and clone qvc history with the ``git`` program, and replication.

Imports: the store and below.
"""
