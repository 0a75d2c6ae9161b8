"""Tests of the scripts in benchmarks/: their parts and smoke runs."""
