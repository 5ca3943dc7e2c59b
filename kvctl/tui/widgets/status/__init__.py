"""status widgets."""
