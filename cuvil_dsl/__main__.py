from cuvil_dsl.cli import main

raise SystemExit(main())
