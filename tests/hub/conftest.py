"""The hub tests' marker: they set up a JupyterHub with real accounts (root, sudo, npm, Chromium)."""


def pytest_configure(config):
    config.addinivalue_line("markers", "hub: sets up a JupyterHub for a class on this machine (needs root)")
