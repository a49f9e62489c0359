"""Model configuration: Triton's ModelConfig message, parsed, defaulted and checked."""
