"""The Pulumi program's building blocks: typed config (config.py), instance facts (catalog.py),
pure manifest builders (manifests.py), one ComponentResource per file, and stack.py wiring.

Imports only pulumi SDKs and PyYAML, never training code (torch, ray, transformers, workloads).
"""
