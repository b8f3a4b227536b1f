"""The Pulumi program's building blocks: typed config (config.py), instance facts (catalog.py),
pure manifest builders (manifests.py), one ComponentResource per file, and stack.py wiring.

Imports only pulumi SDKs, PyYAML and ruamel.yaml, and of ``workloads`` only its standard-library
contract modules (``workloads.CONTRACT_MODULES``: TrainConfig, the path parser, the workers' env);
never training code (torch, ray, transformers).
"""
