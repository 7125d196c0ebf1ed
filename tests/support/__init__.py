"""Helpers shared by the tests (builders, drivers, sandbox runners); no test imports another test."""
