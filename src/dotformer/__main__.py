"""``python -m dotformer`` runs the command line."""

from dotformer.cli import main

raise SystemExit(main())
