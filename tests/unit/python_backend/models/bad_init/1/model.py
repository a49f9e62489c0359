class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("weights file missing")

    def execute(self, requests):
        return []
