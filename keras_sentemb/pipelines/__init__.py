"""One `fit_*` per method, each a short composition over `FitScaffold`."""

from keras_sentemb.pipelines.callbacks import DevSelection
from keras_sentemb.pipelines.callbacks import NonFiniteGuard
from keras_sentemb.pipelines.callbacks import STSDevEvaluation
from keras_sentemb.pipelines.callbacks import StopAtStep
from keras_sentemb.pipelines.scaffold import FitScaffold
from keras_sentemb.pipelines.scaffold import TrainingReport

__all__ = [
    "DevSelection",
    "FitScaffold",
    "NonFiniteGuard",
    "STSDevEvaluation",
    "StopAtStep",
    "TrainingReport",
]
