"""The `fleet` command: one typer app, one module per command group (imported lazily)."""
