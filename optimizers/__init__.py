"""How a program is compiled: metrics, the teleprompters by name, demonstration construction, graders and the
context-window check."""
