"""`python -m keras_sentemb.cli` runs the command line."""

import sys

from keras_sentemb.cli.program import main

sys.exit(main())
