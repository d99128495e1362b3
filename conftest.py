# The suite's pytest plugin lives in the attnsuite package; this file only loads it.
pytest_plugins = ["attnsuite.plugin"]
