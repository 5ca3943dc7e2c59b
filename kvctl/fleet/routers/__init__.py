"""Routing policies a fleet replay can put in front of its replicas (registry.py names them)."""
