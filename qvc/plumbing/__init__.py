"""The plumbing layer: git objects and packs, refs, the staging database (durability), recovery.

Nothing here knows what a checkpoint is. Everything above writes through
:meth:`qvc.plumbing.repository.Repository.transaction`. Imports: ``qvc.errors`` and the
standard library, pygit2 and msgpack only.
"""
