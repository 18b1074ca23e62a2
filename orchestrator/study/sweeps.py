"""Checks that a study's sweep means what it says: parts of the file that would otherwise be silently ignored
or silently overwritten.

- an `exclude` entry naming a key that is not swept, or a value its axis does not have, excludes nothing;
- `train.seed` anywhere but `seeds:` (base, a variant, an axis, zip, a search space) is replaced by the seed
  of `seeds:` while the row's label and the file say otherwise;
- a key set by a variant and also swept (axes, zip, search.space) loses the variant's value in every row.
Each is an error: the file is changed to say the one thing it means. (A repeated axis value, a repeated
seed and an empty `variants: []` are refused by the model's types.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .model import Study

SEED_KEY = "train.seed"


def sweep_problems(study: "Study") -> list[str]:
    return _exclude_problems(study) + _seed_problems(study) + _variant_key_problems(study)


def _swept(study: "Study") -> dict[str, list]:
    return {**study.axes, **study.zip}


def _exclude_problems(study: "Study") -> list[str]:
    swept, problems = _swept(study), []
    for index, assignment in enumerate(study.exclude):
        for key, value in assignment.items():
            if key not in swept:
                names = ", ".join(swept) or "none: this study sweeps nothing"
                problems.append(f"exclude[{index}].{key}: not a swept key, so this entry would exclude nothing; "
                                f"exclude names values of axes or zip keys ({names})")
            elif value not in swept[key]:
                problems.append(f"exclude[{index}].{key}: {value!r} is not one of its values {swept[key]}, so "
                                "this entry would exclude nothing")
    return problems


def _seed_problems(study: "Study") -> list[str]:
    places = []
    train = study.base.get("train") if isinstance(study.base, dict) else None
    if isinstance(train, dict) and "seed" in train:
        places.append("base.train.seed")
    places += [f"{field}.{SEED_KEY}" for field, keys in (("axes", study.axes), ("zip", study.zip),
                                                          ("search.space", study.search.space)) if SEED_KEY in keys]
    places += [f"variants[{index}] ({variant.label}).set.{SEED_KEY}" for index, variant in enumerate(study.variants)
               if SEED_KEY in variant.set]
    return [f"{place}: train.seed is set for every trial from `seeds:` (here {study.seeds}), which would replace "
            "this value while the row's name says otherwise; list the seeds to run in `seeds:` instead"
            for place in places]


def _variant_key_problems(study: "Study") -> list[str]:
    swept = {key: "axes" for key in study.axes} | {key: "zip" for key in study.zip}
    swept |= {key: "search.space" for key in study.search.space}
    problems = []
    for index, variant in enumerate(study.variants):
        for key, value in variant.set.items():
            if key in swept:
                problems.append(f"variants[{index}] ({variant.label}).set.{key}: also swept by {swept[key]}.{key}, "
                                f"whose values would replace the variant's {value!r} in every row; set it in one "
                                "place (drop it from the variant, or from the sweep and set it in each variant)")
    return problems
