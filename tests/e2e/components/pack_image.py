#!/usr/bin/env python3
"""Pack files into an OCI image tarball that `ctr images import` loads (no Docker, no registry).

    pack_image.py OUT.tar REF --file SRC:DEST[:MODE] ... --entrypoint /pause [--arch amd64]

One uncompressed layer holding the given files, a config with the entrypoint, a manifest and an
index whose descriptor carries the image name twice: `io.containerd.image.name` (the full
reference, which containerd's importer names the image after) and
`org.opencontainers.image.ref.name` (the tag, for other OCI tools). Timestamps are fixed so the
same inputs give the same digests. Standard library only: build.sh runs it before any venv exists.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import tarfile
from pathlib import Path


def _blob(tar: tarfile.TarFile, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size, info.mtime, info.mode = len(data), 0, 0o644
    tar.addfile(info, io.BytesIO(data))
    return f"sha256:{digest}"


def _layer(files: list[tuple[Path, str, int]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as layer:
        dirs: set[str] = set()
        for src, dest, mode in files:
            parts = dest.strip("/").split("/")
            for i in range(1, len(parts)):  # parent directories first
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    info = tarfile.TarInfo(d)
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
                    layer.addfile(info)
            data = src.read_bytes()
            info = tarfile.TarInfo(dest.strip("/"))
            info.size, info.mode, info.mtime = len(data), mode, 0
            layer.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("ref", help="full image reference, e.g. localhost/modeldeployment-e2e/pause:1")
    ap.add_argument("--file", action="append", default=[], help="SRC:DEST[:octal mode]")
    ap.add_argument("--entrypoint", action="append", default=[])
    ap.add_argument("--arch", default="amd64")
    args = ap.parse_args()

    files = []
    for spec in args.file:
        src, dest, *mode = spec.split(":")
        files.append((Path(src), dest, int(mode[0], 8) if mode else 0o755))
    layer = _layer(files)
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    platform = {"architecture": args.arch, "os": "linux"}
    config = json.dumps({
        **platform,
        "config": {"Entrypoint": args.entrypoint, "Env": ["PATH=/usr/local/bin:/usr/bin:/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }, sort_keys=True).encode()

    out = Path(args.out)
    tmp = out.with_suffix(".tmp")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        config_digest = _blob(tar, config)
        layer_digest = _blob(tar, layer)
        manifest = json.dumps({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": config_digest, "size": len(config)},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                        "digest": layer_digest, "size": len(layer)}],
        }, sort_keys=True).encode()
        manifest_digest = _blob(tar, manifest)
        tag = args.ref.rsplit(":", 1)[1] if ":" in args.ref.rsplit("/", 1)[-1] else "latest"
        index = json.dumps({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [{
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_digest, "size": len(manifest), "platform": platform,
                "annotations": {"io.containerd.image.name": args.ref,
                                "org.opencontainers.image.ref.name": tag},
            }],
        }, sort_keys=True).encode()
        for name, data in (("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'), ("index.json", index)):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    tmp.replace(out)


if __name__ == "__main__":
    main()
