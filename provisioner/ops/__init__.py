"""Use cases behind the CLI commands: validate, render, plan, up, down, status, gc."""
