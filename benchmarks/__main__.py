"""``python -m benchmarks`` is ``python -m benchmarks.run``."""

from benchmarks.run import main

raise SystemExit(main())
