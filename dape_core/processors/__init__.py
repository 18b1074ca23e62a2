"""The score processors of docs/method.md §3–§4 and their forms: `dape.py` (DAPE and DAPE V2's records, one
convolutional module: `dape_torch.py`, which the records' builder imports when a model is built), `forms.py`
(how a processor's output combines with S and B); `base.py` (torch) is the processors' common module and
builds a layer's processor from its record.

Importing this package registers the records (`none`, the absence of a processor, too), in the order a study's
error message lists them in; it loads without torch (validating a study reads it).
"""

from __future__ import annotations

from .. import registry
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
__all__ = ["FORMS", "PROCESSORS", "processor_form", "processor_in_channels"]
