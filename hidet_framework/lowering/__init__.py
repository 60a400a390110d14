"""Lowering: the pass manager and the passes that take IR from the DSL's level down to
what a C-style code generator prints."""
