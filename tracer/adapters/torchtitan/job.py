"""A TorchTitan job to record: which registered config, which overrides, checked up front.

TorchTitan 0.3 has no TOML: a job is a registered Python config (`--module llama3 --config
llama3_debugmodel`) plus `--section.key value` overrides. Both commtrace forms end up here:
`tracer record --torchtitan llama3:llama3_debugmodel -- OVERRIDES` and a TOML whose
`[job] torchtitan = {module = ..., config = ...}` names the config and whose other sections
(except `[tracer]`) are TorchTitan's, turned into the same overrides (`toml_overrides`).
`check` validates everything in this process, with TorchTitan's own parser, before any rank
starts, so a typo costs one line and exit 2 rather than a failed rank per process.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import re
from dataclasses import dataclass, field

from tracer.adapters.torchtitan import version
from tracer.adapters.torchtitan.errors import TorchTitanError

ENTRYPOINT = "tracer.adapters.torchtitan.entry:main"
"""What every simulated rank runs (entry.py)."""

CPU_DEFAULTS = [
    "--comm.mode",
    "fake_backend",
    "--training.disable_cuda_graphs",
]
"""Overrides put before the user's (a user's later value wins):
- comm.mode fake_backend: TorchTitan's dry-run mode (its init_process_group("fake") is served by
  commtrace's recording backend); `local_tensor` is TorchTitan's own LocalTensor mode;
- disable_cuda_graphs: there is no CUDA (TorchTitan refuses graphs with pipeline parallel)."""

SPMD_FALLBACK = ["--parallelism.spmd_backend", "partial_dtensor"]
"""Put before the user's overrides only where the installed torch's FSDP cannot run TorchTitan
0.3's default backend (`spmd_types_fsdp_gap`): TorchTitan's default everywhere else."""

SPMD_TYPES_FSDP = "https://github.com/pytorch/pytorch/pull/187386"
"""The torch change that lets fully_shard take spmd_types-annotated plain parameters."""


def spmd_types_fsdp_gap() -> str | None:
    """Why the installed torch cannot run TorchTitan 0.3's default `spmd_backend = "spmd_types"`,
    or None when it can. Under spmd_types TorchTitan hands `fully_shard` plain parameters
    annotated with their SPMD types plus `dp_mesh_dims`; torch's FSDP converts those only
    since pytorch#187386 (torch 2.13's refuses them: "all parameters must be DTensors"). The
    check reads that refusal from torch's own code, so a torch that has the change needs no
    fallback whatever its version number."""
    try:
        from torch.distributed.fsdp._fully_shard._fsdp_param import FSDPParam
    except ImportError:
        return None
    fn = getattr(FSDPParam, "_init_sharding_spec", None)
    consts = getattr(getattr(fn, "__code__", None), "co_consts", ())
    if any(isinstance(c, str) and "all parameters must be DTensors" in c for c in consts):
        import torch

        return (
            f"torch {torch.__version__.split('+')[0]}'s FSDP refuses the spmd_types-annotated plain parameters of "
            f"TorchTitan 0.3's default spmd_backend (needs {SPMD_TYPES_FSDP})"
        )
    return None


@dataclass(kw_only=True, slots=True)
class TorchTitanJob:
    module: str
    """TorchTitan model module (`llama3`, `deepseek_v3`, `qwen3`, ...) or a dotted path."""
    config: str
    """Config function of that module's config_registry (`llama3_debugmodel`, ...)."""
    overrides: list[str] = field(default_factory=list)
    """TorchTitan CLI overrides, `--section.key value`, applied after CPU_DEFAULTS."""

    @property
    def args(self) -> list[str]:
        """Arguments of the entrypoint (the same as `python -m torchtitan.train` takes)."""
        return [
            "--module",
            self.module,
            "--config",
            self.config,
            *subcommands_last([*self.defaults(), *self.overrides]),
        ]

    def defaults(self) -> list[str]:
        """CPU_DEFAULTS, and SPMD_FALLBACK where the installed torch needs it."""
        return [*CPU_DEFAULTS, *(SPMD_FALLBACK if spmd_types_fsdp_gap() else [])]

    def option(self, key: str) -> str | None:
        """The value the user's overrides give `--key` (the last one wins), else None."""
        value = None
        for i, a in enumerate(self.overrides):
            if a == f"--{key}" and i + 1 < len(self.overrides):
                value = self.overrides[i + 1]
            elif a.startswith(f"--{key}="):
                value = a.split("=", 1)[1]
        return value

    @property
    def label(self) -> str:
        return f"torchtitan {self.module}:{self.config}"

    def comm_mode(self) -> str:
        """TorchTitan's comm.mode after the overrides (the last one given wins)."""
        args, mode = self.args, "fake_backend"
        for i, a in enumerate(args):
            if a == "--comm.mode" and i + 1 < len(args):
                mode = args[i + 1]
            elif a.startswith("--comm.mode="):
                mode = a.split("=", 1)[1]
        return mode


SUBCOMMAND = re.compile(r"^[A-Za-z][\w-]*:[\w-]+$")
"""A tyro subcommand token (`activation-checkpoint:selective`): TorchTitan 0.3 picks a config
variant by name, and tyro applies every option after it to that subcommand only."""


def subcommands_last(tokens: list[str]) -> list[str]:
    """The same overrides in the order tyro parses them as meant: the top-level options first,
    then each subcommand token with its own options (`--activation-checkpoint.x` after
    `activation-checkpoint:selective`). TorchTitan's own test list, and any user, writes
    `... activation-checkpoint:full --training.steps 2`, where tyro would take `--training.steps`
    for an option of the subcommand. A subcommand given twice keeps its last choice."""
    chosen = {t.split(":", 1)[0]: t for t in tokens if SUBCOMMAND.match(t)}  # the last choice wins
    top: list[str] = []
    subs: dict[str, list[str]] = {name: [tok] for name, tok in chosen.items()}
    owner = top  # where the value after an option goes
    for tok in tokens:
        if SUBCOMMAND.match(tok):
            owner = top
        elif tok.startswith("--"):
            name = tok[2:].split("=", 1)[0]
            head = name.split(".", 1)[0]
            owner = subs[head] if head in subs and "." in name else top
            owner.append(tok)
        else:
            owner.append(tok)  # an option's value (or a stray word: tyro says what it is)
    return top + [t for opts in subs.values() for t in opts]


def from_spec(spec: str, overrides: list[str]) -> TorchTitanJob:
    """`MODULE:CONFIG` of `--torchtitan`, e.g. `llama3:llama3_debugmodel`."""
    module, sep, config = spec.partition(":")
    if not sep or not module or not config:
        raise TorchTitanError(
            f"--torchtitan must look like MODULE:CONFIG (e.g. llama3:llama3_debugmodel), got {spec!r}"
        )
    return TorchTitanJob(module=module, config=config, overrides=list(overrides))


def from_toml(raw: dict) -> TorchTitanJob:
    """A parsed TOML with `[job] torchtitan = {module, config}`; every other section but
    [tracer] holds TorchTitan keys; `[job] args` adds raw overrides after them."""
    job = dict(raw.get("job", {}))
    tt = job.pop("torchtitan")
    if not isinstance(tt, dict) or set(tt) != {"module", "config"} or not all(isinstance(v, str) for v in tt.values()):
        raise TorchTitanError('job.torchtitan: expected {module = "llama3", config = "llama3_debugmodel"}')
    extra = job.pop("args", [])
    if not isinstance(extra, list) or not all(isinstance(a, str) for a in extra):
        raise TorchTitanError("job.args: expected a list of strings")
    overrides = toml_overrides({"job": job, **{k: v for k, v in raw.items() if k not in ("job", "tracer")}})
    return TorchTitanJob(module=tt["module"], config=tt["config"], overrides=overrides + extra)


def toml_overrides(sections: dict, prefix: str = "") -> list[str]:
    """{"training": {"steps": 2, "compile": {"enable": false}}} -> ["--training.steps", "2",
    "--training.compile.no-enable"]: TorchTitan's own CLI spelling (tyro: a bool is a flag,
    `--x.flag` / `--x.no-flag`; a list is comma-separated)."""
    out: list[str] = []
    for key, value in sections.items():
        name = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict):
            out += toml_overrides(value, name)
        elif "." not in name:
            raise TorchTitanError(f"{name}: expected a [{name}] table of TorchTitan keys")
        elif isinstance(value, bool):
            head, _, last = name.rpartition(".")
            out.append(f"--{name}" if value else f"--{head}.no-{last.replace('_', '-')}")
        elif isinstance(value, list):
            out += [f"--{name}", ",".join(str(v) for v in value)]
        else:
            out += [f"--{name}", str(value)]
    return out


def check(job: TorchTitanJob):
    """Parse the job with TorchTitan's own ConfigManager (in this process, before any rank
    runs); returns the parsed Trainer.Config. TorchTitanError (one line) for a missing or
    unsupported TorchTitan, an unknown module or config, an unknown key or a bad value."""
    version.check()
    from tracer.adapters.torchtitan import runtime

    runtime.prepare()
    from torchtitan.config import ConfigManager

    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            return ConfigManager().parse_args(job.args)
    except SystemExit:  # tyro printed its error box and exited
        raise TorchTitanError(_tyro_error(out.getvalue(), job)) from None
    except ImportError as e:
        raise TorchTitanError(_import_error(e, job)) from None
    except ValueError as e:
        msg = _first_line(e)
        if msg.startswith("Config function"):
            names = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", msg.split("Available config functions:")[-1])
            raise TorchTitanError(
                f"unknown TorchTitan config {job.config!r} in module {job.module!r}{_did_you_mean(job.config, names)}"
            ) from None
        raise TorchTitanError(f"TorchTitan config: {msg}") from None


def _import_error(e: ImportError, job: TorchTitanJob) -> str:
    """An unknown module, or a known one that needs a package this environment lacks
    (muse_glimmer's image and video data need torchvision): the package is the cause then."""
    if str(e).startswith("Cannot import config_registry for module"):  # TorchTitan's parser hid why
        e = _registry_import_error(job.module) or e
    missing = getattr(e, "name", None) or ""
    top = missing.split(".")[0]
    if isinstance(e, ModuleNotFoundError) and top and top != "torchtitan" and not job.module.startswith(top):
        return (
            f"TorchTitan module {job.module!r} needs the package {top!r}, which is not installed "
            f"(pip install {top}): {_first_line(e)}"
        )
    return f"unknown TorchTitan module {job.module!r}: {_first_line(e)}"


def _registry_import_error(module: str) -> ImportError | None:
    """The ImportError behind TorchTitan's "Cannot import config_registry" (it tries three
    packages and says none): importing the model's own config_registry again, for its cause."""
    import importlib

    if not module.isidentifier():
        return None
    try:
        importlib.import_module(f"torchtitan.models.{module}.config_registry")
    except ModuleNotFoundError as e:
        return e if (e.name or "").split(".")[0] != "torchtitan" else None
    except Exception:
        return None
    return None


def _tyro_error(text: str, job: TorchTitanJob) -> str:
    lines = [re.sub(r"[│╭╮╰╯─]+", " ", ln).strip() for ln in text.splitlines()]
    lines = [ln for ln in lines if ln]
    unknown = next((ln for ln in lines if ln.startswith("Unrecognized options:")), None)
    if unknown is not None:
        key = unknown.split(":", 1)[1].strip().split()[0].rstrip(",")
        hint = next(
            (m.group(0) for ln in lines[lines.index(unknown) :] if (m := re.match(r"--[A-Za-z][\w.-]*", ln))),
            None,
        )
        return f"unknown TorchTitan key {key}" + (f" (did you mean {hint}?)" if hint else "")
    for i, ln in enumerate(lines):
        if "error" in ln.lower() and i + 1 < len(lines):
            # the box's message: its text lines up to the separator, joined (tyro wraps them)
            box: list[str] = []
            for body in lines[i:]:
                if not body.strip("-─ ") or body.startswith("For full helptext"):
                    break
                box.append(body)
            msg = " ".join(box)
            if "Error parsing" in msg:  # "Value error Error parsing parallelism: For NVIDIA ..."
                msg = msg[msg.index("Error parsing") :]
            elif len(box) > 1:
                msg = " ".join(box[1:])
            return f"TorchTitan config: {msg}"
    return f"TorchTitan config: {lines[0] if lines else 'could not parse ' + ' '.join(job.overrides)}"


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def _did_you_mean(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
