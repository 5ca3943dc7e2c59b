"""`kvctl explain TERM` and docs/glossary.md: one glossary, every term the tables print."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from engine_adapter.funnel import REJECTION_REASONS, STAGES
from kvctl.cli.app import app
from kvctl.cli.explain import lookup, render_markdown

pytestmark = pytest.mark.unit

GLOSSARY = Path(__file__).resolve().parents[2] / "docs" / "glossary.md"


def run(*args: str):
    return CliRunner().invoke(app, ["explain", *args])


def test_docs_glossary_is_the_explain_markdown():
    """docs/glossary.md is exactly `kvctl explain --markdown` (regenerate it when terms change)."""
    assert GLOSSARY.read_text(encoding="utf-8") == render_markdown()


@pytest.mark.parametrize("name", STAGES + REJECTION_REASONS)
def test_every_funnel_stage_and_rejection_bucket_has_an_entry(name):
    """Each of the 9 stages and 8 buckets of engine_adapter/funnel.py is explained."""
    assert lookup(name).name == name


@pytest.mark.parametrize("name", ["U_KV", "H_prefix", "S_sem", "S_cap", "S_indexed", "S_runtime",
                                  "delta_ref", "N_pool", "N_evictable", "tau_high", "headroom",
                                  "reserve", "tool wait", "seed 000", "seed 003"])
def test_the_terms_the_issue_names_have_entries(name):
    """The terms tables print (and the seed numbering) resolve to an entry of that name."""
    assert lookup(name).name == name


def test_explain_prints_meaning_formula_and_source():
    """`kvctl explain s_cap` (any case): meaning, formula S_cap = S_prompt - 1, seed 000 0x07A."""
    result = run("s_cap")
    assert result.exit_code == 0
    assert "formula: S_cap = S_prompt - 1" in result.stdout
    assert "source:  seed 000 0x07A" in result.stdout


def test_aliases_resolve():
    """Other spellings find the entry: 'hit rate' is H_prefix, 'runtime-gb' is reserve."""
    assert lookup("hit rate").name == "H_prefix"
    assert lookup("runtime-gb").name == "reserve"


def test_unknown_term_is_one_line_exit_2_with_the_closest():
    """A typo names the closest terms: exit 2, one line."""
    result = run("delta-rf")
    assert result.exit_code == 2
    assert result.stderr == "kvctl: error: unknown term 'delta-rf'; closest: delta_ref\n"


def test_no_term_lists_every_entry():
    """`kvctl explain` alone lists the terms with their group."""
    result = run()
    assert result.exit_code == 0
    assert "executed_hits" in result.stdout and "funnel rejection bucket" in result.stdout
