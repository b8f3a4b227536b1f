"""The pipeline steps, one module each: preflight, stack (preview, up, destroy), verify, train, check."""
