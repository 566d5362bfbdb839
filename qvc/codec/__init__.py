"""The serializers: how values become bytes or text and back, exactly.

:mod:`~qvc.codec.serde` is the msgpack value codec every stored field, header and pending write
uses (the on-disk format); :mod:`~qvc.codec.tagged` is the lossless tagged JSON people read and
edit (``qvc show --json``, state directories, ``qvc serve``). Serializers of one framework's
types stay with that framework's integration. Imports: :mod:`qvc.errors` and :mod:`qvc.types`
only, so every layer may use them.
"""
