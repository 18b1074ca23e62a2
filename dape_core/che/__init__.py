"""CHE (Chomsky hierarchy) length-generalisation tasks (docs/method.md §7) and the associative-recall extension (§8).

    from dape_core.che import TASKS, make_encoder_batch
    batch = make_encoder_batch(TASKS["binary_addition"], np.random.default_rng(0), length=40, batch_size=128)

See `tasks.py` and `recall.py` for the definitions and the Decisions taken.
"""

from .recall import RECALL_TASKS, AssociativeRecall, CausalBatch
from .tasks import (
    TASKS,
    TEST_LENGTHS,
    TRAIN_MAX_LENGTH,
    Batch,
    EncoderBatch,
    Task,
    get_task,
    make_encoder_batch,
    to_encoder_batch,
    train_lengths,
)

__all__ = [
    "TASKS", "TEST_LENGTHS", "TRAIN_MAX_LENGTH", "Batch", "EncoderBatch", "Task", "get_task",
    "make_encoder_batch", "to_encoder_batch", "train_lengths", "AssociativeRecall", "CausalBatch",
    "RECALL_TASKS",
]
