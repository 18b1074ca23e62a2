"""`orchestrator evaluate`: a study's finished trials scored again from their kept models, or timed alone."""
