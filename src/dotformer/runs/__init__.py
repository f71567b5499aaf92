"""Runs: a run of ``dotformer train`` from its configs to its checkpoints, for every task, and the tasks themselves.

Above the training engine (:mod:`dotformer.training`: the loop, the step, the loss, the schedule, checkpoints of a
run), below the commands. Read in this order: :mod:`~dotformer.runs.task` (what a task is),
:mod:`~dotformer.runs.tasks` (the table of tasks), :mod:`~dotformer.runs.run` (the one pipeline: fresh, fine-tuned
and resumed runs, DDP, records), :mod:`~dotformer.runs.pairs` (g2p, translation, exact, synthetic),
:mod:`~dotformer.runs.text` (a language model), :mod:`~dotformer.runs.encoder` (a masked language model, a
classifier, a tagger), :mod:`~dotformer.runs.sentence_pairs` (a classifier of text pairs); then what they use:
:mod:`~dotformer.runs.config_files` (TOML files and their layering), :mod:`~dotformer.runs.records` (run.json),
:mod:`~dotformer.runs.finetune` (``--init-from``), :mod:`~dotformer.runs.shipped_configs` (``--config g2p`` after a
pip install).

Nothing is imported here: import the module you need.
"""
