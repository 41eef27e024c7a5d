from sandfs.cli import main

raise SystemExit(main())
