"""The claims' verdicts after `run` and `report`: one line, and exit 4 with --strict-claims where one fails."""

from __future__ import annotations

import typer

from .output import EXIT_CLAIMS_FAILED, console, err


def claims_line(claims: list, trials: int | None = None) -> None:
    """How many claims are decided, how, and at what cost: `trials`, the study's finished trials."""
    if claims:
        from ..judging.claims import decision_summary

        console.print("Claims: " + decision_summary(claims, trials)  # verdicts on one seed counted apart, untested
                      + " (the report's Claims section; MLflow tags claim.<id> on the study's run)", markup=False)
        for line in effect_lines(claims):
            console.print(line, markup=False)


def effect_lines(claims: list) -> list[str]:
    """Each claim the test decided, with how big its effect is: "  1x3_below_1x1 holds: 4.1% lower [3.6, 4.6]"
    (judging/claims.py's `ClaimResult.size`: the deciding check's effect and its interval)."""
    from ..judging.claims import FAILS, HOLDS

    return [f"  {claim.claim.id} {claim.verdict}: {claim.size()}" for claim in claims
            if claim.tested and claim.verdict in (HOLDS, FAILS) and claim.size()]


def exit_on_failed_claims(claims: list, strict: bool) -> None:
    """Claims are findings: they change the exit code only when asked to (--strict-claims)."""
    from ..judging.claims import FAILS

    failing = [claim.claim.id for claim in claims if claim.verdict == FAILS]
    if strict and failing:
        err.print(f"--strict-claims: {len(failing)} claim(s) fail: {', '.join(failing)}")
        raise typer.Exit(EXIT_CLAIMS_FAILED)
