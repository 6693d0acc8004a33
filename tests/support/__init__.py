"""What the tests share: support modules that no test collects and no test module imports from another."""
