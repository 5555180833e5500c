"""The one place that imports every gin configurable, so that a .gin file can
name them. Add a module here when it defines a new configurable."""
from bertexp import experiment  # noqa: F401
from bertexp.model import encoders  # noqa: F401
from bertexp.tasks import classification  # noqa: F401
from bertexp.tasks import distillation  # noqa: F401
from bertexp.tasks import pretraining  # noqa: F401
from bertexp.tasks import squad  # noqa: F401
from bertexp.tasks import tagging  # noqa: F401
from bertexp.train import optimization  # noqa: F401
from bertexp.train import strategy  # noqa: F401
