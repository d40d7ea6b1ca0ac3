"""Does nothing: measures the orchestrator's own fixed cost per run and per benchmark."""
