"""Toren's own tests (a package so that test modules can import helpers from tests.conftest)."""
