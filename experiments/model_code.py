"""The code MLflow runs to load a logged ragscale program (MLflow's models from code; ``model.py`` logs it).

MLflow copies this file into the model and executes it on ``mlflow.pyfunc.load_model``: it declares the model and
nothing else, so no pickle is ever read. The program is rebuilt in ``load_context`` from the model's config and its
JSON state (``model.load``). This file is MLflow's to run, never imported by ragscale. ``predict`` has no type hint:
its input is a question, a dict, a list or a DataFrame, which no hint MLflow accepts covers (MLflow says so in a
warning when the file runs).
"""

from mlflow.models import set_model
from mlflow.pyfunc import PythonModel

from ragscale.experiments import model


class RagscaleProgram(PythonModel):
    """A logged program: ``predict`` answers questions; ``program`` is the DSPy program once loaded."""

    def load_context(self, context) -> None:
        self.loaded = model.load(context.model_config, context.artifacts)
        self.program = self.loaded.program

    def predict(self, context, model_input, params=None):
        return model.predict(self.loaded, model_input)


set_model(RagscaleProgram())
