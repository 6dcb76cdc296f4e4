"""The accountant registry: one list of names, and everything derived from it (docs/accounting.md §12)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import get_args

import pytest

import accounting
from accounting.accountants import ACCOUNTANT_NAMES, ACCOUNTANTS, AccountantName, get_accountant
from accounting.requests import EpsilonRequest, NoiseMultiplierRequest, RoundsRequest, SamplingRateRequest
from accounting.results import Calibration, EpsilonReport

ROOT = Path(__file__).resolve().parents[2]
NAMES = get_args(AccountantName)
QUOTED_NAME = re.compile(r"""["'](""" + "|".join(NAMES) + r""")["']""")


def test_the_registry_holds_exactly_the_literal_names() -> None:
    assert tuple(ACCOUNTANTS) == NAMES == ACCOUNTANT_NAMES
    for name, accountant in ACCOUNTANTS.items():
        assert accountant.name == name
        for attribute in ("verified_by", "per_round", "tabulated_by"):
            assert getattr(accountant, attribute) in ACCOUNTANTS, (name, attribute)
        assert accountant.fallback is None or accountant.fallback in ACCOUNTANTS
        # a ledger composes histories, so whoever verifies or logs for an accountant must compose
        assert ACCOUNTANTS[accountant.verified_by].composes and ACCOUNTANTS[accountant.per_round].composes


def test_the_roles_the_issue_fixes() -> None:
    assert get_accountant("closed_form").verified_by == "rdp"
    assert get_accountant("prv").per_round == "rdp" and get_accountant("prv").fallback == "rdp"
    assert get_accountant("prv").verified_by == "prv" and get_accountant("rdp").per_round == "rdp"
    with pytest.raises(accounting.InvalidInputError) as error:
        get_accountant("moments")
    assert error.value.field == "accountant"


def test_schema_fields_and_http_enums_derive_from_the_literal() -> None:
    from app.schemas import LedgerOut, PlanSummary
    from planner import schema

    assert schema.AccountantName is AccountantName
    models = [EpsilonRequest, NoiseMultiplierRequest, SamplingRateRequest, RoundsRequest, schema.Scenario]
    for model in models:
        assert model.model_json_schema()["properties"]["accountant"]["enum"] == list(NAMES), model
    for model in (EpsilonReport, Calibration):
        for field in ("accountant", "accountant_used"):
            assert model.model_json_schema()["properties"][field]["enum"] == list(NAMES), (model, field)
    for model in (PlanSummary, LedgerOut):
        # null for a metric plan (a leakage has no accountant): the enum sits in the anyOf
        field = model.model_json_schema()["properties"]["accountant"]
        enums = [option["enum"] for option in field.get("anyOf", [field]) if "enum" in option]
        assert enums == [list(NAMES)], model


def _choices(parser: argparse.ArgumentParser, *path: str) -> list[tuple[str, ...]]:
    """The --accountant choices of every parser under ``path`` (each question of a command)."""
    for name in path:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    found = [tuple(a.choices) for a in parser._actions if "--accountant" in a.option_strings]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += [tuple(a.choices) for a in sub._actions if "--accountant" in a.option_strings]
    return found


def test_every_cli_accountant_choice_is_every_name() -> None:
    from app.cli import build_parser

    parser = build_parser()
    account = _choices(parser, "account")
    assert len(account) == 4 and all(choices == NAMES for choices in account)  # 4 questions, every accountant
    assert _choices(parser, "plan") == [NAMES]


@pytest.mark.parametrize("document", ["README.md", "docs/accounting.md"])
def test_documented_accountant_lists_are_the_names(document: str) -> None:
    lists = re.findall(r"--accountant ([a-z_]+(?:\|[a-z_]+)+)", (ROOT / document).read_text())
    assert lists and all(found == "|".join(NAMES) for found in lists), lists


def test_no_code_outside_accounting_spells_an_accountant_name() -> None:
    """Roles come from the registry's attributes, never from comparing names (bench/ compares
    with peers by their own accountant names, and tests/ may name cases, so neither counts)."""
    offenders = []
    for package in ("planner", "app", "trainer"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if QUOTED_NAME.search(line):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)
