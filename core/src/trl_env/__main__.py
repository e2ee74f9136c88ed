"""``python -m trl_env`` runs the CLI (what ``accelerate launch -m trl_env`` needs)."""

from .cli import main

main()
