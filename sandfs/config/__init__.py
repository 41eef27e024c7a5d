"""Task configuration: YAML loading and validation (loader.py, schema.py) and the settings of
a mount (settings.py). Nothing is imported here: the command line reads `ConfigError` without
loading the ops registry (numpy, OpenCV) that checking a config needs."""
