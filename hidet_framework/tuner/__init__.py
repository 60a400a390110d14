"""The tuner: templates' hardware-derived spaces, parallel builds, device timing, and
the on-disk cache of winners."""
from hidet_framework.tuner.cache import TuningCache
from hidet_framework.schedule.template import SPACE_LIMITS, Template
from hidet_framework.tuner.tuner import Candidate, TuneRequest, TuningError, TuningResult, candidates_of, tune, tune_many
