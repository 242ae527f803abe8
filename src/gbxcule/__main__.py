import sys

from gbxcule.cli.main import main

sys.exit(main())
