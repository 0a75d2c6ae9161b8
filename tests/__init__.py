"""The test suite: one folder per group of the package (spacy_elmo/<group>/ is tested in tests/<group>/), plus
project/ (the repository's own checks) and benchmarks/ (the benchmark scripts' parts). docs/contributing.md says where
a new test file goes."""
