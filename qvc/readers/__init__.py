"""Reading a repository the way people look at it: log, diffs, state files, status, fsck, watch.

Every function here reads through the store's public API. Imports: the store and below, and
the feature packages beside it (``qvc.remotes``, ``qvc.runs``, ``qvc.qitos``, ``qvc.integrations``)
as long as no cycle forms.
"""
