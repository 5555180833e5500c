"""The one place that imports every gin configurable, so that a .gin file can
name them. Add a module here when it defines a new configurable."""
from bertexp import experiment  # noqa: F401
from bertexp.model import encoders  # noqa: F401
from bertexp.tasks.classification import task as classification  # noqa: F401
from bertexp.tasks.distillation import task as distillation  # noqa: F401
from bertexp.tasks.pretraining import task as pretraining  # noqa: F401
from bertexp.tasks.squad import task as squad  # noqa: F401
from bertexp.tasks.tagging import task as tagging  # noqa: F401
from bertexp.train import optimization  # noqa: F401
from bertexp.train import strategy  # noqa: F401
