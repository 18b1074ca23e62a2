"""The score processors of docs/method.md §3–§4 and their forms: `dape.py` (DAPE and DAPE V2's records, one
convolutional module: `dape_torch.py`, which the records' builder imports when a model is built), `forms.py`
(how a processor's output combines with S and B); `base.py` (torch) is the processors' common module,
`ScoreProcessor`, and builds a layer's processor from its record.

Importing this package registers the records (`none`, the absence of a processor, too), in the order a study's
error message lists them in; it loads without torch (validating a study reads it). `ScoreProcessor`, the class a
processor derives from (`from dape_core.processors import ScoreProcessor`, docs/extending.md), is imported from
`base.py` on first use, with torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import registry
from ..lazy import lazy_attributes
from ..registry import Processor, register_form, register_processor
from . import dape
from .forms import RECORDS as _FORMS
from .forms import processor_form, processor_in_channels

for _form in _FORMS:
    register_form(_form)
registry.processors.add(Processor("none", "no processor"), check=False)  # no processor: nothing to build or cost
for _processor in (dape.DAPE, dape.DAPEV2):
    register_processor(_processor)

FORMS = registry.forms  # the registries (dape_core/registry.py): these, contrib's and plugins'
PROCESSORS = registry.processors
_PUBLIC = {"ScoreProcessor": "base"}  # name -> the submodule it lives in (torch: imported on first use)
__all__ = ["FORMS", "PROCESSORS", "ScoreProcessor", "processor_form", "processor_in_channels"]

if TYPE_CHECKING:
    from .base import ScoreProcessor

__getattr__, __dir__ = lazy_attributes(__name__, _PUBLIC)
