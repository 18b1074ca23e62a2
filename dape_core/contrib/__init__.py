"""Built-in components added through the public API (dape_core/components.py), one module each: every module
here is imported the first time a component name is not found among the record tables (or all are listed), and
registers its records. Adding one is adding a file here (docs/extending.md)."""
