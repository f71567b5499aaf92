"""Open a checkpoint on CTranslate2: its cached copy (converted on first use) and the runner for its architecture.

:func:`open_ct2` is what ``dotformer.load(..., engine="ctranslate2")`` and the commands call once CTranslate2 is
chosen (:func:`dotformer.engines.choice.choose_engine`): a ``Translator`` for an encoder-decoder, a ``Generator`` for a
language model, on the device, in the compute type and with the threads asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dotformer.engines.cache import ct2_copy
from dotformer.engines.choice import COMPUTE_TYPES

if TYPE_CHECKING:
    from dotformer.checkpoint.files import CheckpointFiles
    from dotformer.engines.ct2_generate import CT2Generate
    from dotformer.engines.ct2_translate import CT2Translate


def open_ct2(
    files: CheckpointFiles,
    dtype: str = "float32",
    device: str = "auto",
    intra_threads: int = 0,
    inter_threads: int = 1,
) -> CT2Translate | CT2Generate:
    """The CTranslate2 runner of a checkpoint, its copy stored and computed in ``dtype``.

    Args:
        files: the checkpoint (:func:`~dotformer.checkpoint.files.read_checkpoint_files`).
        dtype: dotformer's ``--dtype`` (float32, int8, bfloat16, float16), CTranslate2's compute type of that name.
        device: cpu, cuda, cuda:N or auto.
        intra_threads: threads per batch (0: CTranslate2's default). inter_threads: batches run at once.

    Raises:
        ConfigError: a model CTranslate2 cannot hold, a bad device. CheckpointError: the checkpoint cannot be read
            (its first conversion). OSError: no place to write the copy.
    """
    copy = ct2_copy(files, dtype)
    options = dict(
        device=device, compute_type=COMPUTE_TYPES[dtype], intra_threads=intra_threads, inter_threads=inter_threads
    )
    if files.config.arch == "decoder-only":
        from dotformer.engines.ct2_generate import CT2Generate

        return CT2Generate(files, copy, **options)
    from dotformer.engines.ct2_translate import CT2Translate

    return CT2Translate(files, copy, **options)
