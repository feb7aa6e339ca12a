"""SQL only: the ``schema``, the one read-write ``connection``, the read-only ``reader``, series and queries.

Submodules are imported directly, so a training process never imports pandas.
"""
