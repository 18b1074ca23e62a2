"""A search's section of the report (search.py's SearchSection) as Markdown and HTML."""

from __future__ import annotations

from html import escape

from tabulate import tabulate

from ..tracking.store import SWEPT_TAG_PREFIX
from .search import SearchSection


def title(section: SearchSection) -> str:
    scheduler = " with ASHA early stopping" if section.scheduler == "asha" else ""
    return f"Search: {section.algorithm} over {', '.join(section.keys)}{scheduler}"


def lines(section: SearchSection) -> list[str]:
    """The section's sentences: the best sample, the grid's best, the importances."""
    out = [section.best_text()]
    grid = section.grid
    if grid is not None:
        if grid.value is None:
            out.append(f"Grid comparison: {grid.note}.")
        else:
            search = f"{section.best['value']:.4f}" if section.best is not None else "no completed sample"
            out.append(f"Against the grid (profile grid, experiment {grid.name}): its best {section.metric} is "
                       f"{grid.value:.4f} ({grid.label}) over {grid.trials} trial(s) and {grid.steps} training steps; "
                       f"the search's best is {search} over {len(section.samples)} sample(s) and {section.steps} "
                       "training steps.")
    if section.importances:
        ranked = ", ".join(f"{key} {value:.2f}" for key, value in section.importances.items())
        out.append(f"Parameter importances (Optuna, over the completed samples): {ranked}.")
    return out


def sample_rows(section: SearchSection) -> tuple[list[str], list[list[str]]]:
    others = section.metrics[1:]
    header = ["#"] + section.keys + [section.metric, *others, "steps", "state", "MLflow run"]
    front = set(section.pareto["run_id"]) if section.pareto is not None else set()
    body = []
    for number, sample in section.samples.iterrows():
        values = [_text(sample[f"{SWEPT_TAG_PREFIX}{key}"]) for key in section.keys]
        metrics = [_metric(sample["value"])] + [_metric(sample[other]) for other in others]
        steps = "–" if sample["steps"] != sample["steps"] else str(int(sample["steps"]))
        best = (section.best is not None and sample["run_id"] == section.best["run_id"]) or sample["run_id"] in front
        body.append([str(number + 1)] + values + [f"**{value}**" if best else value for value in metrics]
                    + [steps, sample["state"], sample["run_name"]])
    return header, body


def _metric(value) -> str:
    return "–" if value != value else f"{value:.4f}"


def _text(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def markdown(section: SearchSection) -> list[str]:
    header, body = sample_rows(section)
    table = tabulate(body, headers=header, tablefmt="pipe", disable_numparse=True)
    return ([f"## {title(section)}", ""] + [line.replace("*", "\\*") for line in lines(section)] + ["",
            f"Every sample in the order it was drawn ({section.metric} as last reported; a sample ASHA stopped "
            "reports it at its last step" + ("; the Pareto set in bold" if section.multi_objective else "")
            + "):", "", table, ""])


def html(section: SearchSection) -> str:
    header, body = sample_rows(section)
    head = "".join(f"<th>{escape(cell)}</th>" for cell in header)
    rows = "".join("<tr>" + "".join(
        f"<td><b>{escape(cell.strip('*'))}</b></td>" if cell.startswith("**") else f"<td>{escape(cell)}</td>"
        for cell in line) + "</tr>" for line in body)
    sentences = "".join(f"<p>{escape(line)}</p>" for line in lines(section))
    return (f"<h2>{escape(title(section))}</h2>{sentences}"
            f'<table class="trials" id="search-samples"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>')
