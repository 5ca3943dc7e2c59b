"""requests widgets."""
