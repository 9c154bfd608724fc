"""`modeldeployment`: serve the hooks and webhooks, dry-run a deployment, write the CRDs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from app import logs, vocab
from app.api.hooks import HookRequest
from app.api.objects import KubeObject
from app.control.sync import SyncFailed, SyncSettings, reconcile
from app.kube.executor import utc_now
from app.settings import Settings
from app.world import load_yaml_objects, related_map

# The example world ships inside the package (a copy of examples/world, kept identical by
# tests/unit/test_packaging.py), so an installed wheel or the image renders without a source tree.
DEFAULT_WORLD = Path(__file__).resolve().parent / "data" / "world"
# `crds` writes into the source tree's CRD directory and the chart's (kept identical); an
# installed package has neither and needs --out.
SOURCE_TREE = Path(__file__).resolve().parent.parent
CRD_DIRS = [SOURCE_TREE / "manifests" / "crds", SOURCE_TREE / "charts" / "modeldeployment" / "crds"]


class _PlainDumper(yaml.SafeDumper):
    """No anchors/aliases: rendered objects share sub-dicts, a reader wants them spelled out."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _deployments(path: Path) -> list[KubeObject]:
    return [o for o in load_yaml_objects(path) if o.get("kind") == vocab.KIND_MODEL_DEPLOYMENT]


def _world_objects(world: Path | None) -> list[KubeObject]:
    return load_yaml_objects(world) if world else []


def cmd_render(args: argparse.Namespace) -> int:
    settings = Settings()
    objects = _world_objects(args.world)
    deployments = _deployments(args.file)
    if not deployments:
        print(f"error: {args.file} holds no ModelDeployment", file=sys.stderr)
        return 2
    sync_settings = SyncSettings(options=settings.render_options())
    status = 0
    for md in deployments:
        md.setdefault("metadata", {}).setdefault("namespace", "default")
        request = HookRequest(parent=md, children={}, related=related_map(objects))
        try:
            result = reconcile(request, sync_settings, now=utc_now())
        except SyncFailed as exc:
            print(f"error: {md['metadata'].get('name')}: {exc}", file=sys.stderr)
            status = 1
            continue
        if args.objects_only:
            # Only Kubernetes objects on stdout (pipe-able into kubectl); the status to stderr.
            docs = list(result.children)
            print(f"# status: {md['metadata'].get('name')}: phase {result.status.get('phase')}", file=sys.stderr)
        else:
            docs = [*result.children, {"status": result.status}]
        sys.stdout.write(yaml.dump_all(docs, Dumper=_PlainDumper, sort_keys=False))
        if not args.quiet:
            for intent in result.intents:
                print(f"# intent: {intent}", file=sys.stderr)
    return status


def cmd_crds(args: argparse.Namespace) -> int:
    from app.api.crd import all_crds

    outs = args.out or [d for d in CRD_DIRS if d.parent.is_dir()]
    if not outs:
        print("error: no source tree here to write manifests/crds into: pass --out DIR", file=sys.stderr)
        return 2
    for out in outs:
        out.mkdir(parents=True, exist_ok=True)
        for name, crd in all_crds().items():
            (out / name).write_text(yaml.safe_dump(crd, sort_keys=False, width=120))
            print(out / name)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    """One app on two listeners (app/web/serving.py): TLS for the API server's webhooks on --port,
    plain HTTP for Metacontroller's hooks on --hooks-port; each serves only its own paths.

    Metacontroller calls hooks over in-cluster HTTP (its examples do); the API server requires
    TLS for admission webhooks, whose certificate is reloaded when its files change.
    """
    from app.web.serving import listeners, run

    overrides: dict[str, Any] = {}
    if args.world is not None:
        overrides["world_dir"] = args.world
    if args.tls_cert:
        overrides["tls_cert_file"] = args.tls_cert
        overrides["tls_key_file"] = args.tls_key
    settings = Settings(**overrides)
    from app.main import create_app

    app = create_app(settings)
    hooks_port = settings.hooks_port if args.hooks_port is None else args.hooks_port
    listening = listeners(app, settings, host=args.host or settings.host, port=args.port or settings.port,
                          hooks_port=hooks_port, log_level=None, log_config=None)
    run(listening, settings)
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from app.admission.review import validate_offline

    return validate_offline(args.file, args.world, args.old)


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="modeldeployment", description=__doc__)
    sub = root.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the hooks and webhooks service")
    serve.add_argument("--host", default=None)
    serve.add_argument("--port", type=int, default=None)
    serve.add_argument("--world", type=Path, default=None, help="a directory of YAML standing in for the cluster")
    serve.add_argument("--tls-cert", type=Path, default=None)
    serve.add_argument("--tls-key", type=Path, default=None)
    serve.add_argument("--hooks-port", type=int, default=None,
                       help="serve Metacontroller's hooks (plain HTTP inside the cluster) on this port, apart from the "
                            "webhooks on --port (default: MODELDEPLOYMENT_HOOKS_PORT, 8081; 0: both on --port)")
    serve.set_defaults(func=cmd_serve)

    render = sub.add_parser("render", help="print the children and status the sync hook would return")
    render.add_argument("-f", "--file", type=Path, required=True)
    render.add_argument("--world", type=Path, default=DEFAULT_WORLD)
    render.add_argument("-q", "--quiet", action="store_true", help="do not print side-effect intents")
    render.add_argument("--objects-only", action="store_true",
                        help="print only the Kubernetes objects (the status goes to stderr), e.g. to pipe into kubectl")
    render.set_defaults(func=cmd_render)

    validate = sub.add_parser("validate", help="check a deployment as the cluster would: apiVersion, kind and unknown "
                              "fields (strict), then both admission webhooks (an update with --old)")
    validate.add_argument("-f", "--file", type=Path, required=True)
    validate.add_argument("--world", type=Path, default=DEFAULT_WORLD)
    validate.add_argument("--old", type=Path, default=None, help="the stored object, to check an update")
    validate.set_defaults(func=cmd_validate)

    crds = sub.add_parser("crds", help="write the CRDs generated from the models")
    crds.add_argument("--out", type=Path, action="append", default=None,
                      help="directory to write into (repeatable); default: manifests/crds and the chart's crds/")
    crds.set_defaults(func=cmd_crds)
    return root


def main(argv: list[str] | None = None) -> int:
    settings = Settings()
    logs.configure(settings.log_json, settings.log_level)
    args = parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
