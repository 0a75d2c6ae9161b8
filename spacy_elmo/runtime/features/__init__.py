"""What a front end asks of the layers: the layer mix (``mix.py``), pooling (``pooling.py``), cosine similarity,
texts -> tokens (``tokenize.py``) -> rows (``text_rows.py``), the layers a Doc stores and their one reader
(``stored_layers.py``), the settings the front ends share (``front_settings.py``) and the progress bar. Builds on
``embedding/`` and ``configuration/``."""
