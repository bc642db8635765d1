from hybridsql.cli import main

raise SystemExit(main())
