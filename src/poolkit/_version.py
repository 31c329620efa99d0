"""poolkit's own version: one name, imported by nothing else of poolkit, so any module may
read it without importing the package (``poolkit/__init__.py`` imports every level)."""

__version__ = "0.1.0"
