"""tern verify: record the original tests under TF, replay their calls on the translation, run the translated tests."""
