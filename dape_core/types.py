"""Constrained field types shared by every config section, so that a constraint is written once and travels
into the JSON schema (`minimum`, `exclusiveMaximum`, `enum` on the Literal fields) where an editor can
complete and check a study file.

Numbers are strict about what YAML can silently turn into a number: a YAML boolean (`yes`, `true`, `off`)
is never accepted where a number is expected, an integer field takes only integers (not `3.0`, not
`"3"`), and a float field takes a float or an integer but never NaN or infinity (`.inf`, `.nan`). Float
fields still accept a numeric string, because PyYAML reads `1e-3` (no dot) as the string "1e-3": its
meaning is not in doubt.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field, Strict

SEED_MAX = 2**32 - 1  # numpy's and CUDA's seeding take 32-bit seeds


def _not_a_boolean(value):
    """YAML 1.1 reads yes/no/on/off/true/false as booleans, and pydantic's float would take True as 1.0."""
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got the boolean {value} (YAML reads yes/no/on/off/true/false as "
                         "booleans)")
    return value


_NO_BOOL = BeforeValidator(_not_a_boolean)

# Integers: strict (no bool, no float, no string). The bounds stand before the boolean check so that pydantic
# applies them to the int itself and writes them into the JSON schema as minimum / maximum.
StrictInt = Annotated[int, Strict(), _NO_BOOL]
PositiveInt = Annotated[int, Strict(), Field(ge=1), _NO_BOOL]
NonNegativeInt = Annotated[int, Strict(), Field(ge=0), _NO_BOOL]
Seed = Annotated[int, Strict(), Field(ge=0, le=SEED_MAX), _NO_BOOL]

# Floats: finite (an int is taken too), never a boolean.
FiniteFloat = Annotated[float, Field(allow_inf_nan=False), _NO_BOOL]
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False), _NO_BOOL]
NonNegativeFloat = Annotated[float, Field(ge=0, allow_inf_nan=False), _NO_BOOL]
Fraction = Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False), _NO_BOOL]  # [0, 1): may be 0, never all
OpenFraction = Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False), _NO_BOOL]  # (0, 1)

StrictBool = Annotated[bool, Strict()]  # `leak: 1` is not a boolean
NonEmptyStr = Annotated[str, Field(min_length=1)]  # an empty string means "leave the field out"
