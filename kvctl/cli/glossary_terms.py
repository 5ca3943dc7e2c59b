"""The glossary behind `kvctl explain TERM` and docs/glossary.md (filled below)."""

from __future__ import annotations

FOOTER = "Terms: kvctl explain TERM, or docs/glossary.md"
