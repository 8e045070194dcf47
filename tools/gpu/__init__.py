"""Scripts run on the GPU machine (tools/device_run.py's steps) and the parts they import."""
