"""A tiny Toren plugin for Toren's own tests: one registration through every hook."""
