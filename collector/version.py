"""The package's version, defined once: the facade exports it and each run records it (bottom of every stage)."""

__version__ = "0.1.0"
