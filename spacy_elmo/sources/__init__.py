"""Model sources: what a model name means (the bundled default, a folder, a published name, a URL),
the published models' table, downloads into the local store and their checks, and `spacy-elmo info`."""
