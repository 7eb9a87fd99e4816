"""`python -m keras_sentemb.cli` runs the command line."""

from keras_sentemb.cli.program import run

run()
