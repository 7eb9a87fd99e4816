"""Evaluation: STS (SentEval conventions) and the dataset readers it uses.

Modules here stay free of TensorFlow imports where they can (STS is pure
numpy / scipy), so evaluating precomputed embeddings or any callable encoder
is fast.
"""

from keras_sentemb.evaluation.readers import read_sick
from keras_sentemb.evaluation.readers import read_sts_folder
from keras_sentemb.evaluation.readers import read_stsb
from keras_sentemb.evaluation.sts import STS_TASKS
from keras_sentemb.evaluation.sts import cosine_scores
from keras_sentemb.evaluation.sts import evaluate_sts
from keras_sentemb.evaluation.sts import load_sts_pairs
from keras_sentemb.evaluation.layer_survey import layer_survey
from keras_sentemb.evaluation.layer_survey import plot_layer_survey
from keras_sentemb.evaluation.sts_spread import plot_sts_spread
from keras_sentemb.evaluation.sts_spread import spread_statistics
from keras_sentemb.evaluation.sts_spread import sts_spread
