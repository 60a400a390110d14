"""Codegen and build: the backend contract every codegen plugin implements, the
C-style code-generator base, kernel naming and signatures, and the build cache."""
