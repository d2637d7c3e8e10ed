"""Repository-wide pytest setup: the suite's own tests drive the plugin with pytester."""

pytest_plugins = ["pytester"]
