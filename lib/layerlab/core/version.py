"""The library version (pyproject's ``version``), in its own module so that nothing needs the package root."""

__version__ = "0.1.0"
