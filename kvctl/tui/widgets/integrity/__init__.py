"""integrity widgets."""
