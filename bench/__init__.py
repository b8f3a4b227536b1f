"""Scripts that print measured numbers. No product package imports them (.ci/checks/contract_imports.py)."""
