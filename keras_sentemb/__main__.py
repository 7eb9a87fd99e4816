from keras_sentemb.cli.program import run

run()
