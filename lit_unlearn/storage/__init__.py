"""Files that survive a kill: atomic writes, checkpoints, class_path specs, the packaged configs."""
