"""Root conftest: the control-plane and MinIO fixtures (tests.infra) for every test package."""

pytest_plugins = ["tests.infra.conftest_plugin"]
