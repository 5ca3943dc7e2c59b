"""Small shared helpers with no domain logic: units, atomic files, JSON."""
