"""Explain a term kvctl prints (U_KV, H_prefix, S_cap, delta_ref, a funnel stage, a seed section).

`kvctl explain` lists every term; `kvctl explain TERM` prints one (case-insensitive, other
spellings accepted, the closest terms suggested when unknown); `--markdown` prints the whole
glossary as docs/glossary.md holds it.
"""

from __future__ import annotations

import difflib
import textwrap
from typing import Annotated, Optional

import typer

from kvctl.cli.glossary_terms import TERMS, Term
from kvctl.errors import InputError


def explain_command(
    term: Annotated[Optional[str], typer.Argument(help="The term, e.g. U_KV, S_cap, evicted, 0x0CF.")] = None,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print the whole glossary as Markdown.")] = False,
) -> None:
    """Explain a term kvctl prints: meaning, formula, seed section."""
    if markdown:
        typer.echo(render_markdown(), nl=False)
        return
    if term is None:
        width = max(len(t.name) for t in TERMS)
        for entry in TERMS:
            typer.echo(f"{entry.name:<{width}}  {entry.group}")
        return
    typer.echo(render_term(lookup(term)))


def _key(text: str) -> str:
    return " ".join(text.lower().replace("-", " ").replace("_", " ").split())


def lookup(text: str) -> Term:
    """The entry named (or aliased) `text`. InputError naming the closest terms otherwise."""
    index = {}
    for entry in TERMS:
        for name in (entry.name, *entry.aliases):
            index.setdefault(_key(name), entry)
    found = index.get(_key(text))
    if found is not None:
        return found
    close = difflib.get_close_matches(_key(text), list(index), n=3, cutoff=0.5)
    names = list(dict.fromkeys(index[c].name for c in close))
    hint = f"closest: {', '.join(names)}" if names else "`kvctl explain` lists every term"
    raise InputError(f"unknown term {text!r}; {hint}")


def render_term(entry: Term) -> str:
    """One entry as plain text lines."""
    lines = [f"{entry.name} ({entry.group})",
             textwrap.fill(entry.meaning, width=78, initial_indent="  ", subsequent_indent="  ")]
    if entry.formula:
        lines.append(f"  formula: {entry.formula}")
    if entry.seed:
        lines.append(f"  source:  {entry.seed}")
    if entry.aliases:
        lines.append(f"  also:    {', '.join(entry.aliases)}")
    return "\n".join(lines)


def render_markdown() -> str:
    """docs/glossary.md: the entries grouped, in glossary order."""
    out = ["# kvctl glossary", "",
           "Every term kvctl's tables and reports print. `kvctl explain TERM` shows one entry;",
           "this file is `kvctl explain --markdown` (a test keeps them equal).", ""]
    groups = list(dict.fromkeys(t.group for t in TERMS))
    for group in groups:
        out += [f"## {group[0].upper()}{group[1:]}", ""]
        for entry in (t for t in TERMS if t.group == group):
            out.append(f"### {entry.name}")
            out.append("")
            out.append(entry.meaning)
            out.append("")
            if entry.formula:
                out += [f"Formula: `{entry.formula}`", ""]
            if entry.seed:
                out += [f"Source: {entry.seed}", ""]
    return "\n".join(out)
