"""slime-facing glue. Every slime import stays inside functions, so this package imports without slime."""
