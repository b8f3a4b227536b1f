"""The driver: `python -m automation` runs preflight, preview, up, verify, train and check in order
(target aws), or the same training job on a Ray head on 127.0.0.1 (target local). See cli.py."""
