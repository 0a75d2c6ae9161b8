"""What a user gives the runtime, before anything runs: the front ends' and the backend's defaults (``defaults.py``)
and the one check of each setting and input (``validation.py``). Imports nothing else of ``runtime/``."""
