from crashdoc.cli import main

raise SystemExit(main())
