"""Which engine runs a checkpoint: ``auto``, ``torch`` or ``ctranslate2``, and what CTranslate2 lacks.

The rule, the same on every surface (the CLI's ``--engine``, ``dotformer.load(..., engine=)``, ``dotformer serve``):

* ``torch`` always runs the lesson's decoder;
* ``ctranslate2`` runs CTranslate2, and refuses in one line a setting it cannot run (naming it) or a checkpoint it
  cannot hold (saying why);
* ``auto`` runs CTranslate2 when it is installed and runs the model and every requested setting, else torch.

What CTranslate2 lacks is listed in one place: :func:`torch_only_settings` (what a
:class:`~dotformer.decoding.options.DecodeRequest` asks for that only torch runs: decoding options, from the
``ctranslate2`` column of :data:`~dotformer.decoding.options.DECODE_OPTIONS`, and attention maps), :func:`ct2_problem`
(the installation, the model, the device and the dtype). A surface adds its own (an ensemble, ``--no-cache``) as plain
names. Every surface builds its request and this module decides from it: the commands at load time, the
:class:`~dotformer.api.Translator` per call, with the same function.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dotformer.data.tokenize.tokenizers import EOS_ID, SPECIAL_TOKENS
from dotformer.decoding.options import SEARCH_OPTIONS
from dotformer.errors import ConfigError, install_hint
from dotformer.export.ct2_rules import model_problem

if TYPE_CHECKING:
    from dotformer.config import ModelConfig
    from dotformer.decoding.config import DecodeConfig
    from dotformer.decoding.options import DecodeRequest

ENGINES: tuple[str, ...] = ("auto", "torch", "ctranslate2")
COMPUTE_TYPES = {"float32": "float32", "int8": "int8", "bfloat16": "bfloat16", "float16": "float16"}  # --dtype ->


class EngineOptionError(ConfigError):
    """A setting the CTranslate2 engine cannot run (``auto`` then runs torch; ``ctranslate2`` reports it)."""


def check_engine(engine: str, flag: str = "engine") -> str:
    """``engine``, checked.

    Raises:
        ConfigError: not one of :data:`ENGINES` (the message names ``flag``).
    """
    if engine not in ENGINES:
        raise ConfigError(f"{flag.rstrip('=')} must be one of {', '.join(ENGINES)}, got {engine!r}")
    return engine


def ctranslate2_installed() -> bool:
    """Whether the ``ctranslate2`` package can be imported (checked without importing it)."""
    return importlib.util.find_spec("ctranslate2") is not None


def torch_only_fields(config: DecodeConfig, model: ModelConfig | None = None) -> list[str]:
    """The :class:`~dotformer.decoding.DecodeConfig` fields of ``config`` that only the torch engine runs: options
    whose ``ctranslate2`` column names a limit, set to another value than their default (an alignment layer that is
    not the last), and ``use_cache=False``."""

    fields = []
    for option in SEARCH_OPTIONS:
        if option.ctranslate2 is None or option.field is None:
            continue
        if option.field == "end_token" and config.strategy != "beam":  # greedy and sampling end where torch's do
            continue
        value, default = getattr(config, option.field), option.default
        if option.field == "end_token":  # </s> ends every output on either engine: only the others count
            value = tuple(token for token in value if token != SPECIAL_TOKENS[EOS_ID])
        if option.field == "alignment_layer" and model is not None:  # -1 and N - 1 name the same (last) layer
            layers = max(1, model.num_decoder_layers)
            if not -layers <= value < layers:
                continue  # no such layer: either engine refuses it (decoding.alignment.check_alignment_layer)
            value, default = value % layers, default % layers
        if value != default:
            fields.append(option.field)
    if not config.use_cache:
        fields.append("use_cache")
    return fields


def torch_only_reason(field: str) -> str:
    """Why ``field`` (a :class:`DecodeConfig` field) runs on torch only: the ``ctranslate2`` column of its option."""

    for option in SEARCH_OPTIONS:
        if option.field == field and option.ctranslate2:
            return option.ctranslate2
    return "CTranslate2 always caches its keys and values" if field == "use_cache" else "CTranslate2 lacks it"


def torch_only_settings(
    request: DecodeRequest, model: ModelConfig | None = None, names: Mapping[str, str] | None = None
) -> list[str]:
    """What ``request`` asks for that only the torch engine runs, each as ``"SETTING (why)"`` for
    :func:`choose_engine`: its search's :func:`torch_only_fields` and attention maps.

    Args:
        request: the call's decoding.
        model: the checkpoint's config (an alignment layer is compared modulo its decoder layers).
        names: how the surface names the fields, as flags (``{"alignment_layer": "--alignment-layer"}``: the
            setting reads ``--alignment-layer 0``); None: as keywords (``alignment_layer=0``).
    """
    config = request.config
    settings = []
    for name in torch_only_fields(config, model):
        value = getattr(config, name)
        flag_value = ",".join(map(str, value)) if isinstance(value, tuple) else value  # end tokens: a,b
        shown = f"{name}={value!r}" if names is None else f"{names.get(name, name)} {flag_value}"
        settings.append(f"{shown} ({torch_only_reason(name)})")
    if request.attention:
        settings.append("attention=True (attention maps)")
    return settings


def ct2_device(device: str) -> tuple[str, int]:
    """dotformer's device name as CTranslate2's ``(device, device_index)``: ``auto`` is ``cuda`` when CTranslate2
    sees a GPU, else ``cpu``; ``cuda:N`` is ``("cuda", N)``.

    Raises:
        ConfigError: not a device name (cpu, cuda, cuda:N, auto).
    """
    name = str(device)
    if name == "auto":
        import ctranslate2

        return ("cuda", 0) if ctranslate2.get_cuda_device_count() > 0 else ("cpu", 0)
    kind, _, index = name.partition(":")
    if kind not in ("cpu", "cuda") or (index and not index.isdigit()) or (kind == "cpu" and index):
        raise ConfigError(f"device {name!r} is not a device (auto, cpu, cuda, cuda:N)")
    return kind, int(index or 0)


def ct2_model_options(device: str, compute_type: str, intra_threads: int, inter_threads: int) -> dict[str, Any]:
    """The keyword arguments of a CTranslate2 ``Translator`` or ``Generator`` for dotformer's device name (see
    :func:`ct2_device`), compute type and threads.

    Raises:
        ConfigError: not a device name.
    """
    kind, index = ct2_device(device)
    return dict(
        device=kind, device_index=index, compute_type=compute_type, intra_threads=intra_threads,
        inter_threads=inter_threads,
    )  # fmt: skip


def ct2_problem(config: ModelConfig, dtype: str, device: str) -> str | None:
    """Why the CTranslate2 engine cannot run a checkpoint of ``config`` in ``dtype`` on ``device`` (one line), or
    None when it can: CTranslate2 not installed, a model it cannot hold, a GPU it does not see, a compute type the
    device lacks (CTranslate2 has no bfloat16 on most CPUs).

    Raises:
        ConfigError: ``device`` is not a device name.
    """

    if not ctranslate2_installed():
        return f"CTranslate2 is not installed ({install_hint('ct2')})"
    problem = model_problem(config)
    if problem is not None:
        return problem
    import ctranslate2

    kind, index = ct2_device(device)
    if kind == "cuda" and index >= ctranslate2.get_cuda_device_count():
        return f"CTranslate2 sees no CUDA device {index} on this machine"
    supported = ctranslate2.get_supported_compute_types(kind, index)
    if dtype not in COMPUTE_TYPES or COMPUTE_TYPES[dtype] not in supported:
        return f"CTranslate2 has no {dtype} on this {kind} (it has {', '.join(sorted(supported))})"
    return None


def choose_engine(engine: str, torch_only: Sequence[str], problem: str | None, flag: str = "--engine") -> str:
    """The engine that runs: ``"torch"`` or ``"ctranslate2"`` (see the module docstring).

    Args:
        engine: the engine asked for: ``auto``, ``torch`` or ``ctranslate2``.
        torch_only: the settings asked for that only torch runs, as the surface names them (``--alignment-layer``,
            ``an ensemble``, ...), each optionally followed by ``" (why)"``.
        problem: why CTranslate2 cannot run the checkpoint (:func:`ct2_problem`), or None.
        flag: how the surface names the engine setting, for the message (``--engine``, ``engine=``).

    Raises:
        EngineOptionError: ``ctranslate2`` asked for with a torch-only setting (the message names it).
        ConfigError: ``ctranslate2`` asked for where CTranslate2 cannot run the checkpoint (the message says why).
    """
    check_engine(engine, flag)
    if engine == "torch":
        return "torch"
    if engine == "ctranslate2":
        shown = f"{flag} ctranslate2" if flag.startswith("--") else f"{flag}'ctranslate2'"
        if torch_only:
            raise EngineOptionError(torch_only_message(torch_only[0], flag))
        if problem is not None:
            raise ConfigError(f"{shown}: {problem}")
        return "ctranslate2"
    return "torch" if torch_only or problem is not None else "ctranslate2"


def torch_only_message(setting: str, flag: str = "--engine") -> str:
    """``--alignment-layer 0 runs on the torch engine only (why); leave it out, or use --engine torch``, from a
    setting named as ``choose_engine`` takes it (``"--alignment-layer 0 (why)"``)."""
    name, _, why = setting.partition(" (")
    reason = f" ({why}" if why else ""
    use = f"{flag} torch" if flag.startswith("--") else f"{flag}'torch'"  # --engine torch, engine='torch'
    return f"{name} runs on the torch engine only{reason}: leave it out, or use {use}"
