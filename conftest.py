# The suite's pytest plugin lives in the attnsuite package. Installed, the package's pytest11
# entry point loads it under this same name, and pytest skips this line; a checkout whose package
# is not installed (the gpu tox environments) loads it here.
pytest_plugins = ["attnsuite.plugin"]
