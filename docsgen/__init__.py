"""The documentation site's generated pages (mkdocs.yml's `hooks:` runs `docsgen.hooks` at every build).

Each reference page is written from the code it documents, at build time, so it cannot drift from it:
- `study_reference`: the study file's fields, from the JSON Schema `orchestrator schema` prints;
- `cli_reference`: every command and option of `orchestrator`, from the typer app (`orchestrator.cli.app`);
- `metrics_reference`: the metric names, from `dape_core/metric_names.py`;
- `benchmarks`: every measured figure, from the benchmarks' recorded outputs in `docs/benchmarks/`;
- `papers_catalogue`: every published value and claim of the studies with where the paper gives it;
- `catalogue`: README's table of studies, from `studies/*.yaml` (written into README, checked by a test);
- `report_picture`: README's picture of a report (docs/img/report.png), drawn in headless Chromium.

`python -m docsgen pages DIR` writes the generated pages to DIR for reading without MkDocs;
`python -m docsgen readme` rewrites README's generated table.
"""
