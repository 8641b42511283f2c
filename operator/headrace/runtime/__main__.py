"""Entry point: ``python -m headrace.runtime <script.py> [args]`` (see ``launcher``)."""

from headrace.runtime.launcher import main

raise SystemExit(main())
