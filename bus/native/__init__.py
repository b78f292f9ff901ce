"""The C accelerators, in one place with one build description (pyproject.toml's ext-modules):
``_speedups`` (the data-frame codec), ``_hotpath`` (wire scan, header peek; with its
``_hotpath_objects.c``, the Object System's content lane) and ``_journalscan`` (the journal's
record scan and column decode, and the writer's record). Each is optional:
``bus.accelerators`` switches them, and every caller falls back to pure Python.
"""
