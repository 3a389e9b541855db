"""How a program is compiled and measured: metrics, the teleprompter registry, the runner and the CLI."""
