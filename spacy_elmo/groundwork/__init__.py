"""The ground floor every room of the package stands on, below ``bilm/``: what every group needs and none owns.

The names of the package's files (``file_names.py``) and the one way a file is written whole (``atomic_write.py``)
or a schema's file is read (``schema_check.py``); bounded excerpts of values for messages (``excerpt.py``); the one
test of a user's number (``number_checks.py``); what the machine offers a process, its cores and memory
(``machine.py``); feature probes of the installed libraries (``probe.py``); the lazy public names of the package
``__init__`` files (``lazy_exports.py``). Imports nothing else of the package, nor torch.
"""
