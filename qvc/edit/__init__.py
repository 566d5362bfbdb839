"""Changing a repository the way people do by hand, beside the read side (:mod:`qvc.readers`).

:mod:`~qvc.edit.workdir`: ``qvc commit DIR``, a directory of state files (as ``qvc checkout
--to DIR`` wrote them, then edited) stored as a new checkpoint. Forking a thread is the store's
own (:mod:`qvc.store.fork`). Every write goes through the store's public API. Imports: the
store and below, and ``qvc.readers`` (the state files it reads).
"""
