"""`modeldeployment`: serve the hooks and webhooks, dry-run a deployment, write the CRDs.

Exit codes: 0 done; 1 refused (a deployment the cluster would not store, or a render that fails);
2 a usage or input problem (a flag, a file that cannot be read, a port in use); 3 an internal error
of the command (a bug: please report it with the input). Every error is printed as one line or a
list of refusals, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import errno
import logging
import socket
import ssl
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from app import live
from app import logs, vocab
from app.admission import files
from app.api.hooks import HookRequest
from app.api.objects import KubeObject
from app.api.v1 import ModelDeployment
from app.control.sync import Refusal, SyncSettings, reconcile
from app.kube.executor import utc_now
from app.settings import Settings
from app.world import World, related_map

log = logging.getLogger("app")

# The example world ships inside the package (a copy of examples/world, kept identical by
# tests/unit/test_packaging.py), so an installed wheel or the image renders without a source tree.
DEFAULT_WORLD = Path(__file__).resolve().parent / "data" / "world"
# `crds` writes into the source tree's CRD directory and the chart's (kept identical); an
# installed package has neither and needs --out.
SOURCE_TREE = Path(__file__).resolve().parent.parent
CRD_DIRS = [SOURCE_TREE / "manifests" / "crds", SOURCE_TREE / "charts" / "modeldeployment" / "crds"]

EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
ENV_PREFIX = Settings.model_config.get("env_prefix", "")


class UsageError(Exception):
    """A flag, a setting or a file the command cannot use; the message says which and the fix."""


class _PlainDumper(yaml.SafeDumper):
    """No anchors/aliases: rendered objects share sub-dicts, a reader wants them spelled out."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


@contextlib.contextmanager
def _quiet(logger: logging.Logger) -> Iterator[None]:
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


def _with_scaled_replicas(md: KubeObject, judged: list[Any]) -> KubeObject:
    """The deployment with the replicas its scalers in the same file set on the roles they govern
    (docs/autoscaling.md: the scaler writes replicas × ratio into each role), as the cluster would
    run it once the scaler's controller has written them."""
    from app.api.scaler import ModelDeploymentScaler

    meta = md["metadata"]
    roles = (md.get("spec") or {}).get("roles")
    if not isinstance(roles, list):
        return md
    for item in judged:
        if item.kind != vocab.KIND_MODEL_DEPLOYMENT_SCALER:
            continue
        scaler = ModelDeploymentScaler.model_validate(item.obj)  # allowed above, so it parses
        if scaler.spec.deployment_ref.name != meta.get("name") or scaler.metadata.namespace != meta.get("namespace"):
            continue
        for role in roles:
            governed = scaler.spec.role(str(role.get("name"))) if isinstance(role, dict) else None
            if governed is not None:
                role["replicas"] = scaler.spec.desired(governed)
    return md


def _all_admitted(judged: list[Any], file: Path) -> bool:
    """Every object of the file admitted; else each refusal printed to stderr (render prints nothing)."""
    for item in judged:
        for warning in item.verdict.warnings:
            print(f"Warning: {warning}", file=sys.stderr)
    refused = [item for item in judged if not item.verdict.allowed]
    for item in refused:
        print(f"error: {item.label}: refused, so not rendered (the cluster would not store it):\n{item.verdict.message}",
              file=sys.stderr)
    if refused:
        print(f"error: nothing rendered: {len(refused)} of the file's {len(judged)} object(s) refused "
              f"(`modeldeployment validate -f {file}` lists them)", file=sys.stderr)
    return not refused


def _renderable(judged: list[Any], file: Path) -> list[Any]:
    """The file's deployments, each with a name to render under (else UsageError)."""
    deployments = [item for item in judged if item.kind == vocab.KIND_MODEL_DEPLOYMENT]
    if not deployments:
        raise UsageError(f"{file} holds ModelDeploymentScalers only, which render nothing — `modeldeployment "
                         f"validate -f {file}` checks them; render their deployment instead")
    unnamed = [item.label for item in deployments if not item.obj["metadata"].get("name")]
    if unnamed:
        raise UsageError(f"{', '.join(unnamed)}: metadata.generateName without metadata.name — the rendered objects are "
                         "named after the deployment, and the API server picks generateName's suffix at create time; "
                         "set metadata.name to render it")
    return deployments


def cmd_render(args: argparse.Namespace) -> int:
    """The sync hook's answer for each deployment of the file, once the cluster would admit every
    object of it: one refusal anywhere and nothing is printed on stdout (a pipe into `kubectl apply`
    must not apply half a file)."""
    from app.admission.offline import judge_documents, no_objects

    options = settings()
    objects = files.read_objects(args.world, "--world") if args.world else []
    world_objects = [o for o in objects if isinstance(o.get("metadata"), dict)]
    docs = files.read_documents(args.file, "-f")
    world = World.of(world_objects)
    # Render only what the cluster would store: the API server's checks and the webhooks first, for
    # every object of the file (a scaler's refusal stops the render too).
    with _quiet(logging.getLogger("app.admission.review")):  # the verdicts are printed; the log line is the service's
        judged = judge_documents(docs, [], world, kv_cache_dtype_owned=options.kv_cache_dtype_owned,
                                 name_files=args.file != files.STDIN and args.file.is_dir())
    if not judged:
        raise UsageError(no_objects(args.file))
    if not _all_admitted(judged, args.file):
        return EXIT_REFUSED
    deployments = _renderable(judged, args.file)
    related = related_map(world_objects)
    sync_settings = SyncSettings(options=options.render_options())
    rendered: list[Any] = []
    notes: list[str] = []
    for item in deployments:
        md = _with_scaled_replicas(copy.deepcopy(item.obj), judged)
        # Admitted above, so the model parses it; a file's object has no uid for the hook door to check.
        request = HookRequest(parent=md, deployment=ModelDeployment.model_validate(md), related=related)
        result = reconcile(request, sync_settings, now=utc_now())
        if isinstance(result, Refusal):
            print(f"error: {item.label}: {result.message}", file=sys.stderr)
            print("error: nothing rendered (one deployment of the file cannot be)", file=sys.stderr)
            return EXIT_REFUSED
        if args.objects_only:
            # Only Kubernetes objects on stdout (pipe-able into kubectl); the status to stderr.
            rendered += list(result.children)
            notes.append(f"# status: {md['metadata'].get('name')}: phase {result.status.get('phase')}")
        else:
            rendered += [*result.children, {"status": result.status}]
        if not args.quiet:
            notes += [f"# intent: {intent}" for intent in result.intents]
    for note in notes:
        print(note, file=sys.stderr)
    sys.stdout.write(yaml.dump_all(rendered, Dumper=_PlainDumper, sort_keys=False))
    return 0


def cmd_crds(args: argparse.Namespace) -> int:
    from app.api.crd import all_crds

    outs = args.out or [d for d in CRD_DIRS if d.parent.is_dir()]
    if not outs:
        raise UsageError("no source tree here to write manifests/crds into — pass --out DIR")
    for out in outs:
        try:
            out.mkdir(parents=True, exist_ok=True)
            for name, crd in all_crds().items():
                (out / name).write_text(yaml.safe_dump(crd, sort_keys=False, width=120))
                print(out / name)
        except OSError as exc:
            raise UsageError(f"--out {exc.filename or out}: cannot be written: {exc.strerror or exc} — pass a "
                             "directory this user may write") from exc
    return 0


# --- serve ------------------------------------------------------------------------------------


def _env(field: str) -> str:
    return f"{ENV_PREFIX}{field}".upper()


def _default(field: str) -> Any:
    return Settings.model_fields[field].default


def _bind_problem(exc: OSError, host: str, port: int, flag: str, field: str) -> str:
    """One line for a listener that cannot bind, naming the port and how to choose another."""
    change = f"choose another with {flag} N or {_env(field)}=N"
    if exc.errno == errno.EADDRINUSE:
        return (f"port {port} on {host} is already in use ({flag}, {_env(field)}) — stop what listens there "
                f"(`ss -ltnp 'sport = :{port}'` shows it), or {change}")
    if exc.errno == errno.EACCES:
        return f"port {port} on {host} needs privileges this user lacks ({flag}) — {change} (above 1023)"
    if exc.errno == errno.EADDRNOTAVAIL or isinstance(exc, socket.gaierror):
        return (f"--host {host!r} is not an address of this machine ({exc.strerror or exc}) — pass one it has "
                f"(127.0.0.1, 0.0.0.0 for every interface) or set {_env('host')}")
    return f"port {port} on {host} cannot be bound ({flag}): {exc.strerror or exc} — {change}"


def _tls_overrides(args: argparse.Namespace) -> dict[str, Any]:
    if args.tls_cert is None and args.tls_key is None:
        return {}
    if args.tls_cert is None or args.tls_key is None:
        missing = "--tls-key" if args.tls_key is None else "--tls-cert"
        raise UsageError(f"{missing} is missing: --tls-cert and --tls-key are given together (a PEM certificate and "
                         "its key), or neither (plain HTTP)")
    for flag, path in (("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key)):
        if not path.is_file():
            raise UsageError(f"{flag} {path}: no such file — pass the PEM file's path")
    return {"tls_cert_file": args.tls_cert, "tls_key_file": args.tls_key}


def cmd_serve(args: argparse.Namespace) -> int:
    """One app on two listeners (app/web/serving.py): TLS for the API server's webhooks on --port,
    plain HTTP for Metacontroller's hooks on --hooks-port; each serves only its own paths.

    Metacontroller calls hooks over in-cluster HTTP (its examples do); the API server requires
    TLS for admission webhooks, whose certificate is reloaded when its files change. Both sockets
    are bound before either listener starts, so a port in use is one line and nothing runs.
    """
    from app.web.serving import bind_socket, listeners, run

    overrides: dict[str, Any] = _tls_overrides(args)
    if args.world is not None:
        overrides["world_dir"] = args.world
    service = settings(**overrides)
    if service.world_dir is not None:  # read on every request: a world that cannot be read stops serve now
        files.read_objects(service.world_dir, "--world" if args.world is not None else _env("world_dir"))
    host = service.host if args.host is None else args.host
    port = service.port if args.port is None else args.port
    hooks_port = service.hooks_port if args.hooks_port is None else args.hooks_port
    if hooks_port == port and port != 0:
        raise UsageError(f"--port and --hooks-port are both {port} — give the hooks another port, or --hooks-port 0 "
                         "to serve hooks and webhooks on --port together (local runs only)")
    from app.main import create_app

    app = create_app(service)
    try:
        listening = listeners(app, service, host=host, port=port, hooks_port=hooks_port, log_level=None,
                              log_config=None)
    except (ssl.SSLError, OSError) as exc:
        raise UsageError(f"--tls-cert {service.tls_cert_file} / --tls-key {service.tls_key_file}: the pair does not load "
                         f"({exc}) — pass a PEM certificate and the key it was issued for") from exc
    named = [("--port", "port"), ("--hooks-port", "hooks_port")]
    for server, (flag, field) in zip(listening.servers, named):
        try:
            listening.sockets.append(bind_socket(server.config.host, server.config.port))
        except OSError as exc:
            for sock in listening.sockets:
                sock.close()
            raise UsageError(_bind_problem(exc, host, server.config.port, flag, field)) from exc
    scheme = "https" if service.tls_cert_file else "http"
    bound = [s.getsockname()[1] for s in listening.sockets]
    if hooks_port == 0:
        log.info("serving webhooks and hooks on %s://%s:%d", scheme, host, bound[0])
    else:
        log.info("serving webhooks on %s://%s:%d, Metacontroller's hooks on http://%s:%d", scheme, host, bound[0],
                 host, bound[1])
    run(listening, service)
    return 0


def cmd_activator(args: argparse.Namespace) -> int:
    """The activator (docs/scale-to-zero.md#the-activator): holds a parked deployment's requests."""
    from app.activator.serve import run as run_activator
    from app.activator.settings import ActivatorSettings

    overrides = {k: v for k, v in (("port", args.port), ("metrics_port", args.metrics_port)) if v is not None}
    run_activator(ActivatorSettings(**overrides))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from app.admission.offline import validate_offline

    return validate_offline(args.file, args.world, args.old)


# --- a live cluster: status and plan (docs/operations.md#why-is-it-not-serving) ------------------


def _live_parsers(sub: Any) -> None:
    def common(command: Any) -> None:
        command.add_argument("-n", "--namespace", default=None,
                             help="the deployment's namespace (default: the kubeconfig context's, else default)")
        command.add_argument("--kubeconfig", type=Path, default=None, metavar="FILE",
                             help="the kubeconfig to read (default: $KUBECONFIG, ~/.kube/config, in-cluster)")

    status = sub.add_parser("status", help="a live deployment's roles and replicas: stage, reason, age, Pods, node",
                            formatter_class=_Formatter,
                            description="Read a ModelDeployment from the cluster (kubeconfig as kubectl reads it) and "
                                        "print every replica: its stage and reason (status.roles[].notReady, "
                                        "docs/status.md#replica-stages), since when, its Pods and node. Reads only.")
    status.add_argument("name", help="the ModelDeployment's name")
    status.add_argument("-w", "--watch", action="store_true", help="print the table again whenever it changes")
    status.add_argument("--interval", type=float, default=2.0, help="--watch: seconds between reads (default 2)")
    common(status)
    status.set_defaults(func=live.cmd_status)
    plan = sub.add_parser("plan", help="what the operator will do with an edit, without writing anything",
                          formatter_class=_Formatter,
                          description="Compare a file's ModelDeployment with the live one: the webhooks' verdict on "
                                      "the update, then the sync hook's own planner on the live Pods and Workloads: "
                                      "replicas added or shed, replaced now, and rolled after them in order. Writes "
                                      "nothing. Exit 0 allowed, 1 refused.")
    plan.add_argument("-f", "--file", type=Path, required=True, help="a YAML file holding one ModelDeployment")
    common(plan)
    plan.set_defaults(func=live.cmd_plan)


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """The descriptions' line breaks kept (each flag's help states its default and variable)."""


def _serve_parser(sub: Any) -> None:
    serve = sub.add_parser(
        "serve", help="run the hooks and webhooks service", formatter_class=_Formatter,
        description="Run the service: the admission webhooks on --port (TLS with --tls-cert/--tls-key, else plain "
                    "HTTP) and Metacontroller's hooks on --hooks-port (plain HTTP). Each flag overrides its "
                    f"environment variable ({_env('host')}, {_env('port')}, {_env('hooks_port')}, "
                    f"{_env('tls_cert_file')}, {_env('tls_key_file')}; docs/operations.md lists every setting). "
                    "The defaults stay off 8080, where kubectl looks for an API server when it has no kubeconfig.")
    serve.add_argument("--host", default=None, metavar="ADDRESS",
                       help=f"address both listeners bind (0.0.0.0: every interface) [{_env('host')}; default "
                            f"{_default('host')}]")
    serve.add_argument("--port", type=int, default=None,
                       help=f"the webhooks' port (the API server calls /webhooks/*) [{_env('port')}; default "
                            f"{_default('port')}]")
    serve.add_argument("--hooks-port", type=int, default=None, metavar="PORT",
                       help="Metacontroller's hooks' port (/hooks/*), apart from the webhooks; 0 serves both on --port "
                            f"(local runs only) [{_env('hooks_port')}; default {_default('hooks_port')}]")
    serve.add_argument("--tls-cert", type=Path, default=None, metavar="PEM",
                       help=f"the webhooks' serving certificate, reloaded when the file changes [{_env('tls_cert_file')}; "
                            "default: none, plain HTTP]")
    serve.add_argument("--tls-key", type=Path, default=None, metavar="PEM",
                       help=f"the certificate's private key [{_env('tls_key_file')}; default: none]")
    serve.add_argument("--world", type=Path, default=None, metavar="DIR",
                       help=f"a directory of YAML standing in for the cluster [{_env('world_dir')}; default: the API "
                            "server]")
    serve.set_defaults(func=cmd_serve)


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="modeldeployment", description=__doc__, formatter_class=_Formatter)
    sub = root.add_subparsers(dest="command", required=True)
    _serve_parser(sub)
    activator = sub.add_parser(
        "activator", help="run the activator: holds a parked deployment's requests, wakes it, forwards them",
        formatter_class=_Formatter,
        description="Run the activator (docs/scale-to-zero.md#the-activator): the proxy on --port, /metrics, /healthz "
                    "and /readyz on --metrics-port. Settings: MODELDEPLOYMENT_ACTIVATOR_* (max_held, "
                    "max_hold_seconds, wake_interval_seconds, poll_seconds, release_batch).")
    activator.add_argument("--port", type=int, default=None,
                           help="the proxy's port [MODELDEPLOYMENT_ACTIVATOR_PORT; default 8080]")
    activator.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                           help="metrics and probes [MODELDEPLOYMENT_ACTIVATOR_METRICS_PORT; default 9090]")
    activator.set_defaults(func=cmd_activator)

    render = sub.add_parser("render", help="print the children and status the sync hook would return",
                            formatter_class=_Formatter,
                            description="Check every object of the file as the cluster would (as `validate`), then "
                                        "print what the sync hook returns for each ModelDeployment (with the replicas "
                                        "a ModelDeploymentScaler of the file sets). One refusal anywhere in the file "
                                        "and nothing is rendered: the refusals go to stderr and the exit code is 1.")
    render.add_argument("-f", "--file", type=Path, required=True,
                        help="a YAML file, a directory of them, or - for standard input")
    render.add_argument("--world", type=Path, default=DEFAULT_WORLD, metavar="DIR",
                        help="InstanceTypes, pools and bindings as YAML (default: the example world)")
    render.add_argument("-q", "--quiet", action="store_true", help="do not print side-effect intents")
    render.add_argument("--objects-only", action="store_true",
                        help="print only the Kubernetes objects (the status goes to stderr), e.g. to pipe into kubectl")
    render.set_defaults(func=cmd_render)

    validate = sub.add_parser(
        "validate", help="check a deployment as the cluster would: apiVersion, kind, unknown "
        "fields and the schema's types and bounds, then both admission webhooks (an update with --old)",
        formatter_class=_Formatter,
        description="Judge every ModelDeployment and ModelDeploymentScaler of a file as the cluster would, without a "
                    "cluster: the file read as the API server's decoder reads YAML (duplicate keys and runaway "
                    "aliases refused), the API server's own checks (apiVersion, kind, unknown fields, the CRD "
                    "schema's types and bounds, metadata: name, labels, annotations), then the admission webhooks "
                    "against --world. Prints `<namespace>/<name>: allowed`, or `refused` and every refusal (field, "
                    "what is wrong, the way out); warnings go to stderr. Exit 0 all allowed, 1 one refused, 2 a file "
                    "that cannot be read. docs/admission.md lists every rule.")
    validate.add_argument("-f", "--file", type=Path, required=True,
                          help="a YAML file, a directory of them, or - for standard input")
    validate.add_argument("--world", type=Path, default=DEFAULT_WORLD, metavar="DIR",
                          help="InstanceTypes, pools and bindings as YAML (default: the example world)")
    validate.add_argument("--old", type=Path, default=None, help="the stored object, to check an update")
    validate.set_defaults(func=cmd_validate)

    crds = sub.add_parser("crds", help="write the CRDs generated from the models", formatter_class=_Formatter)
    crds.add_argument("--out", type=Path, action="append", default=None, metavar="DIR",
                      help="directory to write into (repeatable); default: manifests/crds and the chart's crds/")
    crds.set_defaults(func=cmd_crds)
    _live_parsers(sub)
    return root


def _settings_problem(exc: ValidationError) -> str:
    """A setting from the environment that does not parse, named by its variable."""
    shown = []
    for error in exc.errors(include_url=False)[:3]:
        loc = error.get("loc") or ("?",)
        variable = _env(str(loc[0]))
        shown.append(f"{variable}={error.get('input')!r}: {error.get('msg')}")
    return "; ".join(shown) + " — fix or unset the variable (docs/operations.md lists every setting)"


def settings(**overrides: Any) -> Settings:
    """The service's settings (the environment, then `overrides`), or UsageError naming the variable."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise UsageError(_settings_problem(exc)) from exc


def kubectl_main() -> int:
    """`kubectl md …`: kubectl runs the `kubectl-md` executable with the rest of the command line."""
    return main(prog="kubectl md")


def main(argv: list[str] | None = None, prog: str = "modeldeployment") -> int:
    root = parser()
    root.prog = prog
    args = root.parse_args(argv)  # a usage error: argparse prints it and exits 2
    try:
        configured = settings()
        try:
            logs.configure(configured.log_json, configured.log_level)
        except ValueError as exc:
            raise UsageError(f"{exc} — set it to one of them, or unset it (INFO)") from exc
        return int(args.func(args) or 0)
    except (UsageError, files.InputError, live.LiveError) as exc:
        print(f"error: {exc}", file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - a bug must still not greet the user with a traceback
        log.debug("internal error", exc_info=True)
        print(f"error: internal error in `modeldeployment {args.command}`: {type(exc).__name__}: {exc} — this is a bug; "
              "please report it with the command and its input files (MODELDEPLOYMENT_LOG_LEVEL=DEBUG logs the "
              "traceback)", file=sys.stderr)
        return EXIT_INTERNAL
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
