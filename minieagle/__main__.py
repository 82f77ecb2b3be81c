from minieagle.cli import main

raise SystemExit(main())
