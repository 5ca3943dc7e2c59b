"""Screens: the dashboard, the help overlay and the flush confirmation."""
