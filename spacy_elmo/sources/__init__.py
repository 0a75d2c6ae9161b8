"""Model sources: what a model name means (the bundled default, a folder, a published name, a URL),
the published models' table, the generic fetcher and the package's downloads with their checks, and
`spacy-elmo info`."""
