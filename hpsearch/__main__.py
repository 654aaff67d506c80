import sys

from hpsearch.cli.main import main

sys.exit(main())
