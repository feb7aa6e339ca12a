"""The only place that knows SQL: ``schema``, the ``writer`` and the read-only ``reader``.

Submodules are imported directly, so a training process never imports pandas.
"""
