# sample_project/ is a user's project that test_plugin.py runs in a subprocess (one of its tests
# fails on purpose); it is not part of this suite.
collect_ignore = ["sample_project"]
