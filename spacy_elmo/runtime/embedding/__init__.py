"""Sentences -> the biLM's layers: the backend (``backend.py``: one loaded biLM per model files, device and dtype),
its memory and disk caches (``cache.py``), and the windows and batches every call goes through (``windows.py``).
Builds on ``configuration/`` only."""
