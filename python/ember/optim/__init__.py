"""ember.optim: optimizers (SGD, Adam, AdamW, RMSprop, Adagrad) and lr_scheduler, with
torch.optim's names, defaults, update formulas and state_dict layout."""
from . import lr_scheduler  # noqa: F401
from .adagrad import Adagrad
from .adam import Adam, AdamW
from .optimizer import Optimizer
from .rmsprop import RMSprop
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "lr_scheduler"]
