"""What every method's run shares: the `FitScaffold`, its arguments, callbacks, backups and schedules."""

from keras_sentemb.lazy_exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "BeirDevEvaluation": f"{__name__}.callbacks",
    "DevSelection": f"{__name__}.callbacks",
    "FitScaffold": f"{__name__}.scaffold",
    "NonFiniteGuard": f"{__name__}.callbacks",
    "STSDevEvaluation": f"{__name__}.callbacks",
    "StopAtStep": f"{__name__}.callbacks",
    "TrainingReport": f"{__name__}.scaffold",
})
