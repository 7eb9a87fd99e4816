"""The methods' learning-rate schedules, against their closed forms."""

import keras
import pytest

from keras_sentemb.pipelines.schedules import LinearWarmupDecay
from keras_sentemb.pipelines.schedules import ct_learning_rate_schedule
from keras_sentemb.pipelines.schedules import linear_warmup_decay
from keras_sentemb.pipelines.schedules import warmup_cosine_decay


def test_ct_schedule_is_keras_piecewise_constant_with_the_papers_steps():
    schedule = ct_learning_rate_schedule()
    assert isinstance(schedule, keras.optimizers.schedules.PiecewiseConstantDecay)
    lr = lambda step: float(schedule(step - 1))  # noqa: E731  (steps count from 1)
    assert lr(1) == pytest.approx(1e-5)
    assert lr(500) == pytest.approx(1e-5)
    assert lr(501) == pytest.approx(8e-6)
    assert lr(1000) == pytest.approx(8e-6)
    assert lr(1001) == pytest.approx(6e-6)
    assert lr(2000) == pytest.approx(4e-6)
    assert lr(2001) == pytest.approx(2e-6)
    assert lr(10**6) == pytest.approx(2e-6)
    assert float(ct_learning_rate_schedule(2e-5)(0)) == pytest.approx(2e-5)
    with pytest.raises(ValueError, match="factors"):
        ct_learning_rate_schedule(1e-5, boundaries=(10,), factors=(1.0,))


def test_linear_warmup_decay_closed_form_and_round_trip():
    schedule = LinearWarmupDecay(1e-4, total_steps=10, warmup_steps=2)
    expected = {0: 0.0, 1: 0.5e-4, 2: 1e-4, 6: 0.5e-4, 9: 1e-4 / 8, 10: 0.0, 12: 0.0}
    for step, value in expected.items():
        assert float(schedule(step)) == pytest.approx(value, rel=1e-6, abs=1e-12), step
    no_warmup = linear_warmup_decay(3e-5, 300)
    assert float(no_warmup(0)) == pytest.approx(3e-5)
    assert float(no_warmup(150)) == pytest.approx(1.5e-5)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert restored.get_config() == schedule.get_config()
    with pytest.raises(ValueError, match="warmup_steps"):
        LinearWarmupDecay(1e-4, total_steps=5, warmup_steps=5)


def test_warmup_cosine_decay():
    schedule = warmup_cosine_decay(2e-4, 100, warmup_ratio=0.1)
    assert float(schedule(0)) == pytest.approx(0.0)
    assert float(schedule(5)) == pytest.approx(1e-4)
    assert float(schedule(10)) == pytest.approx(2e-4)
    assert float(schedule(55)) == pytest.approx(1e-4, rel=1e-5)  # half way down the cosine
    assert float(schedule(100)) == pytest.approx(0.0, abs=1e-10)
