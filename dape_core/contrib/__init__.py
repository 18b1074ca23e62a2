"""Built-in components added through the public API (dape_core/components.py), one module each: every module
here is imported the first time a component name is not found among the registered ones (or all are listed:
`components.discover_contrib`), and registers its records. Adding one is adding a file here
(docs/extending.md)."""
