"""Stand-alone commands that are not pipeline steps, one module each exposing `run(args, ui) -> int`."""
