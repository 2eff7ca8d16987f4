"""Feature packages: what the engine does not know, each beside the analysis it needs.

Each package exports ``FEATURE`` (``tern.engine.features.Feature``): the engine finds
them by walking this package and calls their hooks; it never imports them by name.
"""
