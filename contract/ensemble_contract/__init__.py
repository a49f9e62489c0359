"""What the operator and the runtime exchange, described once (pure: pydantic models and functions only).

Both sides import this package; it imports neither (see .importlinter). `repository` is the repository.json the
operator writes and the runtime reads, `status` the runtime's GET /v2/repository/status document the operator
decodes, `ports` the ports the runtime listens on and the operator's Services point at, `names` which model
names a repository may hold, `graph` the ensemble graph rules the runtime applies at load and the webhook at
admission, `model_config` the part of Triton's ModelConfig message the operator renders config.pbtxt through.
"""
