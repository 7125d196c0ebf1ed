"""Fixes: the unit's launch command parsed, rewritten and checked for safety."""
